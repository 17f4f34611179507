package capi_test

import (
	"context"
	"crypto/tls"
	"encoding/base64"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"path"
	"runtime"
	"runtime/metrics"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/certready/certready/internal/testmetrics"
	"github.com/certready/certready/internal/testpki"
	"github.com/certready/certready/internal/testwait"
	"github.com/certready/certready/reporter/approver/capi"
)

// hostileAPIServer is a workload cluster's API server written by a tenant:
// it answers the kubelet-serving CSR list (and the streamed list, a watch
// with its initial events) with body bytes of JSON generated as it is
// sent, or not at all (hang), and everything else as an empty cluster
// would. It counts what it sent.
type hostileAPIServer struct {
	// mode: "huge-event" answers the streamed list with one endless
	// event, "huge-scalar" with an endless string at the top instead of an
	// event; "huge-list", "many" (tiny items) and "empties" (one item of
	// endless empty objects) refuse the streamed list, as API servers
	// before it did, and answer the list; "protobuf" answers the list in
	// protobuf; "hang" never answers either.
	mode string
	body int64
	sent atomic.Int64
	hits atomic.Int64 // CSR lists and watches begun
}

func (h *hostileAPIServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	watching := r.URL.Query().Get("watch") == "true" || r.URL.Query().Get("watch") == "1"
	resource := path.Base(r.URL.Path)
	w.Header().Set("Content-Type", "application/json")
	switch {
	case r.Method == http.MethodPost:
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, `{"kind":"Event","apiVersion":"v1","metadata":{"name":"e","namespace":"default"}}`)
	case resource == "certificatesigningrequests":
		h.hits.Add(1)
		if h.mode == "hang" {
			<-r.Context().Done()
			return
		}
		if h.mode == "protobuf" {
			w.Header().Set("Content-Type", "application/vnd.kubernetes.protobuf")
			w.WriteHeader(http.StatusOK)
			fmt.Fprint(w, "k8s\x00")
			return
		}
		if watching && h.mode != "huge-event" && h.mode != "huge-scalar" {
			w.WriteHeader(http.StatusBadRequest)
			fmt.Fprintf(w, `{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"BadRequest","code":400,"message":"sendInitialEvents is not supported"}`)
			return
		}
		h.stream(w, r, watching)
	case watching: // an idle watch, as an honest server keeps it
		w.WriteHeader(http.StatusOK)
		w.(http.Flusher).Flush()
		<-r.Context().Done()
	default:
		kinds := map[string]string{"services": `"ServiceList","apiVersion":"v1"`, "configmaps": `"ConfigMapList","apiVersion":"v1"`,
			"endpointslices": `"EndpointSliceList","apiVersion":"discovery.k8s.io/v1"`}
		kind, ok := kinds[resource]
		if !ok {
			http.NotFound(w, r)
			return
		}
		fmt.Fprintf(w, `{"kind":%s,"metadata":{"resourceVersion":"1"},"items":[]}`, kind)
	}
}

// stream writes h.body bytes: a list of CSRs, or one watch event that
// never ends its annotation. Nothing of the body is held beyond one item.
func (h *hostileAPIServer) stream(w http.ResponseWriter, r *http.Request, watching bool) {
	write := func(s string) bool {
		n, err := w.Write([]byte(s))
		h.sent.Add(int64(n))
		return err == nil && r.Context().Err() == nil
	}
	var item func(i int) string
	switch h.mode {
	case "many": // the smallest items: the decoding multiplies them most
		item = func(i int) string { return fmt.Sprintf(`{"metadata":{"name":"c%d"}},`, i) }
	case "empties": // one CSR whose conditions are endless empty objects
		item = func(i int) string {
			if i == 0 {
				return `{"metadata":{"name":"c"},"status":{"conditions":[{}`
			}
			return strings.Repeat(",{}", 1024)
		}
	case "huge-list": // CSRs of 8 KiB requests: what an honest list holds, only more
		req := base64.StdEncoding.EncodeToString([]byte(strings.Repeat("r", 6<<10)))
		item = func(i int) string {
			return fmt.Sprintf(`{"metadata":{"name":"csr-%d","uid":"u%d","resourceVersion":"1"},"spec":{"signerName":"kubernetes.io/kubelet-serving","username":"system:node:n%d","request":%q,"usages":["digital signature","server auth"]},"status":{}},`, i, i, i, req)
		}
	}
	head := `{"kind":"CertificateSigningRequestList","apiVersion":"certificates.k8s.io/v1","metadata":{"resourceVersion":"1"},"items":[`
	if watching {
		head = `{"type":"ADDED","object":{"kind":"CertificateSigningRequest","apiVersion":"certificates.k8s.io/v1","metadata":{"name":"a","annotations":{"a":"`
		if h.mode == "huge-scalar" {
			head = `"`
		}
		item = func(int) string { return strings.Repeat("a", 8<<10) }
	}
	w.WriteHeader(http.StatusOK)
	if !write(head) {
		return
	}
	for i := 0; h.sent.Load() < h.body; i++ {
		if !write(item(i)) {
			return
		}
	}
	switch {
	case h.mode == "huge-scalar": // never closed: only a bound ends it early
	case watching:
		write(`"}}}}` + "\n")
	default:
		write(`{"metadata":{"name":"last"}}]}`)
	}
}

