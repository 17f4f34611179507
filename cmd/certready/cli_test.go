//go:build !nodeonly

package main

import (
	"bytes"
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/certready/certready/reporter/fleet"
	"github.com/certready/certready/reporter/fleet/maintenance"
)

func TestPluginArgs(t *testing.T) {
	for _, tc := range []struct {
		argv0 string
		args  []string
		want  []string
	}{
		{"/usr/local/bin/kubectl-certready", nil, []string{"status"}},
		{"kubectl-certready", []string{"-o", "wide"}, []string{"status", "-o", "wide"}},
		{"kubectl-certready", []string{"--problems"}, []string{"status", "--problems"}},
		{"kubectl-certready", []string{"preflight"}, []string{"preflight"}},
		{"kubectl-certready", []string{"--help"}, []string{"--help"}},
		{"certready", nil, nil},
		{"certready", []string{"-o", "wide"}, []string{"-o", "wide"}},
	} {
		if got := pluginArgs(tc.argv0, tc.args); !slices.Equal(got, tc.want) {
			t.Errorf("pluginArgs(%q, %q) = %q, want %q", tc.argv0, tc.args, got, tc.want)
		}
	}
}

// The tree: help and version succeed, an unknown command or flag and a
// bad output format are usage errors (2), each status line is a node.
func TestCommandTree(t *testing.T) {
	root := newRootCommand(context.Background())
	var out bytes.Buffer
	root.SetOut(&out)
	root.SetArgs([]string{"--help"})
	if err := root.Execute(); err != nil || !strings.Contains(out.String(), "Operator commands") || !strings.Contains(out.String(), "completion") {
		t.Errorf("--help: %v\n%s", err, out.String())
	}
	for _, args := range [][]string{{"bogus"}, {"status", "--bogus"}, {"status", "-o", "chart"}, {"preflight", "-o", "wide"}, {"status", "extra-arg"}} {
		if code := execute(context.Background(), args); code != 2 {
			t.Errorf("certready %q: exit %d, want 2", args, code)
		}
	}
	var names []string
	for _, c := range root.Commands() {
		names = append(names, c.Name())
	}
	for _, want := range []string{"agent", "approver", "check", "completion", "copy-binary", "preflight", "status", "version"} {
		if !slices.Contains(names, want) {
			t.Errorf("no %s command in %v", want, names)
		}
	}
}

func TestStatusPrinters(t *testing.T) {
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	rows := []fleet.NodeStatus{{Node: "w1", Ready: true, Status: "False"}, {Node: "w2", Status: "True", Reason: "CSRPending"}}
	for _, tc := range []struct {
		output    string
		noHeaders bool
		want      string
	}{
		{"name", false, "node/w1\nnode/w2\n"},
		{`jsonpath={range .nodes[?(@.ready==false)]}{.node} {.reason}{end}`, false, "w2 CSRPending"},
		{"", true, "w1    true"}, // kubectl's padding
	} {
		p, _, err := statusPrinter(tc.output, tc.noHeaders)
		if err != nil {
			t.Fatalf("%q: %v", tc.output, err)
		}
		var buf bytes.Buffer
		if err := p(&buf, maintenance.StatusDocument{Taken: &now, Nodes: rows}); err != nil {
			t.Fatalf("%q: %v", tc.output, err)
		}
		if !strings.HasPrefix(buf.String(), tc.want) || (tc.noHeaders && strings.Contains(buf.String(), "NODE")) {
			t.Errorf("-o %q (no headers %v):\n%q, want it to start %q", tc.output, tc.noHeaders, buf.String(), tc.want)
		}
	}
	if _, _, err := statusPrinter("jsonpath={.nodes[", false); err == nil {
		t.Error("a broken jsonpath template was accepted")
	}
}
