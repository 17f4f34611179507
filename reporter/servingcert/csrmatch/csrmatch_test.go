package csrmatch_test

import (
	"net"
	"strings"
	"testing"
	"time"

	certv1 "k8s.io/api/certificates/v1"

	"github.com/certready/certready/internal/fingerprint"
	"github.com/certready/certready/internal/testpki"
	"github.com/certready/certready/reporter/servingcert/csrmatch"
)

var base = time.Date(2026, 11, 30, 3, 0, 0, 0, time.UTC)

func newCSR(name, user string, age time.Duration, opts ...testpki.CSROption) *certv1.CertificateSigningRequest {
	return testpki.KubeletCSR(name, "", append([]testpki.CSROption{testpki.Requester(user), testpki.Created(base.Add(-age))}, opts...)...)
}

func cond(t certv1.RequestConditionType, msg string) testpki.CSROption {
	return testpki.Condition(t, msg)
}

func issued(pem []byte) testpki.CSROption { return testpki.Certificate(pem) }

func signer(s string) testpki.CSROption { return testpki.Signer(s) }

func TestMatch(t *testing.T) {
	ca, err := testpki.NewCA("ca")
	if err != nil {
		t.Fatal(err)
	}
	pair := func() *testpki.Pair {
		p, err := ca.Issue(testpki.Serving{Node: "w1", IPs: []net.IP{net.ParseIP("192.0.2.11")}})
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	installed, other := pair(), pair()
	fp := fingerprint.Of(installed.Cert)
	const me = "system:node:w1"
	approved := cond(certv1.CertificateApproved, "")

	cases := []struct {
		name      string
		csrs      []*certv1.CertificateSigningRequest
		installed fingerprint.SHA256
		want      csrmatch.State
		wantName  string
		wantText  string
	}{
		{
			name:      "approved CSR issued the installed certificate",
			csrs:      []*certv1.CertificateSigningRequest{newCSR("csr-a", me, time.Minute, approved, issued(installed.CertPEM()))},
			installed: fp, want: csrmatch.Issued, wantName: "csr-a",
		},
		{
			name: "an older issued CSR explains the certificate even with a newer one pending",
			csrs: []*certv1.CertificateSigningRequest{
				newCSR("csr-new", me, time.Second),
				newCSR("csr-old", me, 30*time.Minute, approved, issued(installed.CertPEM())),
			},
			installed: fp, want: csrmatch.Issued, wantName: "csr-old",
		},
		{
			name:      "newest pending",
			csrs:      []*certv1.CertificateSigningRequest{newCSR("csr-old", me, time.Hour, approved, issued(other.CertPEM())), newCSR("csr-p", me, 2*time.Minute)},
			installed: fp, want: csrmatch.Pending, wantName: "csr-p", wantText: "pending approval since 2026-11-30T02:58:00Z",
		},
		{
			name:      "pending before anything is installed",
			csrs:      []*certv1.CertificateSigningRequest{newCSR("csr-p", me, time.Minute)},
			installed: fingerprint.SHA256{}, want: csrmatch.Pending, wantName: "csr-p",
		},
		{
			name:      "denied with its message",
			csrs:      []*certv1.CertificateSigningRequest{newCSR("csr-d", me, time.Minute, cond(certv1.CertificateDenied, "IPSANNotInInventory"))},
			installed: fp, want: csrmatch.Denied, wantName: "csr-d", wantText: "denied: IPSANNotInInventory",
		},
		{
			name:      "approved but failed by the signer",
			csrs:      []*certv1.CertificateSigningRequest{newCSR("csr-f", me, time.Minute, approved, cond(certv1.CertificateFailed, "invalid usage"))},
			installed: fp, want: csrmatch.Failed, wantName: "csr-f", wantText: "failed to sign: invalid usage",
		},
		{
			name:      "approved, not issued",
			csrs:      []*certv1.CertificateSigningRequest{newCSR("csr-n", me, time.Minute, approved)},
			installed: fp, want: csrmatch.NotIssued, wantName: "csr-n", wantText: "approved but not issued",
		},
		{
			name:      "issued a different certificate",
			csrs:      []*certv1.CertificateSigningRequest{newCSR("csr-x", me, time.Minute, approved, issued(other.CertPEM()))},
			installed: fp, want: csrmatch.None, wantName: "csr-x", wantText: "none of the node's 1",
		},
		{
			name:      "no CSR at all (garbage-collected)",
			installed: fp, want: csrmatch.None, wantText: "no kubelet-serving CSR",
		},
		{
			name:      "issued certificate but never approved does not count",
			csrs:      []*certv1.CertificateSigningRequest{newCSR("csr-u", me, time.Minute, issued(installed.CertPEM()))},
			installed: fp, want: csrmatch.Pending, wantName: "csr-u",
		},
		{
			name:      "another node's CSR that issued the same certificate is ignored",
			csrs:      []*certv1.CertificateSigningRequest{newCSR("csr-o", "system:node:w2", time.Minute, approved, issued(installed.CertPEM()))},
			installed: fp, want: csrmatch.None, wantText: "no kubelet-serving CSR",
		},
		{
			name:      "another signer's CSR is ignored",
			csrs:      []*certv1.CertificateSigningRequest{newCSR("csr-s", me, time.Minute, approved, issued(installed.CertPEM()), signer("example.com/other"))},
			installed: fp, want: csrmatch.None,
		},
		{
			name:      "garbage in status.certificate explains nothing",
			csrs:      []*certv1.CertificateSigningRequest{newCSR("csr-g", me, time.Minute, approved, issued([]byte("-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n")))},
			installed: fp, want: csrmatch.None, wantName: "csr-g",
		},
		{
			name:      "nil entries are skipped",
			csrs:      []*certv1.CertificateSigningRequest{nil, newCSR("csr-a", me, time.Minute, approved, issued(installed.CertPEM()))},
			installed: fp, want: csrmatch.Issued, wantName: "csr-a",
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := csrmatch.Match(tc.csrs, "w1", tc.installed)
			if got.State != tc.want {
				t.Fatalf("state = %s (%s), want %s", got.State, got.Describe(), tc.want)
			}
			if got.Name != tc.wantName {
				t.Errorf("name = %q, want %q", got.Name, tc.wantName)
			}
			if !strings.Contains(got.Describe(), tc.wantText) {
				t.Errorf("describe = %q, want it to contain %q", got.Describe(), tc.wantText)
			}
		})
	}
}
