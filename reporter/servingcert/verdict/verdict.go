// Package verdict turns observations of one node (installed file, CSRs,
// kubelet endpoint) into the KubeletServingCertNotReady condition: a status,
// one reason per failure class and a message an operator can act on. It is a
// pure function of the evidence one check gathered (package evidence, filled
// by package observe): no I/O, no clock, no state.
//
// The steps run in order (file, certificate, CSR, endpoint, API server path)
// and the first failure decides. False ("ready") is returned only when every check ran and
// passed: a missing observation gives Unknown, never False.
package verdict

import (
	"crypto/x509"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"time"

	"github.com/certready/certready/reporter/servingcert/evidence"

	corev1 "k8s.io/api/core/v1"

	"github.com/certready/certready/internal/fingerprint"
	"github.com/certready/certready/internal/names"
	"github.com/certready/certready/internal/stamp"
	"github.com/certready/certready/reporter/servingcert/apipath"
	"github.com/certready/certready/reporter/servingcert/certfile"
	"github.com/certready/certready/reporter/servingcert/csrmatch"
	"github.com/certready/certready/reporter/servingcert/probe"
)

// Step names one step of the verification (the metrics label it "check").
type Step string

const (
	StepFile        Step = "file"
	StepCertificate Step = "certificate"
	StepCSR         Step = "csr"
	StepEndpoint    Step = "endpoint"
	// StepAPIServerPath: the API server's own connection to the kubelet
	// (package apipath), the path of kubectl logs.
	StepAPIServerPath Step = "apiserver-path"
)

// Steps lists the steps in the order they run.
var Steps = []Step{StepFile, StepCertificate, StepCSR, StepEndpoint, StepAPIServerPath}

// Result is one step's outcome, for metrics.
type Result struct {
	Step   Step
	Passed bool
}

// Verdict is the condition to publish.
type Verdict struct {
	Status  corev1.ConditionStatus
	Reason  Reason
	Message string
	// Results lists the checks that ran, in order; the last one failed
	// unless Status is False.
	Results []Result
	// Proof is how the CSR check passed, when it did.
	Proof string
	// CA is the root CA the certificate chains to (ready verdicts).
	CA *x509.Certificate
	// Facts are what a ready verdict states for readers of the Node
	// (nil unless ready).
	Facts *Facts

	// fileMissing: no certificate file was installed, whatever the
	// reason names (the newest CSR's state, when known).
	fileMissing bool
	// transient: the verdict a cause replaced was transient.
	transient bool
}

// Transient reports whether v can be a passing state of a healthy kubelet
// rotation, to be published only once it has persisted for a settle
// period: its reason is (Reason.Transient), or the certificate file is
// missing whatever the node's newest CSR says. The kubelet swaps the file
// as soon as its new CSR is issued, so an agent whose CSR cache has not
// yet seen the issue meets the gap with that request still pending.
func (v Verdict) Transient() bool { return v.Reason.Transient() || v.fileMissing || v.transient }

// Ready reports whether this verdict says the certificate is ready.
func (v Verdict) Ready() bool { return v.Status == corev1.ConditionFalse }

// Evaluate computes the verdict.
func Evaluate(in evidence.Evidence) Verdict {
	v := evaluate(in)
	if k := in.Kubelet; k.Known && !k.ServerTLSBootstrap && v.Status == corev1.ConditionTrue && servesNoIssuedCertificate(in) {
		// The cause of what the checks found, as the evidence agrees: no
		// certificate file, or a certificate the kubelet presents that is
		// not the installed one. The kubelet will never request one, so
		// nothing else resolves it. A state a healthy rotation passes
		// through still settles first: the file may be stale.
		v = Verdict{Status: corev1.ConditionTrue, Reason: KubeletServingBootstrapOff, Results: v.Results,
			fileMissing: v.fileMissing, transient: v.Transient(),
			Message: fmt.Sprintf("serverTLSBootstrap is not true in the kubelet's configuration %s: the kubelet never requests a serving certificate and serves a self-signed one, which an API server that verifies kubelets refuses; set serverTLSBootstrap: true there and restart the kubelet (seen: %s)",
				k.Path, v.Message)}
	}
	if !v.Ready() {
		v.Message += inventoryNotes(in)
	}
	if APIServerVerifiesNoKubelet(in) {
		v.Message += "; yet the API server read this pod's log over that kubelet connection: it verifies no kubelet certificate (set kube-apiserver --kubelet-certificate-authority)"
	}
	return v
}

