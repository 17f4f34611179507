package main

import (
	"errors"
	"math"
	"strings"
	"testing"
	"time"
)

func TestSumSeries(t *testing.T) {
	const exposition = `# HELP apiserver_flowcontrol_dispatched_requests_total Number of requests executed
# TYPE apiserver_flowcontrol_dispatched_requests_total counter
apiserver_flowcontrol_dispatched_requests_total{flow_schema="certready-bench-agent",priority_level="workload-low"} 7
apiserver_flowcontrol_dispatched_requests_total{flow_schema="exempt",priority_level="exempt"} 1000
apiserver_flowcontrol_dispatched_requests_total_other{flow_schema="certready-bench-agent"} 50
certready_watch_events_total{kind="node"} 3
certready_watch_events_total{kind="csr"} 2.5
certready_watch_events_total 1
`
	for _, tc := range []struct {
		metric string
		label  map[string]string
		want   float64
	}{
		{"apiserver_flowcontrol_dispatched_requests_total", map[string]string{"flow_schema": "certready-bench-agent"}, 7},
		{"apiserver_flowcontrol_dispatched_requests_total", map[string]string{"flow_schema": "nobody"}, 0},
		{"apiserver_flowcontrol_dispatched_requests_total", map[string]string{"flow_schema": "certready-bench-agent", "priority_level": "exempt"}, 0},
		{"certready_watch_events_total", nil, 6.5},
		{"certready_watch", nil, 0}, // a prefix of a name is not the name
	} {
		got, err := sumSeries(strings.NewReader(exposition), tc.metric, tc.label)
		if err != nil {
			t.Fatal(err)
		}
		if got != tc.want {
			t.Errorf("sumSeries(%s, %v) = %v, want %v", tc.metric, tc.label, got, tc.want)
		}
	}
}

func TestErrorSetKeepsDistinctMessagesAndCount(t *testing.T) {
	var e errorSet
	if e.err() != nil {
		t.Fatal("an empty set reports an error")
	}
	for i := 0; i < 10; i++ {
		e.add(errors.New("connection refused"))
	}
	e.add(errors.New("too many open files"))
	err := e.err()
	if err == nil || e.count != 11 || len(e.list) != 2 {
		t.Fatalf("err=%v count=%d list=%q", err, e.count, e.list)
	}
	if !strings.Contains(err.Error(), "11 failed") || !strings.Contains(err.Error(), "too many open files") {
		t.Errorf("error %q lacks the count or a message", err)
	}
}

func TestHistogramQuantile(t *testing.T) {
	before := histogram{0.1: 10, 1: 10, math.Inf(1): 10}
	// 100 more observations: 50 at or below 0.1 s, 40 in (0.1, 1], 10 above.
	after := histogram{0.1: 60, 1: 100, math.Inf(1): 110}
	for _, tc := range []struct {
		q    float64
		want time.Duration
	}{
		{.5, 100 * time.Millisecond},
		{.25, 50 * time.Millisecond},
		{.7, 100*time.Millisecond + 450*time.Millisecond}, // 20 of the 40 in (0.1, 1]
		{.99, time.Second},                                // in the +Inf bucket: its lower bound
	} {
		if got := after.quantile(before, tc.q); got != tc.want {
			t.Errorf("q%.2f = %s, want %s", tc.q, got, tc.want)
		}
	}
	if got := before.quantile(before, .5); got != 0 {
		t.Errorf("no observations: %s, want 0", got)
	}
}

func TestApproverHistogramParsesTheTextFormat(t *testing.T) {
	const page = `# TYPE certready_approver_decision_seconds histogram
certready_approver_decision_seconds_bucket{le="0.1"} 50
certready_approver_decision_seconds_bucket{le="1"} 90
certready_approver_decision_seconds_bucket{le="+Inf"} 100
certready_approver_decision_seconds_sum 30
certready_approver_decision_seconds_count 100
`
	h, err := parseHistogram(strings.NewReader(page), "certready_approver_decision_seconds")
	if err != nil {
		t.Fatal(err)
	}
	if h[math.Inf(1)] != 100 || h[0.1] != 50 {
		t.Fatalf("parsed %v: the +Inf bucket must count each observation once", h)
	}
	if got := h.quantile(histogram{}, .5); got != 100*time.Millisecond {
		t.Errorf("p50 %s, want 100ms", got)
	}
}
