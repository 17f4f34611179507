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
	// maxInFlight reviews at once; a caller beyond them gets 429.
	maxInFlight = 4
	// maxCached answers; when full, expired ones go, and beyond that
	// new answers are not kept (a flood of tokens cannot grow memory).
	maxCached = 1024
	// deniedTTL: refusals are kept shortly, so a fixed RBAC binding or a
	// fresh token works soon.
	deniedTTL     = 10 * time.Second
	reviewTimeout = 10 * time.Second
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
type Filter struct {
	reviewer Reviewer
	ttl      time.Duration
	now      func() time.Time
	slots    chan struct{}
	requests *prometheus.CounterVec

	mu    sync.Mutex
	cache map[[sha256.Size]byte]answer
}

type answer struct {
	result  string
	reason  string
	expires time.Time
}

// NewFilter reviews through r and keeps allowed answers for ttl. Its
// counter is registered on reg.
func NewFilter(r Reviewer, ttl time.Duration, reg prometheus.Registerer) *Filter {
	f := &Filter{
		reviewer: r, ttl: ttl, now: time.Now, slots: make(chan struct{}, maxInFlight),
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
	a, ok := f.cache[key]
	f.mu.Unlock()
	if ok && now.Before(a.expires) {
		return a
	}
	select {
	case f.slots <- struct{}{}:
		defer func() { <-f.slots }()
	default:
		return answer{result: ResultThrottled, reason: "too many metrics requests being reviewed; retry"}
	}
	a = f.review(ctx, token, path)
	switch a.result {
	case ResultAllowed:
		a.expires = now.Add(f.ttl)
	case ResultUnauthenticated, ResultForbidden:
		a.expires = now.Add(min(f.ttl, deniedTTL))
	default:
		return a // errors are not kept
	}
	f.remember(key, a, now)
	return a
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

func (f *Filter) remember(key [sha256.Size]byte, a answer, now time.Time) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.cache) >= maxCached {
		for k, old := range f.cache {
			if !now.Before(old.expires) {
				delete(f.cache, k)
			}
		}
		if len(f.cache) >= maxCached {
			return
		}
	}
	f.cache[key] = a
}
