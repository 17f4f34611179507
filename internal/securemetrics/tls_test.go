package securemetrics_test

import (
	"crypto/tls"
	"crypto/x509"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/certready/certready/internal/securemetrics"
	"github.com/certready/certready/internal/testpki"
)

// handshake dials a TLS listener served with cfg and returns the leaf it
// presents.
func handshake(t *testing.T, cfg *tls.Config, roots *x509.CertPool, name string) (*x509.Certificate, error) {
	t.Helper()
	ln, err := tls.Listen("tcp", "127.0.0.1:0", cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		c, err := ln.Accept()
		if err == nil {
			_ = c.(*tls.Conn).Handshake()
			c.Close()
		}
	}()
	conn, err := tls.Dial("tcp", ln.Addr().String(), &tls.Config{RootCAs: roots, ServerName: name, InsecureSkipVerify: roots == nil}) //nolint:gosec // roots nil: the self-signed case, checked by hand
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	if p := conn.ConnectionState().NegotiatedProtocol; p != "" && p != "http/1.1" {
		t.Errorf("negotiated %q: HTTP/2 is not offered", p)
	}
	return conn.ConnectionState().PeerCertificates[0], nil
}

func TestSelfSignedCoversTheListenAddress(t *testing.T) {
	cfg, err := securemetrics.TLSConfig("", securemetrics.Hosts("[::1]:9721"))
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := handshake(t, cfg, nil, "")
	if err != nil {
		t.Fatal(err)
	}
	if len(leaf.IPAddresses) != 1 || !leaf.IPAddresses[0].Equal(net.ParseIP("::1")) || leaf.VerifyHostname("::1") != nil {
		t.Errorf("self-signed SANs %v %v: want the listen address", leaf.IPAddresses, leaf.DNSNames)
	}
	if len(leaf.ExtKeyUsage) != 1 || leaf.ExtKeyUsage[0] != x509.ExtKeyUsageServerAuth {
		t.Errorf("usages %v, want server auth only", leaf.ExtKeyUsage)
	}
	if hosts := securemetrics.Hosts(":9721"); len(hosts) > 1 || (len(hosts) == 1 && net.ParseIP(hosts[0]) != nil) {
		t.Errorf("Hosts(:9721) = %v: an unspecified address is no SAN", hosts)
	}
}

// A certificate folder (a kubernetes.io/tls Secret): served, verified by
// its CA, read again after a renewal, the last good pair kept while a
// renewal is half written; a missing folder fails start-up by name.
func TestCertDirIsReloaded(t *testing.T) {
	ca, err := testpki.NewCA("metrics-ca")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	write := func(p *testpki.Pair) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(dir, securemetrics.CertFile), p.CertPEM(), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, securemetrics.KeyFile), p.KeyPEM(), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	issue := func() *testpki.Pair {
		p, err := ca.Issue(testpki.Serving{CN: "certready-agent-metrics", Orgs: []string{}, DNSNames: []string{"certready-agent-metrics.certready-system.svc"}})
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	first, second := issue(), issue()
	write(first)
	cfg, err := securemetrics.TLSConfig(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	name := "certready-agent-metrics.certready-system.svc"
	leaf, err := handshake(t, cfg, ca.Pool(), name)
	if err != nil || !leaf.Equal(first.Cert) {
		t.Fatalf("first handshake: %v, serial %v, want the folder's certificate", err, leaf)
	}
	write(second)
	if leaf, err = handshake(t, cfg, ca.Pool(), name); err != nil || !leaf.Equal(second.Cert) {
		t.Fatalf("after renewal: %v, want the renewed certificate", err)
	}
	// Half a renewal: a certificate without its key.
	if err := os.WriteFile(filepath.Join(dir, securemetrics.CertFile), first.CertPEM(), 0o600); err != nil {
		t.Fatal(err)
	}
	if leaf, err = handshake(t, cfg, ca.Pool(), name); err != nil || !leaf.Equal(second.Cert) {
		t.Fatalf("mid-renewal: %v, want the last good certificate", err)
	}

	if _, err := securemetrics.TLSConfig(filepath.Join(dir, "absent"), nil); err == nil || !strings.Contains(err.Error(), "tls.crt") {
		t.Errorf("a missing folder: %v, want an error naming tls.crt", err)
	}
}

// The Secret the approver fills, mounted before it is: an empty folder is
// served self-signed (not verifiable with the CA) until both files appear,
// then the folder's certificate, without a restart; likewise a folder
// whose pair does not load.
func TestEmptyCertDirServesSelfSignedUntilFilled(t *testing.T) {
	ca, err := testpki.NewCA("metrics-ca")
	if err != nil {
		t.Fatal(err)
	}
	name := "certready-metrics.certready-system.svc"
	dir := t.TempDir()
	cfg, err := securemetrics.TLSConfig(dir, []string{"127.0.0.1"})
	if err != nil {
		t.Fatalf("an empty folder: %v, want a self-signed certificate until it is filled", err)
	}
	if _, err := handshake(t, cfg, ca.Pool(), name); err == nil {
		t.Fatal("an empty folder: the certificate verified with the CA, want the self-signed fallback")
	}
	if leaf, err := handshake(t, cfg, nil, ""); err != nil || leaf.CheckSignature(leaf.SignatureAlgorithm, leaf.RawTBSCertificate, leaf.Signature) != nil {
		t.Fatalf("an empty folder: %v, want a self-signed certificate", err)
	}
	p, err := ca.Issue(testpki.Serving{CN: name, Orgs: []string{}, DNSNames: []string{name}})
	if err != nil {
		t.Fatal(err)
	}
	for f, b := range map[string][]byte{securemetrics.CertFile: p.CertPEM(), securemetrics.KeyFile: p.KeyPEM()} {
		if err := os.WriteFile(filepath.Join(dir, f), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if leaf, err := handshake(t, cfg, ca.Pool(), name); err != nil || !leaf.Equal(p.Cert) {
		t.Fatalf("after the folder was filled: %v, want its certificate, verified", err)
	}

	// A folder holding a broken pair (whoever writes the Secret wrote it)
	// does not stop the process: self-signed, until the pair loads.
	bad := t.TempDir()
	if err := os.WriteFile(filepath.Join(bad, securemetrics.CertFile), []byte("not PEM"), 0o600); err != nil {
		t.Fatal(err)
	}
	badCfg, err := securemetrics.TLSConfig(bad, nil)
	if err != nil {
		t.Fatalf("a broken pair: %v, want a self-signed certificate, not a start-up failure", err)
	}
	if _, err := handshake(t, badCfg, ca.Pool(), name); err == nil {
		t.Error("a broken pair: the certificate verified with the CA")
	}
	for f, b := range map[string][]byte{securemetrics.CertFile: p.CertPEM(), securemetrics.KeyFile: p.KeyPEM()} {
		if err := os.WriteFile(filepath.Join(bad, f), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if leaf, err := handshake(t, badCfg, ca.Pool(), name); err != nil || !leaf.Equal(p.Cert) {
		t.Errorf("after the pair was fixed: %v, want it served", err)
	}
}
