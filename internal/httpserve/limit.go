package httpserve

import (
	"context"
	"net"
	"net/http"
	"net/netip"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Limits bound what anything that reaches a port can make the process
// hold. The agent's ports are on the node's network, reachable by every
// neighbour there, and without bounds a few thousand idle TLS connections
// or a hundred handshakes a second exhaust an agent limited to 96 MiB and
// 100 millicores (DefaultLimits). A zero field is no bound.
type Limits struct {
	// MaxConns is how many connections the port holds at once. A
	// connection beyond it takes the place of the least recently used one
	// that is not inside a handler (handshaking, sending its request's
	// headers, or idle between requests): holding the port then takes more
	// new connections a second than a caller's handshake lasts, not merely
	// many open ones. When every connection is inside a handler, the
	// newcomer is closed.
	MaxConns int
	// MaxConnsPerSource is how many connections one source (an IP address)
	// holds at once; beyond it the newcomer is closed.
	MaxConnsPerSource int
	// SourceRate is how many new connections a second one source may open
	// (bursts of SourceBurst); beyond it a connection is closed at accept.
	SourceRate  float64
	SourceBurst int
	// Rate is how many new connections a second the port accepts from all
	// sources (bursts of Burst): over TLS each costs a handshake, and the
	// handshakes of many sources would otherwise take the CPU the agent's
	// checks need.
	Rate  float64
	Burst int
	// Metrics, when set, counts the connections closed at accept or taken
	// over, by reason, and the connections open.
	Metrics *ConnMetrics
}

// The ports' limits unless flags say otherwise (certready's --max-connections,
// --max-connections-per-source, --metrics-handshake-rate). Measured
// (BenchmarkIdleTLSConn, BenchmarkTLSHandshake): an idle keep-alive TLS
// connection holds about 30 KiB of resident memory, and a handshake takes
// about 0.8 ms of CPU, so 96 MiB hold about 3,300 connections and 100
// millicores about 130 handshakes a second. A port's legitimate callers
// are a few scrapers, each with one connection a scrape, and the
// kubelet's probes, one at a time:
//   - 128 connections a port hold about 4 MiB (8 MiB mid-request),
//     under the agent's headroom between its 38 MiB peak and its limit;
//   - 8 from one source let a node's scrapers and probes in together;
//   - 1 new connection a second from one source (bursts of 10) is
//     30 times what a scraper at a 30 s interval opens;
//   - 20 handshakes a second over TLS from all sources take at most
//     about 16 millicores; beyond that callers wait for a later scrape,
//     and the agent's checks keep the rest of its CPU.
const (
	DefaultMaxConns          = 128
	DefaultMaxConnsPerSource = 8
	DefaultSourceRate        = 1
	defaultSourceBurst       = 10
	DefaultHandshakeRate     = 20
)

// DefaultLimits are the limits of a port served over TLS or not. Plain
// HTTP (the health port, for the kubelet's probes) has only the total:
// the kubelet probes from the node's own address, which every
// host-network process of the node shares, so a per-source cap or rate
// there would let any of them fail the liveness probe and have the agent
// restarted; a full port gives the probe, whose request is answered at
// once, the place of an idle connection.
func DefaultLimits(overTLS bool) Limits {
	if !overTLS {
		return Limits{MaxConns: DefaultMaxConns}
	}
	return Limits{MaxConns: DefaultMaxConns, MaxConnsPerSource: DefaultMaxConnsPerSource, SourceRate: DefaultSourceRate, SourceBurst: defaultSourceBurst,
		Rate: DefaultHandshakeRate, Burst: 2 * DefaultHandshakeRate}
}

// Reasons a connection is closed by the limits: the label of
// certready_http_connections_refused_total.
const (
	RefusedSource     = "per-source"      // its source holds MaxConnsPerSource
	RefusedSourceRate = "per-source-rate" // its source opened more than SourceRate a second
	RefusedRate       = "rate"            // the port accepted more than Rate a second
	RefusedFull       = "full"            // MaxConns, each inside a handler
	Evicted           = "evicted"         // an open connection closed for a newcomer
)

// ConnMetrics are the limited listeners' counters, one series per port
// (the flag that names it).
type ConnMetrics struct {
	refused *prometheus.CounterVec
	open    *prometheus.GaugeVec
}

// NewConnMetrics registers the counters on reg.
func NewConnMetrics(reg prometheus.Registerer) *ConnMetrics {
	m := &ConnMetrics{
		refused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "certready_http_connections_refused_total",
			Help: "Connections to a metrics or health port closed by its limits, by port (its flag) and reason (per-source, per-source-rate, rate, full; evicted: an idle or handshaking connection closed to make room). A steady rise is a flood from the node's network.",
		}, []string{"port", "reason"}),
		open: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "certready_http_connections_open",
			Help: "Connections open on a metrics or health port, by port (its flag).",
		}, []string{"port"}),
	}
	reg.MustRegister(m.refused, m.open)
	return m
}

