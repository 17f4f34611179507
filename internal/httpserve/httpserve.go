// Package httpserve runs the small HTTP endpoints every certready process
// exposes: Prometheus metrics, /healthz (the process is alive) and /readyz
// (caches synced and the first piece of work done).
package httpserve

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/pprof"
	"strings"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"k8s.io/klog/v2"
)

// Readiness is flipped once by the process when it can do its job.
type Readiness struct {
	ready  atomic.Bool
	reason atomic.Value // string: why not ready yet
}

// NewReadiness starts not ready, with reason.
func NewReadiness(reason string) *Readiness {
	r := &Readiness{}
	r.reason.Store(reason)
	return r
}

// Set marks the process ready (or not, with a reason).
func (r *Readiness) Set(ready bool, reason string) {
	r.reason.Store(reason)
	r.ready.Store(ready)
}

// Ready reports the current state.
func (r *Readiness) Ready() bool { return r.ready.Load() }

// HealthMux serves /healthz and /readyz.
func HealthMux(r *Readiness) *http.ServeMux {
	mux := http.NewServeMux()
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "ok") })
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) {
		if !r.Ready() {
			w.WriteHeader(http.StatusServiceUnavailable)
			fmt.Fprintf(w, "not ready: %s\n", r.reason.Load())
			return
		}
		fmt.Fprintln(w, "ok")
	})
	return mux
}

// MetricsMux serves /metrics from reg and, when profiling, Go's profiles
// under /debug/pprof/ (as Kubernetes' components do with --profiling):
// stacks and allocation sizes, never memory contents.
func MetricsMux(reg *prometheus.Registry, profiling bool) *http.ServeMux {
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg}))
	if profiling {
		mux.HandleFunc("/debug/pprof/", pprof.Index)
		mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
		mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
		mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	}
	return mux
}

// Timeouts of every served connection. The ports are reachable by
// anything on the node's network: a TLS handshake and a request's headers
// must arrive within headerTimeout (net/http bounds the handshake by it
// too), and an idle keep-alive connection is closed after idleTimeout,
// shorter than a scrape interval: a scraper's new connection every scrape
// costs one handshake, while idle connections held for minutes are what a
// flood is made of.
const (
	headerTimeout = 5 * time.Second
	readTimeout   = 10 * time.Second
	idleTimeout   = 20 * time.Second
)

// Serve listens on addr and serves h until ctx ends, over TLS when tlsCfg
// is set, holding no more connections than lim allows. An empty addr
// disables the server. The listener is opened before Serve returns an error, so a
// port already in use fails start-up with a message naming the flag.
func Serve(ctx context.Context, flag, addr string, h http.Handler, tlsCfg *tls.Config, lim Limits) (func() error, error) {
	if addr == "" || addr == "0" {
		return func() error { return nil }, nil
	}
	if _, _, err := net.SplitHostPort(addr); err != nil {
		if i := strings.LastIndex(addr, ":"); i > 0 && !strings.HasPrefix(addr, "[") && strings.Count(addr, ":") > 1 {
			return nil, fmt.Errorf("--%s=%s: an IPv6 address must be in brackets, e.g. %s", flag, addr, net.JoinHostPort(addr[:i], addr[i+1:]))
		}
		return nil, fmt.Errorf("--%s=%s: want host:port, e.g. 0.0.0.0:9721 or [::]:9721: %w", flag, addr, err)
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("--%s=%s: %w", flag, addr, err)
	}
	return ServeListener(ctx, flag, ln, h, tlsCfg, lim), nil
}

// ServeListener serves h on raw, as Serve does once it listens, and closes
// raw when ctx ends.
func ServeListener(ctx context.Context, flag string, raw net.Listener, h http.Handler, tlsCfg *tls.Config, lim Limits) func() error {
	addr := raw.Addr().String()
	// The limits see connections before TLS does: one closed at accept
	// costs no handshake.
	var ln net.Listener = newLimitListener(raw, flag, lim)
	scheme := "http"
	if tlsCfg != nil {
		ln = tls.NewListener(ln, tlsCfg)
		scheme = "https"
	}
	srv := &http.Server{
		Handler: inHandler(h), ConnContext: connContext,
		ReadHeaderTimeout: headerTimeout, ReadTimeout: readTimeout, IdleTimeout: idleTimeout,
		MaxHeaderBytes: 64 << 10,
	}
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}()
	klog.FromContext(ctx).Info("Serving", "flag", flag, "addr", ln.Addr().String(), "scheme", scheme)
	return func() error {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			return fmt.Errorf("--%s=%s: %w", flag, addr, err)
		}
		return nil
	}
}