// serveHostile runs h over TLS on loopback with a certificate of the
// workload clusters' CA; it returns the server URL.
func serveHostile(t *testing.T, h http.Handler) string {
	t.Helper()
	pair, err := workloadCA.Issue(testpki.Serving{CN: "kube-apiserver", IPs: []net.IP{net.ParseIP("127.0.0.1").To4()}})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(h)
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{{Certificate: [][]byte{pair.Cert.Raw}, PrivateKey: pair.Key, Leaf: pair.Cert}}}
	srv.StartTLS()
	t.Cleanup(func() {
		srv.CloseClientConnections()
		srv.Close()
	})
	return srv.URL
}

// heapPeak samples the live heap every millisecond until stopped and
// returns the largest value seen.
func heapPeak() (stop func() uint64) {
	s := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
	var peak atomic.Uint64
	done, finished := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(finished)
		tick := time.NewTicker(time.Millisecond)
		defer tick.Stop()
		for {
			metrics.Read(s)
			if v := s[0].Value.Uint64(); v > peak.Load() {
				peak.Store(v)
			}
			select {
			case <-done:
				return
			case <-tick.C:
			}
		}
	}()
	var once sync.Once
	return func() uint64 {
		once.Do(func() { close(done); <-finished })
		return peak.Load()
	}
}

const mib = 1 << 20

// A tenant's API server that answers the CSR list with 300 MB (large
// items, or a flood of tiny ones the decoding would multiply), or never
// answers, costs the approver a bounded heap, and another tenant's
// pending CSR is approved meanwhile. The hostile cluster is reported
// (certready_approver_capi_cluster_failures_total) and never counted as
// synced.
func TestAHostileWorkloadClusterCannotStarveTheOthers(t *testing.T) {
	for _, tc := range []struct {
		mode string
		// maxHeap bounds the approver's live heap (garbage not yet
		// collected included) while the hostile server streams: about
		// three times the response bound (32 MiB) as client-go's
		// io.ReadAll grows its buffer towards it, plus the rest.
		maxHeap uint64
		limits  capi.Limits // the defaults, but for a timeout the test can wait for
	}{
		{"huge-list", 128 * mib, capi.Limits{}},
		{"huge-event", 64 * mib, capi.Limits{}},
		{"many", 40 * mib, capi.Limits{}},
		{"hang", 40 * mib, capi.Limits{Timeout: 2 * time.Second}},
	} {
		t.Run(tc.mode, func(t *testing.T) {
			hostile := &hostileAPIServer{mode: tc.mode, body: 300e6}
			hostileHost := serveHostile(t, hostile)
			e := newManagerEnv(t)
			honest, honestHost := e.workload("10.0.0.1")
			e.limits = tc.limits
			e.real = map[string]bool{hostileHost: true}
			objs := []k8sruntime.Object{
				clusterObj("tenant-a", "prod", nil),
				machine("tenant-a", "md-0-a", "prod", "prod-md-0-a", [2]string{"InternalIP", "10.0.0.11"}),
				clusterObj("tenant-evil", "evil", nil),
			}
			runtime.GC()
			base := heapPeak()()
			peak := heapPeak()
			start := time.Now()
			e.start(labels.Everything(), objs,
				kubeconfigSecret(t, "tenant-a", "prod", honestHost),
				kubeconfigSecret(t, "tenant-evil", "evil", hostileHost))
			e.poll("the hostile server asked for its CSRs", func() bool { return hostile.hits.Load() > 0 })
			if tc.mode != "hang" {
				e.poll("the hostile server streaming", func() bool { return hostile.sent.Load() > 1*mib })
			}
			asked := time.Now()
			good := csr(t, "prod-md-0-a", []string{"10.0.0.11"})
			create(t, honest, good)
			e.poll("approved the honest cluster's CSR while the hostile one answers", func() bool { return approvedIn(honest, good.Name) })
			approvedAfter := time.Since(asked)
			// Reading 32 MiB through the scanner takes a while under -race.
			if !testwait.Until(time.Minute, func() bool {
				s := testmetrics.Series(t, e.reg, "certready_approver_capi_cluster_failures_total", map[string]string{"cluster": "tenant-evil/evil"})
				return len(s) == 1 && testmetrics.Value(s[0]) >= 1
			}) {
				t.Fatal("never reported the hostile cluster as failed")
			}
			max := peak()
			t.Logf("%s: live heap peak %d MiB (at start %d MiB); hostile server sent %d MiB of a %d MB body in %d requests over %v; honest CSR approved %v after it was created",
				tc.mode, max/mib, base/mib, hostile.sent.Load()/mib, hostile.body/1e6, hostile.hits.Load(), time.Since(start).Round(time.Millisecond), approvedAfter.Round(time.Millisecond))
			if max > base+tc.maxHeap {
				t.Errorf("live heap peaked at %d MiB, %d MiB over the %d MiB at start; want at most %d MiB over", max/mib, (max-base)/mib, base/mib, tc.maxHeap/mib)
			}
			if s := testmetrics.Series(t, e.reg, "certready_approver_capi_cluster_synced", map[string]string{"cluster": "tenant-evil/evil"}); len(s) == 1 && testmetrics.Value(s[0]) != 0 {
				t.Errorf("the hostile cluster counted as synced")
			}
			if s := testmetrics.Series(t, e.reg, "certready_approver_capi_cluster_synced", map[string]string{"cluster": "tenant-a/prod"}); len(s) != 1 || testmetrics.Value(s[0]) != 1 {
				t.Errorf("the honest cluster not counted as synced: %v", s)
			}
		})
	}
}