// maxSources bounds the per-source table: sources with no connection
// whose rate bucket is full again are dropped when it fills; beyond that,
// connections from new sources are refused as over their rate.
const maxSources = 4096

// limitListener closes connections beyond its Limits at accept, before
// a byte is read from them (before any TLS handshake).
type limitListener struct {
	net.Listener
	lim  Limits
	port string
	now  func() time.Time

	mu      sync.Mutex
	conns   map[*limitedConn]struct{}
	sources map[netip.Addr]*source
	all     bucket
}

type source struct {
	conns  int
	bucket bucket
}

// bucket is a token bucket; the zero value is full.
type bucket struct {
	spent float64 // tokens taken, refilling at the rate
	last  time.Time
}

// take spends one token if one is left at rate/burst, and reports whether it did.
func (b *bucket) take(now time.Time, rate float64, burst int) bool {
	if rate <= 0 {
		return true
	}
	b.refill(now, rate)
	if b.spent+1 > float64(max(burst, 1)) {
		return false
	}
	b.spent++
	return true
}

func (b *bucket) refill(now time.Time, rate float64) {
	if !b.last.IsZero() {
		b.spent = max(0, b.spent-now.Sub(b.last).Seconds()*rate)
	}
	b.last = now
}

// limitedConn is an accepted connection counted against its source and
// the port until it is closed.
type limitedConn struct {
	net.Conn
	ln  *limitListener
	src netip.Addr

	// Guarded by ln.mu.
	released  bool
	inHandler int
	lastUsed  time.Time
}

func newLimitListener(ln net.Listener, port string, lim Limits) *limitListener {
	return &limitListener{Listener: ln, lim: lim, port: port, now: time.Now,
		conns: map[*limitedConn]struct{}{}, sources: map[netip.Addr]*source{}}
}

// Accept returns the next connection within the limits and closes the
// others.
func (l *limitListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		lc, evict, reason := l.admit(c)
		if evict != nil {
			l.count(Evicted)
			evict.Conn.Close()
		}
		if lc != nil {
			return lc, nil
		}
		l.count(reason)
		reject(c)
	}
}

// admit counts c in, or tells why not; evict is a connection that gave
// up its place to c and must be closed.
func (l *limitListener) admit(c net.Conn) (lc *limitedConn, evict *limitedConn, reason string) {
	src := sourceOf(c.RemoteAddr())
	now := l.now()
	l.mu.Lock()
	defer l.mu.Unlock()
	s := l.sources[src]
	if s == nil && (l.lim.MaxConnsPerSource > 0 || l.lim.SourceRate > 0) {
		if len(l.sources) >= maxSources {
			l.dropIdleSources(now)
		}
		if len(l.sources) >= maxSources {
			return nil, nil, RefusedSourceRate
		}
		s = &source{}
		l.sources[src] = s
	}
	if s != nil && l.lim.MaxConnsPerSource > 0 && s.conns >= l.lim.MaxConnsPerSource {
		return nil, nil, RefusedSource
	}
	if s != nil && !s.bucket.take(now, l.lim.SourceRate, l.lim.SourceBurst) {
		return nil, nil, RefusedSourceRate
	}
	if !l.all.take(now, l.lim.Rate, l.lim.Burst) {
		return nil, nil, RefusedRate
	}
	if l.lim.MaxConns > 0 && len(l.conns) >= l.lim.MaxConns {
		if evict = l.leastRecentlyUsed(); evict == nil {
			return nil, nil, RefusedFull
		}
		l.releaseLocked(evict)
	}
	if s != nil {
		s.conns++
	}
	lc = &limitedConn{Conn: c, ln: l, src: src, lastUsed: now}
	l.conns[lc] = struct{}{}
	l.gauge()
	return lc, evict, ""
}

