// Package metricscert keeps the certificate that the agents' and the
// approver's metrics endpoints serve, so that Prometheus can verify whom it
// sends its token to: a CA of certready's own (its key in one Secret that
// only the approver reads) and a serving certificate for one fixed server
// name signed by it (certificate, key and CA bundle in a second Secret that
// the pods mount and the ServiceMonitor names as its CA).
//
// Both Secrets are created empty by the manifests: the approver only reads
// and updates them by name, and needs no right to create Secrets (which in
// its namespace would let it mint any ServiceAccount's token).
package metricscert

import (
	"bytes"
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	certutil "k8s.io/client-go/util/cert"
	"k8s.io/client-go/util/keyutil"
	"k8s.io/klog/v2"
)

// The Secrets' keys: a kubernetes.io/tls Secret's names, and the CA bundle
// under the name cert-manager gives it.
const (
	CertKey   = "tls.crt"
	KeyKey    = "tls.key"
	CABundle  = "ca.crt"
	CAKeyFile = "ca.key"
	// previousCAFile, in the CA Secret: the CA a planned renewal replaced,
	// trusted (in the serving Secret's bundle) until it expires.
	previousCAFile = "previous-ca.crt"
)

// Lifetimes: the serving certificate is renewed with a third of its life
// left (the pods' Secret volumes follow within a minute or two, and the CA
// stays, so Prometheus keeps verifying throughout); the CA likewise, and
// its predecessor stays in the bundle until it expires.
const (
	caLifetime      = 10 * 365 * 24 * time.Hour
	servingLifetime = 365 * 24 * time.Hour
)

// Material is the content of the two Secrets.
type Material struct {
	CA, TLS map[string][]byte
}

// Plan returns what the Secrets must hold for serverName at now, given what
// they hold (any of it missing, malformed or hostile: whoever writes Secrets
// in the namespace can write them), and why it changed (nothing when the
// current content is good). The CA bundle is built from the CA Secret
// alone: the CA, and its predecessor (previousCAFile) only after a planned
// renewal and until it expires. A CA replaced because it was bad, or
// emptied by an operator rotating it, leaves no predecessor trusted.
func Plan(cur Material, serverName string, now time.Time) (Material, []string, error) {
	if serverName == "" {
		return Material{}, nil, errors.New("no server name")
	}
	var why []string
	caCert, caKey, err := parseCA(cur.CA, serverName, now)
	next := Material{CA: cur.CA, TLS: cur.TLS}
	var previous *x509.Certificate
	switch {
	case err != nil:
		why = append(why, "new CA: "+err.Error())
	case renewDue(caCert, now):
		why = append(why, fmt.Sprintf("new CA: the CA expires at %s", caCert.NotAfter.UTC().Format(time.RFC3339)))
		previous = caCert
	default:
		previous = previousCA(cur.CA[previousCAFile], caCert, now)
	}
	if len(why) > 0 {
		if caCert, caKey, err = newCA(now); err != nil {
			return Material{}, nil, err
		}
		keyPEM, err := keyutil.MarshalPrivateKeyToPEM(caKey)
		if err != nil {
			return Material{}, nil, err
		}
		next.CA = map[string][]byte{CABundle: encodeCert(caCert.Raw), CAKeyFile: keyPEM}
		if previous != nil {
			next.CA[previousCAFile] = encodeCert(previous.Raw)
		}
	} else if previous == nil && len(cur.CA[previousCAFile]) > 0 {
		why = append(why, "the previous CA expired or is no CA: dropped")
		next.CA = map[string][]byte{CABundle: cur.CA[CABundle], CAKeyFile: cur.CA[CAKeyFile]}
	}
	bundle := encodeCert(caCert.Raw)
	if previous != nil {
		bundle = append(bundle, encodeCert(previous.Raw)...)
	}
	if reason := servingProblem(cur.TLS, caCert, serverName, now); reason != "" || len(why) > 0 {
		if reason != "" {
			why = append(why, "new serving certificate: "+reason)
		}
		certPEM, keyPEM, err := issue(caCert, caKey, serverName, now)
		if err != nil {
			return Material{}, nil, err
		}
		next.TLS = map[string][]byte{CertKey: certPEM, KeyKey: keyPEM, CABundle: bundle}
	} else if !bytes.Equal(cur.TLS[CABundle], bundle) || len(cur.TLS) != 3 {
		why = append(why, "CA bundle brought up to date")
		next.TLS = map[string][]byte{CertKey: cur.TLS[CertKey], KeyKey: cur.TLS[KeyKey], CABundle: bundle}
	}
	return next, why, nil
}

