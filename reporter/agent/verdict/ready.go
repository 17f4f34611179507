package verdict

import (
	"regexp"
	"time"
)

// The Ready message (Evaluate) carries the installed certificate's NotAfter
// and, when a CSR proved it, that CSR's name. ParseReady reads them back for
// the fleet view, which sees only the Node; a test keeps the two in step.
var (
	readyNotAfter = regexp.MustCompile(`^serving certificate \S+ valid until (\S+?),`)
	readyCSR      = regexp.MustCompile(`issued by CSR ([a-z0-9][-a-z0-9.]*)`)
)

// ParseReady returns the certificate expiry and the issuing CSR named in a
// Ready condition message (zero and "" where it names none).
func ParseReady(message string) (notAfter time.Time, csr string) {
	if m := readyNotAfter.FindStringSubmatch(message); m != nil {
		notAfter, _ = time.Parse(time.RFC3339, m[1])
	}
	if m := readyCSR.FindStringSubmatch(message); m != nil {
		csr = m[1]
	}
	return notAfter, csr
}
