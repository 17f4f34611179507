package probe_test

import (
	"context"
	"crypto/tls"
	"errors"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/certready/certready/internal/fingerprint"
	"github.com/certready/certready/internal/testpki"
	"github.com/certready/certready/reporter/servingcert/probe"
)

var loopback = net.ParseIP("127.0.0.1")

// serveTLS serves TLS on a loopback port with getCert, as the kubelet does.
func serveTLS(t *testing.T, getCert func(*tls.ClientHelloInfo) (*tls.Certificate, error)) string {
	t.Helper()
	ln, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{GetCertificate: getCert, MinVersion: tls.VersionTLS12})
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.NotFoundHandler(), ErrorLog: nil}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	return ln.Addr().String()
}

func pairCert(p *testpki.Pair) *tls.Certificate {
	return &tls.Certificate{Certificate: [][]byte{p.Cert.Raw}, PrivateKey: p.Key, Leaf: p.Cert}
}

func TestProbe(t *testing.T) {
	ca, err := testpki.NewCA("kubelet-ca")
	if err != nil {
		t.Fatal(err)
	}
	otherCA, err := testpki.NewCA("other-ca")
	if err != nil {
		t.Fatal(err)
	}
	good, err := ca.Issue(testpki.Serving{Node: "w1", IPs: []net.IP{loopback}})
	if err != nil {
		t.Fatal(err)
	}
	foreign, err := otherCA.Issue(testpki.Serving{Node: "w1", IPs: []net.IP{loopback}})
	if err != nil {
		t.Fatal(err)
	}
	wrongIP, err := ca.Issue(testpki.Serving{Node: "w1", IPs: []net.IP{net.ParseIP("192.0.2.99")}})
	if err != nil {
		t.Fatal(err)
	}
	selfSigned, err := otherCA.Issue(testpki.Serving{Node: "w1", DNSNames: []string{"w1"}})
	if err != nil {
		t.Fatal(err)
	}
	static := func(p *testpki.Pair) string {
		return serveTLS(t, func(*tls.ClientHelloInfo) (*tls.Certificate, error) { return pairCert(p), nil })
	}

	closedAddr := func() string {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := ln.Addr().String()
		ln.Close()
		return addr
	}()
	plainHTTP := func() string {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		srv := &http.Server{Handler: http.NotFoundHandler()}
		go func() { _ = srv.Serve(ln) }()
		t.Cleanup(func() { _ = srv.Close() })
		return ln.Addr().String()
	}()
	silent := func() string {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { ln.Close() })
		go func() {
			for {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				t.Cleanup(func() { c.Close() })
			}
		}()
		return ln.Addr().String()
	}()

	cases := []struct {
		name        string
		addr        string
		want        probe.Outcome
		wantFP      fingerprint.SHA256
		wantTrusted bool
		// wantUnchained: no chain to the CA, whatever the names.
		wantUnchained bool
		wantDetail    string
	}{
		{name: "kubelet presents a trusted certificate", addr: static(good), want: probe.Presented, wantFP: fingerprint.Of(good.Cert), wantTrusted: true},
		{name: "certificate from another CA", addr: static(foreign), want: probe.Presented, wantFP: fingerprint.Of(foreign.Cert), wantUnchained: true},
		{name: "a kubelet's own certificate for its hostname (x509 names the name first)", addr: static(selfSigned), want: probe.Presented, wantFP: fingerprint.Of(selfSigned.Cert), wantUnchained: true},
		{name: "certificate without the dialled IP", addr: static(wrongIP), want: probe.Presented, wantFP: fingerprint.Of(wrongIP.Cert)},
		{
			name: "kubelet without a certificate: tls internal error",
			addr: serveTLS(t, func(*tls.ClientHelloInfo) (*tls.Certificate, error) {
				return nil, errors.New("no serving certificate available for the kubelet")
			}),
			want: probe.NoCertificate, wantDetail: "internal error",
		},
		{name: "plain HTTP on the port", addr: plainHTTP, want: probe.NotTLS},
		{name: "nothing listening", addr: closedAddr, want: probe.Unreachable, wantDetail: "refused"},
		{name: "listener that never answers", addr: silent, want: probe.HandshakeFailed, wantDetail: "deadline"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			res := probe.Probe(context.Background(), probe.Target{Addr: tc.addr, ServerName: "127.0.0.1", Roots: ca.Pool(), Timeout: 2 * time.Second})
			if res.Outcome != tc.want {
				t.Fatalf("outcome = %s (%s), want %s", res.Outcome, res.Detail, tc.want)
			}
			if res.Fingerprint != tc.wantFP {
				t.Errorf("fingerprint = %s, want %s", res.Fingerprint.Short(), tc.wantFP.Short())
			}
			if tc.want == probe.Presented && (res.VerifyErr == nil) != tc.wantTrusted {
				t.Errorf("verify error = %v, want trusted=%v", res.VerifyErr, tc.wantTrusted)
			}
			if res.Unchained != tc.wantUnchained {
				t.Errorf("unchained = %v (verify error %v), want %v", res.Unchained, res.VerifyErr, tc.wantUnchained)
			}
			if !strings.Contains(res.Detail, tc.wantDetail) {
				t.Errorf("detail = %q, want it to contain %q", res.Detail, tc.wantDetail)
			}
			if !strings.Contains(res.Describe(), tc.addr) {
				t.Errorf("describe %q does not name the address", res.Describe())
			}
		})
	}
}
