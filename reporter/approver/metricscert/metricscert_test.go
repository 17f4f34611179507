package metricscert_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	certutil "k8s.io/client-go/util/cert"
	"k8s.io/client-go/util/keyutil"

	"github.com/certready/certready/internal/securemetrics"
	"github.com/certready/certready/internal/testpki"
	"github.com/certready/certready/reporter/approver/metricscert"
)

const name = "certready-metrics"

var t0 = time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC)

func mustPlan(t *testing.T, cur metricscert.Material, at time.Time) (metricscert.Material, []string) {
	t.Helper()
	next, why, err := metricscert.Plan(cur, name, at)
	if err != nil {
		t.Fatal(err)
	}
	return next, why
}

func certs(t *testing.T, b []byte) []*x509.Certificate {
	t.Helper()
	c, err := certutil.ParseCertsPEM(b)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// verifies says whether the serving certificate in m verifies for name
// with m's own CA bundle at at, as Prometheus checks it.
func verifies(t *testing.T, m metricscert.Material, at time.Time) error {
	t.Helper()
	pool := x509.NewCertPool()
	for _, c := range certs(t, m.TLS[metricscert.CABundle]) {
		pool.AddCert(c)
	}
	leaf := certs(t, m.TLS[metricscert.CertKey])[0]
	_, err := leaf.Verify(x509.VerifyOptions{Roots: pool, DNSName: name, CurrentTime: at, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}})
	return err
}

// From nothing, a CA and a serving certificate that verifies; the same
// content again changes nothing; hostile or stale content is replaced.
func TestPlan(t *testing.T) {
	first, why := mustPlan(t, metricscert.Material{}, t0)
	if len(why) == 0 || verifies(t, first, t0) != nil {
		t.Fatalf("from empty Secrets: why %v, verify %v: want a new CA and certificate that verify", why, verifies(t, first, t0))
	}
	if len(first.CA[metricscert.CAKeyFile]) == 0 || len(first.TLS[metricscert.KeyKey]) == 0 {
		t.Fatal("keys missing")
	}
	if strings.Contains(string(first.TLS[metricscert.CABundle]), "PRIVATE") || len(first.TLS) != 3 {
		t.Fatalf("the mounted Secret holds %d keys, want tls.crt, tls.key and ca.crt and no CA key", len(first.TLS))
	}
	if _, why := mustPlan(t, first, t0.Add(24*time.Hour)); len(why) != 0 {
		t.Fatalf("a day later: %v, want nothing to change", why)
	}

	other, _ := mustPlan(t, metricscert.Material{}, t0)
	foreign, err := testpki.NewCA("someone-else")
	if err != nil {
		t.Fatal(err)
	}
	wrongName, err := foreign.Issue(testpki.Serving{CN: name, Orgs: []string{}, DNSNames: []string{"evil.example.com"}})
	if err != nil {
		t.Fatal(err)
	}
	with := func(m metricscert.Material, secret, key string, v []byte) metricscert.Material {
		cp := metricscert.Material{CA: map[string][]byte{}, TLS: map[string][]byte{}}
		for k, b := range m.CA {
			cp.CA[k] = b
		}
		for k, b := range m.TLS {
			cp.TLS[k] = b
		}
		if secret == "ca" {
			cp.CA[key] = v
		} else {
			cp.TLS[key] = v
		}
		return cp
	}
	for _, tc := range []struct {
		name   string
		cur    metricscert.Material
		at     time.Time
		newCA  bool
		reason string
	}{
		{"CA key of another CA", with(first, "ca", metricscert.CAKeyFile, other.CA[metricscert.CAKeyFile]), t0, true, "does not belong"},
		{"CA certificate that is no CA", with(first, "ca", metricscert.CABundle, first.TLS[metricscert.CertKey]), t0, true, "not a self-signed CA"},
		{"CA certificate not PEM", with(first, "ca", metricscert.CABundle, []byte("garbage")), t0, true, "not one certificate"},
		{"serving certificate from another CA", with(first, "tls", metricscert.CertKey, other.TLS[metricscert.CertKey]), t0, false, "does not verify"},
		{"serving certificate for another name", with(with(first, "tls", metricscert.CertKey, wrongName.CertPEM()), "tls", metricscert.KeyKey, wrongName.KeyPEM()), t0, false, "does not verify"},
		{"serving key of another certificate", with(first, "tls", metricscert.KeyKey, other.TLS[metricscert.KeyKey]), t0, false, "does not belong"},
		{"serving key missing", with(first, "tls", metricscert.KeyKey, nil), t0, false, "none yet"},
		{"serving certificate with a third of its life left", first, t0.Add(250 * 24 * time.Hour), false, "expires"},
		{"CA with a third of its life left", first, t0.Add(7 * 365 * 24 * time.Hour), true, "the CA expires"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			next, why := mustPlan(t, tc.cur, tc.at)
			if !strings.Contains(strings.Join(why, "; "), tc.reason) {
				t.Errorf("why %q, want it to say %q", why, tc.reason)
			}
			if err := verifies(t, next, tc.at); err != nil {
				t.Errorf("after the change: %v, want a certificate that verifies", err)
			}
			caChanged := string(next.CA[metricscert.CABundle]) != string(first.CA[metricscert.CABundle])
			if caChanged != tc.newCA {
				t.Errorf("new CA %v, want %v", caChanged, tc.newCA)
			}
			if _, again := mustPlan(t, next, tc.at); len(again) != 0 {
				t.Errorf("planned again: %v, want nothing to change", again)
			}
		})
	}

	// A renewed CA: its predecessor stays in the bundle while it is valid,
	// so the serving certificate the pods still serve keeps verifying
	// until their Secret volumes catch up.
	renewed, _ := mustPlan(t, first, t0.Add(7*365*24*time.Hour))
	if n := len(certs(t, renewed.TLS[metricscert.CABundle])); n != 2 {
		t.Errorf("renewed bundle holds %d CAs, want the new and the old", n)
	}
	after, _ := mustPlan(t, renewed, t0.Add(11*365*24*time.Hour))
	if n := len(certs(t, after.TLS[metricscert.CABundle])); n != 1 {
		t.Errorf("after the old CA expired the bundle holds %d CAs, want 1", n)
	}
}

