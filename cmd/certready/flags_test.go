package main

import (
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/certready/certready/reporter/agent"
)

func TestParseFillsFlagsFromTheEnvironment(t *testing.T) {
	env := map[string]string{"CERTREADY_NODE_NAME": "from-env", "CERTREADY_RESYNC": "30s", "CERTREADY_WORKERS": "2"}
	getenv := func(k string) (string, bool) { v, ok := env[k]; return v, ok }
	fs := newFlagSet("agent")
	node := fs.String("node-name", "", "")
	resync := fs.Duration("resync", time.Minute, "")
	workers := fs.Int("workers", 0, "")
	if _, err := parse(fs, []string{"--workers=1234"}, getenv); err != nil {
		t.Fatal(err)
	}
	if *node != "from-env" || *resync != 30*time.Second {
		t.Errorf("node=%q resync=%s, want the environment's values", *node, *resync)
	}
	if *workers != 1234 {
		t.Errorf("workers=%d: the command line must win over the environment", *workers)
	}
}

func TestParseErrorsNameTheVariable(t *testing.T) {
	getenv := func(k string) (string, bool) { return "soon", k == "CERTREADY_RESYNC" }
	fs := newFlagSet("agent")
	fs.Duration("resync", time.Minute, "")
	_, err := parse(fs, nil, getenv)
	if err == nil || !strings.Contains(err.Error(), "CERTREADY_RESYNC") || !strings.Contains(err.Error(), "--resync") {
		t.Errorf("err = %v, want one naming CERTREADY_RESYNC and --resync", err)
	}
}

func TestParseRefusesStrayArguments(t *testing.T) {
	fs := newFlagSet("agent")
	if _, err := parse(fs, []string{"w1"}, func(string) (string, bool) { return "", false }); err == nil || !strings.Contains(err.Error(), `"w1"`) {
		t.Errorf("err = %v", err)
	}
}

func TestEnvName(t *testing.T) {
	if got := EnvName("kubelet-pki-dir"); got != "CERTREADY_KUBELET_PKI_DIR" {
		t.Errorf("EnvName = %s", got)
	}
}

func TestGoCollectorExportsTheLiveHeap(t *testing.T) {
	reg := prometheus.NewRegistry()
	reg.MustRegister(goCollector())
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{}
	for _, mf := range mfs {
		names[mf.GetName()] = true
	}
	for _, want := range []string{"go_gc_heap_live_bytes", "go_memstats_heap_inuse_bytes", "go_goroutines"} {
		if !names[want] {
			t.Errorf("%s not exported", want)
		}
	}
}

// The expiry windows come from a ConfigMap that whoever writes ConfigMaps
// in the namespace sets: a value that does not parse, or that contradicts
// another, is set aside with the default kept and the variable named, so
// that such a writer cannot stop every agent that restarts. On the command
// line the same mistakes stop the process.
func TestSettingsFromTheEnvironmentNeverStopTheAgent(t *testing.T) {
	for _, tc := range []struct {
		name          string
		args          []string
		env           map[string]string
		warning, crit time.Duration
		failed        bool
		setAside      []string
	}{
		{"a value that does not parse", nil, map[string]string{"CERTREADY_EXPIRY_WARNING": "a fortnight", "CERTREADY_EXPIRY_CRITICAL": "12h"}, 7 * 24 * time.Hour, 12 * time.Hour, false, []string{"CERTREADY_EXPIRY_WARNING"}},
		{"critical longer than warning", nil, map[string]string{"CERTREADY_EXPIRY_WARNING": "1h", "CERTREADY_EXPIRY_CRITICAL": "2h"}, 7 * 24 * time.Hour, 24 * time.Hour, false, []string{"CERTREADY_EXPIRY_WARNING", "CERTREADY_EXPIRY_CRITICAL"}},
		{"a negative window", nil, map[string]string{"CERTREADY_CA_EXPIRY_WARNING": "-1h"}, 7 * 24 * time.Hour, 24 * time.Hour, false, []string{"CERTREADY_CA_EXPIRY_WARNING"}},
		{"good values", nil, map[string]string{"CERTREADY_EXPIRY_WARNING": "336h", "CERTREADY_EXPIRY_CRITICAL": "48h"}, 336 * time.Hour, 48 * time.Hour, false, nil},
		{"the command line's own contradiction", []string{"--expiry-warning=1h", "--expiry-critical=2h"}, nil, time.Hour, 2 * time.Hour, true, nil},
		{"the command line's value does not parse", []string{"--expiry-warning=soon"}, nil, 0, 0, true, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fs := newFlagSet("agent")
			var cfg agent.Config
			fs.DurationVar(&cfg.ExpiryWarning, "expiry-warning", agent.DefaultExpiryWarning, "")
			fs.DurationVar(&cfg.ExpiryCritical, "expiry-critical", agent.DefaultExpiryCritical, "")
			fs.DurationVar(&cfg.CAExpiryWarning, "ca-expiry-warning", agent.DefaultCAExpiryWarning, "")
			set, err := parse(fs, tc.args, func(k string) (string, bool) { v, ok := tc.env[k]; return v, ok })
			if err == nil {
				err = set.settingsFallback(func() error { return cfg.Defaults().ValidateExpiry() })
			}
			if failed := err != nil; failed != tc.failed {
				t.Fatalf("err = %v, want failure %v", err, tc.failed)
			}
			if tc.failed {
				return
			}
			if cfg.ExpiryWarning != tc.warning || cfg.ExpiryCritical != tc.crit {
				t.Errorf("windows %s/%s, want %s/%s", cfg.ExpiryWarning, cfg.ExpiryCritical, tc.warning, tc.crit)
			}
			got := strings.Join(set.setAside, "\n")
			for _, v := range tc.setAside {
				if !strings.Contains(got, v) {
					t.Errorf("set aside %q, want %s named", got, v)
				}
			}
			if len(tc.setAside) == 0 && got != "" {
				t.Errorf("set aside %q, want nothing", got)
			}
		})
	}
}
