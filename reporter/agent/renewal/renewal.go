// Package renewal tells whether the kubelet's renewal of a serving
// certificate that still works is stuck. The kubelet asks for a new
// certificate at a random point between 70% and 90% of the current one's
// lifetime (client-go's certificate manager); once the installed
// certificate is past the latest of those points, plus a grace for the
// request to be approved, signed and installed, it should have been
// replaced. If it was not, the node's newest request says why: it is still
// pending, was denied, failed to sign, is approved but was never signed, or
// was issued but never installed, or the kubelet asked for nothing at all.
//
// This is a warning ahead of expiry, never a verdict: the certificate is
// still valid and presented, so the node stays ready until it expires.
package renewal

import (
	"crypto/x509"
	"fmt"
	"time"

	certv1 "k8s.io/api/certificates/v1"

	"github.com/certready/certready/internal/fingerprint"
	"github.com/certready/certready/internal/stamp"
	"github.com/certready/certready/reporter/servingcert/csrmatch"
)

// Reason says what holds the renewal up.
type Reason string

const (
	// NotDue: the certificate is not past the kubelet's latest rotation
	// point yet (or there is nothing to assess).
	NotDue Reason = ""
	// Pending: the newest request awaits approval.
	Pending Reason = "RenewalPending"
	// Denied: the newest request was denied.
	Denied Reason = "RenewalDenied"
	// Failed: the signer failed the newest request.
	Failed Reason = "RenewalFailed"
	// NotIssued: the newest request is approved but was never signed.
	NotIssued Reason = "RenewalNotIssued"
	// NotInstalled: the newest request was issued, but the kubelet still
	// serves the old certificate.
	NotInstalled Reason = "RenewalNotInstalled"
	// NotRequested: no request was made since the installed certificate's.
	NotRequested Reason = "RenewalNotRequested"
)

// Reasons lists every stuck reason, for metrics.
var Reasons = []Reason{Pending, Denied, Failed, NotIssued, NotInstalled, NotRequested}

const (
	// latestRotation is the kubelet's latest rotation point, as a fraction
	// of the certificate's lifetime.
	latestRotation = 0.9
	// maxGrace bounds the grace after that point (5% of the lifetime for
	// short-lived certificates).
	maxGrace = 5 * time.Minute
)

// Due is when a renewal of leaf is overdue: the kubelet's latest rotation
// point (90% of the lifetime) plus a grace of 5% of the lifetime, at most
// maxGrace.
func Due(leaf *x509.Certificate) time.Time {
	life := leaf.NotAfter.Sub(leaf.NotBefore)
	grace := min(life/20, maxGrace)
	return leaf.NotBefore.Add(time.Duration(float64(life)*latestRotation) + grace)
}

// Status is the assessment of one installed certificate.
type Status struct {
	Reason Reason // NotDue: not stuck
	Due    time.Time
	// CSR is the newest request's name ("" for NotRequested), Detail its
	// denial or failure message.
	CSR     string
	Created time.Time
	Detail  string
}

// Stuck reports whether the renewal is stuck.
func (s Status) Stuck() bool { return s.Reason != NotDue }

// Assess looks at node's kubelet-serving requests made after since (the
// creation of the CSR that issued the installed certificate, or the
// certificate's NotBefore when that CSR is gone) once leaf is past Due.
// CSRs of other signers or other requesters are ignored whatever their
// content.
func Assess(now time.Time, leaf *x509.Certificate, since time.Time, csrs []*certv1.CertificateSigningRequest, node string) Status {
	if leaf == nil {
		return Status{}
	}
	st := Status{Due: Due(leaf)}
	if now.Before(st.Due) {
		return st
	}
	var later []*certv1.CertificateSigningRequest
	for _, c := range csrs {
		if c != nil && c.CreationTimestamp.After(since) {
			later = append(later, c)
		}
	}
	// What the newest of the node's later requests is doing, as the
	// verdict reads it (the installed certificate is none of theirs).
	newest := csrmatch.Match(later, node, fingerprint.SHA256{})
	st.CSR, st.Created, st.Detail = newest.Name, newest.Created, newest.Detail
	switch newest.State {
	case csrmatch.Pending:
		st.Reason = Pending
	case csrmatch.Denied:
		st.Reason = Denied
	case csrmatch.Failed:
		st.Reason = Failed
	case csrmatch.NotIssued:
		st.Reason = NotIssued
	default:
		if newest.Seen == 0 {
			st.Reason = NotRequested
		} else {
			// Issued after the installed certificate's request, yet the
			// old certificate is still the one installed.
			st.Reason = NotInstalled
		}
	}
	return st
}

// Message is the Warning event's text for a stuck renewal of the
// certificate with fingerprint fp.
func (s Status) Message(fp string, notAfter time.Time) string {
	what := ""
	switch s.Reason {
	case Pending:
		what = fmt.Sprintf("its newest request, CSR %s (created %s), is still pending approval", s.CSR, stamp.Format(s.Created))
	case Denied:
		what = fmt.Sprintf("its newest request, CSR %s (created %s), was denied%s", s.CSR, stamp.Format(s.Created), detail(s.Detail))
	case Failed:
		what = fmt.Sprintf("its newest request, CSR %s (created %s), failed to sign%s", s.CSR, stamp.Format(s.Created), detail(s.Detail))
	case NotIssued:
		what = fmt.Sprintf("its newest request, CSR %s (created %s), is approved but was never signed (is the controller manager's signer running?)", s.CSR, stamp.Format(s.Created))
	case NotInstalled:
		what = fmt.Sprintf("CSR %s (created %s) was issued, but the kubelet has not installed its certificate", s.CSR, stamp.Format(s.Created))
	case NotRequested:
		what = "the kubelet has not requested a new certificate (is serverTLSBootstrap with certificate rotation on?)"
	default:
		return ""
	}
	return fmt.Sprintf("renewal of serving certificate sha256 %s is stuck: past the kubelet's latest rotation point (%s), %s; the certificate still works until %s",
		fp, stamp.Format(s.Due), what, stamp.Format(notAfter))
}

func detail(s string) string {
	if s == "" {
		return ""
	}
	return ": " + s
}