// servesNoIssuedCertificate reports whether the evidence shows a kubelet
// without a certificate from the kubelet-serving signer in use: no file
// installed, or a presented certificate that is not the installed one.
func servesNoIssuedCertificate(in evidence.Evidence) bool {
	if in.File.State == certfile.Missing {
		return true
	}
	ep := in.Endpoint
	return ep != nil && ep.Outcome == probe.Presented && ep.Fingerprint != in.File.Fingerprint
}

// APIServerVerifiesNoKubelet reports the cluster finding of in: the
// kubelet presented a certificate the CA does not verify and the API
// server still read the pod's log through it.
func APIServerVerifiesNoKubelet(in evidence.Evidence) bool {
	return Unverifiable(in) && in.Unverified != nil && in.Unverified.Outcome == apipath.Proven
}

// Unverifiable reports whether the kubelet presented a certificate that
// no chain links to the CA (a self-signed one): what an API server that
// verifies kubelets with that CA must refuse, whatever address it dials.
// A certificate of the CA for another name or past its validity is not
// one: the API server may dial a name it covers.
func Unverifiable(in evidence.Evidence) bool {
	ep := in.Endpoint
	return in.CA != nil && in.CAErr == nil && ep != nil && ep.Outcome == probe.Presented && ep.VerifyErr != nil && ep.Unchained
}

func evaluate(in evidence.Evidence) Verdict {
	e := evaluation{in: in}
	if v, failed := e.file(); failed {
		v.fileMissing = in.File.State == certfile.Missing
		return v
	}
	if v, failed := e.certificate(); failed {
		return v
	}
	if v, failed := e.csr(); failed {
		return v
	}
	return e.endpoint()
}

// Stalled is what the agent's watchdog publishes when no check has
// completed since last (stuck in stage): Unknown, since the last verdict
// no longer stands.
func Stalled(now, last time.Time, stage string) Verdict {
	return Verdict{
		Status: corev1.ConditionUnknown, Reason: CheckStalled,
		Message: fmt.Sprintf("no check completed for %s (since %s; now in %s): the agent's checks are stuck, its last verdict no longer stands; see its logs",
			now.Sub(last).Round(time.Second), stamp.Format(last), stage),
	}
}

// NeedsEndpoint reports whether in passes every check before the endpoint,
// so that probing the kubelet port can decide the verdict. Callers use it to
// skip the handshake when an earlier check already failed.
func NeedsEndpoint(in evidence.Evidence) bool {
	in.Endpoint = &probe.Result{Outcome: probe.Presented, Fingerprint: in.File.Fingerprint}
	in.APIPath = &apipath.Result{Outcome: apipath.Proven}
	return evaluate(in).Ready()
}

// NeedsAPIPath reports whether in passes every node-local check, so that
// the API server's path decides the verdict (or, when not required, is
// worth observing).
func NeedsAPIPath(in evidence.Evidence) bool {
	in.RequireAPIPath = false
	return evaluate(in).Ready()
}

type evaluation struct {
	in       evidence.Evidence
	results  []Result
	proof    string
	provedBy string            // the CSR that issued the certificate, when one proved it
	ca       *x509.Certificate // the root the certificate chains to
}

func (e *evaluation) pass(c Step) { e.results = append(e.results, Result{Step: c, Passed: true}) }

func (e *evaluation) fail(c Step, status corev1.ConditionStatus, r Reason, format string, args ...any) (Verdict, bool) {
	e.results = append(e.results, Result{Step: c, Passed: false})
	return Verdict{Status: status, Reason: r, Message: fmt.Sprintf(format, args...), Results: e.results}, true
}

