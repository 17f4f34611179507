package apiclock

import (
	"net/http"
	"net/http/httptest"
	"testing"
	"time"
)

// A real HTTP server whose clock is off by a known amount: its Date header
// must show up as the node's skew, within the header's one-second grain.
func TestSkewFromTheDateOfRealResponses(t *testing.T) {
	for _, tc := range []struct {
		name      string
		serverOff time.Duration // server clock minus real time
	}{
		{"server in step", 0},
		{"node 10 minutes behind the server", 10 * time.Minute},
		{"node 3 minutes ahead of the server", -3 * time.Minute},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
				w.Header().Set("Date", time.Now().Add(tc.serverOff).UTC().Format(http.TimeFormat))
			}))
			defer srv.Close()
			c := New()
			if c.Read().Known {
				t.Fatal("known before any response")
			}
			client := &http.Client{Transport: c.Wrap(http.DefaultTransport)}
			resp, err := client.Get(srv.URL)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			r := c.Read()
			want := -tc.serverOff
			if !r.Known || r.Skew < want-time.Second || r.Skew > want+time.Second {
				t.Fatalf("reading %+v, want skew %s ± 1s", r, want)
			}
		})
	}
}

func TestResponsesWithoutADateChangeNothing(t *testing.T) {
	c := New()
	c.observe(time.Now(), time.Now(), "")
	c.observe(time.Now(), time.Now(), "yesterday")
	if c.Read().Known {
		t.Fatal("a missing or unparseable Date was taken as a reading")
	}
}
