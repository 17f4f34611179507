// Package probe performs a TLS handshake with the kubelet's serving port and
// reports which certificate, if any, the kubelet actually presents. It
// separates the failure classes an operator must tell apart: nothing
// listening, a kubelet with no certificate (the "tls: internal error" of an
// unapproved node), a server that does not speak TLS, and a certificate that
// does not verify against the CA.
package probe

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"strings"
	"time"

	"github.com/certready/certready/internal/fingerprint"
)

// DefaultTimeout bounds one probe: dial plus handshake.
const DefaultTimeout = 5 * time.Second

// Outcome classifies a probe.
type Outcome string

const (
	// Presented: the handshake completed and the server sent a certificate.
	Presented Outcome = "Presented"
	// Unreachable: nothing accepted the connection in time.
	Unreachable Outcome = "Unreachable"
	// NoCertificate: the server aborted the handshake with an internal_error
	// alert, which is what a kubelet without a serving certificate does.
	NoCertificate Outcome = "NoCertificate"
	// NotTLS: the server answered with something other than TLS.
	NotTLS Outcome = "NotTLS"
	// HandshakeFailed: any other handshake failure.
	HandshakeFailed Outcome = "HandshakeFailed"
)

// Target says where to dial and which name to verify.
type Target struct {
	Addr       string         // host:port
	ServerName string         // an IP literal or a DNS name the certificate must carry
	Roots      *x509.CertPool // the CA that signs kubelet serving certificates
	Timeout    time.Duration  // DefaultTimeout when zero
	// Now is the time the presented chain is verified at (the API
	// server's clock when the node's is off); zero: time.Now().
	Now time.Time
}

// Result is what the kubelet presented.
type Result struct {
	Outcome     Outcome
	Addr        string
	Detail      string // the error behind a failed outcome
	Leaf        *x509.Certificate
	Fingerprint fingerprint.SHA256
	// VerifyErr is non-nil when the presented chain does not verify against
	// Roots for ServerName and server auth.
	VerifyErr error
}

// Probe dials t.Addr and completes a TLS handshake. It never fails: every
// problem is a Result with an Outcome and a Detail.
func Probe(ctx context.Context, t Target) Result {
	timeout := t.Timeout
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	res := Result{Addr: t.Addr}
	raw, err := (&net.Dialer{}).DialContext(ctx, "tcp", t.Addr)
	if err != nil {
		res.Outcome, res.Detail = Unreachable, err.Error()
		return res
	}
	defer raw.Close()
	var chain []*x509.Certificate
	conn := tls.Client(raw, &tls.Config{
		MinVersion: tls.VersionTLS12,
		ServerName: t.ServerName,
		// Verification happens below, against the presented chain, so that
		// an untrusted certificate is still seen and fingerprinted.
		InsecureSkipVerify: true,
		VerifyConnection: func(cs tls.ConnectionState) error {
			chain = cs.PeerCertificates
			return nil
		},
	})
	err = conn.HandshakeContext(ctx)
	if err != nil {
		res.Outcome, res.Detail = classify(err), err.Error()
		return res
	}
	_ = conn.Close()
	if len(chain) == 0 {
		res.Outcome, res.Detail = NoCertificate, "the server completed the handshake without a certificate"
		return res
	}
	res.Outcome = Presented
	res.Leaf = chain[0]
	res.Fingerprint = fingerprint.Of(chain[0])
	at := t.Now
	if at.IsZero() {
		at = time.Now()
	}
	res.VerifyErr = Verify(chain[0], chain[1:], t.Roots, t.ServerName, at)
	return res
}

// Verify checks that leaf chains to roots for server auth and carries name
// (an IP literal is checked against IP SANs).
func Verify(leaf *x509.Certificate, intermediates []*x509.Certificate, roots *x509.CertPool, name string, now time.Time) error {
	if roots == nil {
		return errors.New("no CA to verify against")
	}
	pool := x509.NewCertPool()
	for _, c := range intermediates {
		pool.AddCert(c)
	}
	_, err := leaf.Verify(x509.VerifyOptions{
		DNSName:       name,
		Roots:         roots,
		Intermediates: pool,
		CurrentTime:   now,
		KeyUsages:     []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	})
	return err
}

func classify(err error) Outcome {
	var rh tls.RecordHeaderError
	if errors.As(err, &rh) {
		return NotTLS
	}
	// crypto/tls keeps its alert type unexported on TCP connections: the
	// message is the only handle on the internal_error alert a kubelet
	// sends when it has no certificate to serve.
	if strings.Contains(err.Error(), "remote error: tls: internal error") {
		return NoCertificate
	}
	return HandshakeFailed
}

// Describe is a one-line account for condition messages.
func (r Result) Describe() string {
	switch r.Outcome {
	case Presented:
		return fmt.Sprintf("%s presents %s", r.Addr, r.Fingerprint.Short())
	case NoCertificate:
		return fmt.Sprintf("%s has no serving certificate (%s)", r.Addr, r.Detail)
	case NotTLS:
		return fmt.Sprintf("%s does not speak TLS (%s)", r.Addr, r.Detail)
	case Unreachable:
		return fmt.Sprintf("%s is unreachable (%s)", r.Addr, r.Detail)
	}
	return fmt.Sprintf("TLS handshake with %s failed (%s)", r.Addr, r.Detail)
}
