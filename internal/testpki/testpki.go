// Package testpki generates real key material for tests: a CA, kubelet
// serving certificates and kubelet-serving CSRs, and the kubelet's on-disk
// pki layout. It exists so that tests exercise crypto/x509 for real instead
// of hand-written fixtures. It is imported by tests only.
package testpki

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/asn1"
	"encoding/pem"
	"math/big"
	"net"
	"net/url"
	"os"
	"sync/atomic"
	"time"

	"k8s.io/client-go/util/certificate"

	"github.com/certready/certready/internal/names"
)

var serial atomic.Int64

// CA is a self-signed certificate authority.
type CA struct {
	Cert *x509.Certificate
	Key  crypto.Signer
}

// NewCA returns a fresh ECDSA P-256 CA valid from an hour ago for a year.
func NewCA(cn string) (*CA, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(serial.Add(1)),
		Subject:               pkix.Name{CommonName: cn},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(365 * 24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		return nil, err
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	return &CA{Cert: cert, Key: key}, nil
}

// PEM is the CA certificate in PEM form.
func (ca *CA) PEM() []byte { return encodeCert(ca.Cert) }

// Pool is a pool holding only this CA.
func (ca *CA) Pool() *x509.CertPool {
	p := x509.NewCertPool()
	p.AddCert(ca.Cert)
	return p
}

// Serving describes a kubelet serving certificate to issue.
type Serving struct {
	CN        string // default system:node:<Node>
	Orgs      []string
	Node      string
	IPs       []net.IP
	DNSNames  []string
	NotBefore time.Time // default an hour ago
	NotAfter  time.Time // default in a day
	EKU       []x509.ExtKeyUsage
}

// Pair is an issued certificate with its private key.
type Pair struct {
	Cert *x509.Certificate
	Key  *ecdsa.PrivateKey
}

// Issue signs a serving certificate as the kubelet-serving signer would.
func (ca *CA) Issue(s Serving) (*Pair, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	if s.CN == "" {
		s.CN = names.NodeUser(s.Node)
	}
	if s.Orgs == nil {
		s.Orgs = []string{names.NodesGroup}
	}
	if s.NotBefore.IsZero() {
		s.NotBefore = time.Now().Add(-time.Hour)
	}
	if s.NotAfter.IsZero() {
		s.NotAfter = time.Now().Add(24 * time.Hour)
	}
	if s.EKU == nil {
		s.EKU = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(serial.Add(1)),
		Subject:      pkix.Name{CommonName: s.CN, Organization: s.Orgs},
		NotBefore:    s.NotBefore,
		NotAfter:     s.NotAfter,
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  s.EKU,
		IPAddresses:  s.IPs,
		DNSNames:     s.DNSNames,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, key.Public(), ca.Key)
	if err != nil {
		return nil, err
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	return &Pair{Cert: cert, Key: key}, nil
}

// CertPEM is the certificate alone in PEM form.
func (p *Pair) CertPEM() []byte { return encodeCert(p.Cert) }

// KeyPEM is the private key in PEM form (EC PRIVATE KEY, as the kubelet writes it).
func (p *Pair) KeyPEM() []byte {
	der, err := x509.MarshalECPrivateKey(p.Key)
	if err != nil {
		panic(err) // a freshly generated P-256 key always marshals
	}
	return pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: der})
}

// FilePEM is what the kubelet writes to kubelet-server-<ts>.pem: certificate then key.
func (p *Pair) FilePEM() []byte { return append(p.CertPEM(), p.KeyPEM()...) }

// encodeCert PEM-encodes a certificate.
func encodeCert(c *x509.Certificate) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: c.Raw})
}

// Request describes a CSR to generate.
type Request struct {
	CN       string // default system:node:<Node>
	Orgs     []string
	Node     string
	IPs      []net.IP
	DNSNames []string
	Emails   []string
	URIs     []string
	RSA      bool // an RSA-2048 key instead of ECDSA P-256
	// Key, when set, signs the request instead of a fresh key.
	Key crypto.Signer
	// RawIPSANs are encoded byte for byte into a hand-made subjectAltName
	// extension (replacing IPs, DNSNames, Emails and URIs), for encodings
	// Go itself never produces, such as a 16-byte IPv4-mapped address.
	RawIPSANs [][]byte
}

