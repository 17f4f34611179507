// Package redact leaves node names, SANs and addresses out of records and
// output that leave the cluster (diagnostic data handed to a vendor, an
// auditor outside the organisation). A node name becomes a pseudonym, the
// same for the same name under the same key, so that records can still be
// told apart and joined; without the key the pseudonym says nothing of the
// name (it is an HMAC, not a plain digest a dictionary of host names would
// undo). SANs and IP addresses are left out.
package redact

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net"
	"os"
	"regexp"
	"sort"
	"strings"
)

// KeySize is the size of a key file's key, in bytes.
const KeySize = 32

// Placeholders for what is left out of a text.
const (
	SAN     = "<san>"
	Address = "<ip>"
	URL     = "<url>"
)

// Redactor turns names into pseudonyms under its key. The nil *Redactor
// redacts nothing.
type Redactor struct {
	key []byte
}

// New is a redactor under key; an empty key is a random one, so the
// pseudonyms hold within the process only.
func New(key []byte) *Redactor {
	if len(key) == 0 {
		key = make([]byte, KeySize)
		if _, err := rand.Read(key); err != nil {
			panic(err) // crypto/rand does not fail on Linux
		}
	}
	return &Redactor{key: key}
}

// LoadKey reads a key file (KeySize random bytes, hex or raw); with create,
// a missing file is made (0600) with a new random key. Keep it where the
// unredacted records are: with it, a pseudonym can be checked against a
// name.
func LoadKey(path string, create bool) ([]byte, error) {
	data, err := os.ReadFile(path)
	if os.IsNotExist(err) && create {
		key := make([]byte, KeySize)
		if _, err := rand.Read(key); err != nil {
			return nil, err
		}
		f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
		if err != nil {
			return nil, fmt.Errorf("redaction key %s: %w", path, err)
		}
		if _, err := f.WriteString(hex.EncodeToString(key) + "\n"); err != nil {
			f.Close()
			return nil, fmt.Errorf("redaction key %s: %w", path, err)
		}
		return key, f.Close()
	}
	if err != nil {
		return nil, fmt.Errorf("redaction key: %w", err)
	}
	if key, err := hex.DecodeString(strings.TrimSpace(string(data))); err == nil && len(key) >= 16 {
		return key, nil
	}
	if len(data) >= 16 {
		return data, nil
	}
	return nil, fmt.Errorf("redaction key %s: %d bytes, want at least 16 (e.g. head -c 32 /dev/urandom | xxd -p -c 64 > %s)", path, len(data), path)
}

// Node is name's pseudonym: "node-" and 12 hex digits; "" stays "".
func (r *Redactor) Node(name string) string {
	if r == nil || name == "" {
		return name
	}
	m := hmac.New(sha256.New, r.key)
	m.Write([]byte(name))
	return "node-" + hex.EncodeToString(m.Sum(nil))[:12]
}

// Tag is an HMAC of s under the key (32 hex digits): an identifier (a
// record's event_id) that only the key's holder can compute from the
// unredacted data, where a plain digest of guessable fields would give the
// fields away to whoever tries every candidate.
func (r *Redactor) Tag(s string) string {
	if r == nil {
		return s
	}
	m := hmac.New(sha256.New, r.key)
	m.Write([]byte("tag:" + s))
	return hex.EncodeToString(m.Sum(nil))[:32]
}

// pseudonym is what Node writes.
var pseudonym = regexp.MustCompile(`node-[0-9a-f]{12}`)

// HasPseudonym says whether s holds a node's pseudonym: a redacted text
// that named a node.
func HasPseudonym(s string) bool { return pseudonym.MatchString(s) }

// candidate is what may be an address in a text: digits, hex letters,
// dots and colons (an IPv4 or IPv6 address, perhaps with a port).
var candidate = regexp.MustCompile(`[0-9A-Fa-f.:]*[.:][0-9A-Fa-f.:]*`)

// Text is s with each of nodes replaced by its pseudonym, each of sans by
// SAN and every IP address (with or without a port) by Address. Longer
// names go first, so that a name inside another is not half replaced.
func (r *Redactor) Text(s string, nodes, sans []string) string {
	if r == nil || s == "" {
		return s
	}
	type swap struct{ from, to string }
	var swaps []swap
	for _, n := range nodes {
		if n != "" {
			swaps = append(swaps, swap{n, r.Node(n)})
		}
	}
	for _, v := range sans {
		if v != "" && net.ParseIP(v) == nil { // addresses: below
			swaps = append(swaps, swap{v, SAN})
		}
	}
	sort.SliceStable(swaps, func(i, j int) bool { return len(swaps[i].from) > len(swaps[j].from) })
	for _, sw := range swaps {
		s = strings.ReplaceAll(s, sw.from, sw.to)
	}
	s = url.ReplaceAllString(s, URL)
	return candidate.ReplaceAllStringFunc(s, redactAddress)
}

// url is a URL in a text (an API server's, a webhook's): its host names a
// machine.
var url = regexp.MustCompile(`[A-Za-z][A-Za-z0-9+.-]*://[^\s"'()<>\[\]]+`)

func redactAddress(m string) string {
	// A full stop or colon after (a sentence's) is no part of the
	// address; nor what comes before a colon that precedes one (IP:
	// 10.0.0.7, refused:10.0.0.8:443, whose letters a-f the match took).
	if r, ok := address(m); ok {
		return r
	}
	for i := 0; i < len(m); i++ {
		if m[i] == ':' {
			if r, ok := address(m[i+1:]); ok {
				return m[:i+1] + r
			}
		}
	}
	return m
}

// address is m redacted when it is an address, with or without a port,
// and a full stop or colons after it.
func address(m string) (string, bool) {
	trimmed := strings.TrimRight(m, ".:")
	rest := m[len(trimmed):]
	if net.ParseIP(trimmed) != nil {
		return Address + rest, true
	}
	if host, port, err := net.SplitHostPort(trimmed); err == nil && net.ParseIP(host) != nil {
		return Address + ":" + port + rest, true
	}
	return m, false
}