// The keeper fills the two empty Secrets the manifests create, never
// creates one, and the mounted result serves a TLS endpoint that a client
// holding only ca.crt and the server name verifies.
func TestKeeperFillsTheSecretsAndTheEndpointVerifies(t *testing.T) {
	ctx := context.Background()
	ns := "certready-system"
	empty := func(n string) *corev1.Secret {
		return &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: n}, Type: corev1.SecretTypeOpaque}
	}
	k := &metricscert.Keeper{Namespace: ns, CASecret: "certready-metrics-ca", ServingSecret: "certready-metrics-tls", ServerName: name, Interval: time.Hour}

	k.Client = fake.NewClientset()
	if err := k.Ensure(ctx); err == nil || !strings.Contains(err.Error(), "certready-metrics-ca") {
		t.Fatalf("without the Secrets: %v, want an error naming the missing Secret", err)
	}
	if l, _ := k.Client.CoreV1().Secrets(ns).List(ctx, metav1.ListOptions{}); len(l.Items) != 0 {
		t.Fatalf("created %d Secrets, want none: creating Secrets is no right the approver holds", len(l.Items))
	}

	client := fake.NewClientset(empty("certready-metrics-ca"), empty("certready-metrics-tls"))
	k.Client = client
	if err := k.Ensure(ctx); err != nil {
		t.Fatal(err)
	}
	tlsS, err := client.CoreV1().Secrets(ns).Get(ctx, "certready-metrics-tls", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	rv := tlsS.ResourceVersion
	if err := k.Ensure(ctx); err != nil {
		t.Fatal(err)
	}
	if again, _ := client.CoreV1().Secrets(ns).Get(ctx, "certready-metrics-tls", metav1.GetOptions{}); again.ResourceVersion != rv {
		t.Error("a second pass rewrote a good Secret")
	}

	// As the kubelet mounts it, and as the agent serves it.
	dir := t.TempDir()
	for _, f := range []string{metricscert.CertKey, metricscert.KeyKey} {
		if err := os.WriteFile(filepath.Join(dir, f), tlsS.Data[f], 0o600); err != nil {
			t.Fatal(err)
		}
	}
	cfg, err := securemetrics.TLSConfig(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok")) }))
	srv.TLS = cfg
	srv.StartTLS()
	defer srv.Close()
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(tlsS.Data[metricscert.CABundle]) {
		t.Fatal("ca.crt holds no certificate")
	}
	get := func(serverName string) error {
		c := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots, ServerName: serverName, MinVersion: tls.VersionTLS12}}}
		resp, err := c.Get(srv.URL)
		if err != nil {
			return err
		}
		return resp.Body.Close()
	}
	if err := get(name); err != nil {
		t.Fatalf("with ca.crt and %s: %v, want a verified connection", name, err)
	}
	if err := get("certready-metrics.elsewhere"); err == nil {
		t.Error("another server name verified")
	}
}

