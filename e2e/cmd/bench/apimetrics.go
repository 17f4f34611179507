package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"sort"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	auditv1 "k8s.io/apiserver/pkg/apis/audit/v1"

	"github.com/certready/certready/e2e/localcluster"
)

// apiMetrics reads the API server's own /metrics.
func (b *bench) apiMetrics(ctx context.Context) (map[string]*dto.MetricFamily, error) {
	raw, err := b.c.Client.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		return nil, fmt.Errorf("reading the API server's metrics: %w", err)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(bytes.NewReader(raw))
	if err != nil {
		return nil, fmt.Errorf("parsing the API server's metrics: %w", err)
	}
	return families, nil
}

func labelsOf(m *dto.Metric) map[string]string {
	l := map[string]string{}
	for _, p := range m.GetLabel() {
		l[p.GetName()] = p.GetValue()
	}
	return l
}

// apiCounts are the API server's own counts: requests on CSRs by "VERB
// subresource" (apiserver_request_total; every client's: the storm's
// creations, the approver's writes, the signer's), and the time the
// approver's requests waited in API Priority and Fairness queues (its
// FlowSchema's wait-duration histogram).
type apiCounts struct {
	csr                 map[string]float64
	apfWait, apfWaitOps float64
}

// apfWaitMillisSince is the mean time, in milliseconds, the requests since
// before waited in API Priority and Fairness (0 when there were none).
func (after apiCounts) apfWaitMillisSince(before apiCounts) float64 {
	if ops := after.apfWaitOps - before.apfWaitOps; ops > 0 {
		return (after.apfWait - before.apfWait) / ops * 1000
	}
	return 0
}

// quiesce waits until the API server has served no write on resource for
// two seconds (at most two minutes).
func (b *bench) quiesce(ctx context.Context, resource string) error {
	writes := func() (float64, error) {
		families, err := b.apiMetrics(ctx)
		if err != nil {
			return 0, err
		}
		n := 0.0
		for _, m := range families["apiserver_request_total"].GetMetric() {
			if l := labelsOf(m); l["resource"] == resource && l["verb"] != "GET" && l["verb"] != "LIST" && l["verb"] != "WATCH" {
				n += m.GetCounter().GetValue()
			}
		}
		return n, nil
	}
	last, err := writes()
	if err != nil {
		return err
	}
	quietSince := time.Now()
	return localcluster.Poll(ctx, 2*time.Minute, "no more writes on "+resource, func() (bool, error) {
		n, err := writes()
		if err != nil {
			return false, err
		}
		if n != last {
			quietSince, last = time.Now(), n
		}
		return time.Since(quietSince) >= 2*time.Second, nil
	})
}

func (b *bench) apiCounts(ctx context.Context) (apiCounts, error) {
	families, err := b.apiMetrics(ctx)
	if err != nil {
		return apiCounts{}, err
	}
	out := apiCounts{csr: map[string]float64{}}
	for _, m := range families["apiserver_request_total"].GetMetric() {
		if l := labelsOf(m); l["resource"] == "certificatesigningrequests" {
			out.csr[l["verb"]+" "+l["subresource"]] += m.GetCounter().GetValue()
		}
	}
	for _, m := range families["apiserver_flowcontrol_request_wait_duration_seconds"].GetMetric() {
		if labelsOf(m)["flow_schema"] == "certready-approver" {
			out.apfWait += m.GetHistogram().GetSampleSum()
			out.apfWaitOps += float64(m.GetHistogram().GetSampleCount())
		}
	}
	return out, nil
}

// Where the bench's agent and approver serve /metrics, inside the namespace.
const (
	agentMetrics    = "http://127.0.0.1:9721/metrics"
	approverMetrics = "http://127.0.0.1:9731/metrics"
	// With --profiling: fetching the heap profile with gc=1 runs a full
	// GC first.
	approverHeapProfile = "http://127.0.0.1:9731/debug/pprof/heap?gc=1"
)

