package suite

import (
	"context"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	certv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/certready/certready/e2e/deploy"
	"github.com/certready/certready/e2e/localcluster"
	"github.com/certready/certready/reporter/fleet"
)

// versionPod runs `certready version` on a worker (the image our runtime
// really runs) so that there are logs to fetch through that kubelet.
func versionPod(nodeName string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "logs-" + nodeName, Namespace: "default"},
		Spec: corev1.PodSpec{
			NodeName:      nodeName,
			RestartPolicy: corev1.RestartPolicyNever,
			Tolerations:   []corev1.Toleration{{Operator: corev1.TolerationOpExists}},
			Containers:    []corev1.Container{{Name: "version", Image: "certready:dev", Args: []string{"version"}}},
		},
	}
}

// Happy path: without a human, each worker goes from tainted to
// KubeletServingCertNotReady=False and untainted, and kubectl logs through
// its kubelet fails before and works after.
func TestWorkersGetUntaintedAndServeLogsWithoutAHuman(t *testing.T) {
	ctx := ctxT(t, 6*time.Minute)
	if isDeployed() {
		// Only a run that picked scenarios (-run) gets here: in a full run
		// this file sorts first.
		if flag.Lookup("test.run").Value.String() == "" {
			t.Fatal("certready was installed before the happy path ran: bootstrap_test.go must sort first among the suite's files")
		}
		t.Skip("certready was installed by a scenario that ran before this one (-run): the cluster without it cannot be seen any more")
	}
	w := cluster.Workers()[0].Name
	for _, n := range cluster.Workers() {
		if !deploy.HasReadinessTaint(node(t, ctx, n.Name)) {
			t.Fatalf("%s registered without the readiness taint", n.Name)
		}
	}
	if _, err := cluster.Clientset().CoreV1().Pods("default").Create(ctx, versionPod(w), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	err := localcluster.Poll(ctx, time.Minute, "the version pod to finish", func() (bool, error) {
		p, err := cluster.Clientset().CoreV1().Pods("default").Get(ctx, "logs-"+w, metav1.GetOptions{})
		return err == nil && p.Status.Phase == corev1.PodSucceeded, nil
	})
	if err != nil {
		t.Fatalf("%v\n%s", err, podsAndEvents(ctx))
	}
	out, err := cluster.Kubectl(ctx, "logs", "logs-"+w)
	if err == nil {
		t.Fatalf("kubectl logs through %s worked before its serving certificate was approved: %s", w, out)
	}
	if !strings.Contains(out, "tls") {
		t.Errorf("kubectl logs failed, but not on TLS: %s", out)
	}
	t.Logf("before certready: kubectl logs fails: %s", strings.TrimSpace(out))

	start := time.Now()
	deployed(t)
	for _, n := range cluster.Workers() {
		got := waitCondition(t, ctx, n.Name, 3*time.Minute, "condition False and taint lifted", readyAndUntainted)
		c := certCondition(got)
		if c.Reason != "KubeletServingCertReady" || !strings.Contains(c.Message, "presented on "+n.IP+":10250") {
			t.Errorf("%s: condition %+v", n.Name, c)
		}
		if got.Annotations["certready.io/bootstrap-completed"] == "" {
			t.Errorf("%s: no bootstrap-completed annotation", n.Name)
		}
		t.Logf("%s ready and untainted %s after deploy: %s", n.Name, time.Since(start).Round(time.Millisecond), c.Message)
	}
	// The control plane's kubelet too (kind, kubeadm): its address is the
	// API server's, approved only because the installer labelled the node
	// control-plane, a label no kubelet may set on itself.
	workers := map[string]bool{}
	for _, n := range cluster.Workers() {
		workers[n.Name] = true
	}
	for _, n := range cluster.Nodes() {
		if workers[n.Name] {
			continue
		}
		got := waitCondition(t, ctx, n.Name, 2*time.Minute, "condition False", func(n *corev1.Node) bool {
			c := certCondition(n)
			return c != nil && c.Status == corev1.ConditionFalse
		})
		t.Logf("%s (control plane) ready: %s", n.Name, certCondition(got).Message)
	}
	// The approval came from certready's policy, not from a human.
	csrs, err := cluster.Clientset().CertificatesV1().CertificateSigningRequests().List(ctx, metav1.ListOptions{LabelSelector: "certready.io/node=" + w})
	if err != nil || len(csrs.Items) == 0 {
		t.Fatalf("no labelled CSR for %s: %v", w, err)
	}
	if a := csrCondition(&csrs.Items[0], certv1.CertificateApproved); a == nil || a.Reason != "CertReadyValidatedNodeIdentity" {
		t.Errorf("CSR %s approval %+v", csrs.Items[0].Name, a)
	}
	describe, err := cluster.Kubectl(ctx, "describe", "node", w)
	if err != nil || !strings.Contains(describe, "KubeletServingCertNotReady   False") {
		t.Errorf("kubectl describe node %s does not show the condition: %v\n%s", w, err, describe)
	}
	out, err = cluster.Kubectl(ctx, "logs", "logs-"+w)
	if err != nil || !strings.Contains(out, "certready") {
		t.Fatalf("kubectl logs after approval: %v %s", err, out)
	}
	t.Logf("after certready: kubectl logs works: %s", strings.TrimSpace(out))
	// The chart's own test: certready status --problems in the cluster.
	status, err := deploy.ChartTest(ctx, cluster, t.Logf)
	if err != nil {
		t.Fatalf("%v\n%s", err, status)
	}
	t.Logf("helm test certready passed:\n%s", status)
}

// Approver stopped when a worker joins: it stays tainted with CSRPending;
// scaling the approver back up lifts it.
func TestWorkerStaysTaintedWhileNoApproverRuns(t *testing.T) {
	ctx := ctxT(t, 6*time.Minute)
	deployed(t)
	scaleApprover(t, ctx, 0)
	t.Cleanup(func() { restoreApprover(t) })
	n, err := cluster.JoinWorker(ctx, "worker-3")
	if err != nil {
		t.Fatal(err)
	}
	c := certCondition(waitCondition(t, ctx, n.Name, 2*time.Minute, "CSRPending", hasReason("CSRPending", corev1.ConditionTrue)))
	t.Logf("%s: %s", n.Name, c.Message)
	if !deploy.HasReadinessTaint(node(t, ctx, n.Name)) {
		t.Fatal("the taint came off without an approved certificate")
	}
	scaleApprover(t, ctx, 2)
	start := time.Now()
	waitCondition(t, ctx, n.Name, 2*time.Minute, "ready and untainted after the approver returned", readyAndUntainted)
	t.Logf("%s untainted %s after the approver returned", n.Name, time.Since(start).Round(time.Millisecond))
}

// A node registered again (kubectl delete node, then a kubelet
// restart; the agent keeps running): the new Node comes back with the
// readiness taint and no condition, and the agent must publish the condition
// at once, not at its next heartbeat (5 min), so that the taint is lifted.
func TestNodeRegisteredAgainIsUntaintedAtOnce(t *testing.T) {
	ctx := ctxT(t, 4*time.Minute)
	deployed(t)
	w := cluster.Workers()[0].Name
	before := waitCondition(t, ctx, w, time.Minute, "ready and untainted before", readyAndUntainted)
	agentPod := func() (string, int32) {
		pods, err := cluster.Clientset().CoreV1().Pods(deploy.Namespace).List(ctx, metav1.ListOptions{
			LabelSelector: "app.kubernetes.io/component=agent", FieldSelector: "spec.nodeName=" + w,
		})
		if err != nil || len(pods.Items) != 1 || len(pods.Items[0].Status.ContainerStatuses) != 1 {
			t.Fatalf("agent pod on %s: %v", w, err)
		}
		return pods.Items[0].Name, pods.Items[0].Status.ContainerStatuses[0].RestartCount
	}
	pod, restarts := agentPod()
	watch, err := cluster.Clientset().CoreV1().Nodes().Watch(ctx, metav1.ListOptions{FieldSelector: "metadata.name=" + w, ResourceVersion: before.ResourceVersion})
	if err != nil {
		t.Fatal(err)
	}
	defer watch.Stop()
	start := time.Now()
	if err := cluster.ReRegisterNode(ctx, w); err != nil {
		t.Fatal(err)
	}
	t.Logf("%s registered again (uid %s -> %s) in %s", w, before.UID, node(t, ctx, w).UID, time.Since(start).Round(time.Millisecond))
	// The new Node as the kubelet created it: tainted, without the condition.
	for created := false; !created; {
		select {
		case ev, ok := <-watch.ResultChan():
			if !ok {
				t.Fatal("the node watch ended before the new Node was seen")
			}
			n, isNode := ev.Object.(*corev1.Node)
			if !isNode || ev.Type != "ADDED" || n.UID == before.UID {
				continue
			}
			if !deploy.HasReadinessTaint(n) || certCondition(n) != nil {
				t.Fatalf("the kubelet registered %s without the readiness taint or with a condition: taints %v, condition %+v", w, n.Spec.Taints, certCondition(n))
			}
			created = true
		case <-ctx.Done():
			t.Fatal("the new Node's creation was never seen")
		}
	}
	got := waitCondition(t, ctx, w, time.Minute, "condition False and taint lifted on the new Node", readyAndUntainted)
	t.Logf("%s ready and untainted %s after the deletion: %s", w, time.Since(start).Round(time.Millisecond), certCondition(got).Message)
	if p, r := agentPod(); p != pod || r != restarts {
		t.Errorf("the agent was restarted (pod %s/%d -> %s/%d): the scenario did not test a running agent", pod, restarts, p, r)
	}
}

// Expiry (last in this file, so it runs last: it is the slowest): with 3-minute certificates and no approver, the certificate
// expires unrenewed and the condition says so; the approver's return
// renews it and the condition recovers. The runbook's acceptance around
// it: a baseline taken while the first certificate serves, certready
// verify failing the node before the renewal and passing it after.
func TestExpiredCertificateIsReportedAndRenewalRecovers(t *testing.T) {
	ctx := ctxT(t, 10*time.Minute)
	deployed(t)
	if err := cluster.SetSigningDuration(ctx, 3*time.Minute); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		if err := cluster.SetSigningDuration(ctx, 0); err != nil {
			t.Errorf("restoring the signing duration: %v", err)
		}
	})
	n, err := cluster.JoinWorker(ctx, "worker-5")
	if err != nil {
		t.Fatal(err)
	}
	got := waitCondition(t, ctx, n.Name, 2*time.Minute, "ready with a short certificate", readyAndUntainted)
	t.Logf("%s ready: %s", n.Name, certCondition(got).Message)
	kubeconfig := writeKubeconfig(t, cluster.AdminConfig())
	baseline, _ := runCertready(t, ctx, "status", "--kubeconfig="+kubeconfig, "-o", "json")
	// The same renewal as a maintenance run an auditor accepts, plain and
	// redacted: the baseline now, a step per action, the final
	// verification after.
	run := openRun(t, ctx, kubeconfig, n.Name, false)
	redactedRun := openRun(t, ctx, kubeconfig, n.Name, true)
	baselineFile := filepath.Join(t.TempDir(), "before.json")
	if err := os.WriteFile(baselineFile, []byte(baseline), 0o600); err != nil {
		t.Fatal(err)
	}
	verify := func() (fleet.Verification, int) {
		t.Helper()
		out, code := runCertready(t, ctx, "verify", "--kubeconfig="+kubeconfig, "--baseline="+baselineFile, "-o", "json")
		var doc struct{ Nodes []fleet.Verification }
		if err := json.Unmarshal([]byte(out), &doc); err != nil {
			t.Fatalf("certready verify -o json (exit %d): %v\n%s", code, err, out)
		}
		for _, v := range doc.Nodes {
			if v.Node == n.Name {
				return v, code
			}
		}
		t.Fatalf("certready verify does not list %s:\n%s", n.Name, out)
		return fleet.Verification{}, code
	}
	v0, code := verify()
	if code != 1 || v0.Passed || !strings.Contains(v0.Reason, "did not change") || v0.Before == nil {
		t.Fatalf("verify before the renewal: exit %d, %s %+v, want exit 1 and the certificate unchanged", code, n.Name, v0)
	}
	scaleApprover(t, ctx, 0)
	t.Cleanup(func() { restoreApprover(t) })
	run.step(ctx, "stop-approver")
	redactedRun.step(ctx, "stop-approver")
	c := certCondition(waitCondition(t, ctx, n.Name, 5*time.Minute, "CertificateExpired", hasReason("CertificateExpired", corev1.ConditionTrue)))
	t.Logf("expired: %s", c.Message)
	// Before it expired, the agent saw the renewal stuck (the kubelet's
	// request pending past its latest rotation point) and said so on the
	// Node, while the node stayed ready.
	var stuck string
	err = localcluster.Poll(ctx, time.Minute, "a RenewalStuck event on "+n.Name, func() (bool, error) {
		evs, err := cluster.Clientset().CoreV1().Events(metav1.NamespaceDefault).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=" + n.Name + ",reason=RenewalStuck"})
		if err != nil || len(evs.Items) == 0 {
			return false, nil
		}
		stuck = evs.Items[0].Message
		return true, nil
	})
	if err != nil || !strings.Contains(stuck, "RenewalPending") || !strings.Contains(stuck, v0.Before.Fingerprint) {
		t.Fatalf("%v: event %q, want the pending renewal of %s", err, stuck, v0.Before.Fingerprint)
	}
	t.Logf("event RenewalStuck: %s", stuck)
	scaleApprover(t, ctx, 2)
	run.step(ctx, "restore-approver")
	redactedRun.step(ctx, "restore-approver")
	waitCondition(t, ctx, n.Name, 3*time.Minute, "ready again after renewal", func(n *corev1.Node) bool {
		c := certCondition(n)
		return c != nil && c.Status == corev1.ConditionFalse
	})
	checkClosedRun(t, ctx, run.close(ctx), n.Name, "stop-approver", "restore-approver")
	checkClosedRun(t, ctx, redactedRun.close(ctx), n.Name, "stop-approver", "restore-approver")
	if out, _ := runCertready(t, ctx, "status", "--kubeconfig="+kubeconfig, "--redact", "-o", "json"); strings.Contains(out, n.Name) || !strings.Contains(out, `"node": "node-`) {
		t.Errorf("status --redact names %s, or no pseudonym:\n%s", n.Name, out)
	}
	refusedBaselines(t, ctx, kubeconfig, n.Name, baseline, v0.Before.Fingerprint)
	// The other nodes kept their certificates: verify exits 1 for them;
	// this node passes, with a new fingerprint that expires later.
	v, code := verify()
	if code != 1 || !v.Passed || v.Before == nil || v.After == nil || v.Before.Fingerprint == v.After.Fingerprint || v.After.NotAfter <= v.Before.NotAfter {
		t.Fatalf("verify after the renewal: exit %d, %s %+v (before %+v, after %+v), want it passed", code, n.Name, v, v.Before, v.After)
	}
	if v.Before.CA == "" || v.Before.CA != v.After.CA {
		t.Errorf("verify: CA before %q, after %q: want the same, stated by the agent", v.Before.CA, v.After.CA)
	}
	t.Logf("certready verify: %s renewed, sha256 %s (notAfter %s) -> %s (notAfter %s)", n.Name, v.Before.Fingerprint, v.Before.NotAfter, v.After.Fingerprint, v.After.NotAfter)
	// The agent's own record of it: a CertificateRotated Node event with
	// both full fingerprints.
	var rotated string
	err = localcluster.Poll(ctx, time.Minute, "a CertificateRotated event on "+n.Name, func() (bool, error) {
		evs, err := cluster.Clientset().CoreV1().Events(metav1.NamespaceDefault).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=" + n.Name + ",reason=CertificateRotated"})
		if err != nil || len(evs.Items) == 0 {
			return false, nil
		}
		rotated = evs.Items[len(evs.Items)-1].Message
		return true, nil
	})
	if err != nil || !strings.Contains(rotated, v.Before.Fingerprint) || !strings.Contains(rotated, v.After.Fingerprint) {
		t.Fatalf("%v: event %q, want both full fingerprints", err, rotated)
	}
	t.Logf("event CertificateRotated: %s", rotated)
	// And the decision ledger's record, on the agent's standard output.
	agent := podOn(t, ctx, deploy.Namespace, "app.kubernetes.io/component=agent", n.Name)
	var record map[string]any
	err = localcluster.Poll(ctx, time.Minute, "a certificate-rotated ledger record from "+agent, func() (bool, error) {
		logs, err := cluster.Clientset().CoreV1().Pods(deploy.Namespace).GetLogs(agent, &corev1.PodLogOptions{}).DoRaw(ctx)
		if err != nil {
			return false, nil
		}
		for _, line := range strings.Split(string(logs), "\n") {
			var r map[string]any
			if json.Unmarshal([]byte(line), &r) == nil && r["action"] == "certificate-rotated" && r["certificate_sha256"] == v.After.Fingerprint {
				record = r
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if cluster, _ := record["cluster"].(string); record["previous_certificate_sha256"] != v.Before.Fingerprint || record["node"] != n.Name || record["schema"] != "certready.io/ledger/v1" || cluster == "" {
		t.Errorf("ledger rotation record %v: want %s's rotation from %s, naming the cluster", record, n.Name, v.Before.Fingerprint)
	}
}
