//go:build !nodeonly

package main

import (
	"strings"
	"testing"

	"github.com/spf13/pflag"
)

// Every flag that chooses what a process trusts refuses its environment
// variable with an error naming both, even when the command line sets the
// flag too: a ConfigMap under envFrom, or an injected variable, must not
// switch off the metrics' authentication or redirect the API client.
func TestCommandLineOnlyFlagsRefuseTheEnvironment(t *testing.T) {
	fs := newFlagSet("approver")
	(&approverFlags{}).add(fs)
	seen := map[string]bool{}
	fs.VisitAll(func(f *pflag.Flag) {
		if _, only := commandLineOnly[f.Name]; !only {
			return
		}
		seen[f.Name] = true
		env := EnvName(f.Name)
		for _, args := range [][]string{nil, {"--" + f.Name + "=" + f.DefValue}} {
			fs := newFlagSet("approver")
			(&approverFlags{}).add(fs)
			_, err := parse(fs, args, func(k string) (string, bool) { return "x", k == env })
			if err == nil || !strings.Contains(err.Error(), env) || !strings.Contains(err.Error(), "--"+f.Name) || !strings.Contains(err.Error(), "command line") {
				t.Errorf("%s with args %v: err = %v, want a refusal naming %s and --%s", env, args, err, env, f.Name)
			}
		}
	})
	// The agent's own: its command refuses them before it does anything.
	for _, name := range []string{"ca-file", "kubelet-pki-dir", "kubelet-config", "inventory", "settle", "heartbeat", "check-stalled-after", "max-clock-skew", "apiserver-proof", "pod-name", "pod-namespace"} {
		t.Run(name, func(t *testing.T) {
			t.Setenv(EnvName(name), "/tmp/elsewhere")
			if code, _ := runCommand(t, "agent", "--node-name=w1", "--kubeconfig=/nonexistent"); code != 2 {
				t.Errorf("certready agent with %s set: exit %d, want 2 (a flag error)", EnvName(name), code)
			}
		})
		seen[name] = true
	}
	for name := range commandLineOnly {
		if !seen[name] && !agentOnlyFlag(t, name) {
			t.Errorf("commandLineOnly names %q, a flag neither the approver nor the agent has", name)
		}
	}
	// What may come from the environment still does.
	fs = newFlagSet("approver")
	f := &approverFlags{}
	f.add(fs)
	if _, err := parse(fs, nil, func(k string) (string, bool) { return "12", k == "CERTREADY_WORKERS" }); err != nil || f.o.Controller.Workers != 12 {
		t.Errorf("CERTREADY_WORKERS=12: err %v, workers %d", err, f.o.Controller.Workers)
	}
}

// agentOnlyFlag says whether the agent's command line has name.
func agentOnlyFlag(t *testing.T, name string) bool {
	t.Helper()
	fs := newFlagSet("agent")
	(&agentOptions{}).AddFlags(fs)
	return fs.Lookup(name) != nil
}