// approverLiveHeap is the approver's live heap after a GC it is made to run
// now: what its caches and queues keep, without the garbage that heap in
// use also counts (up to GOGC percent of it, timing-dependent).
func (b *bench) approverLiveHeap(ctx context.Context) (float64, error) {
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, approverHeapProfile, nil)
	resp, err := b.c.HTTPClient().Do(req)
	if err != nil {
		return 0, err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("%s: %s (is --profiling on?)", approverHeapProfile, resp.Status)
	}
	return b.scrapeAt(ctx, approverMetrics, "go_gc_heap_live_bytes")
}

// scrape sums a counter from the agent's /metrics (inside the namespace).
func (b *bench) scrape(ctx context.Context, name string) (float64, error) {
	return b.scrapeAt(ctx, agentMetrics, name)
}

// scrapeAt sums the series of name at url (inside the namespace).
func (b *bench) scrapeAt(ctx context.Context, url, name string) (float64, error) {
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	resp, err := b.c.HTTPClient().Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	return sumSeries(resp.Body, name, nil)
}

// auditCount counts the audit events of user between from and to by verb.
func auditCount(path, user string, from, to time.Time) (map[string]int, int, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, 0, err
	}
	defer f.Close()
	by := map[string]int{}
	total := 0
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<24)
	for sc.Scan() {
		var ev auditv1.Event
		if json.Unmarshal(sc.Bytes(), &ev) != nil || ev.User.Username != user {
			continue
		}
		// One event per request: the stage that ends it.
		if ev.Stage != auditv1.StageResponseComplete && ev.Stage != auditv1.StageResponseStarted {
			continue
		}
		if ev.Stage == auditv1.StageResponseStarted && ev.Verb != "watch" {
			continue
		}
		if received := ev.RequestReceivedTimestamp.Time; received.Before(from) || received.After(to) {
			continue
		}
		by[ev.Verb]++
		total++
	}
	return by, total, sc.Err()
}

// histogram is a Prometheus histogram's cumulative bucket counts by upper
// bound, read from a /metrics page.
type histogram map[float64]float64

// approverHistogram reads histogram name from the approver's /metrics.
func (b *bench) approverHistogram(ctx context.Context, name string) (histogram, error) {
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, approverMetrics, nil)
	resp, err := b.c.HTTPClient().Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	return parseHistogram(resp.Body, name)
}

// parseHistogram reads histogram name from a /metrics page.
func parseHistogram(r io.Reader, name string) (histogram, error) {
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(r)
	if err != nil {
		return nil, fmt.Errorf("parsing the approver's metrics: %w", err)
	}
	h := histogram{}
	if mf := families[name]; mf != nil {
		for _, m := range mf.GetMetric() {
			// The text format lists the +Inf bucket; a histogram without
			// one has its sample count there.
			inf := false
			for _, bk := range m.GetHistogram().GetBucket() {
				h[bk.GetUpperBound()] += float64(bk.GetCumulativeCount())
				inf = inf || math.IsInf(bk.GetUpperBound(), 1)
			}
			if !inf {
				h[math.Inf(1)] += float64(m.GetHistogram().GetSampleCount())
			}
		}
	}
	return h, nil
}

// quantile of the observations between before and h, interpolated within
// the bucket as PromQL's histogram_quantile does.
func (h histogram) quantile(before histogram, q float64) time.Duration {
	bounds := make([]float64, 0, len(h))
	for le := range h {
		bounds = append(bounds, le)
	}
	sort.Float64s(bounds)
	total := h[math.Inf(1)] - before[math.Inf(1)]
	if total <= 0 {
		return 0
	}
	rank := q * total
	prevLE, prevCount := 0.0, 0.0
	for _, le := range bounds {
		count := h[le] - before[le]
		if count >= rank {
			if math.IsInf(le, 1) {
				return time.Duration(prevLE * float64(time.Second))
			}
			frac := 0.0
			if count > prevCount {
				frac = (rank - prevCount) / (count - prevCount)
			}
			return time.Duration((prevLE + (le-prevLE)*frac) * float64(time.Second))
		}
		prevLE, prevCount = le, count
	}
	return 0
}
