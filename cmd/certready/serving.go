package main

import (
	"context"
	"crypto/tls"
	"fmt"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/pflag"
	"golang.org/x/sync/errgroup"
	"k8s.io/client-go/rest"

	"github.com/certready/certready/internal/httpserve"
	"github.com/certready/certready/internal/securemetrics"
)

// servingFlags are the agent's and the approver's endpoints: metrics (over
// TLS to authenticated, authorized callers unless --metrics-secure=false)
// and health (plain HTTP, for the kubelet's probes).
type servingFlags struct {
	metricsAddr, healthAddr string
	profiling, secure       bool
	certDir                 string
	authTTL                 time.Duration
	// The ports' limits (httpserve.Limits): the ports are reachable by
	// anything on the node's network.
	maxConns, maxConnsPerSource int
	handshakeRate               float64
}

func (s *servingFlags) add(fs *pflag.FlagSet, metricsAddr, healthAddr, profilingNote string) {
	fs.StringVar(&s.metricsAddr, "metrics-addr", metricsAddr, "Address for Prometheus /metrics (empty: off).")
	fs.StringVar(&s.healthAddr, "health-addr", healthAddr, "Address for /healthz and /readyz, plain HTTP (empty: off).")
	fs.BoolVar(&s.profiling, "profiling", false, "Serve Go's profiles under /debug/pprof/ on --metrics-addr, behind the same authentication and authorization as /metrics"+profilingNote+".")
	fs.BoolVar(&s.secure, "metrics-secure", true, "Serve --metrics-addr over TLS, only to callers whose bearer token the API server authenticates (TokenReview) and authorizes to get the path (SubjectAccessReview; RBAC: nonResourceURLs [\"/metrics\"], verbs [\"get\"], the ClusterRole certready-metrics-reader). false: plain HTTP to anyone who can reach the port.")
	fs.StringVar(&s.certDir, "metrics-cert-dir", "", "--metrics-secure: folder holding "+securemetrics.CertFile+" and "+securemetrics.KeyFile+" (a kubernetes.io/tls Secret, e.g. from cert-manager; read again when they change). Empty: a self-signed certificate made at start.")
	fs.IntVar(&s.maxConns, "max-connections", httpserve.DefaultMaxConns, "Connections each of --metrics-addr and --health-addr holds at once (an idle TLS connection holds about 30 KiB). When full, a new connection takes the place of the one used longest ago that is not being answered, or is closed. 0: no bound.")
	fs.IntVar(&s.maxConnsPerSource, "max-connections-per-source", httpserve.DefaultMaxConnsPerSource, "Connections one IP address holds at once on the metrics port; beyond, new ones are closed at accept. 0: no bound. (The health port has only --max-connections: the kubelet probes from the address every host-network process of the node shares.)")
	fs.Float64Var(&s.handshakeRate, "metrics-handshake-rate", httpserve.DefaultHandshakeRate, "--metrics-secure: new connections a second --metrics-addr accepts from all callers (bursts of twice as many); each costs a TLS handshake, about 0.8 ms of CPU. Beyond, closed at accept. 0: no bound.")
	fs.DurationVar(&s.authTTL, "metrics-auth-cache-ttl", 2*time.Minute, "--metrics-secure: how long a scraper's allowed token is trusted before the API server is asked again (refusals: at most 10s). Every scraper costs two reviews per TTL per process.")
}

// metricsTLS builds the metrics server's TLS and its authentication and
// authorization filter, or nothing with --metrics-secure=false.
func (s *servingFlags) metricsTLS(cfg *rest.Config, reg prometheus.Registerer) (*tls.Config, *securemetrics.Filter, error) {
	if !s.secure || s.metricsAddr == "" {
		return nil, nil, nil
	}
	if s.metricsAddr == s.healthAddr {
		return nil, nil, fmt.Errorf("--metrics-addr and --health-addr are both %s: with --metrics-secure (the default) metrics are served over TLS and health over plain HTTP for the kubelet's probes; give them different ports, or set --metrics-secure=false", s.metricsAddr)
	}
	tlsCfg, err := securemetrics.TLSConfig(s.certDir, securemetrics.Hosts(s.metricsAddr))
	if err != nil {
		return nil, nil, fmt.Errorf("--metrics-cert-dir=%s: %w", s.certDir, err)
	}
	reviewer, err := securemetrics.NewReviewer(cfg)
	if err != nil {
		return nil, nil, err
	}
	return tlsCfg, securemetrics.NewFilter(reviewer, s.authTTL, reg), nil
}

// limits are the ports' connection limits from the flags, over TLS or
// not, counted on reg.
func (s *servingFlags) limits(reg prometheus.Registerer) (func(overTLS bool) httpserve.Limits, error) {
	for _, f := range []struct {
		name string
		v    float64
	}{{"max-connections", float64(s.maxConns)}, {"max-connections-per-source", float64(s.maxConnsPerSource)}, {"metrics-handshake-rate", s.handshakeRate}} {
		if f.v < 0 {
			return nil, fmt.Errorf("--%s=%v: want 0 (no bound) or more", f.name, f.v)
		}
	}
	conns := httpserve.NewConnMetrics(reg)
	return func(overTLS bool) httpserve.Limits {
		l := httpserve.DefaultLimits(overTLS)
		l.MaxConns, l.Metrics = s.maxConns, conns
		if overTLS {
			l.MaxConnsPerSource = s.maxConnsPerSource
			l.Rate, l.Burst = s.handshakeRate, int(2*s.handshakeRate)
		}
		return l
	}, nil
}

// serveAndRun runs the metrics and health servers beside run, until ctx ends
// or one of them fails.
func (s *servingFlags) serveAndRun(ctx context.Context, cfg *rest.Config, reg *prometheus.Registry, ready *httpserve.Readiness, run func(context.Context) error) error {
	tlsCfg, filter, err := s.metricsTLS(cfg, reg)
	if err != nil {
		return fmt.Errorf("cannot serve metrics: %w", err)
	}
	var metrics http.Handler = httpserve.MetricsMux(reg, s.profiling)
	if filter != nil {
		metrics = filter.Wrap(metrics)
	}
	limits, err := s.limits(reg)
	if err != nil {
		return err
	}
	g, gctx := errgroup.WithContext(ctx)
	type server struct {
		serve func() error
		err   error
	}
	var servers []server
	if s.metricsAddr != "" && s.metricsAddr == s.healthAddr { // plain HTTP only (metricsTLS refuses otherwise)
		mux := httpserve.HealthMux(ready)
		mux.Handle("/metrics", metrics)
		mux.Handle("/debug/pprof/", metrics)
		var sv server
		sv.serve, sv.err = httpserve.Serve(gctx, "metrics-addr", s.metricsAddr, mux, nil, limits(false))
		servers = append(servers, sv)
	} else {
		var m, h server
		m.serve, m.err = httpserve.Serve(gctx, "metrics-addr", s.metricsAddr, metrics, tlsCfg, limits(tlsCfg != nil))
		h.serve, h.err = httpserve.Serve(gctx, "health-addr", s.healthAddr, httpserve.HealthMux(ready), nil, limits(false))
		servers = append(servers, m, h)
	}
	for _, sv := range servers {
		if sv.err != nil {
			return exitWith(1, fmt.Errorf("cannot listen: %w", sv.err))
		}
		g.Go(sv.serve)
	}
	g.Go(func() error { return run(gctx) })
	if err := g.Wait(); err != nil {
		return exitWith(1, fmt.Errorf("stopped: %w", err))
	}
	return nil
}
