package renewal

import (
	"strings"
	"testing"
	"time"

	certv1 "k8s.io/api/certificates/v1"

	"github.com/certready/certready/internal/testpki"
)

func TestDueIsTheKubeletsLatestRotationPointPlusAGrace(t *testing.T) {
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	ca, err := testpki.NewCA("ca")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		life time.Duration
		want time.Duration // after NotBefore
	}{
		// A year: 90% plus the 5-minute cap.
		{365 * 24 * time.Hour, time.Duration(0.9*float64(365*24*time.Hour)) + 5*time.Minute},
		// Three minutes (the e2e expiry scenario): 90% plus 5% of it.
		{3 * time.Minute, 162*time.Second + 9*time.Second},
	} {
		p, err := ca.Issue(testpki.Serving{Node: "n", NotBefore: start, NotAfter: start.Add(tc.life)})
		if err != nil {
			t.Fatal(err)
		}
		if got := Due(p.Cert).Sub(start); got != tc.want {
			t.Errorf("lifetime %s: due %s after NotBefore, want %s", tc.life, got, tc.want)
		}
		// Within the kubelet's window the renewal is never stuck, whatever the CSRs.
		if st := Assess(start.Add(tc.want-time.Second), p.Cert, start, nil, "n"); st.Stuck() {
			t.Errorf("lifetime %s: stuck before due: %+v", tc.life, st)
		}
	}
}

func TestAssessNamesWhatHoldsTheRenewalUp(t *testing.T) {
	ca, err := testpki.NewCA("ca")
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now().Add(-10 * time.Hour).Truncate(time.Second)
	installed, err := ca.Issue(testpki.Serving{Node: "n", NotBefore: start, NotAfter: start.Add(10*time.Hour + time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	renewed, err := ca.Issue(testpki.Serving{Node: "n", NotBefore: start.Add(9 * time.Hour), NotAfter: start.Add(20 * time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now() // 10 h into an 11 h life: past 90% + 5 min
	issuedAt := start.Add(time.Minute)
	renewalAt := start.Add(9 * time.Hour)
	own := testpki.KubeletCSR("csr-installed", "n", testpki.Created(issuedAt), testpki.Issued(installed.CertPEM()))
	kubelet := func(name string, opts ...testpki.CSROption) *certv1.CertificateSigningRequest {
		return testpki.KubeletCSR(name, "n", append([]testpki.CSROption{testpki.Created(renewalAt)}, opts...)...)
	}
	for _, tc := range []struct {
		name   string
		since  time.Time
		csrs   []*certv1.CertificateSigningRequest
		want   Reason
		csr    string
		phrase string
	}{
		{name: "no request since the installed one", since: issuedAt, csrs: []*certv1.CertificateSigningRequest{own}, want: NotRequested, phrase: "has not requested"},
		{name: "no CSR at all (garbage-collected)", since: start, want: NotRequested},
		{name: "pending", since: issuedAt, csrs: []*certv1.CertificateSigningRequest{own, kubelet("csr-new")}, want: Pending, csr: "csr-new", phrase: "still pending"},
		{name: "denied, with its message", since: issuedAt,
			csrs: []*certv1.CertificateSigningRequest{own, kubelet("csr-new", testpki.Condition(certv1.CertificateDenied, "SANDenied: not yours"))},
			want: Denied, csr: "csr-new", phrase: "was denied: SANDenied: not yours"},
		{name: "failed", since: issuedAt,
			csrs: []*certv1.CertificateSigningRequest{own, kubelet("csr-new", testpki.Condition(certv1.CertificateApproved, ""), testpki.Condition(certv1.CertificateFailed, "invalid usage"))},
			want: Failed, csr: "csr-new", phrase: "failed to sign: invalid usage"},
		{name: "approved, never signed", since: issuedAt, csrs: []*certv1.CertificateSigningRequest{own, kubelet("csr-new", testpki.Condition(certv1.CertificateApproved, ""))},
			want: NotIssued, csr: "csr-new", phrase: "never signed"},
		{name: "issued, never installed", since: issuedAt, csrs: []*certv1.CertificateSigningRequest{own, kubelet("csr-new", testpki.Issued(renewed.CertPEM()))},
			want: NotInstalled, csr: "csr-new", phrase: "has not installed"},
		{name: "the newest request decides", since: issuedAt, csrs: []*certv1.CertificateSigningRequest{own,
			kubelet("csr-old", testpki.Condition(certv1.CertificateDenied, "no")),
			kubelet("csr-newest", testpki.Created(renewalAt.Add(time.Minute)))},
			want: Pending, csr: "csr-newest"},
		{name: "a request older than the installed one's is no renewal", since: issuedAt, csrs: []*certv1.CertificateSigningRequest{own,
			kubelet("csr-before", testpki.Created(issuedAt.Add(-time.Minute)), testpki.Condition(certv1.CertificateDenied, "no"))},
			want: NotRequested},
		{name: "another node's request is ignored", since: issuedAt, csrs: []*certv1.CertificateSigningRequest{own,
			testpki.KubeletCSR("csr-other", "m", testpki.Created(renewalAt))}, want: NotRequested},
		{name: "another signer's request is ignored", since: issuedAt, csrs: []*certv1.CertificateSigningRequest{own,
			kubelet("csr-client", testpki.Signer(certv1.KubeAPIServerClientKubeletSignerName))}, want: NotRequested},
		{name: "a request in the node's name from someone else is ignored", since: issuedAt, csrs: []*certv1.CertificateSigningRequest{own,
			kubelet("csr-forged", testpki.Requester("system:serviceaccount:tenant:sa"), testpki.Labelled("n"))}, want: NotRequested},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := Assess(now, installed.Cert, tc.since, tc.csrs, "n")
			if st.Reason != tc.want || st.CSR != tc.csr {
				t.Fatalf("got %q (CSR %q), want %q (CSR %q)", st.Reason, st.CSR, tc.want, tc.csr)
			}
			msg := st.Message("abc", installed.Cert.NotAfter)
			for _, want := range []string{"stuck", "abc", tc.phrase, tc.csr, "still works until"} {
				if !strings.Contains(msg, want) {
					t.Errorf("message %q lacks %q", msg, want)
				}
			}
		})
	}
}

func TestNotStuckIsNoMessage(t *testing.T) {
	if m := (Status{}).Message("abc", time.Now()); m != "" {
		t.Errorf("message %q for a renewal that is not stuck", m)
	}
	if (Status{}).Stuck() {
		t.Error("the zero status is stuck")
	}
	if st := Assess(time.Now(), nil, time.Time{}, nil, "n"); st.Stuck() {
		t.Errorf("no certificate, yet stuck: %+v", st)
	}
}
