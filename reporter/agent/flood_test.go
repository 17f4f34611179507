package agent_test

import (
	"bufio"
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	authnv1 "k8s.io/api/authentication/v1"

	"github.com/certready/certready/internal/httpserve"
	"github.com/certready/certready/internal/securemetrics"
	"github.com/certready/certready/reporter/agent"
	"github.com/certready/certready/reporter/servingcert/verdict"
)

// slowReviewer is the API server's reviews: prom-token is Prometheus's,
// allowed; every other token is refused after a delay, as an API server
// under load answers, so that a flood's reviews fill the filter's places.
type slowReviewer struct{}

func (slowReviewer) Authenticate(ctx context.Context, token string) (*authnv1.UserInfo, error) {
	if token == "prom-token" {
		return &authnv1.UserInfo{Username: "system:serviceaccount:monitoring:prometheus"}, nil
	}
	select {
	case <-time.After(200 * time.Millisecond):
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	return nil, nil
}

func (slowReviewer) Authorize(context.Context, *authnv1.UserInfo, string, string) (bool, string, error) {
	return true, "", nil
}

// flood is neighbours on the node's network: each source opens
// connections one after another (handshake, one request with a random
// token, then held idle), up to perSource held and attempts in all.
type flood struct {
	held     atomic.Int64 // connections served and not closed by the server
	peak     atomic.Int64
	attempts atomic.Int64
	wg       sync.WaitGroup
}

func (f *flood) run(ctx context.Context, addr string, overTLS bool, sources []string, perSource, attempts int) {
	for _, from := range sources {
		f.wg.Add(1)
		go func() {
			defer f.wg.Done()
			var mine atomic.Int64
			for i := 0; i < attempts && ctx.Err() == nil; i++ {
				f.attempts.Add(1)
				if mine.Load() >= int64(perSource) {
					// The flood's own bound (file descriptors); paced, not a wait for a condition.
					time.Sleep(20 * time.Millisecond)
					continue
				}
				c, err := floodConn(addr, from, overTLS)
				if err != nil {
					time.Sleep(5 * time.Millisecond) // the flood's pace
					continue
				}
				mine.Add(1)
				n := f.held.Add(1)
				for p := f.peak.Load(); n > p && !f.peak.CompareAndSwap(p, n); p = f.peak.Load() {
				}
				f.wg.Add(1)
				go func() {
					defer f.wg.Done()
					stop := context.AfterFunc(ctx, func() { c.Close() })
					defer stop()
					_, _ = c.Read(make([]byte, 1)) // until the server (or the test's end) closes it
					c.Close()
					f.held.Add(-1)
					mine.Add(-1)
				}()
			}
		}()
	}
}

// floodConn opens one connection from from and has it answered once.
func floodConn(addr, from string, overTLS bool) (net.Conn, error) {
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}, Timeout: 5 * time.Second}
	var c net.Conn
	var err error
	if overTLS {
		c, err = tls.DialWithDialer(d, "tcp", addr, &tls.Config{InsecureSkipVerify: true}) //nolint:gosec // the flood does not care whom it floods
	} else {
		c, err = d.Dial("tcp", addr)
	}
	if err != nil {
		return nil, err
	}
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err = fmt.Fprintf(c, "GET /metrics HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer random-%p\r\n\r\n", c); err == nil {
		var resp *http.Response
		if resp, err = http.ReadResponse(bufio.NewReader(c), nil); err == nil {
			resp.Body.Close()
		}
	}
	if err != nil {
		c.Close()
		return nil, err
	}
	_ = c.SetDeadline(time.Time{})
	return c, nil
}

func sources(first, n int) []string {
	s := make([]string, n)
	for i := range s {
		s[i] = fmt.Sprintf("127.0.0.%d", first+i)
	}
	return s
}

// goMemory is the Go heap and stacks in use after a collection.
func goMemory() uint64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapInuse + ms.StackInuse
}

