package fleet

import (
	"crypto/x509"
	"encoding/pem"
	"sort"
	"time"

	certv1 "k8s.io/api/certificates/v1"

	"github.com/certready/certready/internal/csrstate"
	"github.com/certready/certready/internal/fingerprint"
	"github.com/certready/certready/internal/names"
)

// CSR stages as 'certready csr' shows them: where the request stands on its
// way to an installed certificate.
var (
	StagePending           = csrstate.Pending.Stage()
	StageApprovedNotIssued = csrstate.Approved.Stage()
	StageIssued            = csrstate.Issued.Stage()
	StageDenied            = csrstate.Denied.Stage()
	StageFailed            = csrstate.Failed.Stage()
)

// CSRRow is one kubelet-serving CSR in 'certready csr'.
type CSRRow struct {
	Name      string    `json:"name"`
	UID       string    `json:"uid"`
	Node      string    `json:"node,omitempty"`
	Requester string    `json:"requester"`
	Created   time.Time `json:"created"`
	Stage     string    `json:"stage"`
	// Rule is the decision's reason: the Approved, Denied or Failed
	// condition's, or for a pending request the approver's recorded
	// refusal (certready.io/decision-rule). Message goes with it.
	Rule    string `json:"rule,omitempty"`
	Message string `json:"message,omitempty"`
	// Certificate is the issued certificate (issued requests).
	Certificate *IssuedCert `json:"certificate,omitempty"`
}

// IssuedCert is what the signer issued, as the runbook compares it.
type IssuedCert struct {
	Fingerprint string    `json:"fingerprint"`
	NotBefore   time.Time `json:"notBefore"`
	NotAfter    time.Time `json:"notAfter"`
	Subject     string    `json:"subject"`
	DNSNames    []string  `json:"dnsNames,omitempty"`
	IPAddresses []string  `json:"ipAddresses,omitempty"`
}

// CSRs gives a row per kubelet-serving CSR in list (others are left out),
// by node, newest first.
func CSRs(list []certv1.CertificateSigningRequest) []CSRRow {
	out := make([]CSRRow, 0, len(list))
	for i := range list {
		c := &list[i]
		if c.Spec.SignerName != names.SignerName {
			continue
		}
		out = append(out, CSRRowOf(c))
	}
	sort.SliceStable(out, func(i, j int) bool {
		if out[i].Node != out[j].Node {
			return out[i].Node < out[j].Node
		}
		if !out[i].Created.Equal(out[j].Created) {
			return out[i].Created.After(out[j].Created)
		}
		return out[i].Name < out[j].Name
	})
	return out
}

// CSRRowOf reads one CSR.
func CSRRowOf(c *certv1.CertificateSigningRequest) CSRRow {
	r := CSRRow{Name: c.Name, UID: string(c.UID), Requester: c.Spec.Username, Created: c.CreationTimestamp.UTC()}
	r.Node, _ = names.NodeOf(c.Spec.Username)
	approved, denied, failed := csrstate.Conditions(c)
	decided := approved
	state := csrstate.Of(c)
	r.Stage = state.Stage()
	switch state {
	case csrstate.Pending:
		r.Rule, r.Message = c.Annotations[names.DecisionRuleAnnotation], c.Annotations[names.DecisionMessageAnnotation]
	case csrstate.Issued:
		r.Certificate = issued(c.Status.Certificate)
	case csrstate.Denied:
		decided = denied
	case csrstate.Failed:
		decided = failed
	}
	if decided != nil {
		r.Rule, r.Message = decided.Reason, decided.Message
	}
	return r
}

// issued reads the leaf of an issued chain; nil when it does not parse
// (the signer wrote it, but the object is anyone's to read as text).
func issued(chain []byte) *IssuedCert {
	block, _ := pem.Decode(chain)
	if block == nil || block.Type != "CERTIFICATE" {
		return nil
	}
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		return nil
	}
	ic := &IssuedCert{Fingerprint: fingerprint.Of(cert).String(), NotBefore: cert.NotBefore.UTC(), NotAfter: cert.NotAfter.UTC(),
		Subject: cert.Subject.String(), DNSNames: cert.DNSNames}
	for _, ip := range cert.IPAddresses {
		ic.IPAddresses = append(ic.IPAddresses, ip.String())
	}
	return ic
}