func (e *evaluation) file() (Verdict, bool) {
	f := e.in.File
	switch f.State {
	case certfile.Present:
		e.pass(StepFile)
		return Verdict{}, false
	case certfile.Missing:
		// With no certificate installed, the node's newest CSR is the cause
		// an operator needs to see (typically: pending approval).
		if ev := e.in.CSR; ev != nil && ev.LookupErr == nil {
			if r, ok := csrReasons[ev.Match.State]; ok {
				return e.fail(StepFile, corev1.ConditionTrue, r, "no serving certificate installed (%s); %s", f.Detail, ev.Match.Describe())
			}
			return e.fail(StepFile, corev1.ConditionTrue, CertificateMissing, "no serving certificate installed (%s); %s", f.Detail, ev.Match.Describe())
		}
		return e.fail(StepFile, corev1.ConditionTrue, CertificateMissing, "no serving certificate installed (%s)", f.Detail)
	case certfile.Malformed:
		return e.fail(StepFile, corev1.ConditionTrue, CertificateMalformed, "installed serving certificate is malformed: %s", f.Detail)
	default:
		return e.fail(StepFile, corev1.ConditionTrue, CertificateUnreadable, "installed serving certificate cannot be read: %s", f.Detail)
	}
}

func (e *evaluation) certificate() (Verdict, bool) {
	in, leaf := e.in, e.in.File.Leaf
	fp := e.in.File.Fingerprint.Short()
	if in.CAErr != nil || in.CA == nil {
		return e.fail(StepCertificate, corev1.ConditionUnknown, CAUnavailable, "cannot verify certificate %s: %v", fp, orMissing(in.CAErr))
	}
	now := in.ValidityTime()
	if c := in.Clock; c.Known && c.Max > 0 && (c.Skew > c.Max || c.Skew < -c.Max) {
		dir, by := "ahead of", c.Skew
		if by < 0 {
			dir, by = "behind", -by
		}
		return e.fail(StepCertificate, corev1.ConditionTrue, ClockSkew,
			"node clock is %s %s the API server's (the Date of its responses; at most %s tolerated): the kubelet rotates its certificate by that clock; certificate %s is valid until %s by the API server's clock; fix the node's time sync",
			by.Round(time.Second), dir, c.Max, fp, stamp.Format(leaf.NotAfter))
	}
	wantCN := names.NodeUser(in.Node.Name)
	if leaf.Subject.CommonName != wantCN || !slices.Equal(leaf.Subject.Organization, []string{names.NodesGroup}) {
		return e.fail(StepCertificate, corev1.ConditionTrue, CertificateInvalid,
			"certificate %s has subject CN=%q O=%q, want CN=%q O=[\"system:nodes\"]", fp, leaf.Subject.CommonName, leaf.Subject.Organization, wantCN)
	}
	if now.Before(leaf.NotBefore) {
		return e.fail(StepCertificate, corev1.ConditionTrue, CertificateNotYetValid,
			"certificate %s is not valid before %s (clock skew?)", fp, stamp.Format(leaf.NotBefore))
	}
	if !now.Before(leaf.NotAfter) {
		return e.fail(StepCertificate, corev1.ConditionTrue, CertificateExpired,
			"certificate %s expired at %s and was not renewed", fp, stamp.Format(leaf.NotAfter))
	}
	if !slices.Contains(leaf.ExtKeyUsage, x509.ExtKeyUsageServerAuth) {
		return e.fail(StepCertificate, corev1.ConditionTrue, CertificateInvalid, "certificate %s lacks the server auth extended key usage", fp)
	}
	ca, err := certfile.Verify(leaf, in.File.Intermediates, in.CA, "", now)
	if err != nil {
		return e.fail(StepCertificate, corev1.ConditionTrue, CertificateUntrusted, "certificate %s does not chain to the kubelet serving CA: %v", fp, err)
	}
	e.ca = ca
	if msg := coverage(leaf, in.Node); msg != "" {
		return e.fail(StepCertificate, corev1.ConditionTrue, CertificateIdentityMismatch, "certificate %s %s", fp, msg)
	}
	e.pass(StepCertificate)
	return Verdict{}, false
}

