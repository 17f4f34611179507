package main

import (
	"errors"
	"strings"
	"testing"
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
