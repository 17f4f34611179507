package httpserve_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/certready/certready/internal/httpserve"
)

func TestServeListenAddresses(t *testing.T) {
	for _, tc := range []struct {
		addr    string
		wantErr string // empty: listens
	}{
		{"127.0.0.1:0", ""},
		{"[127.0.0.1]:0", ""}, // what the manifests give: [$(HOST_IP)]:port
		{"[::1]:0", ""},
		{"::1:0", "must be in brackets, e.g. [::1]:0"},
		{"fd00::11:9721", "must be in brackets, e.g. [fd00::11]:9721"},
		{"127.0.0.1", "want host:port"},
	} {
		t.Run(tc.addr, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			serve, err := httpserve.Serve(ctx, "metrics-addr", tc.addr, http.NotFoundHandler(), nil, httpserve.Limits{})
			if tc.wantErr == "" {
				if err != nil {
					t.Fatalf("Serve(%q): %v", tc.addr, err)
				}
				cancel()
				if err := serve(); err != nil {
					t.Fatal(err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) || !strings.Contains(err.Error(), "--metrics-addr="+tc.addr) {
				t.Fatalf("Serve(%q) error %v, want one naming the flag and %q", tc.addr, err, tc.wantErr)
			}
		})
	}
}

func TestProfilesOnlyWhenAsked(t *testing.T) {
	for _, profiling := range []bool{false, true} {
		srv := httptest.NewServer(httpserve.MetricsMux(prometheus.NewRegistry(), profiling))
		resp, err := srv.Client().Get(srv.URL + "/debug/pprof/heap?gc=1")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if want := map[bool]int{false: http.StatusNotFound, true: http.StatusOK}[profiling]; resp.StatusCode != want {
			t.Errorf("profiling=%v: /debug/pprof/heap answered %d, want %d", profiling, resp.StatusCode, want)
		}
		if resp, err := srv.Client().Get(srv.URL + "/metrics"); err != nil || resp.StatusCode != http.StatusOK {
			t.Errorf("profiling=%v: /metrics: %v %v", profiling, resp, err)
		} else {
			resp.Body.Close()
		}
		srv.Close()
	}
}
