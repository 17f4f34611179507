// Package trim holds informer transforms that drop, before an object is
// cached, what certready never reads of it: a cluster's Nodes carry image
// lists, node info and managed fields many times larger than the
// addresses, taints and conditions the agent and the approver use.
// Both only ever patch Nodes (conditions, taints) and write CSRs through
// subresources or whole-object updates whose spec and status the API
// server keeps from the stored object, so a trimmed copy is never written
// back over the real one.
package trim

import (
	"maps"
	"slices"
	"strconv"

	certv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/certready/certready/internal/csrstate"
	"github.com/certready/certready/internal/names"
)

// Node returns a transform that keeps of a Node its metadata (labels,
// annotations, UID, resourceVersion), its spec (taints), and of its status
// the addresses, the kubelet's endpoint and the conditions of the given
// types (certready reads only its own: a kubelet's five others, with their
// messages, are a fifth of a trimmed Node).
func Node(conditions ...corev1.NodeConditionType) cache.TransformFunc {
	return func(obj any) (any, error) {
		n, ok := obj.(*corev1.Node)
		if !ok {
			return obj, nil
		}
		n.ManagedFields = nil
		var kept []corev1.NodeCondition
		for _, c := range n.Status.Conditions {
			if slices.Contains(conditions, c.Type) {
				kept = append(kept, c)
			}
		}
		n.Status = corev1.NodeStatus{
			Addresses:       n.Status.Addresses,
			Conditions:      kept,
			DaemonEndpoints: n.Status.DaemonEndpoints,
		}
		return n, nil
	}
}

// CSROptions say what a CSR cache keeps.
type CSROptions struct {
	// KeepCertificate keeps the issued certificate (the agent matches
	// installed certificates against it; the approver never reads it).
	KeepCertificate bool
	// DropRequest drops every request (the agent never reads them).
	DropRequest bool
	// MaxRequestBytes: a pending CSR's request above it is dropped before
	// it is cached, marked with names.DroppedRequestKey and its size, so
	// that the policy refuses it unread. 0: keep every request.
	MaxRequestBytes int
}

// CSR returns a transform for CertificateSigningRequests: managed fields
// always go; once the CSR is decided (Approved, Denied or Failed), its
// request goes too (the policy reads it only while the CSR is pending), and
// so does the issued certificate unless o.KeepCertificate.
func CSR(o CSROptions) cache.TransformFunc {
	return func(obj any) (any, error) {
		c, ok := obj.(*certv1.CertificateSigningRequest)
		if !ok {
			return obj, nil
		}
		c.ManagedFields = nil
		switch {
		case !csrstate.IsPending(c) || o.DropRequest:
			c.Spec.Request = nil
		case o.MaxRequestBytes > 0 && len(c.Spec.Request) > o.MaxRequestBytes:
			extra := maps.Clone(c.Spec.Extra)
			if extra == nil {
				extra = map[string]certv1.ExtraValue{}
			}
			extra[names.DroppedRequestKey] = certv1.ExtraValue{strconv.Itoa(len(c.Spec.Request))}
			c.Spec.Extra, c.Spec.Request = extra, nil
		}
		if !csrstate.IsPending(c) && !o.KeepCertificate && len(c.Status.Certificate) > 0 {
			extra := maps.Clone(c.Spec.Extra)
			if extra == nil {
				extra = map[string]certv1.ExtraValue{}
			}
			extra[names.IssuedKey] = certv1.ExtraValue{"true"}
			c.Spec.Extra, c.Status.Certificate = extra, nil
		}
		return c, nil
	}
}
