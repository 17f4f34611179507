package suite

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	authenticationv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/certready/certready/reporter/fleet/maintenance"
)

// maintenanceRun drives 'certready evidence' for one node's renewal, as an
// operator would: open before, a step per action, close after.
type maintenanceRun struct {
	t                      *testing.T
	kubeconfig, node, path string
	// keyFile: a redacted run's key ("" for a plain run).
	keyFile string
}

func openRun(t *testing.T, ctx context.Context, kubeconfig, node string, redacted bool) *maintenanceRun {
	t.Helper()
	dir := t.TempDir()
	r := &maintenanceRun{t: t, kubeconfig: kubeconfig, node: node, path: filepath.Join(dir, "run.json")}
	args := []string{"evidence", "open", "--kubeconfig=" + kubeconfig, "--run=" + r.path, "-l", "kubernetes.io/hostname=" + node, "-m", "e2e: renew " + node}
	if redacted {
		r.keyFile = filepath.Join(dir, "run.key")
		args = append(args, "--redact", "--redact-key-file="+r.keyFile)
	}
	out, code := runCertready(t, ctx, args...)
	if code != 0 || !strings.Contains(out, "Opened run run-") || !strings.Contains(out, "1 node, 1 ready with a certificate") {
		t.Fatalf("certready evidence open: exit %d\n%s", code, out)
	}
	t.Logf("certready evidence open:\n%s", out)
	return r
}

// redactArgs are what closing a redacted run takes: its key, and the
// selector again (the run records it redacted: it names the node).
func (r *maintenanceRun) redactArgs() []string {
	if r.keyFile == "" {
		return nil
	}
	return []string{"--redact", "--redact-key-file=" + r.keyFile, "-l", "kubernetes.io/hostname=" + r.node}
}

func (r *maintenanceRun) step(ctx context.Context, name string) {
	r.t.Helper()
	args := []string{"evidence", "step", "--kubeconfig=" + r.kubeconfig, "--run=" + r.path, name}
	if r.keyFile != "" {
		args = append(args, "--redact", "--redact-key-file="+r.keyFile)
	}
	out, code := runCertready(r.t, ctx, args...)
	if code != 0 || !strings.Contains(out, "Recorded step") {
		r.t.Fatalf("certready evidence step %s: exit %d\n%s", name, code, out)
	}
	r.t.Logf("certready evidence step %s:\n%s", name, out)
}

// close runs the final verification and returns the closed run as the
// file holds it.
func (r *maintenanceRun) close(ctx context.Context) *maintenance.Run {
	r.t.Helper()
	out, code := runCertready(r.t, ctx, append([]string{"evidence", "close", "--kubeconfig=" + r.kubeconfig, "--run=" + r.path}, r.redactArgs()...)...)
	if code != 0 || !strings.Contains(out, "PASSED") {
		r.t.Fatalf("certready evidence close: exit %d, want 0 (passed)\n%s", code, out)
	}
	r.t.Logf("certready evidence close:\n%s", out)
	data, err := os.ReadFile(r.path)
	if err != nil {
		r.t.Fatal(err)
	}
	run, err := maintenance.Parse(data)
	if err == nil {
		err = maintenance.Check(run)
	}
	if err != nil {
		r.t.Fatalf("the closed run: %v", err)
	}
	out, code = runCertready(r.t, ctx, "evidence", "verify", r.path)
	if code != 0 || !strings.Contains(out, "whole") {
		r.t.Errorf("certready evidence verify: exit %d, want 0\n%s", code, out)
	}
	r.t.Logf("certready evidence verify:\n%s", out)
	return run
}

// checkClosedRun: the run names this cluster and the operator the API
// server knows, the baseline came first, every step is there, and the one
// node passed.
func checkClosedRun(t *testing.T, ctx context.Context, run *maintenance.Run, node string, steps ...string) {
	t.Helper()
	ns, err := cluster.Clientset().CoreV1().Namespaces().Get(ctx, metav1.NamespaceSystem, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	me, err := cluster.Clientset().AuthenticationV1().SelfSubjectReviews().Create(ctx, &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if run.Cluster != string(ns.UID) || run.Operator != me.Status.UserInfo.Username {
		t.Errorf("run bound to cluster %s, operator %q; want %s, %q", run.Cluster, run.Operator, ns.UID, me.Status.UserInfo.Username)
	}
	var names []string
	for _, s := range run.Steps() {
		names = append(names, s.Name)
	}
	if strings.Join(names, ",") != strings.Join(steps, ",") {
		t.Errorf("steps %v, want %v", names, steps)
	}
	v := run.Entries[len(run.Entries)-1].Verification
	if v == nil || !v.Passed || v.Coverage.Judged != 1 || v.Coverage.Passed != 1 || v.Coverage.Failed != 0 {
		t.Fatalf("final verification %+v, want %s's one pass", v, node)
	}
	data, _ := json.Marshal(run)
	if named := strings.Contains(string(data), node); named == run.Redacted {
		t.Errorf("run (redacted %v) names %s: %v", run.Redacted, node, named)
	}
}

// refusedBaselines: verify refuses, with its named reason and exit status,
// a baseline from another cluster, one older than the bound, and one that
// shows a certificate the node had already replaced when it was taken.
func refusedBaselines(t *testing.T, ctx context.Context, kubeconfig, node, baseline, oldFingerprint string) {
	t.Helper()
	dir := t.TempDir()
	write := func(name, data string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	var doc map[string]any
	if err := json.Unmarshal([]byte(baseline), &doc); err != nil || doc["cluster"] == "" || doc["taken"] == nil {
		t.Fatalf("status -o json names no cluster or time (%v):\n%s", err, baseline)
	}
	other := strings.Replace(baseline, doc["cluster"].(string), "00000000-0000-0000-0000-000000000000", 1)
	now, _ := runCertready(t, ctx, "status", "--kubeconfig="+kubeconfig, "-l", "kubernetes.io/hostname="+node, "-o", "json")
	var nowDoc struct {
		Nodes []map[string]any `json:"nodes"`
	}
	if err := json.Unmarshal([]byte(now), &nowDoc); err != nil || len(nowDoc.Nodes) != 1 {
		t.Fatalf("status now: %v\n%s", err, now)
	}
	// Taken now, after the renewal, but showing the certificate before it.
	afterRenewal := strings.Replace(now, nowDoc.Nodes[0]["fingerprint"].(string), oldFingerprint, 1)
	for _, tc := range []struct {
		name, baseline, reason string
		extra                  []string
		code                   int
	}{
		{"another cluster's", write("other.json", other), maintenance.BaselineFromAnotherCluster, nil, maintenance.ExitOtherCluster},
		{"older than the bound", write("old.json", baseline), maintenance.BaselineTooOld, []string{"--max-baseline-age=1s"}, maintenance.ExitAge},
		{"taken after the renewal", write("after.json", afterRenewal), maintenance.BaselineAfterRenewal, []string{"--issue-slack=0s"}, maintenance.ExitAfterRenewal},
	} {
		args := append([]string{"verify", "--kubeconfig=" + kubeconfig, "-l", "kubernetes.io/hostname=" + node, "--baseline=" + tc.baseline}, tc.extra...)
		out, code := runCertreadyWithStderr(t, ctx, args...)
		if code != tc.code || !strings.Contains(out, tc.reason) {
			t.Errorf("verify with a baseline %s: exit %d, want %d naming %s\n%s", tc.name, code, tc.code, tc.reason, out)
		}
		t.Logf("certready verify with a baseline %s (exit %d):\n%s", tc.name, code, out)
	}
}
