//go:build !nodeonly

package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	kubefake "k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"sigs.k8s.io/yaml"

	"github.com/certready/certready/reporter/fleet"
	"github.com/certready/certready/reporter/fleet/maintenance"
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

// A node that runs no agent by design reads as such in the table (READY
// "-", reason NoAgentByDesign, why in wide) and counts apart in the
// summary.
func TestStatusShowsNodesWithoutAnAgentByDesign(t *testing.T) {
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	rows := []fleet.NodeStatus{
		{Node: "w1", Ready: true, Status: "False", Reason: "KubeletServingCertReady"},
		{Node: "win1", NoAgent: "kubernetes.io/os=windows: the agent runs on Linux nodes"},
	}
	var table, wide bytes.Buffer
	if err := printStatus(&table, "table", rows, now, false); err != nil {
		t.Fatal(err)
	}
	if err := printStatus(&wide, "wide", rows, now, false); err != nil {
		t.Fatal(err)
	}
	fields := strings.Fields(strings.Split(strings.TrimSpace(table.String()), "\n")[2])
	if len(fields) < 4 || fields[0] != "win1" || fields[1] != "-" || fields[2] != "none" || fields[3] != "NoAgentByDesign" {
		t.Errorf("table row %v:\n%s", fields, table.String())
	}
	if !strings.Contains(wide.String(), "the agent runs on Linux nodes") {
		t.Errorf("wide does not say why:\n%s", wide.String())
	}
	for _, tc := range []struct {
		nodes, notReady, noAgent int
		want                     string
	}{
		{3, 0, 0, "\n3 of 3 nodes ready.\n"},
		{3, 1, 1, "\n1 of 2 nodes ready. 1 more node runs no agent by design (-o wide says why).\n"},
		{5, 0, 3, "\n2 of 2 nodes ready. 3 more nodes run no agent by design (-o wide says why).\n"},
	} {
		if got := summary(tc.nodes, tc.notReady, tc.noAgent); got != tc.want {
			t.Errorf("summary(%d, %d, %d) = %q, want %q", tc.nodes, tc.notReady, tc.noAgent, got, tc.want)
		}
	}
}

// listAgentSets finds certready's agent DaemonSets by their labels in any
// namespace, and nothing else.
func TestListAgentSetsByLabels(t *testing.T) {
	agentLabels := map[string]string{"app.kubernetes.io/name": "certready", "app.kubernetes.io/component": "agent"}
	ds := func(ns, name string, labels map[string]string) *appsv1.DaemonSet {
		d := &appsv1.DaemonSet{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: labels}}
		d.Spec.Template.Spec.NodeSelector = map[string]string{"kubernetes.io/os": "linux"}
		return d
	}
	client := kubefake.NewClientset(
		ds("certready", "certready-agent", agentLabels),
		ds("ops", "release-b-certready-agent", agentLabels),
		ds("kube-system", "kube-proxy", map[string]string{"k8s-app": "kube-proxy"}),
	)
	sets, err := listAgentSets(t.Context(), client, "")
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, s := range sets {
		got = append(got, s.Name)
		if s.Pod.NodeSelector["kubernetes.io/os"] != "linux" {
			t.Errorf("%s: pod spec not carried: %+v", s.Name, s.Pod)
		}
	}
	if strings.Join(got, ",") != "certready/certready-agent,ops/release-b-certready-agent" {
		t.Errorf("agent sets %v", got)
	}
	if sets, err := listAgentSets(t.Context(), client, "ops"); err != nil || len(sets) != 1 || sets[0].Name != "ops/release-b-certready-agent" {
		t.Errorf("--agent-namespace=ops: %v %v", sets, err)
	}
}

