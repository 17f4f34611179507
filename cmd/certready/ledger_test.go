//go:build !nodeonly

package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/certready/certready/internal/ledger"
)

// runRoot runs the command tree on args as main does, and returns the exit
// status and what the command printed (its output and its error).
func runRoot(t *testing.T, args ...string) (int, string) {
	t.Helper()
	root := newRootCommand(context.Background())
	var out bytes.Buffer
	root.SetOut(&out)
	root.SetErr(&out)
	root.SetArgs(args)
	cmd, err := root.ExecuteC()
	if err != nil && !isExitError(err) {
		err = usageError(err)
	}
	code := reportError(&out, cmd.CommandPath(), err)
	return code, out.String()
}

// certready ledger verify over real ledger files: a whole ledger exits 0,
// one with a line removed exits 1 naming where; a missing file is an
// error (2).
func TestLedgerVerifyCommand(t *testing.T) {
	var buf bytes.Buffer
	l, err := ledger.New(ledger.Config{Sinks: []string{ledger.SinkStdout}, Component: "approver", Actor: "approver-a", Stdout: &buf}, prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	for _, csr := range []string{"csr-1", "csr-2", "csr-3"} {
		l.Record(ledger.Record{Action: ledger.Approved, CSR: csr, Node: "w1"})
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	l.Run(ctx)
	dir := t.TempDir()
	whole, cut := filepath.Join(dir, "whole.jsonl"), filepath.Join(dir, "cut.jsonl")
	lines := strings.SplitAfter(buf.String(), "\n")
	if err := os.WriteFile(whole, buf.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(cut, []byte(lines[0]+lines[2]), 0o600); err != nil {
		t.Fatal(err)
	}
	run := func(args ...string) (int, string) {
		t.Helper()
		return runRoot(t, append([]string{"ledger", "verify"}, args...)...)
	}
	if code, out := run(whole); code != 0 || !strings.Contains(out, "Every chain is whole") || !strings.Contains(out, "approver-a") {
		t.Errorf("a whole ledger: exit %d\n%s", code, out)
	}
	if code, out := run(cut); code != 1 || !strings.Contains(out, "cut.jsonl:2: deleted") {
		t.Errorf("a line removed: exit %d\n%s", code, out)
	}
	if code, out := run("-o", "json", cut); code != 1 || !strings.Contains(out, `"kind": "deleted"`) {
		t.Errorf("-o json: exit %d\n%s", code, out)
	}
	// A file that cannot be read fails the run, not the command line.
	if code, out := run(filepath.Join(dir, "absent.jsonl")); code != 2 || !strings.Contains(out, "certready ledger verify: open ") || strings.Contains(out, "--help") {
		t.Errorf("a missing file: exit %d, want 2 naming the file without pointing at --help\n%s", code, out)
	}
	if code, out := run("-o", "wide", whole); code != 2 || !strings.Contains(out, "Run 'certready ledger verify --help'") {
		t.Errorf("-o wide: exit %d, want 2 as a usage error\n%s", code, out)
	}
}
