package httpserve_test

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/certready/certready/internal/httpserve"
	"github.com/certready/certready/internal/securemetrics"
	"github.com/certready/certready/internal/testmetrics"
)

// limitedServer serves h over TLS on 127.0.0.1 within lim and returns its
// address. Clients bind 127.0.0.2, 127.0.0.3, ...: each is a source of its
// own (Linux routes all of 127.0.0.0/8 to the loopback).
func limitedServer(t *testing.T, h http.Handler, lim httpserve.Limits) string {
	t.Helper()
	cfg, err := securemetrics.TLSConfig("", []string{"127.0.0.1"})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	serve := httpserve.ServeListener(ctx, "metrics-addr", ln, h, cfg, lim)
	done := make(chan error, 1)
	go func() { done <- serve() }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	})
	return ln.Addr().String()
}

// tryTLS dials addr from the address from and completes a handshake and
// one request, or says why it could not.
func tryTLS(t *testing.T, addr, from string) (*tls.Conn, error) {
	t.Helper()
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}, Timeout: 10 * time.Second}
	conn, err := tls.DialWithDialer(d, "tcp", addr, &tls.Config{InsecureSkipVerify: true}) //nolint:gosec // the test server's self-signed certificate
	if err != nil {
		return nil, err
	}
	if status, _ := request(t, conn, "/"); status != http.StatusOK {
		conn.Close()
		return nil, errors.New(http.StatusText(status))
	}
	return conn, nil
}

func mustTLS(t *testing.T, addr, from string) *tls.Conn {
	t.Helper()
	c, err := tryTLS(t, addr, from)
	if err != nil {
		t.Fatalf("a connection from %s within the limits: %v", from, err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func refused(t *testing.T, addr, from, why string) {
	t.Helper()
	if c, err := tryTLS(t, addr, from); err == nil {
		c.Close()
		t.Fatalf("a connection from %s was served; want it closed at accept (%s)", from, why)
	}
}

// closedByServer tells whether the server has closed c (a read ends with
// EOF or a reset, not the deadline).
func closedByServer(c net.Conn, within time.Duration) bool {
	_ = c.SetReadDeadline(time.Now().Add(within))
	_, err := c.Read(make([]byte, 1))
	var ne net.Error
	return err != nil && (!errors.As(err, &ne) || !ne.Timeout())
}

var ok = http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok\n")) })

// One source holds at most MaxConnsPerSource; others are served beside it,
// and it gets its place back when it lets one go.
func TestLimitPerSource(t *testing.T) {
	reg := prometheus.NewRegistry()
	addr := limitedServer(t, ok, httpserve.Limits{MaxConnsPerSource: 2, Metrics: httpserve.NewConnMetrics(reg)})
	first := mustTLS(t, addr, "127.0.0.2")
	mustTLS(t, addr, "127.0.0.2")
	refused(t, addr, "127.0.0.2", "its source holds 2")
	mustTLS(t, addr, "127.0.0.3")
	first.Close()
	deadline := time.Now().Add(10 * time.Second)
	for {
		c, err := tryTLS(t, addr, "127.0.0.2")
		if err == nil {
			c.Close()
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after closing one of its 2 connections, the source is still refused: %v", err)
		}
		time.Sleep(20 * time.Millisecond) // the server sees the close asynchronously
	}
	series := testmetrics.Series(t, reg, "certready_http_connections_refused_total", map[string]string{"port": "metrics-addr", "reason": httpserve.RefusedSource})
	if len(series) != 1 || testmetrics.Value(series[0]) < 1 {
		t.Errorf("certready_http_connections_refused_total{reason=%q}: %v, want at least 1", httpserve.RefusedSource, series)
	}
}

// A full port makes room by closing the least recently used connection
// outside a handler, never one inside it; when every one is inside a
// handler, the newcomer is closed.
func TestLimitTotalTakesOverIdleNeverBusy(t *testing.T) {
	release := make(chan struct{})
	entered := make(chan struct{}, 4)
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/hold" {
			entered <- struct{}{}
			<-release
		}
		_, _ = w.Write([]byte("ok\n"))
	})
	addr := limitedServer(t, h, httpserve.Limits{MaxConns: 2})
	defer close(release)

	a := mustTLS(t, addr, "127.0.0.2")
	b := mustTLS(t, addr, "127.0.0.3")
	mustTLS(t, addr, "127.0.0.4") // the port is full: a, used longest ago, gives way
	if !closedByServer(a, 5*time.Second) {
		t.Fatal("the least recently used idle connection was not closed for a newcomer")
	}
	if closedByServer(b, 200*time.Millisecond) {
		t.Fatal("a more recently used connection was closed instead")
	}

	// Both places inside a handler: the newcomer is refused.
	for _, from := range []string{"127.0.0.5", "127.0.0.6"} {
		c := dialTLS(t, addr, from)
		t.Cleanup(func() { c.Close() })
		if _, err := fmt.Fprintf(c, "GET /hold HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
			t.Fatal(err)
		}
		select {
		case <-entered:
		case <-time.After(10 * time.Second):
			t.Fatalf("the request from %s never reached the handler", from)
		}
	}
	refused(t, addr, "127.0.0.7", "every place is inside a handler")
}

