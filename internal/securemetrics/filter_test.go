package securemetrics_test

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
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
	mu        sync.Mutex
	users     map[string]string // token -> username
	allowed   map[string]bool   // username + " " + path
	fail      atomic.Bool
	hold      chan struct{} // when set, reviews of tokens it does not know wait on it (a flood)
	holdKnown chan struct{} // when set, reviews of tokens it knows wait on it
	reviews   atomic.Int32
}

func (f *fakeReviewer) Authenticate(ctx context.Context, token string) (*authnv1.UserInfo, error) {
	f.reviews.Add(1)
	f.mu.Lock()
	name, ok := f.users[token]
	hold := f.hold
	if ok {
		hold = f.holdKnown
	}
	f.mu.Unlock()
	if hold != nil {
		select {
		case <-hold:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	if f.fail.Load() {
		return nil, errors.New("connection refused")
	}
	if !ok {
		return nil, nil
	}
	return &authnv1.UserInfo{Username: name, Groups: []string{"system:serviceaccounts"}}, nil
}

// revoke makes the API server refuse token from now on.
func (f *fakeReviewer) revoke(token string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.users, token)
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
	srv, _, _ := serveFilter(t, r, reg, time.Minute)
	return srv
}

// serveFilter is serve with the filter's TTL and clock: the clock starts
// now and moves only when advanced.
func serveFilter(t *testing.T, r securemetrics.Reviewer, reg prometheus.Registerer, ttl time.Duration) (*httptest.Server, *fakeClock, *securemetrics.Filter) {
	t.Helper()
	cfg, err := securemetrics.TLSConfig("", []string{"127.0.0.1"})
	if err != nil {
		t.Fatal(err)
	}
	f := securemetrics.NewFilter(r, ttl, reg)
	clock := &fakeClock{start: time.Now()}
	securemetrics.SetClock(f, clock.now)
	srv := httptest.NewUnstartedServer(f.Wrap(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = io.WriteString(w, "certready_up 1\n")
	})))
	srv.TLS = cfg
	srv.StartTLS()
	t.Cleanup(srv.Close)
	return srv, clock, f
}

type fakeClock struct {
	start   time.Time
	elapsed atomic.Int64
}

func (c *fakeClock) now() time.Time          { return c.start.Add(time.Duration(c.elapsed.Load())) }
func (c *fakeClock) advance(d time.Duration) { c.elapsed.Add(int64(d)) }

func get(t *testing.T, srv *httptest.Server, method, path, auth string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, srv.URL+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	c := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}} //nolint:gosec // self-signed by design; the test checks authentication, not the server's name
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
	rev := &fakeReviewer{}
	rev.fail.Store(true)
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
// Tokens never allowed take at most three of the four places.
func TestFilterThrottlesConcurrentReviews(t *testing.T) {
	rev := &fakeReviewer{hold: make(chan struct{})}
	srv := serve(t, rev, nil)
	var wg sync.WaitGroup
	for i := 0; i < 3; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			get(t, srv, "GET", "/metrics", "Bearer held-"+string(rune('a'+i)))
		}()
	}
	if !testwait.Until(10*time.Second, func() bool { return rev.reviews.Load() == 3 }) {
		t.Fatalf("only %d reviews started", rev.reviews.Load())
	}
	code, _ := get(t, srv, "GET", "/metrics", "Bearer one-more")
	close(rev.hold)
	wg.Wait()
	if code != http.StatusTooManyRequests {
		t.Errorf("a fourth unknown caller while three reviews run: %d, want 429", code)
	}
	if n := rev.reviews.Load(); n != 3 {
		t.Errorf("%d reviews, want 3 (the throttled caller made none)", n)
	}
}

const prom = "Bearer prom-token"

func scraperReviewer() *fakeReviewer {
	return &fakeReviewer{
		users:   map[string]string{"prom-token": "system:serviceaccount:monitoring:prometheus"},
		allowed: map[string]bool{"system:serviceaccount:monitoring:prometheus /metrics": true},
	}
}

