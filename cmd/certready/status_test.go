//go:build !nodeonly

package main

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/certready/certready/reporter/fleet"
)

func TestPrintStatusFormats(t *testing.T) {
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	since, expiry := now.Add(-90*time.Minute), now.Add(72*time.Hour)
	rows := []fleet.NodeStatus{
		{Node: "w2", Status: "True", Reason: "CSRPending", Since: &since, Tainted: true, Problem: "CSRPending", Message: "CSR csr-w2 pending approval"},
		{Node: "w1", Ready: true, Status: "False", Reason: "KubeletServingCertReady", Since: &since, NotAfter: &expiry, CSR: "csr-w1", Completed: []string{"kubelet-serving-cert"}},
	}
	var table, wide, js, ym bytes.Buffer
	for out, buf := range map[string]*bytes.Buffer{"table": &table, "wide": &wide, "json": &js, "yaml": &ym} {
		if err := printStatus(buf, out, rows, now, false); err != nil {
			t.Fatalf("%s: %v", out, err)
		}
	}
	lines := strings.Split(strings.TrimSpace(table.String()), "\n")
	if len(lines) != 3 || !strings.HasPrefix(lines[0], "NODE") || !strings.Contains(lines[2], "in 3d") || !strings.Contains(lines[2], "csr-w1") ||
		!strings.Contains(lines[1], "90m") || strings.Contains(table.String(), "pending approval") {
		t.Errorf("table:\n%s", table.String())
	}
	if !strings.Contains(wide.String(), "MESSAGE") || !strings.Contains(wide.String(), "CSR csr-w2 pending approval") {
		t.Errorf("wide lacks the message:\n%s", wide.String())
	}
	var decoded struct{ Nodes []fleet.NodeStatus }
	if err := json.Unmarshal(js.Bytes(), &decoded); err != nil || len(decoded.Nodes) != 2 || decoded.Nodes[1].CSR != "csr-w1" {
		t.Errorf("json %v: %s", err, js.String())
	}
	decoded.Nodes = nil
	if err := yaml.UnmarshalStrict(ym.Bytes(), &decoded); err != nil || len(decoded.Nodes) != 2 || !decoded.Nodes[0].Tainted {
		t.Errorf("yaml %v: %s", err, ym.String())
	}
	var empty bytes.Buffer
	if err := printStatus(&empty, "json", fleet.Problems(rows[1:]), now, false); err != nil || !strings.Contains(empty.String(), `"nodes": []`) {
		t.Errorf("no problems as json: %v %s", err, empty.String())
	}
}
