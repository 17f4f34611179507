package verdict

import (
	"strings"
	"time"

	"github.com/certready/certready/internal/fingerprint"
	"github.com/certready/certready/internal/names"
)

// Facts are what a Ready condition states about the serving certificate
// for readers that see only the Node (the fleet view, `certready status`):
// its expiry, the CSR that issued it and its full fingerprint. The Ready
// message ends with them as a trailer, written by Facts.String and read by
// ParseFacts alone, so that the prose before it can change freely:
//
//	... presented on 192.0.2.11:10250 [notAfter=2027-12-01T12:00:00Z csr=csr-1 sha256=<64 hex digits>]
type Facts struct {
	NotAfter    time.Time
	CSR         string // "" when no CSR proved the certificate (retention)
	Fingerprint fingerprint.SHA256
}

const factsOpen = " [notAfter="

// String is the trailer: " [notAfter=<RFC 3339> csr=<name> sha256=<hex>]",
// csr left out when there is none.
func (f Facts) String() string {
	var b strings.Builder
	b.WriteString(factsOpen)
	b.WriteString(names.Stamp(f.NotAfter))
	if f.CSR != "" {
		b.WriteString(" csr=")
		b.WriteString(f.CSR)
	}
	b.WriteString(" sha256=")
	b.WriteString(f.Fingerprint.String())
	b.WriteByte(']')
	return b.String()
}

// ParseFacts reads the trailer Facts.String wrote at the end of message;
// ok is false when message carries none (a condition that is not Ready, or
// one written by an agent older than the trailer).
func ParseFacts(message string) (f Facts, ok bool) {
	i := strings.LastIndex(message, factsOpen)
	if i < 0 || !strings.HasSuffix(message, "]") {
		return Facts{}, false
	}
	fields := strings.Fields(message[i+len(" [") : len(message)-1])
	for _, kv := range fields {
		k, v, _ := strings.Cut(kv, "=")
		switch k {
		case "notAfter":
			t, err := time.Parse(time.RFC3339, v)
			if err != nil {
				return Facts{}, false
			}
			f.NotAfter = t
		case "csr":
			f.CSR = v
		case "sha256":
			fp, err := fingerprint.Parse(v)
			if err != nil {
				return Facts{}, false
			}
			f.Fingerprint = fp
		default:
			return Facts{}, false
		}
	}
	return f, !f.NotAfter.IsZero() && !f.Fingerprint.IsZero()
}
