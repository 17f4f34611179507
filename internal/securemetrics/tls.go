package securemetrics

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"sync"
	"time"

	"k8s.io/klog/v2"
)

// Files read from the certificate folder: the names of a
// kubernetes.io/tls Secret's keys (cert-manager writes them).
const (
	CertFile = "tls.crt"
	KeyFile  = "tls.key"
)

// TLSConfig is the metrics server's TLS: the certificate and key in
// certDir (read again when either file changes, as a Secret mount or
// cert-manager renews them in place), or with no certDir a self-signed
// certificate for hosts made at start (its key never leaves memory). A
// certDir that exists but holds no good pair yet (the Secret the approver
// fills, mounted before it is; or a pair that does not load) is served
// self-signed until a good pair appears. Only a certDir that is no folder
// is an error.
// HTTP/1.1 only, as controller-runtime's metrics server does: HTTP/2's
// stream handling has been a denial-of-service surface and scrapes gain
// nothing from it.
func TLSConfig(certDir string, hosts []string) (*tls.Config, error) {
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, NextProtos: []string{"http/1.1"}}
	if certDir == "" {
		cert, err := selfSigned(hosts, time.Now())
		if err != nil {
			return nil, err
		}
		cfg.Certificates = []tls.Certificate{cert}
		return cfg, nil
	}
	if fi, err := os.Stat(certDir); err != nil || !fi.IsDir() {
		return nil, fmt.Errorf("folder %s, meant to hold %s and %s: %w", certDir, CertFile, KeyFile, errors.Join(err, notDir(fi)))
	}
	kp := &keyPair{cert: filepath.Join(certDir, CertFile), key: filepath.Join(certDir, KeyFile)}
	// Until the folder holds a good pair (nothing written yet, or a pair
	// that does not load: whoever writes the Secret must not be able to
	// stop every process that restarts), a self-signed certificate, which
	// Prometheus refuses: scrapes fail, the process keeps working.
	var fallback *tls.Certificate
	if _, err := kp.get(); err != nil {
		cert, serr := selfSigned(hosts, time.Now())
		if serr != nil {
			return nil, serr
		}
		fallback = &cert
		if kp.absent() {
			klog.Background().Info("Serving a self-signed metrics certificate until the certificate folder holds both files", "folder", certDir, "files", []string{CertFile, KeyFile})
		} else {
			klog.Background().Error(err, "Serving a self-signed metrics certificate: the certificate folder's pair does not load; Prometheus refuses it until the pair is fixed", "folder", certDir)
		}
	}
	cfg.GetCertificate = func(*tls.ClientHelloInfo) (*tls.Certificate, error) {
		c, err := kp.get()
		if err != nil && fallback != nil {
			return fallback, nil
		}
		return c, err
	}
	return cfg, nil
}

func notDir(fi os.FileInfo) error {
	if fi != nil && !fi.IsDir() {
		return errors.New("not a folder")
	}
	return nil
}

// keyPair is a certificate and key on disk, loaded again when either
// file's modification time or size changes.
type keyPair struct {
	cert, key string
	mu        sync.Mutex
	stamp     string
	loaded    *tls.Certificate
}

func (kp *keyPair) get() (*tls.Certificate, error) {
	stamp, err := kp.stampNow()
	kp.mu.Lock()
	defer kp.mu.Unlock()
	if err == nil && stamp == kp.stamp && kp.loaded != nil {
		return kp.loaded, nil
	}
	var cert tls.Certificate
	if err == nil {
		cert, err = tls.LoadX509KeyPair(kp.cert, kp.key)
	}
	if err != nil {
		err = fmt.Errorf("metrics certificate %s and key %s: %w (a kubernetes.io/tls Secret mounted at --metrics-cert-dir holds both)", kp.cert, kp.key, err)
		if kp.loaded != nil {
			// Mid-renewal (one file written, not the other): keep serving
			// the last good pair.
			klog.Background().V(2).Info("Keeping the last metrics certificate", "err", err)
			return kp.loaded, nil
		}
		return nil, err
	}
	if leaf, err := x509.ParseCertificate(cert.Certificate[0]); err == nil {
		cert.Leaf = leaf
		klog.Background().Info("Serving the metrics certificate from its folder", "file", kp.cert, "subject", leaf.Subject.CommonName, "notAfter", leaf.NotAfter)
	}
	kp.stamp, kp.loaded = stamp, &cert
	return kp.loaded, nil
}

// absent says whether neither file exists: nothing written yet, as
// opposed to a pair that cannot be read or does not match.
func (kp *keyPair) absent() bool {
	for _, p := range []string{kp.cert, kp.key} {
		if _, err := os.Stat(p); !errors.Is(err, os.ErrNotExist) {
			return false
		}
	}
	return true
}

func (kp *keyPair) stampNow() (string, error) {
	var s string
	for _, p := range []string{kp.cert, kp.key} {
		fi, err := os.Stat(p)
		if err != nil {
			return "", err
		}
		s += fmt.Sprintf("%d.%d/", fi.ModTime().UnixNano(), fi.Size())
	}
	return s, nil
}

// selfSigned makes an ECDSA P-256 serving certificate for hosts (IP
// addresses or DNS names), valid for a year.
func selfSigned(hosts []string, now time.Time) (tls.Certificate, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return tls.Certificate{}, err
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return tls.Certificate{}, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: "certready-metrics"},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(365 * 24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	for _, h := range hosts {
		if ip := net.ParseIP(h); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else if h != "" {
			tmpl.DNSNames = append(tmpl.DNSNames, h)
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return tls.Certificate{}, err
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		return tls.Certificate{}, err
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key, Leaf: leaf}, nil
}

// Hosts are the names a self-signed certificate for addr carries: its IP
// when it names one, and this machine's host name.
func Hosts(addr string) []string {
	var hosts []string
	if h, _, err := net.SplitHostPort(addr); err == nil && h != "" {
		if ip := net.ParseIP(h); ip != nil && !ip.IsUnspecified() {
			hosts = append(hosts, ip.String())
		}
	}
	if name, err := os.Hostname(); err == nil {
		hosts = append(hosts, name)
	}
	return hosts
}
