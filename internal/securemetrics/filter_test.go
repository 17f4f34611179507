package securemetrics_test

import (
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	authnv1 "k8s.io/api/authentication/v1"

	"github.com/certready/certready/internal/securemetrics"
	"github.com/certready/certready/internal/testmetrics"
	"github.com/certready/certready/internal/testwait"
)

// fakeReviewer is the API server's side: tokens map to users, users to
// the paths they may get. It counts reviews and can hold them.
type fakeReviewer struct {
	users   map[string]string // token -> username
	allowed map[string]bool   // username + " " + path
	fail    bool
	hold    chan struct{} // when set, Authenticate waits on it
	reviews atomic.Int32
}

func (f *fakeReviewer) Authenticate(ctx context.Context, token string) (*authnv1.UserInfo, error) {
	f.reviews.Add(1)
	if f.hold != nil {
		select {
		case <-f.hold:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	if f.fail {
		return nil, errors.New("connection refused")
	}
	name, ok := f.users[token]
	if !ok {
		return nil, nil
	}
	return &authnv1.UserInfo{Username: name, Groups: []string{"system:serviceaccounts"}}, nil
}

func (f *fakeReviewer) Authorize(_ context.Context, user *authnv1.UserInfo, verb, path string) (bool, string, error) {
	if verb != "get" {
		return false, "", errors.New("unexpected verb " + verb)
	}
	return f.allowed[user.Username+" "+path], "no RBAC rule", nil
}

// serve runs the filter in front of a handler on a real TLS listener with
// the self-signed certificate.
func serve(t *testing.T, r securemetrics.Reviewer, reg prometheus.Registerer) *httptest.Server {
	t.Helper()
	cfg, err := securemetrics.TLSConfig("", []string{"127.0.0.1"})
	if err != nil {
		t.Fatal(err)
	}
	f := securemetrics.NewFilter(r, time.Minute, reg)
	srv := httptest.NewUnstartedServer(f.Wrap(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = io.WriteString(w, "certready_up 1\n")
	})))
	srv.TLS = cfg
	srv.StartTLS()
	t.Cleanup(srv.Close)
	return srv
}

func get(t *testing.T, srv *httptest.Server, method, path, auth string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, srv.URL+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	c := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}} //nolint:gosec // self-signed by design; the test checks authentication, not the server's name
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

func TestFilter(t *testing.T) {
	rev := &fakeReviewer{
		users:   map[string]string{"prom-token": "system:serviceaccount:monitoring:prometheus", "other-token": "system:serviceaccount:default:nobody"},
		allowed: map[string]bool{"system:serviceaccount:monitoring:prometheus /metrics": true},
	}
	reg := prometheus.NewRegistry()
	srv := serve(t, rev, reg)
	for _, tc := range []struct {
		name, method, path, auth string
		code                     int
		body                     string
	}{
		{"no token", "GET", "/metrics", "", http.StatusUnauthorized, "bearer token"},
		{"basic credentials", "GET", "/metrics", "Basic cHJvbTpwcm9t", http.StatusUnauthorized, "bearer token"},
		{"empty bearer", "GET", "/metrics", "Bearer ", http.StatusUnauthorized, "bearer token"},
		{"huge token, refused unread", "GET", "/metrics", "Bearer " + strings.Repeat("a", 17<<10), http.StatusUnauthorized, "bearer token"},
		{"token the API server rejects", "GET", "/metrics", "Bearer forged", http.StatusUnauthorized, "does not accept"},
		{"token without RBAC", "GET", "/metrics", "Bearer other-token", http.StatusForbidden, "certready-metrics-reader"},
		{"scraper", "GET", "/metrics", "Bearer prom-token", http.StatusOK, "certready_up 1"},
		{"scheme is case-insensitive", "GET", "/metrics", "bearer prom-token", http.StatusOK, "certready_up 1"},
		{"scraper, a path it may not get", "GET", "/debug/pprof/heap", "Bearer prom-token", http.StatusForbidden, "may not get /debug/pprof/heap"},
		{"scraper, POST", "POST", "/metrics", "Bearer prom-token", http.StatusMethodNotAllowed, "method not allowed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, body := get(t, srv, tc.method, tc.path, tc.auth)
			if code != tc.code || !strings.Contains(body, tc.body) {
				t.Errorf("%s %s: %d %q, want %d containing %q", tc.method, tc.path, code, body, tc.code, tc.body)
			}
		})
	}
	// 2 scraper paths + forged + other: every token reviewed once, the
	// repeated scraper answered from the cache.
	if n := rev.reviews.Load(); n != 4 {
		t.Errorf("%d token reviews, want 4 (one per token and path; repeats from the cache)", n)
	}
	for i := 0; i < 3; i++ {
		if code, _ := get(t, srv, "GET", "/metrics", "Bearer forged"); code != http.StatusUnauthorized {
			t.Fatalf("forged token: %d", code)
		}
	}
	if n := rev.reviews.Load(); n != 4 {
		t.Errorf("%d token reviews after repeating a refused token, want 4 (refusals cached too)", n)
	}
	for result, want := range map[string]float64{"allowed": 2, "unauthenticated": 8, "forbidden": 2} {
		series := testmetrics.Series(t, reg, "certready_metrics_requests_total", map[string]string{"result": result})
		if len(series) != 1 {
			t.Fatalf("certready_metrics_requests_total{result=%q}: %d series", result, len(series))
		}
		if got := testmetrics.Value(series[0]); got != want {
			t.Errorf("certready_metrics_requests_total{result=%q} = %v, want %v", result, got, want)
		}
	}
}

// An API server that cannot review: 503, not cached (the next request
// asks again), never the page.
func TestFilterReviewErrorIsNotCached(t *testing.T) {
	rev := &fakeReviewer{fail: true}
	srv := serve(t, rev, nil)
	for i := 0; i < 2; i++ {
		if code, body := get(t, srv, "GET", "/metrics", "Bearer prom-token"); code != http.StatusServiceUnavailable || strings.Contains(body, "certready_up") {
			t.Fatalf("review error: %d %q, want 503 without the page", code, body)
		}
	}
	if n := rev.reviews.Load(); n != 2 {
		t.Errorf("%d reviews, want 2: errors are not cached", n)
	}
}

// Callers beyond the in-flight reviews are told to retry without a review
// of their own: a flood of tokens cannot queue work on the API server.
func TestFilterThrottlesConcurrentReviews(t *testing.T) {
	rev := &fakeReviewer{hold: make(chan struct{})}
	srv := serve(t, rev, nil)
	var wg sync.WaitGroup
	for i := 0; i < 4; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			get(t, srv, "GET", "/metrics", "Bearer held-"+string(rune('a'+i)))
		}()
	}
	if !testwait.Until(10*time.Second, func() bool { return rev.reviews.Load() == 4 }) {
		t.Fatalf("only %d reviews started", rev.reviews.Load())
	}
	code, _ := get(t, srv, "GET", "/metrics", "Bearer one-more")
	close(rev.hold)
	wg.Wait()
	if code != http.StatusTooManyRequests {
		t.Errorf("a fifth caller while four reviews run: %d, want 429", code)
	}
	if n := rev.reviews.Load(); n != 4 {
		t.Errorf("%d reviews, want 4 (the throttled caller made none)", n)
	}
}
