package securemetrics

import (
	"context"
	"crypto/sha256"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/klog/v2"
)

// Limits on what a caller can make the filter do.
const (
	// maxTokenBytes: a ServiceAccount token is about 1 KiB; a longer
	// Authorization header is refused without asking the API server.
	maxTokenBytes = 16 << 10
	// maxInFlight reviews at once, of which a token never allowed before
	// may take maxInFlightUnknown: a flood of random tokens leaves the
	// rest to the scrapers the filter knows. A caller beyond them gets 429.
	maxInFlight        = 4
	maxInFlightUnknown = 3
	// maxCached answers; when full, expired ones go, then an allowed answer
	// takes a refusal's place, and a refusal is not kept (a flood of random
	// tokens can neither grow memory nor keep a scraper's answer out).
	maxCached = 1024
	// deniedTTL: refusals are kept shortly, so a fixed RBAC binding or a
	// fresh token works soon.
	deniedTTL     = 10 * time.Second
	reviewTimeout = 10 * time.Second
	// knownFor: a token allowed this long ago still reviews in a place
	// kept for known callers (a scraper that paused, an API server that
	// was down).
	knownFor = time.Hour
	// refreshRetry: after a re-review that failed (the API server did not
	// answer), the next one is not tried before this.
	refreshRetry = 5 * time.Second
)

// Results, the label of certready_metrics_requests_total.
const (
	ResultAllowed         = "allowed"
	ResultUnauthenticated = "unauthenticated"
	ResultForbidden       = "forbidden"
	ResultThrottled       = "throttled"
	ResultError           = "error"
)

// Filter lets a request through to the handler it wraps only when the
// API server authenticates its bearer token and authorizes the token's
// user to get the request's path.
//
// An allowed answer is fresh for the TTL; for one TTL more it is stale:
// still answered from the cache while the token is reviewed again in the
// background, so a scraper never waits on the API server, nor meets a
// flood of other tokens' reviews (429), when its answer expires. A
// re-review that refuses the token ends its access at once; one that fails
// leaves the stale answer in use until the second TTL ends.
type Filter struct {
	reviewer Reviewer
	ttl      time.Duration
	now      func() time.Time
	slots    chan struct{} // reviews in flight, any token
	unknown  chan struct{} // reviews in flight of tokens never allowed
	requests *prometheus.CounterVec

	mu       sync.Mutex
	cache    map[[sha256.Size]byte]answer
	nRefused int // refusals in cache
}

type answer struct {
	result  string
	reason  string
	expires time.Time
	// For an allowed answer past expires: a re-review runs, or the last
	// one failed and the next waits until retryAt.
	refreshing bool
	retryAt    time.Time
}

// staleUntil is when an allowed answer stops being used.
func (f *Filter) staleUntil(a answer) time.Time { return a.expires.Add(f.ttl) }

// NewFilter reviews through r and keeps allowed answers for ttl. Its
// counter is registered on reg.
func NewFilter(r Reviewer, ttl time.Duration, reg prometheus.Registerer) *Filter {
	f := &Filter{
		reviewer: r, ttl: ttl, now: time.Now,
		slots: make(chan struct{}, maxInFlight), unknown: make(chan struct{}, maxInFlightUnknown),
		cache: map[[sha256.Size]byte]answer{},
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "certready_metrics_requests_total",
			Help: "Requests to the metrics endpoint by the authentication and authorization filter's result (allowed, unauthenticated, forbidden, throttled, error).",
		}, []string{"result"}),
	}
	for _, r := range []string{ResultAllowed, ResultUnauthenticated, ResultForbidden, ResultThrottled, ResultError} {
		f.requests.WithLabelValues(r)
	}
	if reg != nil {
		reg.MustRegister(f.requests)
	}
	return f
}

// Wrap protects next.
func (f *Filter) Wrap(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
			return
		}
		token, ok := bearer(r.Header.Get("Authorization"))
		if !ok {
			f.refuse(w, ResultUnauthenticated, "send a bearer token: Authorization: Bearer <ServiceAccount token>")
			return
		}
		a := f.decide(r.Context(), token, r.URL.Path)
		switch a.result {
		case ResultAllowed:
			f.requests.WithLabelValues(ResultAllowed).Inc()
			next.ServeHTTP(w, r)
		default:
			f.refuse(w, a.result, a.reason)
		}
	})
}

// refusalCodes answer each refusal; a package variable, not a map built
// per refusal: refusals are what a flood of bad tokens makes.
var refusalCodes = map[string]int{
	ResultUnauthenticated: http.StatusUnauthorized,
	ResultForbidden:       http.StatusForbidden,
	ResultThrottled:       http.StatusTooManyRequests,
	ResultError:           http.StatusServiceUnavailable,
}

func (f *Filter) refuse(w http.ResponseWriter, result, reason string) {
	f.requests.WithLabelValues(result).Inc()
	code := refusalCodes[result]
	switch code {
	case http.StatusUnauthorized:
		w.Header().Set("WWW-Authenticate", `Bearer realm="certready metrics"`)
	case http.StatusTooManyRequests, http.StatusServiceUnavailable:
		w.Header().Set("Retry-After", "5")
	}
	http.Error(w, reason, code)
}