// kubectl's template outputs, inline and from a file, run over the json
// document, and custom-columns over each node's; a template or spec that
// does not parse or a missing file is named.
func TestStatusTemplateOutputs(t *testing.T) {
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	rows := []fleet.NodeStatus{{Node: "w1", Ready: true}, {Node: "w2", Problem: "CSRPending"}}
	dir := t.TempDir()
	gt, jp := dir+"/nodes.gotmpl", dir+"/nodes.jsonpath"
	if err := os.WriteFile(gt, []byte(`{{range .nodes}}{{.node}}={{.ready}};{{end}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(jp, []byte(`{.nodes[*].node}`), 0o600); err != nil {
		t.Fatal(err)
	}
	cc := dir + "/nodes.columns"
	if err := os.WriteFile(cc, []byte("NAME   PROBLEM\n.node  .problem\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ output, want, wantErr string }{
		{output: `go-template={{range .nodes}}{{.node}}={{.ready}};{{end}}`, want: "w1=true;w2=false;"},
		{output: "go-template-file=" + gt, want: "w1=true;w2=false;"},
		{output: `jsonpath={.nodes[?(@.problem=="CSRPending")].node}`, want: "w2"},
		{output: "jsonpath-file=" + jp, want: "w1 w2"},
		{output: "go-template={{range .nodes}", wantErr: "--output=go-template={{range .nodes}: "},
		{output: "jsonpath-file=" + dir + "/missing", wantErr: "no such file"},
		{output: "custom-columns=NAME:.node,READY:.ready,PROBLEM:.problem", want: "NAME   READY   PROBLEM\nw1     true    <none>\nw2     false   CSRPending\n"},
		{output: "custom-columns-file=" + cc, want: "NAME   PROBLEM\nw1     <none>\nw2     CSRPending\n"},
		{output: "custom-columns=NAME", wantErr: "expected <header>:<json-path-expr>"},
		{output: "custom-columns=NAME:{.node", wantErr: "column NAME"},
		{output: "custom", wantErr: "want wide, name, json, yaml, jsonpath=<template>"},
	} {
		if strings.HasPrefix(tc.output, "go-template") && templateFlavour != "" {
			continue // the image's build: TestTheImageBuildRefusesGoTemplates
		}
		p, _, err := statusPrinter(tc.output, false)
		if tc.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("-o %s: error %v, want %q", tc.output, err, tc.wantErr)
			}
			continue
		}
		if err != nil {
			t.Fatalf("-o %s: %v", tc.output, err)
		}
		var out bytes.Buffer
		if err := p(&out, maintenance.StatusDocument{Taken: &now, Nodes: rows}); err != nil || out.String() != tc.want {
			t.Errorf("-o %s = %q, %v; want %q", tc.output, out.String(), err, tc.want)
		}
	}
}

// The list commands share kubectl's printers: every one takes the same
// outputs, with custom-columns over its own rows and --no-headers.
func TestListCommandsShareThePrinters(t *testing.T) {
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	csrs := []fleet.CSRRow{{Name: "csr-a", Node: "w1", Stage: "issued", Created: now.Add(-90 * time.Minute)}, {Name: "csr-b", Node: "w2", Stage: "pending", Rule: "SANDenied", Created: now}}
	verified := []fleet.Verification{{Node: "w1", Passed: true}, {Node: "w2", Reason: "not ready now"}}
	pre := []fleet.Row{{Node: "w1", Outcome: fleet.Stays, Why: "no agent"}}
	for _, tc := range []struct {
		name  string
		print func(w *bytes.Buffer, output string, noHeaders bool) error
		cc    string
		want  string
	}{
		{"csr", func(w *bytes.Buffer, o string, nh bool) error { return printCSRs(w, o, nh, csrs, now) },
			"custom-columns=NAME:.name,RULE:.rule", "csr-a   <none>\ncsr-b   SANDenied\n"},
		{"verify", func(w *bytes.Buffer, o string, nh bool) error { return printVerify(w, o, nh, verified) },
			"custom-columns=NODE:.node,PASSED:.passed", "w1    true\nw2    false\n"},
		{"preflight", func(w *bytes.Buffer, o string, nh bool) error {
			return printPreflight(w, o, nh, fleet.ShippedRule(), pre, 1, preflightExtras{})
		}, "custom-columns=NODE:.node,OUTCOME:.outcome", "w1    StaysTainted\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var b bytes.Buffer
			if err := tc.print(&b, tc.cc, true); err != nil || b.String() != tc.want {
				t.Errorf("-o %s --no-headers = %q, %v; want %q", tc.cc, b.String(), err, tc.want)
			}
			b.Reset()
			if err := tc.print(&b, "jsonpath={.nodes[0].node}{.csrs[0].name}", false); err != nil || (b.String() != "w1" && b.String() != "csr-a") {
				t.Errorf("-o jsonpath = %q, %v", b.String(), err)
			}
			b.Reset()
			if err := tc.print(&b, "", true); err != nil || strings.Contains(b.String(), "NODE") || strings.Contains(b.String(), "NAME") {
				t.Errorf("table --no-headers printed a header, or failed (%v):\n%s", err, b.String())
			}
		})
	}
	if err := checkListOutput("wide"); err == nil || !strings.Contains(err.Error(), "custom-columns=<spec>") {
		t.Errorf("checkListOutput(wide) = %v, want the outputs named", err)
	}
	if err := checkOutput("jsonpath={.x}"); err == nil {
		t.Error("csr explain and ledger verify print one document: json or yaml only")
	}
}

// Ages as kubectl writes them (duration.HumanDuration).
func TestShortDurationIsKubectls(t *testing.T) {
	for d, want := range map[time.Duration]string{
		45 * time.Second: "45s", 12 * time.Minute: "12m", 5*time.Hour + 30*time.Minute: "5h30m",
		3*24*time.Hour + 5*time.Hour: "3d5h", 800 * 24 * time.Hour: "2y70d", -90 * time.Second: "-90s",
	} {
		if got := shortDuration(d); got != want {
			t.Errorf("shortDuration(%v) = %q, want %q", d, got, want)
		}
	}
}
