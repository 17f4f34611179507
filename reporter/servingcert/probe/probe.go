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
	"net"
	"strings"
	"time"

	"github.com/certready/certready/internal/fingerprint"
	"github.com/certready/certready/reporter/servingcert/certfile"
)

// DefaultTimeout bounds one probe: dial plus handshake.
const DefaultTimeout = 5 * time.Second

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
	_, res.VerifyErr = certfile.Verify(chain[0], chain[1:], t.Roots, t.ServerName, at)
	if res.VerifyErr != nil && t.Roots != nil {
		// Does any chain link it to the CA at all, whatever its names and
		// validity? (x509 checks the name before it builds a chain.)
		_, err := certfile.Verify(chain[0], chain[1:], t.Roots, "", chain[0].NotBefore)
		var unknown x509.UnknownAuthorityError
		res.Unchained = errors.As(err, &unknown)
	}
	return res
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