// coverage says what the certificate's SANs fail to cover, or "".
func coverage(leaf *x509.Certificate, n evidence.Node) string {
	if len(leaf.IPAddresses) == 0 {
		// A DNS-only certificate must name the node, and the address the
		// API server dials.
		for _, d := range leaf.DNSNames {
			if strings.EqualFold(strings.TrimSuffix(d, "."), n.Name) {
				return dialCoverage(leaf, n)
			}
		}
		return fmt.Sprintf("has no IP SAN and no DNS SAN %q", n.Name)
	}
	if len(n.InternalIPs) == 0 {
		return "has IP SANs but the node reports no InternalIP to check them against"
	}
	for _, want := range n.InternalIPs {
		found := false
		for _, ip := range leaf.IPAddresses {
			if got, ok := netip.AddrFromSlice(ip); ok && got.Unmap() == want.Unmap() {
				found = true
				break
			}
		}
		if !found {
			return fmt.Sprintf("does not cover the node's InternalIP %s (SANs: %s)", want, sans(leaf))
		}
	}
	return dialCoverage(leaf, n)
}

// dialCoverage says whether the certificate fails to cover n.Dial, the
// address the API server verifies it against, or "".
func dialCoverage(leaf *x509.Certificate, n evidence.Node) string {
	if n.Dial == "" {
		return ""
	}
	if want, err := netip.ParseAddr(n.Dial); err == nil {
		for _, ip := range leaf.IPAddresses {
			if got, ok := netip.AddrFromSlice(ip); ok && got.Unmap() == want.Unmap() {
				return ""
			}
		}
	} else {
		for _, d := range leaf.DNSNames {
			if strings.EqualFold(strings.TrimSuffix(d, "."), strings.TrimSuffix(n.Dial, ".")) {
				return ""
			}
		}
	}
	return fmt.Sprintf("does not cover %s, the %s address the API server dials for logs and exec (SANs: %s)", n.Dial, n.DialType, sans(leaf))
}

func (e *evaluation) csr() (Verdict, bool) {
	in := e.in
	ev := in.CSR
	if ev == nil {
		if in.SkipCSR {
			e.proof = "CSR not checked (no API credentials)"
			return Verdict{}, false
		}
		return e.fail(StepCSR, corev1.ConditionUnknown, NotChecked, "the CSR check has not run yet")
	}
	if ev.LookupErr != nil {
		return e.fail(StepCSR, corev1.ConditionUnknown, CSRLookupFailed, "cannot list kubelet-serving CSRs: %v", ev.LookupErr)
	}
	leaf := in.File.Leaf
	switch {
	case ev.Match.State == csrmatch.Issued:
		e.proof, e.provedBy = "issued by "+ev.Match.Describe(), ev.Match.Name
	case ev.Remembered != nil:
		e.proof = fmt.Sprintf("issued by CSR %s, verified earlier by this agent (since garbage-collected)", ev.Remembered.Name)
		e.provedBy = ev.Remembered.Name
	case ev.Retention > 0 && in.ValidityTime().Sub(leaf.NotBefore) > ev.Retention:
		e.proof = fmt.Sprintf("no CSR left; certificate signed by the cluster CA for %s is older than the %s CSR retention", leaf.Subject.CommonName, ev.Retention)
	default:
		r, ok := csrReasons[ev.Match.State]
		if !ok {
			r = CSRNotFound
		}
		return e.fail(StepCSR, corev1.ConditionTrue, r, "certificate %s is not explained by an approved CSR: %s", in.File.Fingerprint.Short(), ev.Match.Describe())
	}
	e.pass(StepCSR)
	return Verdict{}, false
}

var csrReasons = map[csrmatch.State]Reason{
	csrmatch.Pending:   CSRPending,
	csrmatch.Denied:    CSRDenied,
	csrmatch.Failed:    CSRFailed,
	csrmatch.NotIssued: CSRNotIssued,
}

