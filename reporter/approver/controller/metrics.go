package controller

import (
	"time"

	"github.com/certready/certready/internal/csrstate"

	"github.com/prometheus/client_golang/prometheus"
)

type metrics struct {
	decisions *prometheus.CounterVec
	latency   prometheus.Histogram
	// decisionTime: first event -> approval written (Controller.firstSeen).
	decisionTime prometheus.Histogram
	leader       prometheus.Gauge
	floodGuard   prometheus.Gauge
	// elsewhere: approvals another actor wrote, by whether certready's
	// policy had refused the request.
	elsewhere *prometheus.CounterVec
}

func newMetrics(reg prometheus.Registerer, c *Controller) *metrics {
	m := &metrics{
		decisions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "certready_approver_decisions_total",
			Help: "Decisions on kubelet-serving CSRs by decision (approved, refused, denied, deferred) and reason (the policy rule).",
		}, []string{"decision", "reason"}),
		latency: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "certready_approver_approval_latency_seconds",
			Help:    "Time from a kubelet-serving CSR's creation to its approval by this approver.",
			Buckets: []float64{.05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 300},
		}),
		decisionTime: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "certready_approver_decision_seconds",
			Help:    "Time from this approver's first event of a kubelet-serving CSR (its informer) to the approval written: the approver's own share of the approval latency, without the creation request and the watch delivery.",
			Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10},
		}),
		leader: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "certready_approver_is_leader",
			Help: "1 while this replica holds the leader Lease and acts, else 0.",
		}),
		floodGuard: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "certready_approver_flood_guard_active",
			Help: "1 while the pending kubelet-serving backlog is at or above --max-pending and nothing is approved.",
		}),
	}
	m.elsewhere = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "certready_approver_approved_elsewhere_total",
		Help: "Kubelet-serving CSRs approved by another actor than certready (kubectl certificate approve, another approver), by policy: refused (certready had left the request pending with a rule), deferred (it was waiting: flood guard, a newer request, a node not in the inventory yet) or unknown.",
	}, []string{"policy"})
	m.elsewhere.WithLabelValues("refused")
	m.elsewhere.WithLabelValues("deferred")
	m.elsewhere.WithLabelValues("unknown")
	reg.MustRegister(m.decisions, m.latency, m.decisionTime, m.leader, m.floodGuard, m.elsewhere, cacheCollector{c})
	return m
}

// cacheCollector is what the informer cache says of the kubelet-serving
// CSRs, counted in one pass per scrape: certready_approver_csrs{stage},
// the backlog (pending, or approved and not yet signed) and its oldest age.
type cacheCollector struct{ c *Controller }

var (
	stageDesc = prometheus.NewDesc("certready_approver_csrs",
		"Kubelet-serving CSRs in the informer cache by stage: pending, approved-not-issued, issued, denied, failed (the controller manager deletes them an hour after they are decided).",
		[]string{"stage"}, nil)
	pendingDesc = prometheus.NewDesc("certready_approver_pending_csrs",
		"Kubelet-serving CSRs that wait for a certificate: not decided, or approved and not yet signed (from the informer cache).", nil, nil)
	oldestDesc = prometheus.NewDesc("certready_approver_oldest_pending_csr_age_seconds",
		"Age of the oldest kubelet-serving CSR that waits for a certificate (not decided, or approved and not signed; 0 when none).", nil, nil)
)

func (s cacheCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- stageDesc
	ch <- pendingDesc
	ch <- oldestDesc
}

func (s cacheCollector) Collect(ch chan<- prometheus.Metric) {
	counts, oldest := s.c.survey(time.Now())
	for _, state := range csrstate.States {
		ch <- prometheus.MustNewConstMetric(stageDesc, prometheus.GaugeValue, float64(counts[state]), state.Stage())
	}
	ch <- prometheus.MustNewConstMetric(pendingDesc, prometheus.GaugeValue, float64(counts[csrstate.Pending]+counts[csrstate.Approved]))
	ch <- prometheus.MustNewConstMetric(oldestDesc, prometheus.GaugeValue, oldest.Seconds())
}
