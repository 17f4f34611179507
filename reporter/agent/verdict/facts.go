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
//	... presented on 192.0.2.11:10250 [notAfter=2027-12-01T12:00:00Z csr=csr-1 sha256=<64 hex digits> ca=<64 hex digits> caNotAfter=2035-11-29T12:00:00Z clientNotAfter=2027-11-20T08:00:00Z agent=v1.2.3]
//
// A reader ignores keys it does not know: a newer agent may state more.
type Facts struct {
	NotAfter    time.Time
	CSR         string // "" when no CSR proved the certificate (retention)
	Fingerprint fingerprint.SHA256
	// CA is the root the certificate chains to (zero: not stated, by an
	// older agent), CANotAfter its expiry.
	CA         fingerprint.SHA256
	CANotAfter time.Time
	// ClientNotAfter is the expiry of the kubelet's client certificate
	// (zero: not stated, no rotated client certificate, or an older agent).
	ClientNotAfter time.Time
	// Agent is the version of the agent that stated them ("" unknown).
	Agent string
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
	if !f.CA.IsZero() {
		b.WriteString(" ca=")
		b.WriteString(f.CA.String())
		b.WriteString(" caNotAfter=")
		b.WriteString(names.Stamp(f.CANotAfter))
	}
	if !f.ClientNotAfter.IsZero() {
		b.WriteString(" clientNotAfter=")
		b.WriteString(names.Stamp(f.ClientNotAfter))
	}
	if v := strings.Join(strings.Fields(f.Agent), "_"); v != "" && !strings.ContainsAny(v, "[]") {
		b.WriteString(" agent=")
		b.WriteString(v)
	}
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
		var err error
		switch k {
		case "notAfter":
			f.NotAfter, err = time.Parse(time.RFC3339, v)
		case "caNotAfter":
			f.CANotAfter, err = time.Parse(time.RFC3339, v)
		case "clientNotAfter":
			f.ClientNotAfter, err = time.Parse(time.RFC3339, v)
		case "sha256":
			f.Fingerprint, err = fingerprint.Parse(v)
		case "ca":
			f.CA, err = fingerprint.Parse(v)
		case "csr":
			f.CSR = v
		case "agent":
			f.Agent = v
		}
		if err != nil {
			return Facts{}, false
		}
	}
	return f, !f.NotAfter.IsZero() && !f.Fingerprint.IsZero()
}
