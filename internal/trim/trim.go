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
	"time"

	certv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/certready/certready/internal/csrstate"
	"github.com/certready/certready/internal/names"
)

// InfrastructureAddressTypes is the annotation key under which a trimmed
// Node carries, comma-separated and sorted, the types of the addresses in
// its status that only a cloud controller wrote (NodeOptions): the one
// fact certready keeps of its managed fields. It exists in informer caches
// only: the transform drops the key from every Node it receives, so a
// value a node sets on its own Node never reaches the cache.
const InfrastructureAddressTypes = "certready.io/infrastructure-address-types"

// NodeOptions say what a Node cache keeps.
type NodeOptions struct {
	// Conditions: the types of the conditions kept.
	Conditions []corev1.NodeConditionType
	// CloudControllers are the field managers whose writes of
	// status.addresses are the infrastructure's word, not the node's: an
	// address type whose address only they wrote is listed under
	// InfrastructureAddressTypes. A field manager's name is chosen by the
	// writer: this is evidence the operator opts into, which a node's own
	// credentials can forge. Empty: none.
	CloudControllers []string
}

// Node returns a transform that keeps of a Node its metadata (labels,
// annotations, UID, resourceVersion), its spec (taints), and of its status
// the addresses, the kubelet's endpoint and the conditions of the given
// types (certready reads only its own: a kubelet's five others, with their
// messages, are a fifth of a trimmed Node).
func Node(conditions ...corev1.NodeConditionType) cache.TransformFunc {
	return NodeWith(NodeOptions{Conditions: conditions})
}

// NodeWith is Node that also keeps, of the managed fields, which address
// types o.CloudControllers wrote (InfrastructureAddressTypes).
func NodeWith(o NodeOptions) cache.TransformFunc {
	conditions := o.Conditions
	return func(obj any) (any, error) {
		n, ok := obj.(*corev1.Node)
		if !ok {
			return obj, nil
		}
		delete(n.Annotations, InfrastructureAddressTypes)
		if infra := infrastructureTypes(n, o.CloudControllers); infra != "" {
			if n.Annotations == nil {
				n.Annotations = map[string]string{}
			}
			n.Annotations[InfrastructureAddressTypes] = infra
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
		// The markers are the cache's own: a requester's user info (an
		// authenticating proxy's extras) may carry the same keys.
		if c.Spec.Extra != nil {
			extra := maps.Clone(c.Spec.Extra)
			for _, k := range []string{names.ApprovedByKey, names.IssuedKey, names.DroppedRequestKey} {
				delete(extra, k)
			}
			c.Spec.Extra = extra
		}
		if by := approvalManager(c.ManagedFields); by != "" {
			extra := maps.Clone(c.Spec.Extra)
			if extra == nil {
				extra = map[string]certv1.ExtraValue{}
			}
			extra[names.ApprovedByKey] = certv1.ExtraValue{by}
			c.Spec.Extra = extra
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

// approvalManager is the field manager of the newest write through the
// approval subresource ("" when none is recorded), at most 128 bytes.
func approvalManager(fields []metav1.ManagedFieldsEntry) string {
	by, at := "", time.Time{}
	for _, f := range fields {
		if f.Subresource != "approval" {
			continue
		}
		t := time.Time{}
		if f.Time != nil {
			t = f.Time.Time
		}
		if by == "" || !t.Before(at) {
			by, at = f.Manager, t
		}
	}
	if len(by) > 128 {
		by = by[:128]
	}
	return by
}
