// Package fingerprint identifies certificates by the SHA-256 of their DER
// encoding, the identity every check in certready compares: the installed
// file, the CSR's issued certificate and the certificate the kubelet presents.
package fingerprint

import (
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"fmt"
)

// SHA256 is the SHA-256 digest of a certificate's DER bytes.
type SHA256 [sha256.Size]byte

// Of returns the fingerprint of cert; the zero value for nil.
func Of(cert *x509.Certificate) SHA256 {
	if cert == nil {
		return SHA256{}
	}
	return sha256.Sum256(cert.Raw)
}

// IsZero reports whether f is the zero value (no certificate).
func (f SHA256) IsZero() bool { return f == SHA256{} }

// String is the full lower-case hex digest.
func (f SHA256) String() string { return hex.EncodeToString(f[:]) }

// Short is the first 16 hex digits: enough to tell certificates apart in a
// condition message or a log line.
func (f SHA256) Short() string { return f.String()[:16] }

// Parse reads the full hex digest String writes.
func Parse(s string) (SHA256, error) {
	var f SHA256
	b, err := hex.DecodeString(s)
	if err != nil || len(b) != len(f) {
		return SHA256{}, fmt.Errorf("fingerprint %q: want %d hex digits", s, 2*len(f))
	}
	copy(f[:], b)
	return f, nil
}
