// Package apiclock compares this node's clock with the API server's, read
// from the Date header of the API server's responses: the clock a
// certificate's validity must be judged by when the node's own is wrong.
// It costs no request: it wraps the client's transport and looks at the
// responses the agent gets anyway (lists, watches, condition writes).
package apiclock

import (
	"net/http"
	"sync"
	"time"
)

// Clock holds the latest offset between the API server's clock and this
// process's. Safe for concurrent use.
type Clock struct {
	now func() time.Time

	mu    sync.Mutex
	skew  time.Duration // local minus server
	seen  time.Time     // local time of the sample
	known bool
}

// New returns a Clock with no sample yet.
func New() *Clock { return &Clock{now: time.Now} }

// Reading is the node's clock against the API server's.
type Reading struct {
	// Known is false until a response with a Date header was seen.
	Known bool
	// Skew is the node's clock minus the API server's: negative when the
	// node is behind. The Date header has whole seconds, so the error is
	// about half a second plus half the round trip.
	Skew time.Duration
	// At is when (local time) the sample was taken.
	At time.Time
}

// Read returns the latest reading.
func (c *Clock) Read() Reading {
	c.mu.Lock()
	defer c.mu.Unlock()
	return Reading{Known: c.known, Skew: c.skew, At: c.seen}
}

// Wrap is a rest.Config.WrapTransport: responses pass through unchanged.
func (c *Clock) Wrap(rt http.RoundTripper) http.RoundTripper {
	return roundTripper{c: c, next: rt}
}

type roundTripper struct {
	c    *Clock
	next http.RoundTripper
}

func (r roundTripper) RoundTrip(req *http.Request) (*http.Response, error) {
	sent := r.c.now()
	resp, err := r.next.RoundTrip(req)
	if err != nil {
		return resp, err
	}
	r.c.observe(sent, r.c.now(), resp.Header.Get("Date"))
	return resp, nil
}

// observe records one response: sent and received are local times around
// it, date its Date header.
func (c *Clock) observe(sent, received time.Time, date string) {
	server, err := http.ParseTime(date)
	if err != nil {
		return
	}
	// The header is truncated to the second: the server's clock read
	// somewhere in [Date, Date+1s), at about the middle of the round trip.
	mid := sent.Add(received.Sub(sent) / 2)
	skew := mid.Sub(server.Add(500 * time.Millisecond))
	c.mu.Lock()
	defer c.mu.Unlock()
	c.skew, c.seen, c.known = skew, received, true
}
