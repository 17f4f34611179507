package testwait_test

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/certready/certready/internal/testwait"
)

func TestUntil(t *testing.T) {
	var n atomic.Int32
	if !testwait.Until(10*time.Second, func() bool { return n.Add(1) >= 3 }) {
		t.Fatal("a condition that holds on the third look was not seen to hold")
	}
	if got := n.Load(); got != 3 {
		t.Errorf("looked %d times, want 3 (once at once, then until it held)", got)
	}
	start := time.Now()
	if testwait.Until(50*time.Millisecond, func() bool { return false }) {
		t.Fatal("a condition that never holds was reported to hold")
	}
	if el := time.Since(start); el < 50*time.Millisecond {
		t.Errorf("gave up after %s, before the 50ms timeout", el)
	}
}
