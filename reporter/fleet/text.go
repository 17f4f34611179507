package fleet

import (
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"

	"k8s.io/cli-runtime/pkg/printers"
)

// Escape makes s, text from the cluster (a CSR's SANs, a condition's
// message, a node's name, an annotation), safe to print in a table or text
// on an operator's terminal, where whoever wrote it could otherwise set
// colours, move the cursor, rewrite the title, or fake a row of the table.
//
// It escapes as kubectl's printers do since CVE-2021-25743
// (printers.EscapeTerminal: ESC as ^[, CR as \r), and beyond them, as
// kubectl's table printer would not (it cuts a cell at a newline), every
// other control character in Go's notation (\n, \t, \b, \x07, \u009b) and
// Unicode's format characters (U+202E and the other bidirectional controls,
// which reorder what is shown), and a byte that is no UTF-8 (\xff: a
// terminal may take a lone 0x9b as CSI). Not reversible: json and yaml
// output carry the data itself, escaped by their encoders.
func Escape(s string) string {
	if printableASCII(s) {
		return s
	}
	s = printers.EscapeTerminal(s)
	var b strings.Builder
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			fmt.Fprintf(&b, `\x%02x`, s[i])
		case r == '\n':
			b.WriteString(`\n`)
		case r == '\t':
			b.WriteString(`\t`)
		case r < 0x20 || r == 0x7f:
			fmt.Fprintf(&b, `\x%02x`, r)
		case r >= 0x80 && r < 0xa0, unicode.Is(unicode.Cf, r), r == '\u2028', r == '\u2029':
			fmt.Fprintf(&b, `\u%04x`, r)
		default:
			b.WriteString(s[i : i+size])
		}
		i += size
	}
	return b.String()
}

func printableASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < 0x20 || s[i] > 0x7e {
			return false
		}
	}
	return true
}
