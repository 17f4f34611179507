package securemetrics

import (
	"crypto/sha256"
	"time"
)

// SetClock makes f read the time from now: tests move it past a TTL.
func SetClock(f *Filter, now func() time.Time) { f.now = now }

// Expires is when f's cached answer for token and path expires (zero:
// none cached).
func Expires(f *Filter, token, path string) time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.cache[sha256.Sum256([]byte(path+"\x00"+token))].expires
}
