package httpserve_test

import (
	"bufio"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/certready/certready/internal/httpserve"
	"github.com/certready/certready/internal/securemetrics"
)

// The benchmarks measure a server in a process of its own (this test
// binary run again with benchServerEnv set), so that what the clients
// hold is not counted: the figures the Limits' defaults are sized from.
const benchServerEnv = "CERTREADY_HTTPSERVE_BENCH_SERVER"

func TestMain(m *testing.M) {
	if os.Getenv(benchServerEnv) != "" {
		benchServer()
		return
	}
	os.Exit(m.Run())
}

// benchServer serves the metrics port's TLS, without limits, as the
// agent would: a 401 to every request (a flood of bad tokens), and /mem
// reporting the Go runtime's heap and stacks after a collection. It
// prints its address and runs until stdin closes.
func benchServer() {
	cfg, err := securemetrics.TLSConfig("", []string{"127.0.0.1"})
	if err != nil {
		panic(err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/", func(w http.ResponseWriter, _ *http.Request) {
		http.Error(w, "the API server does not accept this token", http.StatusUnauthorized)
	})
	mux.HandleFunc("/mem", func(w http.ResponseWriter, _ *http.Request) {
		debug.FreeOSMemory()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		fmt.Fprintf(w, "%d\n", ms.HeapInuse+ms.StackInuse)
	})
	ctx, cancel := context.WithCancel(context.Background())
	serve, err := httpserve.Serve(ctx, "metrics-addr", "127.0.0.1:0", mux, cfg, httpserve.Limits{})
	if err != nil {
		panic(err)
	}
	go func() { _, _ = io.Copy(io.Discard, os.Stdin); cancel() }()
	_ = serve()
}

type benchChild struct {
	cmd  *exec.Cmd
	addr string
	pid  int
}

func startBenchServer(b *testing.B) *benchChild {
	b.Helper()
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), benchServerEnv+"=1")
	stdin, err := cmd.StdinPipe()
	if err != nil {
		b.Fatal(err)
	}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		b.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { stdin.Close(); _ = cmd.Wait() })
	// klog's "Serving" line names the address.
	sc := bufio.NewScanner(stderr)
	for sc.Scan() {
		if _, rest, ok := strings.Cut(sc.Text(), `addr="`); ok {
			addr, _, _ := strings.Cut(rest, `"`)
			go func() { _, _ = io.Copy(io.Discard, stderr) }()
			return &benchChild{cmd: cmd, addr: addr, pid: cmd.Process.Pid}
		}
	}
	b.Fatalf("the server process printed no address: %v", sc.Err())
	return nil
}

// rss is the server's resident memory in bytes.
func (c *benchChild) rss(b *testing.B) float64 {
	b.Helper()
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", c.pid))
	if err != nil {
		b.Fatal(err)
	}
	for _, line := range strings.Split(string(status), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, err := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 64)
			if err != nil {
				b.Fatal(err)
			}
			return kb * 1024
		}
	}
	b.Fatal("no VmRSS")
	return 0
}

// cpu is the server's user and system CPU time so far.
func (c *benchChild) cpu(b *testing.B) time.Duration {
	b.Helper()
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", c.pid))
	if err != nil {
		b.Fatal(err)
	}
	// Fields after the command's closing parenthesis; utime and stime are
	// the 14th and 15th of the line, in clock ticks (100 a second).
	f := strings.Fields(string(stat[strings.LastIndexByte(string(stat), ')')+2:]))
	ut, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(ut+st) * 10 * time.Millisecond
}

// goMem asks the server for its heap and stacks in use.
func (c *benchChild) goMem(b *testing.B) float64 {
	b.Helper()
	conn := dialTLS(b, c.addr, "127.0.0.1")
	defer conn.Close()
	status, body := request(b, conn, "/mem")
	if status != http.StatusOK {
		b.Fatalf("/mem: %d", status)
	}
	v, err := strconv.ParseFloat(strings.TrimSpace(body), 64)
	if err != nil {
		b.Fatal(err)
	}
	return v
}

func dialTLS(tb testing.TB, addr, from string) *tls.Conn {
	tb.Helper()
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}, Timeout: 10 * time.Second}
	conn, err := tls.DialWithDialer(d, "tcp", addr, &tls.Config{InsecureSkipVerify: true}) //nolint:gosec // the bench server's self-signed certificate
	if err != nil {
		tb.Fatal(err)
	}
	return conn
}

// request sends one keep-alive GET on conn and reads its answer.
func request(tb testing.TB, conn net.Conn, path string) (int, string) {
	tb.Helper()
	if _, err := fmt.Fprintf(conn, "GET %s HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer flood\r\n\r\n", path); err != nil {
		tb.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		tb.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

// BenchmarkIdleTLSConn: what one idle keep-alive TLS connection (handshake
// done, one request answered) holds in the server, as resident memory
// and as Go heap and stacks.
func BenchmarkIdleTLSConn(b *testing.B) {
	const conns = 1000
	for i := 0; i < b.N; i++ {
		child := startBenchServer(b)
		// Warm up the code paths and pools before the baseline.
		for range 20 {
			c := dialTLS(b, child.addr, "127.0.0.2")
			request(b, c, "/")
			c.Close()
		}
		goBefore, rssBefore := child.goMem(b), child.rss(b)
		held := make([]net.Conn, 0, conns)
		for range conns {
			c := dialTLS(b, child.addr, "127.0.0.2")
			if status, _ := request(b, c, "/"); status != http.StatusUnauthorized {
				b.Fatalf("flood request: %d", status)
			}
			held = append(held, c)
		}
		goAfter, rssAfter := child.goMem(b), child.rss(b)
		b.ReportMetric((rssAfter-rssBefore)/conns/1024, "rss-KiB/conn")
		b.ReportMetric((goAfter-goBefore)/conns/1024, "go-KiB/conn")
		b.ReportMetric(96<<20/((rssAfter-rssBefore)/conns), "conns/96MiB")
		for _, c := range held {
			c.Close()
		}
	}
}

// BenchmarkTLSHandshake: the server's CPU for one connection that
// handshakes, asks once and leaves, and how many a second take a
// 100-millicore limit.
func BenchmarkTLSHandshake(b *testing.B) {
	const handshakes = 1000
	for i := 0; i < b.N; i++ {
		child := startBenchServer(b)
		before := child.cpu(b)
		for range handshakes {
			c := dialTLS(b, child.addr, "127.0.0.2")
			request(b, c, "/")
			c.Close()
		}
		per := (child.cpu(b) - before) / handshakes
		b.ReportMetric(float64(per.Microseconds()), "server-cpu-µs/handshake")
		b.ReportMetric(float64(100*time.Millisecond)/float64(per), "handshakes/s-per-100m")
	}
}
