package main

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/certready/certready/internal/httpserve"
)

// The ports' limits come from the flags, over the measured defaults; the
// handshake rate bounds the TLS port only (the health port's refusals
// would fail the kubelet's probes), and a negative bound names its flag.
func TestServingLimitsFromFlags(t *testing.T) {
	parseServing := func(t *testing.T, args ...string) *servingFlags {
		t.Helper()
		fs := newFlagSet("agent")
		s := &servingFlags{}
		s.add(fs, ":0", ":0", "")
		if _, err := parse(fs, args, func(string) (string, bool) { return "", false }); err != nil {
			t.Fatal(err)
		}
		return s
	}
	limits, err := parseServing(t).limits(prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	tlsPort, health := limits(true), limits(false)
	if tlsPort.MaxConns != httpserve.DefaultMaxConns || tlsPort.MaxConnsPerSource != httpserve.DefaultMaxConnsPerSource ||
		tlsPort.Rate != httpserve.DefaultHandshakeRate || tlsPort.SourceRate != httpserve.DefaultSourceRate || tlsPort.Metrics == nil {
		t.Errorf("default TLS port limits %+v", tlsPort)
	}
	if health.Rate != 0 || health.MaxConnsPerSource != 0 || health.SourceRate != 0 || health.MaxConns != httpserve.DefaultMaxConns {
		t.Errorf("default health port limits %+v: want the total cap alone (the kubelet probes from the address every host-network process shares)", health)
	}
	limits, err = parseServing(t, "--max-connections=16", "--max-connections-per-source=2", "--metrics-handshake-rate=5").limits(prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	if l := limits(true); l.MaxConns != 16 || l.MaxConnsPerSource != 2 || l.Rate != 5 || l.Burst != 10 {
		t.Errorf("limits from flags %+v", l)
	}
	if l := limits(false); l.MaxConns != 16 || l.MaxConnsPerSource != 0 {
		t.Errorf("health port limits from flags %+v: want --max-connections and no per-source cap", l)
	}
	for _, flag := range []string{"max-connections", "max-connections-per-source", "metrics-handshake-rate"} {
		_, err := parseServing(t, "--"+flag+"=-1").limits(prometheus.NewRegistry())
		if err == nil || !strings.Contains(err.Error(), "--"+flag+"=-1") {
			t.Errorf("--%s=-1: %v, want an error naming the flag", flag, err)
		}
	}
}
