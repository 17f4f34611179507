package testmetrics_test

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/certready/certready/internal/testmetrics"
)

func TestSeriesSelectsByLabels(t *testing.T) {
	reg := prometheus.NewRegistry()
	c := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "x_total", Help: "x"}, []string{"decision", "rule"})
	g := prometheus.NewGauge(prometheus.GaugeOpts{Name: "g", Help: "g"})
	reg.MustRegister(c, g)
	c.WithLabelValues("approved", "a").Add(2)
	c.WithLabelValues("approved", "b").Add(3)
	c.WithLabelValues("refused", "a").Add(5)
	g.Set(7)
	for _, tc := range []struct {
		name  string
		want  map[string]string
		n     int
		total float64
	}{
		{"x_total", nil, 3, 10},
		{"x_total", map[string]string{"decision": "approved"}, 2, 5},
		{"x_total", map[string]string{"decision": "approved", "rule": "b"}, 1, 3},
		{"x_total", map[string]string{"decision": "denied"}, 0, 0},
		{"x_total", map[string]string{"cluster": ""}, 0, 0}, // a label the series lack matches no value, not even ""
		{"g", nil, 1, 7},
		{"absent", nil, 0, 0},
	} {
		s := testmetrics.Series(t, reg, tc.name, tc.want)
		total := 0.0
		for _, m := range s {
			total += testmetrics.Value(m)
		}
		if len(s) != tc.n || total != tc.total {
			t.Errorf("%s %v: %d series summing to %v, want %d summing to %v", tc.name, tc.want, len(s), total, tc.n, tc.total)
		}
	}
}
