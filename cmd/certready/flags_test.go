package main

import (
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

func TestParseFillsFlagsFromTheEnvironment(t *testing.T) {
	env := map[string]string{"CERTREADY_NODE_NAME": "from-env", "CERTREADY_RESYNC": "30s", "CERTREADY_WORKERS": "2"}
	getenv := func(k string) (string, bool) { v, ok := env[k]; return v, ok }
	fs := newFlagSet("agent", "")
	node := fs.String("node-name", "", "")
	resync := fs.Duration("resync", time.Minute, "")
	workers := fs.Int("workers", 0, "")
	if err := parse(fs, []string{"--workers=1234"}, getenv); err != nil {
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
	fs := newFlagSet("agent", "")
	fs.Duration("resync", time.Minute, "")
	err := parse(fs, nil, getenv)
	if err == nil || !strings.Contains(err.Error(), "CERTREADY_RESYNC") || !strings.Contains(err.Error(), "--resync") {
		t.Errorf("err = %v, want one naming CERTREADY_RESYNC and --resync", err)
	}
}

func TestParseRefusesStrayArguments(t *testing.T) {
	fs := newFlagSet("agent", "")
	if err := parse(fs, []string{"w1"}, func(string) (string, bool) { return "", false }); err == nil || !strings.Contains(err.Error(), `"w1"`) {
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