// When a scraper's answer expires, it is answered from the cache while the
// API server reviews its token again, once, in the background: it never
// waits on the review. A refusal from that review ends its access; a failed
// review leaves the stale answer in use for one more TTL only.
func TestFilterAnswersAnAllowedTokenWhileReReviewing(t *testing.T) {
	const ttl = time.Minute
	rev := scraperReviewer()
	srv, clock, f := serveFilter(t, rev, nil, ttl)
	if code, _ := get(t, srv, "GET", "/metrics", prom); code != http.StatusOK {
		t.Fatalf("scraper: %d", code)
	}
	firstExpiry := securemetrics.Expires(f, "prom-token", "/metrics")

	// Expired, the re-review held: answered at once, reviewed once.
	rev.mu.Lock()
	rev.holdKnown = make(chan struct{})
	rev.mu.Unlock()
	clock.advance(ttl + time.Second)
	for i := 0; i < 3; i++ {
		if code, _ := get(t, srv, "GET", "/metrics", prom); code != http.StatusOK {
			t.Fatalf("scraper with an expired answer, re-review pending: %d, want 200 from the cache", code)
		}
	}
	if !testwait.Until(10*time.Second, func() bool { return rev.reviews.Load() == 2 }) {
		t.Fatalf("%d reviews, want 2 (the first, then one re-review)", rev.reviews.Load())
	}
	close(rev.holdKnown)
	if !testwait.Until(10*time.Second, func() bool { return securemetrics.Expires(f, "prom-token", "/metrics").After(firstExpiry) }) {
		t.Fatal("the re-review never renewed the answer")
	}
	if code, _ := get(t, srv, "GET", "/metrics", prom); code != http.StatusOK || rev.reviews.Load() != 2 {
		t.Fatalf("after the re-review: %d, %d reviews; want 200 from the renewed answer, 2 reviews", code, rev.reviews.Load())
	}

	// The API server fails: the stale answer serves until its second TTL
	// ends, then the caller is asked to retry.
	rev.fail.Store(true)
	clock.advance(ttl + time.Second)
	if code, _ := get(t, srv, "GET", "/metrics", prom); code != http.StatusOK {
		t.Fatalf("expired, the API server failing: %d, want 200 from the cache", code)
	}
	clock.advance(ttl)
	if code, _ := get(t, srv, "GET", "/metrics", prom); code != http.StatusServiceUnavailable {
		t.Fatalf("two TTLs without a review: %d, want 503", code)
	}

	// Revoked: the re-review's refusal ends its access.
	rev.fail.Store(false)
	if code, _ := get(t, srv, "GET", "/metrics", prom); code != http.StatusOK {
		t.Fatalf("the API server back: %d", code)
	}
	rev.revoke("prom-token")
	clock.advance(ttl + time.Second)
	get(t, srv, "GET", "/metrics", prom) // stale, starts the re-review
	if !testwait.Until(10*time.Second, func() bool {
		code, _ := get(t, srv, "GET", "/metrics", prom)
		return code == http.StatusUnauthorized
	}) {
		t.Fatal("a revoked token kept its access after its re-review")
	}
}

// A flood of random tokens takes every place it may; a scraper allowed
// before still gets its review (and 200), even with its answer too old to
// be used from the cache.
func TestFilterKeepsAReviewForKnownCallers(t *testing.T) {
	const ttl = time.Minute
	rev := scraperReviewer()
	rev.hold = make(chan struct{})
	srv, clock, _ := serveFilter(t, rev, nil, ttl)
	if code, _ := get(t, srv, "GET", "/metrics", prom); code != http.StatusOK {
		t.Fatalf("scraper: %d", code)
	}
	clock.advance(3 * ttl) // past the stale answer: a review is needed
	var wg sync.WaitGroup
	var throttled atomic.Int32
	for i := 0; i < 4; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if code, _ := get(t, srv, "GET", "/metrics", "Bearer random-"+string(rune('a'+i))); code == http.StatusTooManyRequests {
				throttled.Add(1)
			}
		}()
	}
	defer wg.Wait()
	defer close(rev.hold)
	if !testwait.Until(10*time.Second, func() bool { return rev.reviews.Load()-1+throttled.Load() == 4 }) {
		t.Fatalf("the flood's four requests: %d reviews, %d throttled", rev.reviews.Load()-1, throttled.Load())
	}
	if code, _ := get(t, srv, "GET", "/metrics", prom); code != http.StatusOK {
		t.Errorf("scraper during a flood of random tokens: %d, want 200 (a review kept for known callers)", code)
	}
}

// Refusals fill at most part of the cache: after a flood of random
// tokens, a scraper's answer is still kept (one review, not one a scrape).
func TestFilterKeepsRoomForAllowedAnswers(t *testing.T) {
	rev := scraperReviewer()
	h := securemetrics.NewFilter(rev, time.Minute, nil).Wrap(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	ask := func(token string) int {
		r := httptest.NewRequest(http.MethodGet, "/metrics", nil)
		r.Header.Set("Authorization", "Bearer "+token)
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		return w.Code
	}
	for i := 0; i < 1100; i++ {
		if code := ask(fmt.Sprintf("random-%d", i)); code != http.StatusUnauthorized {
			t.Fatalf("random token %d: %d", i, code)
		}
	}
	before := rev.reviews.Load()
	for i := 0; i < 3; i++ {
		if code := ask("prom-token"); code != http.StatusOK {
			t.Fatalf("scraper after the flood: %d", code)
		}
	}
	if n := rev.reviews.Load() - before; n != 1 {
		t.Errorf("the scraper's three requests after a flood made %d reviews, want 1 (its answer kept)", n)
	}
}