// A neighbour floods the agent's ports with connections, handshakes and
// random tokens, as serveAndRun serves them with the default limits: the
// ports hold no more than their cap and the process's memory stays far
// from the agent's limit; the agent keeps publishing its condition, the
// kubelet's health probe keeps being answered, and the scraper keeps
// getting its metrics (never 429) as its cached answer expires.
func TestConditionIsPublishedDuringAFlood(t *testing.T) {
	h := newHarness(t, labelledCSR("csr-1", time.Now()))
	h.run(agent.Config{})
	h.waitFor(verdict.CSRPending)

	tlsCfg, err := securemetrics.TLSConfig("", []string{"127.0.0.1"})
	if err != nil {
		t.Fatal(err)
	}
	filter := securemetrics.NewFilter(slowReviewer{}, 500*time.Millisecond, nil)
	ctx, cancel := context.WithCancel(context.Background())
	listen := func(flag string, h http.Handler, tlsCfg *tls.Config) string {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		serve := httpserve.ServeListener(ctx, flag, ln, h, tlsCfg, httpserve.DefaultLimits(tlsCfg != nil))
		done := make(chan error, 1)
		go func() { done <- serve() }()
		t.Cleanup(func() {
			if err := <-done; err != nil {
				t.Error(err)
			}
		})
		return ln.Addr().String()
	}
	metricsAddr := listen("metrics-addr", filter.Wrap(httpserve.MetricsMux(h.reg, false)), tlsCfg)
	healthAddr := listen("health-addr", httpserve.HealthMux(h.ready), nil)

	// The kubelet's liveness probe (a new connection each time, 1 s
	// timeout) and the scraper (keep-alive, a bearer token), at their
	// pace.
	probeFailures, maxProbeFailures := 0, 0
	probe := &http.Client{Timeout: time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	scraper := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, //nolint:gosec // the self-signed metrics certificate
		DialContext:     (&net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP("127.0.0.2")}}).DialContext,
	}}
	scrapeErrors, scrapeCodes := 0, map[int]int{}
	var lastVisit time.Time
	visit := func() {
		// Once a second at most: the probe's source has its rate too (the
		// kubelet probes every 5 or 20 s).
		if time.Since(lastVisit) < time.Second {
			return
		}
		lastVisit = time.Now()
		if resp, err := probe.Get("http://" + healthAddr + "/healthz"); err == nil && resp.StatusCode == http.StatusOK {
			resp.Body.Close()
			probeFailures = 0
		} else {
			if err == nil {
				resp.Body.Close()
			}
			probeFailures++
			maxProbeFailures = max(maxProbeFailures, probeFailures)
		}
		req, _ := http.NewRequest(http.MethodGet, "https://"+metricsAddr+"/metrics", nil)
		req.Header.Set("Authorization", "Bearer prom-token")
		if resp, err := scraper.Do(req); err == nil {
			resp.Body.Close()
			scrapeCodes[resp.StatusCode]++
		} else {
			scrapeErrors++ // refused at accept: the handshake rate, a later scrape gets in
		}
	}

	// The scraper was scraping before the flood began.
	visit()
	if scrapeCodes[http.StatusOK] != 1 {
		t.Fatalf("the scraper before the flood: %v, %d not connected", scrapeCodes, scrapeErrors)
	}
	before := goMemory()
	floodCtx, stopFlood := context.WithTimeout(ctx, 60*time.Second)
	var metricsFlood, healthFlood flood
	metricsFlood.run(floodCtx, metricsAddr, true, sources(10, 24), 100, 3000)
	healthFlood.run(floodCtx, healthAddr, false, sources(40, 8), 100, 3000)
	t.Cleanup(func() {
		stopFlood()
		metricsFlood.wg.Wait()
		healthFlood.wg.Wait()
		cancel()
	})
	h.poll("the flood to fill the metrics port", func() bool { return metricsFlood.held.Load() >= httpserve.DefaultMaxConns/2 })

	// The node's certificate comes, then the kubelet serves another one:
	// both published within the harness's deadline, the flood running.
	p := h.issue("w1")
	h.issueCSR("csr-1", p)
	h.install(p)
	h.kubelet.serve(p)
	h.poll("Ready during the flood", func() bool {
		visit()
		c := h.condition()
		return c != nil && c.Reason == string(verdict.Ready)
	})
	h.kubelet.serve(h.issue("w1"))
	h.queueNudge()
	h.poll("EndpointCertificateMismatch during the flood", func() bool {
		visit()
		c := h.condition()
		return c != nil && c.Reason == string(verdict.EndpointCertificateMismatch)
	})
	// A few more visits, past several expiries of the scraper's cached
	// answer (500 ms).
	for end := time.Now().Add(3 * time.Second); time.Now().Before(end); time.Sleep(100 * time.Millisecond) {
		visit()
	}
	if floodCtx.Err() != nil {
		t.Fatal("the flood ended before the checks did: they proved nothing")
	}

	used := int64(goMemory()) - int64(before)
	held := metricsFlood.held.Load() + healthFlood.held.Load()
	t.Logf("flood: %d attempts, %d held at the end (peak %d metrics, %d health); Go memory +%.1f MiB; %d probes failed in a row at most; scrapes %v, %d not connected",
		metricsFlood.attempts.Load()+healthFlood.attempts.Load(), held, metricsFlood.peak.Load(), healthFlood.peak.Load(), float64(used)/(1<<20), maxProbeFailures, scrapeCodes, scrapeErrors)
	// The cap, with room for connections the server has closed that the
	// flood has not yet seen closed.
	if limit := 2 * int64(httpserve.DefaultMaxConns); metricsFlood.peak.Load() > limit || healthFlood.peak.Load() > limit {
		t.Errorf("the ports held up to %d and %d of the flood's connections, want at most %d each (the cap, give or take those closing)", metricsFlood.peak.Load(), healthFlood.peak.Load(), limit)
	}
	// Both ends of every connection are in this process.
	if used > 32<<20 {
		t.Errorf("the flood took %.1f MiB of Go memory in this process (both ends), want under 32 MiB: the agent's limit is 96 MiB", float64(used)/(1<<20))
	}
	if maxProbeFailures >= 3 {
		t.Errorf("%d health probes failed in a row: the kubelet would have restarted the agent", maxProbeFailures)
	}
	if scrapeCodes[http.StatusOK] == 0 || len(scrapeCodes) != 1 {
		t.Errorf("scraper's answers %v, want 200 only (never 429 for a flood of other tokens)", scrapeCodes)
	}
}