func (e *evaluation) endpoint() Verdict {
	in := e.in
	ep := in.Endpoint
	if ep == nil {
		v, _ := e.fail(StepEndpoint, corev1.ConditionUnknown, NotChecked, "the kubelet endpoint has not been probed yet")
		return v
	}
	var r Reason
	switch ep.Outcome {
	case probe.Unreachable:
		r = EndpointUnreachable
	case probe.NoCertificate:
		r = EndpointNoCertificate
	case probe.NotTLS:
		r = EndpointNotTLS
	case probe.HandshakeFailed:
		r = EndpointHandshakeFailed
	case probe.Presented:
		switch {
		case ep.Fingerprint == in.File.Fingerprint:
			e.pass(StepEndpoint)
			if v, failed := e.apiPath(); failed {
				return v
			}
			leaf := in.File.Leaf
			return Verdict{
				Status: corev1.ConditionFalse,
				Reason: Ready,
				Message: fmt.Sprintf("serving certificate %s valid until %s, %s; presented on %s",
					in.File.Fingerprint.Short(), stamp.Format(leaf.NotAfter), e.proof, ep.Addr) + inventoryNotes(in),
				Facts: &Facts{NotBefore: leaf.NotBefore, NotAfter: leaf.NotAfter, CSR: e.provedBy, Fingerprint: in.File.Fingerprint,
					CA: fingerprint.Of(e.ca), CANotAfter: caNotAfter(e.ca), ClientNotAfter: in.ClientNotAfter, Agent: in.Agent},
				Results: e.results,
				Proof:   e.proof,
				CA:      e.ca,
			}
		case ep.VerifyErr != nil:
			v, _ := e.fail(StepEndpoint, corev1.ConditionTrue, EndpointCertificateUntrusted,
				"%s presents %s, not the installed %s, and it does not verify: %v", ep.Addr, ep.Fingerprint.Short(), in.File.Fingerprint.Short(), ep.VerifyErr)
			return v
		default:
			v, _ := e.fail(StepEndpoint, corev1.ConditionTrue, EndpointCertificateMismatch,
				"%s presents %s (valid until %s), not the installed %s: the kubelet serves a stale certificate",
				ep.Addr, ep.Fingerprint.Short(), stamp.Format(ep.Leaf.NotAfter), in.File.Fingerprint.Short())
			return v
		}
	default:
		r = EndpointHandshakeFailed
	}
	v, _ := e.fail(StepEndpoint, corev1.ConditionTrue, r, "%s", ep.Describe())
	return v
}

// apiPath judges the API server's path to the kubelet, when required.
func (e *evaluation) apiPath() (Verdict, bool) {
	if !e.in.RequireAPIPath {
		return Verdict{}, false
	}
	p := e.in.APIPath
	switch {
	case p == nil:
		return e.fail(StepAPIServerPath, corev1.ConditionUnknown, NotChecked, "the API server's connection to the kubelet (the path of kubectl logs) has not been proven yet")
	case p.Outcome == apipath.Proven:
		e.pass(StepAPIServerPath)
		e.proof += "; the API server reached the kubelet (kubectl logs)"
		return Verdict{}, false
	case p.Outcome == apipath.CannotVerify:
		return e.fail(StepAPIServerPath, corev1.ConditionTrue, APIServerCannotVerifyKubelet,
			"the node serves its certificate, but the API server's own TLS connection to the kubelet fails, so kubectl logs and exec fail: %s (check the API server's --kubelet-certificate-authority and that the certificate covers the address its --kubelet-preferred-address-types picks)", p.Detail)
	case p.Outcome == apipath.CannotReach:
		return e.fail(StepAPIServerPath, corev1.ConditionTrue, APIServerCannotReachKubelet,
			"the node serves its certificate, but the API server cannot reach the kubelet, so kubectl logs and exec fail: %s (check the network and firewalls from the control plane to the node's kubelet port)", p.Detail)
	}
	return e.fail(StepAPIServerPath, corev1.ConditionUnknown, APIServerProofUnavailable,
		"the API server's connection to the kubelet could not be proven: %s", p.Detail)
}

func sans(c *x509.Certificate) string {
	var out []string
	for _, ip := range c.IPAddresses {
		out = append(out, ip.String())
	}
	out = append(out, c.DNSNames...)
	return strings.Join(out, ",")
}

func orMissing(err error) error {
	if err == nil {
		return fmt.Errorf("no CA configured")
	}
	return err
}

// caNotAfter is ca's expiry; zero without one.
func caNotAfter(ca *x509.Certificate) time.Time {
	if ca == nil {
		return time.Time{}
	}
	return ca.NotAfter
}