// renewDue says whether c has less than a third of its life left.
func renewDue(c *x509.Certificate, now time.Time) bool {
	life := c.NotAfter.Sub(c.NotBefore)
	return c.NotAfter.Sub(now) < life/3
}

// parseCA reads the CA Secret's CA and key, and refuses one that could not
// issue a serving certificate Prometheus accepts for serverName at now
// (not yet valid, expired, constrained, or with a key other than ECDSA
// P-256): it would be re-issued from forever.
func parseCA(data map[string][]byte, serverName string, now time.Time) (*x509.Certificate, crypto.Signer, error) {
	if len(data[CABundle]) == 0 || len(data[CAKeyFile]) == 0 {
		return nil, nil, errors.New("none yet")
	}
	certs, err := certutil.ParseCertsPEM(data[CABundle])
	if err != nil || len(certs) != 1 {
		return nil, nil, fmt.Errorf("%s is not one certificate", CABundle)
	}
	c := certs[0]
	if !c.IsCA || !c.BasicConstraintsValid || c.KeyUsage&x509.KeyUsageCertSign == 0 || c.CheckSignatureFrom(c) != nil {
		return nil, nil, fmt.Errorf("%s is not a self-signed CA certificate", CABundle)
	}
	if pub, ok := c.PublicKey.(*ecdsa.PublicKey); !ok || pub.Curve != elliptic.P256() {
		return nil, nil, fmt.Errorf("%s has another key than ECDSA P-256", CABundle)
	}
	if now.Before(c.NotBefore) || !now.Before(c.NotAfter) {
		return nil, nil, fmt.Errorf("%s is not valid now (%s to %s)", CABundle, c.NotBefore.UTC().Format(time.RFC3339), c.NotAfter.UTC().Format(time.RFC3339))
	}
	k, err := keyutil.ParsePrivateKeyPEM(data[CAKeyFile])
	if err != nil {
		return nil, nil, fmt.Errorf("%s is not a private key", CAKeyFile)
	}
	signer, ok := k.(crypto.Signer)
	if !ok || !publicKeysEqual(signer.Public(), c.PublicKey) {
		return nil, nil, fmt.Errorf("%s does not belong to %s", CAKeyFile, CABundle)
	}
	// What it signs must verify: no name constraint or usage of its own
	// may exclude the server name.
	certPEM, _, err := issue(c, signer, serverName, now)
	if err != nil {
		return nil, nil, fmt.Errorf("%s cannot sign: %w", CAKeyFile, err)
	}
	if problem := verifies(certPEM, c, serverName, now); problem != "" {
		return nil, nil, fmt.Errorf("a certificate it signs %s", problem)
	}
	return c, signer, nil
}

// verifies says what keeps certPEM from verifying for serverName with ca
// at now, or "".
func verifies(certPEM []byte, ca *x509.Certificate, serverName string, now time.Time) string {
	certs, err := certutil.ParseCertsPEM(certPEM)
	if err != nil || len(certs) != 1 {
		return CertKey + " is not one certificate"
	}
	pool := x509.NewCertPool()
	pool.AddCert(ca)
	if _, err := certs[0].Verify(x509.VerifyOptions{Roots: pool, DNSName: serverName, CurrentTime: now, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}); err != nil {
		return fmt.Sprintf("does not verify for %s with the CA", serverName)
	}
	return ""
}

// servingProblem says what is wrong with the serving certificate in data,
// or "" when it is signed by ca, for serverName, with its key, and not due.
func servingProblem(data map[string][]byte, ca *x509.Certificate, serverName string, now time.Time) string {
	if len(data[CertKey]) == 0 || len(data[KeyKey]) == 0 {
		return "none yet"
	}
	if problem := verifies(data[CertKey], ca, serverName, now); problem != "" {
		return "it " + problem
	}
	c, _ := certutil.ParseCertsPEM(data[CertKey])
	k, err := keyutil.ParsePrivateKeyPEM(data[KeyKey])
	if err != nil {
		return KeyKey + " is not a private key"
	}
	if s, ok := k.(crypto.Signer); !ok || !publicKeysEqual(s.Public(), c[0].PublicKey) {
		return KeyKey + " does not belong to " + CertKey
	}
	if renewDue(c[0], now) {
		return "it expires at " + c[0].NotAfter.UTC().Format(time.RFC3339)
	}
	return ""
}

// previousCA is the predecessor the CA Secret records (previousCAFile),
// while it is still valid: the certificates it signed may still be
// served until the pods' volumes catch up.
func previousCA(pemBytes []byte, current *x509.Certificate, now time.Time) *x509.Certificate {
	certs, err := certutil.ParseCertsPEM(pemBytes)
	if err != nil || len(certs) != 1 {
		return nil
	}
	c := certs[0]
	if c.Equal(current) || !c.IsCA || !now.Before(c.NotAfter) || c.CheckSignatureFrom(c) != nil {
		return nil
	}
	return c
}