// New connections beyond a source's rate, or beyond the port's rate from
// all sources, are closed before their handshake.
func TestLimitRates(t *testing.T) {
	t.Run("per source", func(t *testing.T) {
		addr := limitedServer(t, ok, httpserve.Limits{SourceRate: 0.1, SourceBurst: 2})
		mustTLS(t, addr, "127.0.0.2").Close()
		mustTLS(t, addr, "127.0.0.2").Close()
		refused(t, addr, "127.0.0.2", "its source spent its burst of 2")
		mustTLS(t, addr, "127.0.0.3")
	})
	t.Run("all sources", func(t *testing.T) {
		reg := prometheus.NewRegistry()
		addr := limitedServer(t, ok, httpserve.Limits{Rate: 0.1, Burst: 2, Metrics: httpserve.NewConnMetrics(reg)})
		mustTLS(t, addr, "127.0.0.2")
		mustTLS(t, addr, "127.0.0.3")
		refused(t, addr, "127.0.0.4", "the port spent its burst of 2")
		series := testmetrics.Series(t, reg, "certready_http_connections_refused_total", map[string]string{"reason": httpserve.RefusedRate})
		if len(series) != 1 || testmetrics.Value(series[0]) != 1 {
			t.Errorf("certready_http_connections_refused_total{reason=%q}: %v, want 1", httpserve.RefusedRate, series)
		}
	})
}

// A connection that never completes its TLS handshake is cut after the
// header timeout (net/http bounds the handshake by it), whatever the caps.
func TestSilentConnectionIsCut(t *testing.T) {
	addr := limitedServer(t, ok, httpserve.Limits{})
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	start := time.Now()
	if !closedByServer(c, 15*time.Second) {
		t.Fatal("a connection that sent nothing was kept 15 s")
	}
	t.Logf("cut after %v", time.Since(start).Round(100*time.Millisecond))
}

// The kubelet probes the health port from the node's own address, which
// every host-network process of the node shares: a process there that
// holds connections and opens new ones as fast as it can never fails the
// probe. Only the total cap applies, and the probe, answered at once,
// takes an idle connection's place.
func TestHealthPortProbeSurvivesItsOwnAddressFlooding(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	lim := httpserve.DefaultLimits(false)
	lim.MaxConns = 16
	serve := httpserve.ServeListener(ctx, "health-addr", ln, httpserve.HealthMux(httpserve.NewReadiness("")), nil, lim)
	done := make(chan error, 1)
	go func() { done <- serve() }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("health server: %v", err)
		}
	})
	addr := ln.Addr().String()
	// The neighbour, from 127.0.0.1 like the probe: twice the cap of held
	// connections, and a burst of new ones.
	var held []net.Conn
	t.Cleanup(func() {
		for _, c := range held {
			c.Close()
		}
	})
	for range 2 * lim.MaxConns {
		d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP("127.0.0.1")}, Timeout: 5 * time.Second}
		if c, err := d.Dial("tcp", addr); err == nil {
			held = append(held, c)
		}
	}
	probe := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DisableKeepAlives: true,
		DialContext: (&net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP("127.0.0.1")}}).DialContext}}
	for i := range 20 {
		resp, err := probe.Get("http://" + addr + "/healthz")
		if err != nil {
			t.Fatalf("probe %d from the flooded address: %v", i, err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("probe %d: %d", i, resp.StatusCode)
		}
	}
}
