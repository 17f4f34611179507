// Package clientmetrics exports what client-go measures about certready's
// own work through Prometheus: its workqueues (depth, adds, queue and work
// time, retries, stuck work) and its REST client's requests (latency by
// verb, results by code), under the names Kubernetes' components and
// controller-runtime use, so existing dashboards read them; and
// certready_build_info. client-go keeps one provider per process: Register
// once, before the first queue and client are made.
package clientmetrics

import (
	"context"
	"net/url"
	"runtime"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/client-go/tools/metrics"
	"k8s.io/client-go/util/workqueue"
)

var once sync.Once

// Register adds the workqueue and REST client metrics and build info to
// reg. Only the first call in a process has an effect: client-go's
// providers are global.
func Register(reg prometheus.Registerer, component, version, commit string) {
	once.Do(func() {
		build := prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "certready_build_info",
			Help: "1, labelled with the build: component, version, commit, Go version.",
		}, []string{"component", "version", "commit", "goversion"})
		build.WithLabelValues(component, version, commit, runtime.Version()).Set(1)
		q := newQueueMetrics()
		c := newClientMetrics()
		reg.MustRegister(build, q.depth, q.adds, q.latency, q.workDuration, q.unfinished, q.longest, q.retries, c.latency, c.results)
		workqueue.SetProvider(q)
		metrics.Register(metrics.RegisterOpts{RequestLatency: c, RequestResult: c})
	})
}

type queueMetrics struct {
	depth, unfinished, longest *prometheus.GaugeVec
	adds, retries              *prometheus.CounterVec
	latency, workDuration      *prometheus.HistogramVec
}

func newQueueMetrics() *queueMetrics {
	buckets := prometheus.ExponentialBuckets(1e-6, 10, 10) // 1 µs to 1000 s, as Kubernetes' components
	return &queueMetrics{
		depth: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "workqueue_depth", Help: "Current depth of the workqueue."}, []string{"name"}),
		adds:  prometheus.NewCounterVec(prometheus.CounterOpts{Name: "workqueue_adds_total", Help: "Adds handled by the workqueue."}, []string{"name"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "workqueue_queue_duration_seconds",
			Help: "How long an item stays in the workqueue before it is requested.", Buckets: buckets}, []string{"name"}),
		workDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "workqueue_work_duration_seconds",
			Help: "How long processing an item from the workqueue takes.", Buckets: buckets}, []string{"name"}),
		unfinished: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "workqueue_unfinished_work_seconds",
			Help: "Seconds of work in progress not yet observed by work_duration; large values mean stuck workers."}, []string{"name"}),
		longest: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "workqueue_longest_running_processor_seconds",
			Help: "How long the longest running worker has been working."}, []string{"name"}),
		retries: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "workqueue_retries_total", Help: "Retries handled by the workqueue."}, []string{"name"}),
	}
}

func (q *queueMetrics) NewDepthMetric(name string) workqueue.GaugeMetric {
	return q.depth.WithLabelValues(name)
}

func (q *queueMetrics) NewAddsMetric(name string) workqueue.CounterMetric {
	return q.adds.WithLabelValues(name)
}

func (q *queueMetrics) NewLatencyMetric(name string) workqueue.HistogramMetric {
	return q.latency.WithLabelValues(name)
}

func (q *queueMetrics) NewWorkDurationMetric(name string) workqueue.HistogramMetric {
	return q.workDuration.WithLabelValues(name)
}

func (q *queueMetrics) NewUnfinishedWorkSecondsMetric(name string) workqueue.SettableGaugeMetric {
	return q.unfinished.WithLabelValues(name)
}

func (q *queueMetrics) NewLongestRunningProcessorSecondsMetric(name string) workqueue.SettableGaugeMetric {
	return q.longest.WithLabelValues(name)
}

func (q *queueMetrics) NewRetriesMetric(name string) workqueue.CounterMetric {
	return q.retries.WithLabelValues(name)
}

type clientMetrics struct {
	latency *prometheus.HistogramVec
	results *prometheus.CounterVec
}

func newClientMetrics() *clientMetrics {
	return &clientMetrics{
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "rest_client_request_duration_seconds",
			Help:    "Request latency to the API server, by verb and host.",
			Buckets: []float64{.005, .025, .1, .25, .5, 1, 2, 4, 8, 15, 30, 60}}, []string{"verb", "host"}),
		results: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "rest_client_requests_total",
			Help: "Requests to the API server, by status code, method and host."}, []string{"code", "method", "host"}),
	}
}

func (c *clientMetrics) Observe(_ context.Context, verb string, u url.URL, latency time.Duration) {
	c.latency.WithLabelValues(verb, u.Host).Observe(latency.Seconds())
}

func (c *clientMetrics) Increment(_ context.Context, code, method, host string) {
	c.results.WithLabelValues(code, method, host).Inc()
}