// bearer reads the token of an Authorization header.
func bearer(h string) (string, bool) {
	scheme, token, ok := strings.Cut(h, " ")
	token = strings.TrimSpace(token)
	if !ok || !strings.EqualFold(scheme, "Bearer") || token == "" || len(token) > maxTokenBytes {
		return "", false
	}
	return token, true
}

// decide answers from the cache or asks the API server.
func (f *Filter) decide(ctx context.Context, token, path string) answer {
	key := sha256.Sum256([]byte(path + "\x00" + token))
	now := f.now()
	f.mu.Lock()
	a, cached := f.cache[key]
	switch {
	case cached && now.Before(a.expires):
		f.mu.Unlock()
		return a
	case cached && a.result == ResultAllowed && now.Before(f.staleUntil(a)):
		if !a.refreshing && !now.Before(a.retryAt) {
			a.refreshing = true
			f.cache[key] = a
			go f.refresh(key, token, path)
		}
		f.mu.Unlock()
		return a
	}
	f.mu.Unlock()
	// A token allowed before (its answer too old to use) reviews in a
	// place a flood of unknown tokens cannot take.
	known := cached && a.result == ResultAllowed
	if !known {
		select {
		case f.unknown <- struct{}{}:
			defer func() { <-f.unknown }()
		default:
			return throttled
		}
	}
	select {
	case f.slots <- struct{}{}:
		defer func() { <-f.slots }()
	default:
		return throttled
	}
	a = f.review(ctx, token, path)
	if a.result != ResultError { // errors are not kept
		f.remember(key, a, f.now())
	}
	return a
}

var throttled = answer{result: ResultThrottled, reason: "too many metrics requests being reviewed; retry"}

// refresh reviews an allowed token again, in the background, after its
// answer expired.
func (f *Filter) refresh(key [sha256.Size]byte, token, path string) {
	a := answer{result: ResultError}
	select {
	case f.slots <- struct{}{}:
		a = f.review(context.Background(), token, path)
		<-f.slots
	default: // every place taken by other known callers: retry soon
	}
	now := f.now()
	if a.result != ResultError {
		f.remember(key, a, now)
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if old, ok := f.cache[key]; ok && old.result == ResultAllowed {
		old.refreshing, old.retryAt = false, now.Add(refreshRetry)
		f.cache[key] = old
	}
}

func (f *Filter) review(ctx context.Context, token, path string) answer {
	ctx, cancel := context.WithTimeout(ctx, reviewTimeout)
	defer cancel()
	logger := klog.FromContext(ctx)
	user, err := f.reviewer.Authenticate(ctx, token)
	if err != nil {
		logger.V(2).Info("Cannot review a metrics caller's token", "err", err)
		return answer{result: ResultError, reason: "the API server did not review the token; retry"}
	}
	if user == nil {
		return answer{result: ResultUnauthenticated, reason: "the API server does not accept this token"}
	}
	allowed, reason, err := f.reviewer.Authorize(ctx, user, "get", path)
	if err != nil {
		logger.V(2).Info("Cannot review a metrics caller's access", "user", user.Username, "err", err)
		return answer{result: ResultError, reason: "the API server did not review the access; retry"}
	}
	if !allowed {
		msg := user.Username + ` may not get ` + path + ` (RBAC: a ClusterRole with nonResourceURLs ["` + path + `"], verbs ["get"], e.g. certready-metrics-reader)`
		if reason != "" {
			msg += ": " + reason
		}
		return answer{result: ResultForbidden, reason: msg}
	}
	return answer{result: ResultAllowed}
}

// remember keeps a, fresh from now: an allowed answer for the TTL, a
// refusal for at most deniedTTL.
func (f *Filter) remember(key [sha256.Size]byte, a answer, now time.Time) {
	refused := a.result != ResultAllowed
	if refused {
		a.expires = now.Add(min(f.ttl, deniedTTL))
	} else {
		a.expires = now.Add(f.ttl)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	old, replaces := f.cache[key]
	if replaces {
		f.drop(key, old)
	}
	if len(f.cache) >= maxCached {
		for k, old := range f.cache {
			if !now.Before(f.keepUntil(old)) {
				f.drop(k, old)
			}
		}
	}
	if !refused && len(f.cache) >= maxCached && f.nRefused > 0 {
		for k, old := range f.cache { // an allowed answer displaces a refusal
			if old.result != ResultAllowed {
				f.drop(k, old)
				break
			}
		}
	}
	if len(f.cache) >= maxCached {
		return
	}
	f.cache[key] = a
	if refused {
		f.nRefused++
	}
}

// keepUntil is when a cached answer may go: a refusal when it expires,
// an allowed answer knownFor later (past its stale TTL it is never used as
// an answer, only to give its token a reserved review).
func (f *Filter) keepUntil(a answer) time.Time {
	if a.result == ResultAllowed {
		return a.expires.Add(max(f.ttl, knownFor))
	}
	return a.expires
}

func (f *Filter) drop(k [sha256.Size]byte, a answer) {
	delete(f.cache, k)
	if a.result != ResultAllowed {
		f.nRefused--
	}
}
