package probe

import (
	"crypto/x509"
	"fmt"

	"github.com/certready/certready/internal/fingerprint"
)

// Outcome classifies a probe of the kubelet port.
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

// Result is what the kubelet presented on its port.
type Result struct {
	Outcome     Outcome
	Addr        string
	Detail      string // the error behind a failed outcome
	Leaf        *x509.Certificate
	Fingerprint fingerprint.SHA256
	// VerifyErr is non-nil when the presented chain does not verify against
	// Roots for ServerName and server auth.
	VerifyErr error
	// Unchained: no chain links the presented certificate to Roots,
	// whatever its names and validity (a self-signed certificate).
	Unchained bool
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