// hostileCA is a CA Secret's content for a self-signed CA made from tmpl.
func hostileCA(t *testing.T, tmpl *x509.Certificate) map[string][]byte {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl.SerialNumber, tmpl.IsCA, tmpl.BasicConstraintsValid = big.NewInt(7), true, true
	tmpl.KeyUsage = x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		t.Fatal(err)
	}
	keyPEM, err := keyutil.MarshalPrivateKeyToPEM(key)
	if err != nil {
		t.Fatal(err)
	}
	return map[string][]byte{metricscert.CABundle: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), metricscert.CAKeyFile: keyPEM}
}

// What the bundle trusts comes from the CA Secret alone: a CA slipped
// into the mounted Secret's ca.crt is dropped, a CA an operator emptied to
// rotate it is not carried over, and a CA that parses but cannot sign a
// certificate that verifies (not yet valid, or constrained away from the
// name) is replaced rather than re-issued from forever.
func TestPlanTrustsOnlyTheCASecret(t *testing.T) {
	first, _ := mustPlan(t, metricscert.Material{}, t0)
	attacker, _ := mustPlan(t, metricscert.Material{}, t0)
	slipped := metricscert.Material{CA: first.CA, TLS: map[string][]byte{}}
	for k, v := range first.TLS {
		slipped.TLS[k] = v
	}
	slipped.TLS[metricscert.CABundle] = append(append([]byte{}, first.TLS[metricscert.CABundle]...), attacker.CA[metricscert.CABundle]...)
	next, why := mustPlan(t, slipped, t0)
	if n := len(certs(t, next.TLS[metricscert.CABundle])); n != 1 || len(why) == 0 {
		t.Errorf("a CA slipped into ca.crt: bundle of %d CAs (%v), want the CA Secret's one", n, why)
	}

	rotated, _ := mustPlan(t, metricscert.Material{CA: map[string][]byte{}, TLS: first.TLS}, t0)
	if b := certs(t, rotated.TLS[metricscert.CABundle]); len(b) != 1 || b[0].Equal(certs(t, first.CA[metricscert.CABundle])[0]) {
		t.Errorf("after the CA Secret was emptied: bundle %d CAs, want only the new CA", len(b))
	}

	for name, ca := range map[string]map[string][]byte{
		"not valid yet": hostileCA(t, &x509.Certificate{Subject: pkix.Name{CommonName: "later"}, NotBefore: t0.Add(365 * 24 * time.Hour), NotAfter: t0.Add(20 * 365 * 24 * time.Hour)}),
		"constrained away from the name": hostileCA(t, &x509.Certificate{Subject: pkix.Name{CommonName: "constrained"}, NotBefore: t0.Add(-time.Hour), NotAfter: t0.Add(5 * 365 * 24 * time.Hour),
			PermittedDNSDomainsCritical: true, PermittedDNSDomains: []string{"example.com"}}),
	} {
		next, why := mustPlan(t, metricscert.Material{CA: ca}, t0)
		if string(next.CA[metricscert.CABundle]) == string(ca[metricscert.CABundle]) || verifies(t, next, t0) != nil {
			t.Errorf("a CA %s: kept (%v), want it replaced by one whose certificate verifies", name, why)
		}
		if _, again := mustPlan(t, next, t0); len(again) != 0 {
			t.Errorf("a CA %s: planned again %v, want nothing", name, again)
		}
	}
}
