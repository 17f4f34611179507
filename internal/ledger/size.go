package ledger

import (
	"encoding/json"
	"fmt"
	"unicode/utf8"
)

// MaxLineBytes bounds a record's line, newline included. Container
// runtimes (containerd, CRI-O, Docker) split a log line at 16 KiB, and a
// record split in two is two lines of broken JSON to whoever reads the
// logs; the file sink keeps the same lines.
const MaxLineBytes = 16000

// What a long record keeps: each identifying text, each SAN and all SANs
// together (more when the rest leaves room); the message gets the rest.
const (
	maxTextBytes = 256
	maxSANBytes  = 256
	maxSANsBytes = 6 << 10
)

// ellipsis ends a shortened text.
const ellipsis = "…"

// encode is r's line. A record over MaxLineBytes has its long fields
// shortened, named with what they lost in Truncated (shortened is then
// true); one that still cannot fit is an error, never a partial line.
func encode(r Record) (line []byte, shortened bool, err error) {
	line, err = marshalLine(r)
	if err != nil || len(line) <= MaxLineBytes {
		return line, false, err
	}
	r.Truncated = map[string]int{}
	for name, f := range map[string]*string{"rule": &r.Rule, "status": &r.Status, "node": &r.Node, "csr": &r.CSR,
		"csr_uid": &r.CSRUID, "requester": &r.Requester, "key_type": &r.KeyType, "cluster": &r.Cluster, "actor": &r.Actor,
		"version": &r.Version, "component": &r.Component, "certificate_sha256": &r.CertificateSHA256,
		"previous_certificate_sha256": &r.PreviousSHA256} {
		var dropped int
		if *f, dropped = cut(*f, maxTextBytes); dropped > 0 {
			r.Truncated[name] = dropped
		}
	}

	// The SANs: the first ones, as many as the rest of the line leaves
	// room for, and at least maxSANsBytes' worth (the message is cut then).
	if len(r.SANs) > 0 {
		rest := r
		rest.SANs = nil
		rest.Truncated = withEntry(r.Truncated, "sans", len(r.SANs)) // its widest value
		restLine, err := marshalLine(rest)
		if err != nil {
			return nil, false, err
		}
		room := max(MaxLineBytes-len(restLine)-len(`,"sans":[]`), maxSANsBytes)
		var kept []string
		for _, san := range r.SANs {
			san, _ = cut(san, maxSANBytes)
			size := encodedLen(san) + 2 + 1 // quotes, comma
			if size > room {
				break
			}
			room -= size
			kept = append(kept, san)
		}
		if dropped := len(r.SANs) - len(kept); dropped > 0 {
			r.Truncated["sans"] = dropped
		}
		r.SANs = kept
	}

	// The message: what the line has left.
	if line, err = marshalLine(r); err == nil && len(line) > MaxLineBytes && r.Message != "" {
		msg := r.Message
		r.Message = ""
		r.Truncated = withEntry(r.Truncated, "message", len(msg)) // its widest value
		var rest []byte
		if rest, err = marshalLine(r); err != nil {
			return nil, false, err
		}
		var dropped int
		r.Message, dropped = cut(msg, MaxLineBytes-len(rest)-len(`,"message":""`))
		r.Truncated["message"] = dropped
		line, err = marshalLine(r)
	}
	if err != nil {
		return nil, false, err
	}
	if len(line) > MaxLineBytes {
		return nil, false, fmt.Errorf("a %d-byte record over the ledger's line bound (%d) even shortened", len(line), MaxLineBytes)
	}
	return line, true, nil
}

func marshalLine(r Record) ([]byte, error) {
	b, err := json.Marshal(r)
	if err != nil {
		return nil, err
	}
	return append(b, '\n'), nil
}

func withEntry(m map[string]int, k string, v int) map[string]int {
	out := make(map[string]int, len(m)+1)
	for key, val := range m {
		out[key] = val
	}
	out[k] = v
	return out
}

// cut shortens s, on a rune boundary and ending in the ellipsis, until its
// JSON encoding (quotes left out) takes at most budget bytes; dropped is
// how many of s's bytes were left out.
func cut(s string, budget int) (string, int) {
	if encodedLen(s) <= budget {
		return s, 0
	}
	room := budget - len(ellipsis)
	i := 0
	for i < len(s) && room > 0 {
		r, size := utf8.DecodeRuneInString(s[i:])
		n := runeEncodedLen(r, size)
		if n > room {
			break
		}
		room -= n
		i += size
	}
	if budget < len(ellipsis) {
		return "", len(s)
	}
	return s[:i] + ellipsis, len(s) - i
}

// encodedLen is an upper bound of the bytes encoding/json writes for s,
// quotes left out.
func encodedLen(s string) int {
	n := 0
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		n += runeEncodedLen(r, size)
		i += size
	}
	return n
}

func runeEncodedLen(r rune, size int) int {
	switch {
	case r == utf8.RuneError && size == 1: // invalid UTF-8: \ufffd
		return 6
	case r == '"' || r == '\\' || r == '\n' || r == '\r' || r == '\t':
		return 2
	case r < 0x20 || r == '<' || r == '>' || r == '&' || r == '\u2028' || r == '\u2029':
		return 6
	}
	return size
}