func publicKeysEqual(a, b crypto.PublicKey) bool {
	e, ok := a.(interface{ Equal(crypto.PublicKey) bool })
	return ok && e.Equal(b)
}

func serial() (*big.Int, error) {
	return rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
}

func newCA(now time.Time) (*x509.Certificate, crypto.Signer, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	sn, err := serial()
	if err != nil {
		return nil, nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          sn,
		Subject:               pkix.Name{CommonName: fmt.Sprintf("certready-metrics-ca@%d", now.Unix())},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(caLifetime),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		return nil, nil, err
	}
	c, err := x509.ParseCertificate(der)
	return c, key, err
}

func issue(ca *x509.Certificate, caKey crypto.Signer, serverName string, now time.Time) (certPEM, keyPEM []byte, err error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	sn, err := serial()
	if err != nil {
		return nil, nil, err
	}
	notAfter := now.Add(servingLifetime)
	if notAfter.After(ca.NotAfter) {
		notAfter = ca.NotAfter
	}
	tmpl := &x509.Certificate{
		SerialNumber: sn,
		Subject:      pkix.Name{CommonName: serverName},
		DNSNames:     []string{serverName},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     notAfter,
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, key.Public(), caKey)
	if err != nil {
		return nil, nil, err
	}
	keyPEM, err = keyutil.MarshalPrivateKeyToPEM(key)
	if err != nil {
		return nil, nil, err
	}
	return encodeCert(der), keyPEM, nil
}

// Keeper brings the two Secrets in line with Plan, at start and every
// Interval, while this approver leads.
type Keeper struct {
	Client                  kubernetes.Interface
	Namespace               string
	CASecret, ServingSecret string
	ServerName              string
	Interval                time.Duration
	Now                     func() time.Time
}

// Run keeps the Secrets until ctx ends; failures are logged and retried
// from 5 seconds, doubling up to a minute, while they fail.
func (k *Keeper) Run(ctx context.Context) {
	logger := klog.FromContext(ctx).WithValues("namespace", k.Namespace, "caSecret", k.CASecret, "servingSecret", k.ServingSecret)
	retry := 5 * time.Second
	for {
		wait := k.Interval
		if err := k.Ensure(ctx); err != nil {
			logger.Error(err, "Could not keep the metrics serving certificate; the metrics endpoints serve a certificate Prometheus cannot verify until this succeeds", "retry", retry)
			wait, retry = min(wait, retry), min(2*retry, time.Minute)
		} else {
			retry = 5 * time.Second
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
	}
}

// Ensure reads both Secrets, and writes what Plan says they must hold.
func (k *Keeper) Ensure(ctx context.Context) error {
	now := time.Now
	if k.Now != nil {
		now = k.Now
	}
	secrets := k.Client.CoreV1().Secrets(k.Namespace)
	caS, err := secrets.Get(ctx, k.CASecret, metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("Secret %s/%s (the manifests create it empty): %w", k.Namespace, k.CASecret, err)
	}
	tlsS, err := secrets.Get(ctx, k.ServingSecret, metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("Secret %s/%s (the manifests create it empty): %w", k.Namespace, k.ServingSecret, err)
	}
	next, why, err := Plan(Material{CA: caS.Data, TLS: tlsS.Data}, k.ServerName, now())
	if err != nil || len(why) == 0 {
		return err
	}
	// The CA first: a serving certificate published before its CA's key
	// is stored would be signed by a key lost if this write failed.
	if !mapsEqual(caS.Data, next.CA) {
		caS.Data = next.CA
		if _, err := secrets.Update(ctx, caS, metav1.UpdateOptions{}); err != nil {
			return fmt.Errorf("update Secret %s/%s: %w", k.Namespace, k.CASecret, err)
		}
	}
	if !mapsEqual(tlsS.Data, next.TLS) {
		tlsS.Data = next.TLS
		if _, err := secrets.Update(ctx, tlsS, metav1.UpdateOptions{}); err != nil {
			return fmt.Errorf("update Secret %s/%s: %w", k.Namespace, k.ServingSecret, err)
		}
	}
	klog.FromContext(ctx).Info("Metrics serving certificate written", "serverName", k.ServerName, "why", why)
	return nil
}

func mapsEqual(a, b map[string][]byte) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || !bytes.Equal(v, w) {
			return false
		}
	}
	return true
}

func encodeCert(der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}
