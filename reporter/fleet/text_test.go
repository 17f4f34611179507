package fleet

import "testing"

// What cluster data can put on an operator's terminal is escaped: kubectl's
// ESC and CR, and every other control, format or non-UTF-8 byte; printable
// text, in any script, is left as it is.
func TestEscape(t *testing.T) {
	for in, want := range map[string]string{
		"worker-1":                        "worker-1",
		"\x1b[31mred\x1b[0m":              "^[[31mred^[[0m",
		"ok\rDenied":                      `ok\rDenied`,
		"10.0.0.1\nworker-2   True":       `10.0.0.1\nworker-2   True`,
		"a\tb":                            `a\tb`,
		"Denied\b\b\b\b\b\bApproved":      `Denied\x08\x08\x08\x08\x08\x08Approved`,
		"bell\x07\x00\x7f":                `bell\x07\x00\x7f`,
		"c1\u009b31m":                     `c1\u009b31m`,
		"lone\x9b31m":                     `lone\x9b31m`,
		"evil\u202egnp.exe":               `evil\u202egnp.exe`,
		"zero\u200bwidth":                 `zero\u200bwidth`,
		"nœud-été.example, 東京, 192.0.2.1": "nœud-été.example, 東京, 192.0.2.1",
	} {
		if got := Escape(in); got != want {
			t.Errorf("Escape(%q) = %q, want %q", in, got, want)
		}
	}
}
