package events

import "unicode/utf8"

// Clip bounds s, text another actor wrote (a node, a controller, an
// admin's approval message), to n bytes for an event or a ledger record,
// cut on a rune boundary and marked with "...".
func Clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "..."
}
