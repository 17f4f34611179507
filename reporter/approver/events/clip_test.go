package events_test

import (
	"testing"
	"unicode/utf8"

	"github.com/certready/certready/reporter/approver/events"
)

func TestClip(t *testing.T) {
	for _, tc := range []struct {
		in   string
		n    int
		want string
	}{
		{"short", 10, "short"},
		{"exactly10!", 10, "exactly10!"},
		{"a longer message", 8, "a longer..."},
		{"naïve", 3, "na..."}, // 'ï' is two bytes: never half of it
		{"日本語", 4, "日..."},
		{"", 0, ""},
		{"x", 0, "..."},
	} {
		got := events.Clip(tc.in, tc.n)
		if got != tc.want || !utf8.ValidString(got) {
			t.Errorf("Clip(%q, %d) = %q, want %q", tc.in, tc.n, got, tc.want)
		}
	}
}