// NewCSR returns a PEM CERTIFICATE REQUEST signed by a fresh key.
func NewCSR(r Request) ([]byte, crypto.Signer, error) {
	key := r.Key
	var err error
	switch {
	case key != nil:
	case r.RSA:
		key, err = rsa.GenerateKey(rand.Reader, 2048)
	default:
		key, err = ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	}
	if err != nil {
		return nil, nil, err
	}
	if r.CN == "" {
		r.CN = names.NodeUser(r.Node)
	}
	if r.Orgs == nil {
		r.Orgs = []string{names.NodesGroup}
	}
	tmpl := &x509.CertificateRequest{
		Subject:        pkix.Name{CommonName: r.CN, Organization: r.Orgs},
		IPAddresses:    r.IPs,
		DNSNames:       r.DNSNames,
		EmailAddresses: r.Emails,
	}
	for _, u := range r.URIs {
		parsed, err := url.Parse(u)
		if err != nil {
			return nil, nil, err
		}
		tmpl.URIs = append(tmpl.URIs, parsed)
	}
	if len(r.RawIPSANs) > 0 {
		var seq []asn1.RawValue
		for _, ip := range r.RawIPSANs {
			seq = append(seq, asn1.RawValue{Tag: 7, Class: asn1.ClassContextSpecific, Bytes: ip})
		}
		val, err := asn1.Marshal(seq)
		if err != nil {
			return nil, nil, err
		}
		tmpl.ExtraExtensions = append(tmpl.ExtraExtensions, pkix.Extension{Id: asn1.ObjectIdentifier{2, 5, 29, 17}, Value: val})
		tmpl.IPAddresses, tmpl.DNSNames, tmpl.EmailAddresses, tmpl.URIs = nil, nil, nil, nil
	}
	der, err := x509.CreateCertificateRequest(rand.Reader, tmpl, key)
	if err != nil {
		return nil, nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der}), key, nil
}

// Install lays the pair out in dir as the kubelet does, with the kubelet's
// own file store (client-go's util/certificate): a new
// kubelet-server-<timestamp>.pem (0600, certificate and key), then a
// symlink with an absolute target renamed onto kubelet-server-current.pem
// after the old one is removed, which leaves the file briefly absent. It
// returns the timestamped file's path.
func Install(dir string, p *Pair) (string, error) {
	store, err := certificate.NewFileStore("kubelet-server", dir, dir, "", "")
	if err != nil {
		return "", err
	}
	if _, err := store.Update(p.CertPEM(), p.KeyPEM()); err != nil {
		return "", err
	}
	return os.Readlink(store.CurrentPath())
}

// TB is what the serving helpers need of a test.
type TB interface {
	Fatal(...any)
	Cleanup(func())
}

// ServeTLS serves p on a loopback port, as a kubelet serving p would, until
// the test ends. It returns host:port.
func ServeTLS(t TB, p *Pair) string {
	return ServeTLSOn(t, "127.0.0.1:0", p)
}

// ServeTLSOn is ServeTLS on addr (an IPv6 loopback, for one).
func ServeTLSOn(t TB, addr string, p *Pair) string {
	return ServeCurrent(t, addr, func() *Pair { return p })
}

// ServeCurrent serves on addr, at each handshake, the pair current returns
// (a kubelet that picks up a new certificate), until the test ends.
func ServeCurrent(t TB, addr string, current func() *Pair) string {
	ln, err := tls.Listen("tcp", addr, &tls.Config{
		MinVersion: tls.VersionTLS12,
		GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) {
			p := current()
			return &tls.Certificate{Certificate: [][]byte{p.Cert.Raw}, PrivateKey: p.Key, Leaf: p.Cert}, nil
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				_ = c.(*tls.Conn).Handshake()
			}()
		}
	}()
	t.Cleanup(func() { ln.Close() })
	return ln.Addr().String()
}