// The transport's bounds, one at a time, against a real client: each
// error names the cluster, the request and the bound; an honest list and
// an idle watch go through.
func TestBoundedClientNamesTheBound(t *testing.T) {
	for _, tc := range []struct {
		mode    string
		watch   bool
		limits  capi.Limits
		wantErr string
	}{
		{"huge-list", false, capi.Limits{MaxResponseBytes: 1 * mib}, "workload cluster tenant/x: GET /apis/certificates.k8s.io/v1/certificatesigningrequests: past the bound on a workload cluster's answers: the response is larger than 1 MiB"},
		{"many", false, capi.Limits{MaxObjects: 100}, "the list holds more than 100 objects"},
		{"huge-event", true, capi.Limits{MaxEventBytes: 1 * mib}, "watch /apis/certificates.k8s.io/v1/certificatesigningrequests: past the bound on a workload cluster's answers: a watch event is larger than 1 MiB"},
		{"huge-scalar", true, capi.Limits{MaxEventBytes: 1 * mib}, "a watch event is larger than 1 MiB"},
		{"empties", false, capi.Limits{MaxObjects: 100}, "the response holds more than 6400 JSON objects and arrays"},
		{"protobuf", false, capi.Limits{}, `answered with Content-Type "application/vnd.kubernetes.protobuf", not the application/json asked for`},
		{"hang", false, capi.Limits{Timeout: 200 * time.Millisecond}, "no answer within 200ms"},
		{"hang", true, capi.Limits{Timeout: 200 * time.Millisecond}, "no answer within 200ms"},
	} {
		t.Run(fmt.Sprintf("%s watch=%v", tc.mode, tc.watch), func(t *testing.T) {
			hostile := &hostileAPIServer{mode: tc.mode, body: 300e6}
			cs := boundedClient(t, serveHostile(t, hostile), tc.limits)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			var err error
			if tc.watch {
				var w watch.Interface
				w, err = cs.CertificatesV1().CertificateSigningRequests().Watch(ctx, metav1.ListOptions{})
				if err == nil {
					for ev := range w.ResultChan() {
						if ev.Type == watch.Error {
							err = apierrors.FromObject(ev.Object)
							break
						}
					}
					w.Stop()
				}
			} else {
				_, err = cs.CertificatesV1().CertificateSigningRequests().List(ctx, metav1.ListOptions{})
			}
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("err %v, want one naming %q", err, tc.wantErr)
			}
		})
	}
}

func boundedClient(t *testing.T, host string, l capi.Limits) kubernetes.Interface {
	t.Helper()
	cfg := &rest.Config{Host: host, TLSClientConfig: rest.TLSClientConfig{CAData: workloadCA.PEM()}}
	capi.Bound(cfg, "tenant/x", l)
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return cs
}
