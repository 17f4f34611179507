//go:build !nodeonly

package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/certready/certready/internal/redact"
	"github.com/certready/certready/reporter/fleet"
	"github.com/certready/certready/reporter/fleet/maintenance"
)

// writeRun writes a run made by the maintenance package, as evidence open,
// step and close would have, and returns its path.
func writeRun(t *testing.T, closed, passed bool) string {
	t.Helper()
	at := time.Date(2026, 12, 6, 8, 0, 0, 0, time.UTC)
	nb := at.AddDate(0, -6, 0)
	run, err := maintenance.Open("cluster-a", "alice", "n1", at, "", "ticket OPS-1", []fleet.NodeStatus{{Node: "w1", Ready: true, Fingerprint: "aa", NotBefore: &nb}}, "")
	if err != nil {
		t.Fatal(err)
	}
	if err := run.Step("restart-kubelets", "alice", "", at.Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	if closed {
		if err := run.Close("alice", "", at.Add(2*time.Minute), maintenance.Verification{Passed: passed, Coverage: maintenance.Coverage{Judged: 1}}); err != nil {
			t.Fatal(err)
		}
	}
	data, err := maintenance.Encode(run)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "run.json")
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// certready evidence verify checks a run offline, and verify --baseline
// refuses a broken run with the refusal's own exit status, not as a usage
// error.
func TestEvidenceVerifyCommand(t *testing.T) {
	passed, failed, open := writeRun(t, true, true), writeRun(t, true, false), writeRun(t, false, false)
	data, _ := os.ReadFile(passed)
	edited := filepath.Join(t.TempDir(), "edited.json")
	if err := os.WriteFile(edited, []byte(strings.Replace(string(data), `"restart-kubelets"`, `"restart-kubelet"`, 1)), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		args []string
		code int
		want []string
	}{
		{"a closed run that passed", []string{"evidence", "verify", passed}, 0, []string{"whole (3 entries", "restart-kubelets", "PASSED: 1 judged"}},
		{"a closed run that failed", []string{"evidence", "verify", failed}, 1, []string{"FAILED"}},
		{"an open run", []string{"evidence", "verify", open}, 1, []string{"The run is open"}},
		{"an edited step", []string{"evidence", "verify", edited}, 6, []string{"RunBroken", "entry 2 (step \"restart-kubelet\") does not match its hash"}},
		{"an edited run as a baseline", []string{"verify", "--baseline", edited, "--kubeconfig=/nonexistent"}, 6, []string{"RunBroken"}},
		{"-o json", []string{"evidence", "verify", "-o", "json", passed}, 0, []string{`"schema": "certready.io/maintenance-run/v1"`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, out := runRoot(t, tc.args...)
			if code != tc.code {
				t.Errorf("exit %d, want %d\n%s", code, tc.code, out)
			}
			for _, w := range tc.want {
				if !strings.Contains(out, w) {
					t.Errorf("output lacks %q:\n%s", w, out)
				}
			}
			if tc.code == 6 && strings.Contains(out, "--help") {
				t.Errorf("a broken run is no usage error:\n%s", out)
			}
		})
	}
}

// A redacted run is judged only under the key it was opened with: any
// other would match no node and fail every one.
func TestARedactedRunWantsItsOwnKey(t *testing.T) {
	dir := t.TempDir()
	keyFile, otherFile := filepath.Join(dir, "key"), filepath.Join(dir, "other")
	key, err := redact.LoadKey(keyFile, true)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := redact.LoadKey(otherFile, true); err != nil {
		t.Fatal(err)
	}
	at := time.Date(2026, 12, 6, 8, 0, 0, 0, time.UTC)
	red := redact.New(key)
	run, err := maintenance.Open("cluster-a", "alice", "n1", at, "", "", []fleet.NodeStatus{{Node: red.Node("w1")}},
		runKeyCheck(red, maintenance.NewID("cluster-a", "alice", at, "n1")))
	if err != nil {
		t.Fatal(err)
	}
	data, _ := maintenance.Encode(run)
	path := filepath.Join(dir, "run.json")
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"verify", "--baseline", path}, "is redacted"},
		{[]string{"verify", "--baseline", path, "--redact", "--redact-key-file", otherFile}, "is not the key run"},
		{[]string{"evidence", "close", "--run", path, "--redact", "--redact-key-file", otherFile}, "is not the key run"},
		{[]string{"evidence", "step", "--run", path, "drain"}, "is redacted"},
	} {
		code, out := runRoot(t, append(tc.args, "--kubeconfig=/nonexistent")...)
		if code != 2 || !strings.Contains(out, tc.want) {
			t.Errorf("%v: exit %d, want 2 with %q:\n%s", tc.args, code, tc.want, out)
		}
	}
	// With its key, the run is read and the command goes on to the
	// cluster (here none).
	if code, out := runRoot(t, "verify", "--baseline", path, "--redact", "--redact-key-file", keyFile, "--kubeconfig=/nonexistent"); code != 2 || strings.Contains(out, "key") {
		t.Errorf("the run's own key: exit %d\n%s", code, out)
	}
}

// The evidence commands refuse what they cannot record before reading the
// cluster: exit 2, naming the flag.
func TestEvidenceCommandsRefuseBadInput(t *testing.T) {
	dir := t.TempDir()
	run := writeRun(t, false, false)
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"open without --run", []string{"evidence", "open"}, "--run is required"},
		{"open --redact without a key file", []string{"evidence", "open", "--run", filepath.Join(dir, "r.json"), "--redact"}, "needs --redact-key-file"},
		{"a key file without --redact", []string{"status", "--redact-key-file", filepath.Join(dir, "k")}, "without --redact"},
		{"step without a name", []string{"evidence", "step", "--run", run}, "accepts 1 arg"},
		{"step with a control character", []string{"evidence", "step", "--run", run, "a\x1b[2Jb"}, "printable characters"},
		{"close --gap without a reason", []string{"evidence", "close", "--run", run, "--gap", "w1"}, "--gap=w1: want NODE=REASON"},
		{"close -l", []string{"evidence", "close", "--run", run, "-l", "x=y"}, "judges the nodes the baseline was taken with"},
		{"close -o wide", []string{"evidence", "close", "--run", run, "-o", "wide"}, "--output=wide"},
		{"verify --max-baseline-age<0", []string{"verify", "--baseline", run, "--max-baseline-age=-1h"}, "cannot be negative"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, out := runRoot(t, tc.args...)
			if code != 2 || !strings.Contains(out, tc.want) {
				t.Errorf("exit %d, want 2 with %q:\n%s", code, tc.want, out)
			}
		})
	}
}
