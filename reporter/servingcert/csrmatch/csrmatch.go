// Package csrmatch finds the kubelet-serving CSR that explains an installed
// certificate, or, when none does, the state of the node's newest request
// (pending, denied, failed, approved but not issued). Every CSR is treated as
// hostile input: a certificate that does not parse simply explains nothing.
package csrmatch

import (
	"fmt"
	"sort"
	"time"

	certv1 "k8s.io/api/certificates/v1"

	"github.com/certready/certready/internal/csrstate"
	"github.com/certready/certready/internal/fingerprint"
	"github.com/certready/certready/internal/names"
	"github.com/certready/certready/internal/stamp"
	"github.com/certready/certready/reporter/servingcert/certfile"
)

// State is what the node's CSRs say about the installed certificate: a
// CSR's own state (csrstate) where one CSR decides, and two of its own.
type State csrstate.State

const (
	// Issued: an approved CSR's issued certificate is the installed one.
	Issued = State(csrstate.Issued)
	// Pending: the newest request has neither been approved nor denied.
	Pending = State(csrstate.Pending)
	// Denied: the newest request was denied.
	Denied = State(csrstate.Denied)
	// Failed: the newest request was approved but the signer failed it.
	Failed = State(csrstate.Failed)
	// NotIssued: the newest request is approved but carries no certificate yet.
	NotIssued State = "NotIssued"
	// None: no request of this node explains the installed certificate and
	// none is outstanding (the newest was issued for another certificate, or
	// there is no request at all, for example after garbage collection).
	None State = "None"
)

// Result names the CSR behind the state.
type Result struct {
	State   State
	Name    string    // the CSR, when there is one
	Created time.Time // its creation time
	Detail  string    // the denial or failure message, when there is one
	Seen    int       // how many of this node's CSRs were considered
}

// Describe is a one-line account for condition messages and events.
func (r Result) Describe() string {
	switch r.State {
	case Issued:
		return fmt.Sprintf("CSR %s (created %s)", r.Name, stamp.Format(r.Created))
	case Pending:
		return fmt.Sprintf("CSR %s pending approval since %s", r.Name, stamp.Format(r.Created))
	case Denied:
		return fmt.Sprintf("CSR %s (created %s) was denied%s", r.Name, stamp.Format(r.Created), suffix(r.Detail))
	case Failed:
		return fmt.Sprintf("CSR %s (created %s) failed to sign%s", r.Name, stamp.Format(r.Created), suffix(r.Detail))
	case NotIssued:
		return fmt.Sprintf("CSR %s (created %s) is approved but not issued yet", r.Name, stamp.Format(r.Created))
	}
	if r.Seen == 0 {
		return "no kubelet-serving CSR from this node exists"
	}
	return fmt.Sprintf("none of the node's %d kubelet-serving CSRs issued the installed certificate", r.Seen)
}

// Age is how old the CSR is at now.
func (r Result) Age(now time.Time) time.Duration {
	if r.Created.IsZero() {
		return 0
	}
	return now.Sub(r.Created).Truncate(time.Second)
}

func suffix(s string) string {
	if s == "" {
		return ""
	}
	return ": " + s
}

// FiledBy reports whether c is a kubelet-serving request that node's own
// credentials filed (the API server sets the username; nobody else can).
func FiledBy(c *certv1.CertificateSigningRequest, node string) bool {
	return c != nil && c.Spec.SignerName == names.SignerName && c.Spec.Username == names.NodeUser(node)
}

// Match looks through csrs for node's kubelet-serving requests. CSRs of
// other signers or other users are ignored whatever their content.
func Match(csrs []*certv1.CertificateSigningRequest, node string, installed fingerprint.SHA256) Result {
	var mine []*certv1.CertificateSigningRequest
	for _, c := range csrs {
		if !FiledBy(c, node) {
			continue
		}
		mine = append(mine, c)
	}
	res := Result{State: None, Seen: len(mine)}
	if !installed.IsZero() {
		for _, c := range mine {
			if issuedBy(c, installed) {
				return Result{State: Issued, Name: c.Name, Created: c.CreationTimestamp.Time, Seen: len(mine)}
			}
		}
	}
	// Nothing explains the installed certificate: what is the newest request doing?
	sort.SliceStable(mine, func(i, j int) bool {
		return mine[i].CreationTimestamp.After(mine[j].CreationTimestamp.Time)
	})
	if len(mine) == 0 {
		return res
	}
	newest := mine[0]
	res.Name, res.Created = newest.Name, newest.CreationTimestamp.Time
	_, denied, failed := csrstate.Conditions(newest)
	switch csrstate.Of(newest) {
	case csrstate.Denied:
		res.State, res.Detail = Denied, denied.Message
	case csrstate.Failed:
		res.State, res.Detail = Failed, failed.Message
	case csrstate.Approved:
		res.State = NotIssued
	case csrstate.Pending:
		res.State = Pending
	default:
		// Approved and issued, but for another certificate: either the
		// kubelet has not installed it yet or it is an old one.
		res.State = None
	}
	return res
}

// issuedBy reports whether c is approved, neither denied nor failed, and
// issued exactly the certificate with fingerprint fp.
func issuedBy(c *certv1.CertificateSigningRequest, fp fingerprint.SHA256) bool {
	if csrstate.Of(c) != csrstate.Issued {
		return false
	}
	certs, err := certfile.ParseCertificates(c.Status.Certificate)
	if err != nil {
		return false
	}
	return fingerprint.Of(certs[0]) == fp
}
