//go:build !nodeonly

package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/certready/certready/reporter/fleet"
)

func TestReadBaseline(t *testing.T) {
	dir := t.TempDir()
	write := func(name, data string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	for _, tc := range []struct {
		name, path, wantErr string
		nodes               int
	}{
		{"no flag", "", "--baseline is required", 0},
		{"missing file", filepath.Join(dir, "absent.json"), "absent.json", 0},
		{"kubectl get nodes -o json instead", write("nodes.json", `{"apiVersion":"v1","kind":"List","items":[]}`), "is neither a maintenance run nor the output of 'certready status -o json'", 0},
		{"not JSON", write("garbage.json", "certready status output\n"), "is neither a maintenance run", 0},
		{"status -o json", write("before.json", `{"nodes":[{"node":"w1","ready":true,"status":"False","fingerprint":"`+strings.Repeat("a", 64)+`","tainted":false}]}`), "", 1},
		{"status -o yaml", write("before.yaml", "nodes:\n- node: w1\n  ready: true\n  status: \"False\"\n  tainted: false\n- node: w2\n  ready: false\n  status: \"True\"\n  tainted: true\n"), "", 2},
		{"an empty fleet", write("empty.json", `{"nodes":[]}`), "", 0},
		{"a run whose baseline was edited", write("run.json", `{"schema":"certready.io/maintenance-run/v1","id":"run-0","cluster":"c","operator":"o","opened":"2026-12-06T08:00:00Z","nonce":"n","entries":[]}`), "RunBroken", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b, err := readBaseline(tc.path)
			switch {
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
				t.Errorf("error %v, want one with %q", err, tc.wantErr)
			case tc.wantErr == "" && (err != nil || len(b.Nodes) != tc.nodes):
				t.Errorf("%d nodes, %v; want %d", len(b.Nodes), err, tc.nodes)
			}
		})
	}
}

func TestPrintVerifyTable(t *testing.T) {
	fp := func(c string) string { return strings.Repeat(c, 64) }
	rows := []fleet.Verification{
		{Node: "w2", Before: &fleet.Cert{Fingerprint: fp("a")}, After: &fleet.Cert{Fingerprint: fp("a"), NotAfter: "2027-01-01T00:00:00Z"}, Reason: "the serving certificate did not change"},
		{Node: "w1", Passed: true, Before: &fleet.Cert{Fingerprint: fp("a")}, After: &fleet.Cert{Fingerprint: fp("b"), NotAfter: "2027-02-01T00:00:00Z"}},
	}
	var b bytes.Buffer
	if err := printVerify(&b, "", false, rows); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{"NODE", "w2     FAIL     aaaaaaaaaaaaaaaa   aaaaaaaaaaaaaaaa", "did not change", "w1     PASS     aaaaaaaaaaaaaaaa   bbbbbbbbbbbbbbbb   2027-02-01T00:00:00Z", "1 of 2 nodes renewed"} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
}
