//go:build !nodeonly

package main

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	k8stesting "k8s.io/client-go/testing"
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

// The rules' names come from the NodeReadinessRules themselves; without
// the CRD (or the right to list it) the marks keep their UIDs.
func TestRuleNamesFromTheNodeReadinessRules(t *testing.T) {
	rule := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "readiness.node.x-k8s.io/v1alpha1", "kind": "NodeReadinessRule",
		"metadata": map[string]any{"name": "kubelet-serving-cert", "uid": "9f1c2b7e-0000-4000-8000-000000000001"},
	}}
	dyn := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(), map[schema.GroupVersionResource]string{nodeReadinessRules: "NodeReadinessRuleList"}, rule)
	got := ruleNames(context.Background(), dyn)
	if got["9f1c2b7e-0000-4000-8000-000000000001"] != "kubelet-serving-cert" || len(got) != 1 {
		t.Errorf("ruleNames = %v, want the one rule's UID named", got)
	}
	none := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(), map[schema.GroupVersionResource]string{nodeReadinessRules: "NodeReadinessRuleList"})
	none.PrependReactor("list", "nodereadinessrules", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewNotFound(nodeReadinessRules.GroupResource(), "")
	})
	if got := ruleNames(context.Background(), none); len(got) != 0 {
		t.Errorf("without the CRD: %v, want no names", got)
	}
}
