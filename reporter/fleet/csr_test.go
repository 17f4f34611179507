package fleet_test

import (
	"net"
	"testing"
	"time"

	certv1 "k8s.io/api/certificates/v1"

	"github.com/certready/certready/internal/fingerprint"
	"github.com/certready/certready/internal/names"
	"github.com/certready/certready/internal/testpki"
	"github.com/certready/certready/reporter/fleet"
)

// Every stage a kubelet-serving CSR passes through reads as its own, with
// the rule of the decision that put it there; the issued certificate is
// decoded to its full fingerprint; other signers are left out.
func TestCSRRowsNameEachStageAndItsRule(t *testing.T) {
	ca, err := testpki.NewCA("kubelet-ca")
	if err != nil {
		t.Fatal(err)
	}
	pair, err := ca.Issue(testpki.Serving{Node: "w1", IPs: []net.IP{net.ParseIP("192.0.2.11")}})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)
	at := func(ago time.Duration) testpki.CSROption { return testpki.Created(now.Add(-ago)) }
	approvedBy := func(reason string) testpki.CSROption {
		return func(c *certv1.CertificateSigningRequest) {
			testpki.Condition(certv1.CertificateApproved, "ok")(c)
			c.Status.Conditions[len(c.Status.Conditions)-1].Reason = reason
		}
	}
	refused := testpki.KubeletCSR("csr-refused", "w2", at(time.Minute))
	refused.Annotations = map[string]string{names.DecisionRuleAnnotation: "IPSANNotInInventory", names.DecisionMessageAnnotation: "192.0.2.99 not recorded for w2"}
	issued := testpki.KubeletCSR("csr-issued", "w1", at(2*time.Hour), approvedBy("CertReadyValidatedNodeIdentity"), testpki.Certificate(pair.CertPEM()))
	list := []certv1.CertificateSigningRequest{
		*testpki.KubeletCSR("csr-waiting", "w1", at(time.Minute)),
		*refused,
		*issued,
		*testpki.KubeletCSR("csr-unsigned", "w1", at(time.Hour), approvedBy("CertReadyValidatedNodeIdentity")),
		*testpki.KubeletCSR("csr-denied", "w3", at(time.Hour), testpki.Condition(certv1.CertificateDenied, "no")),
		*testpki.KubeletCSR("csr-failed", "w3", at(2*time.Hour), approvedBy("CertReadyValidatedNodeIdentity"), testpki.Condition(certv1.CertificateFailed, "signer refused")),
		*testpki.KubeletCSR("csr-client", "w1", at(time.Hour), testpki.Signer(certv1.KubeAPIServerClientKubeletSignerName)),
	}
	rows := fleet.CSRs(list)
	want := []struct{ name, node, stage, rule string }{
		{"csr-waiting", "w1", fleet.StagePending, ""},
		{"csr-unsigned", "w1", fleet.StageApprovedNotIssued, "CertReadyValidatedNodeIdentity"},
		{"csr-issued", "w1", fleet.StageIssued, "CertReadyValidatedNodeIdentity"},
		{"csr-refused", "w2", fleet.StagePending, "IPSANNotInInventory"},
		{"csr-denied", "w3", fleet.StageDenied, ""},
		{"csr-failed", "w3", fleet.StageFailed, ""},
	}
	if len(rows) != len(want) {
		t.Fatalf("%d rows, want %d (other signers left out): %+v", len(rows), len(want), rows)
	}
	for i, w := range want {
		r := rows[i]
		if r.Name != w.name || r.Node != w.node || r.Stage != w.stage || r.Rule != w.rule {
			t.Errorf("row %d = %s %s %s %q, want %s %s %s %q", i, r.Name, r.Node, r.Stage, r.Rule, w.name, w.node, w.stage, w.rule)
		}
	}
	if rows[3].Message != "192.0.2.99 not recorded for w2" {
		t.Errorf("refusal message %q", rows[3].Message)
	}
	if rows[5].Message != "signer refused" {
		t.Errorf("a failed CSR's row shows %q, want the Failed condition's message", rows[5].Message)
	}
	ic := rows[2].Certificate
	if ic == nil || ic.Fingerprint != fingerprint.Of(pair.Cert).String() || !ic.NotAfter.Equal(pair.Cert.NotAfter.UTC()) ||
		len(ic.IPAddresses) != 1 || ic.IPAddresses[0] != "192.0.2.11" {
		t.Errorf("issued certificate %+v", ic)
	}
	for i, r := range rows {
		if i != 2 && r.Certificate != nil {
			t.Errorf("%s (%s) shows a certificate", r.Name, r.Stage)
		}
	}
}
