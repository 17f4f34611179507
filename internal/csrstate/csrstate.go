// Package csrstate reads where a CertificateSigningRequest stands, once and
// the same way for every part of certready: the approver's queue and cache,
// the agent's CSR match, the taint fallback's proof and the operator views.
package csrstate

import (
	"strings"

	certv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"

	"github.com/certready/certready/internal/names"
)

// State is where a CSR stands.
type State string

const (
	// Pending: neither approved, denied nor failed.
	Pending State = "Pending"
	// Approved: approved, no certificate issued yet.
	Approved State = "Approved"
	// Issued: approved and the signer wrote its certificate.
	Issued State = "Issued"
	// Denied: someone denied it; a denied CSR is never signed.
	Denied State = "Denied"
	// Failed: the signer could not issue it.
	Failed State = "Failed"
)

// Of returns c's state. Only conditions with status True count (the API
// server accepts no other status for Approved and Denied); Denied and Failed
// win over Approved, and a certificate counts only on an approved request.
func Of(c *certv1.CertificateSigningRequest) State {
	approved, denied, failed := Conditions(c)
	switch {
	case denied != nil:
		return Denied
	case failed != nil:
		return Failed
	case approved == nil:
		return Pending
	case len(c.Status.Certificate) == 0 && len(c.Spec.Extra[names.IssuedKey]) == 0:
		return Approved
	}
	return Issued
}

// Stage is s as operators read it ('certready csr', the stage metric):
// pending, approved-not-issued, issued, denied, failed.
func (s State) Stage() string {
	if s == Approved {
		return "approved-not-issued"
	}
	return strings.ToLower(string(s))
}

// States lists every state.
var States = []State{Pending, Approved, Issued, Denied, Failed}

// IsPending reports whether c still waits for a decision.
func IsPending(c *certv1.CertificateSigningRequest) bool { return Of(c) == Pending }

// Conditions returns c's Approved, Denied and Failed conditions whose status
// is True (nil where there is none), for their reasons and messages.
func Conditions(c *certv1.CertificateSigningRequest) (approved, denied, failed *certv1.CertificateSigningRequestCondition) {
	for i := range c.Status.Conditions {
		cond := &c.Status.Conditions[i]
		if cond.Status != corev1.ConditionTrue {
			continue
		}
		switch cond.Type {
		case certv1.CertificateApproved:
			approved = cond
		case certv1.CertificateDenied:
			denied = cond
		case certv1.CertificateFailed:
			failed = cond
		}
	}
	return approved, denied, failed
}