// leastRecentlyUsed is the open connection outside a handler used longest
// ago, or nil. A linear scan: MaxConns is small, and it runs only when
// the port is full.
func (l *limitListener) leastRecentlyUsed() *limitedConn {
	var oldest *limitedConn
	for c := range l.conns {
		if c.inHandler == 0 && (oldest == nil || c.lastUsed.Before(oldest.lastUsed)) {
			oldest = c
		}
	}
	return oldest
}

func (l *limitListener) dropIdleSources(now time.Time) {
	for p, s := range l.sources {
		if s.conns == 0 {
			s.bucket.refill(now, l.lim.SourceRate)
			if s.bucket.spent == 0 || l.lim.SourceRate <= 0 {
				delete(l.sources, p)
			}
		}
	}
}

// releaseLocked takes c out of the counts, once.
func (l *limitListener) releaseLocked(c *limitedConn) {
	if c.released {
		return
	}
	c.released = true
	delete(l.conns, c)
	if s := l.sources[c.src]; s != nil {
		s.conns--
	}
	l.gauge()
}

func (l *limitListener) gauge() {
	if l.lim.Metrics != nil {
		l.lim.Metrics.open.WithLabelValues(l.port).Set(float64(len(l.conns)))
	}
}

func (l *limitListener) count(reason string) {
	if l.lim.Metrics != nil {
		l.lim.Metrics.refused.WithLabelValues(l.port, reason).Inc()
	}
}

func (c *limitedConn) Close() error {
	c.ln.mu.Lock()
	c.ln.releaseLocked(c)
	c.ln.mu.Unlock()
	return c.Conn.Close()
}

// reject closes c at once with a reset: no FIN handshake, no TIME_WAIT
// kept by this side for a connection it never served.
func reject(c net.Conn) {
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetLinger(0)
	}
	_ = c.Close()
}

// sourceOf is the address a caller's limits are counted by: its IP
// address. Not an IPv6 /64: Kubernetes gives each node's pods one /64 by
// default, and a scraper would share its place with every pod beside it.
func sourceOf(a net.Addr) netip.Addr {
	if ta, ok := a.(*net.TCPAddr); ok {
		ip, _ := netip.AddrFromSlice(ta.IP)
		return ip.Unmap()
	}
	ap, _ := netip.ParseAddrPort(a.String())
	return ap.Addr().Unmap()
}

type connKey struct{}

// connContext remembers the limited connection under a request's
// context, for inHandler.
func connContext(ctx context.Context, c net.Conn) context.Context {
	if nc, ok := c.(interface{ NetConn() net.Conn }); ok { // *tls.Conn
		c = nc.NetConn()
	}
	if lc, ok := c.(*limitedConn); ok {
		return context.WithValue(ctx, connKey{}, lc)
	}
	return ctx
}

// inHandler marks a request's connection busy while h runs: a connection
// inside a handler is never taken over, one idle or still sending
// headers is.
func inHandler(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		lc, ok := r.Context().Value(connKey{}).(*limitedConn)
		if !ok {
			h.ServeHTTP(w, r)
			return
		}
		l := lc.ln
		l.mu.Lock()
		lc.inHandler++
		l.mu.Unlock()
		defer func() {
			l.mu.Lock()
			lc.inHandler--
			lc.lastUsed = l.now()
			l.mu.Unlock()
		}()
		h.ServeHTTP(w, r)
	})
}
