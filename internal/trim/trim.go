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
	"slices"

	certv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/cache"
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

// CSR returns a transform for CertificateSigningRequests: managed fields
// always go; once the CSR is decided (Approved, Denied or Failed), its
// request goes too (the policy reads it only while the CSR is pending), and
// so does the issued certificate unless keepCertificate (the agent matches
// installed certificates against it; the approver never reads it).
func CSR(keepCertificate bool) cache.TransformFunc {
	return func(obj any) (any, error) {
		c, ok := obj.(*certv1.CertificateSigningRequest)
		if !ok {
			return obj, nil
		}
		c.ManagedFields = nil
		if decided(c) {
			c.Spec.Request = nil
			if !keepCertificate {
				c.Status.Certificate = nil
			}
		}
		return c, nil
	}
}

func decided(c *certv1.CertificateSigningRequest) bool {
	for _, cond := range c.Status.Conditions {
		switch cond.Type {
		case certv1.CertificateApproved, certv1.CertificateDenied, certv1.CertificateFailed:
			return true
		}
	}
	return false
}
