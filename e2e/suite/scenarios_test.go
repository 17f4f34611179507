package suite

import (
	"bytes"
	"context"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	certv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/certready/certready/e2e/deploy"
	"github.com/certready/certready/e2e/localcluster"

	"github.com/certready/certready/internal/names"
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
	w := cluster.Workers()[0].Name
	for _, n := range cluster.Workers() {
		if !deploy.HasStartupTaint(node(t, ctx, n.Name)) {
			t.Fatalf("%s registered without the startup taint", n.Name)
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

	// Installed once through the Helm chart, whose defaults are the
	// standalone overlay object for object (e2e/static proves it); later
	// scenarios re-apply that overlay over it.
	start := time.Now()
	if err := deploy.Chart(ctx, cluster, chartDir, nil, t.Logf); err != nil {
		t.Fatal(err)
	}
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
}

// Approver stopped when a worker joins: it stays tainted with CSRPending;
// scaling the approver back up lifts it.
func TestWorkerStaysTaintedWhileNoApproverRuns(t *testing.T) {
	ctx := ctxT(t, 6*time.Minute)
	scaleApprover(t, ctx, 0)
	t.Cleanup(func() { restoreApprover(t) })
	n, err := cluster.JoinWorker(ctx, "worker-3")
	if err != nil {
		t.Fatal(err)
	}
	c := certCondition(waitCondition(t, ctx, n.Name, 2*time.Minute, "CSRPending", hasReason("CSRPending", corev1.ConditionTrue)))
	t.Logf("%s: %s", n.Name, c.Message)
	if !deploy.HasStartupTaint(node(t, ctx, n.Name)) {
		t.Fatal("the taint came off without an approved certificate")
	}
	scaleApprover(t, ctx, 2)
	start := time.Now()
	waitCondition(t, ctx, n.Name, 2*time.Minute, "ready and untainted after the approver returned", readyAndUntainted)
	t.Logf("%s untainted %s after the approver returned", n.Name, time.Since(start).Round(time.Millisecond))
}

// Identity mismatch: a CSR with another IP, made with the worker's own
// credentials, stays pending with a Warning naming the rule; the worker's
// condition stays truthful.
func TestCSRForAnotherAddressStaysPendingWithItsRule(t *testing.T) {
	ctx := ctxT(t, 3*time.Minute)
	w := cluster.Workers()[0]
	name, _ := requestServingCert(t, ctx, w.Name, "192.0.2.99")
	want := "IPSANNotInInventory: 192.0.2.99 not recorded for " + w.Name
	err := localcluster.Poll(ctx, time.Minute, "a Warning event naming the rule", func() (bool, error) {
		evs, err := cluster.Clientset().CoreV1().Events("default").List(ctx, metav1.ListOptions{
			FieldSelector: fields.Set{"involvedObject.name": name, "type": "Warning"}.String(),
		})
		if err != nil {
			return false, nil
		}
		for _, e := range evs.Items {
			if strings.Contains(e.Message, want) && e.Reason == "IPSANNotInInventory" {
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		t.Fatalf("%v\n%s", err, podsAndEvents(ctx))
	}
	c, err := cluster.Clientset().CertificatesV1().CertificateSigningRequests().Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Status.Conditions) != 0 {
		t.Errorf("the mismatching CSR was decided: %+v", c.Status.Conditions)
	}
	if c.Labels[names.NodeLabel] != w.Name {
		t.Errorf("labels %v", c.Labels)
	}
	if got := certCondition(node(t, ctx, w.Name)); got.Status != corev1.ConditionFalse {
		t.Errorf("a foreign pending CSR changed %s's truthful condition: %+v", w.Name, got)
	}
	_ = cluster.Clientset().CertificatesV1().CertificateSigningRequests().Delete(ctx, name, metav1.DeleteOptions{})
}

// Stale endpoint and restart safety: a renewed certificate lands
// on disk while the kubelet keeps serving the old one; the condition says
// EndpointCertificateMismatch. Restarting the agent then must never publish
// False, and restarting the apiserver loses nothing: swapping the old file
// back afterwards is still seen.
func TestStaleEndpointIsNamedAndRestartsNeverPublishFalse(t *testing.T) {
	ctx := ctxT(t, 6*time.Minute)
	w := cluster.Workers()[1]
	name, key := requestServingCert(t, ctx, w.Name, w.IP)
	issued := waitIssued(t, ctx, name, time.Minute)

	oldTarget, err := cluster.ServingTarget(ctx, w.Name)
	if err != nil {
		t.Fatal(err)
	}
	// Lay the renewed pair out exactly as the kubelet does: a new
	// timestamped 0600 file, then an absolute symlink renamed onto -current.
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	pair := append(append([]byte{}, issued.Status.Certificate...), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER})...)
	newName := "kubelet-server-" + time.Now().UTC().Format("2006-01-02-15-04-05") + "-e2e.pem"
	newPath, err := cluster.WriteServingFile(ctx, w.Name, newName, pair)
	if err != nil {
		t.Fatal(err)
	}
	swap := func(target string) {
		t.Helper()
		if err := cluster.PointServingAt(ctx, w.Name, target); err != nil {
			t.Fatal(err)
		}
	}
	swap(newPath)
	c := certCondition(waitCondition(t, ctx, w.Name, time.Minute, "EndpointCertificateMismatch", hasReason("EndpointCertificateMismatch", corev1.ConditionTrue)))
	t.Logf("stale endpoint: %s", c.Message)

	// Restart the agent of this node: the condition must stay True throughout.
	pods, err := cluster.Clientset().CoreV1().Pods(deploy.Namespace).List(ctx, metav1.ListOptions{
		LabelSelector: "app.kubernetes.io/component=agent", FieldSelector: "spec.nodeName=" + w.Name,
	})
	if err != nil || len(pods.Items) != 1 {
		t.Fatalf("agent pod on %s: %v %d", w.Name, err, len(pods.Items))
	}
	old := pods.Items[0].Name
	watchFrom := node(t, ctx, w.Name).ResourceVersion
	if err := cluster.Clientset().CoreV1().Pods(deploy.Namespace).Delete(ctx, old, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	err = localcluster.Poll(ctx, 2*time.Minute, "a new agent pod on "+w.Name+" ready", func() (bool, error) {
		pods, err := cluster.Clientset().CoreV1().Pods(deploy.Namespace).List(ctx, metav1.ListOptions{
			LabelSelector: "app.kubernetes.io/component=agent", FieldSelector: "spec.nodeName=" + w.Name,
		})
		if err != nil || len(pods.Items) != 1 || pods.Items[0].Name == old {
			return false, nil
		}
		for _, cs := range pods.Items[0].Status.ContainerStatuses {
			if cs.Ready {
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		t.Fatalf("%v\n%s", err, podsAndEvents(ctx))
	}
	assertNeverReady(t, ctx, w.Name, watchFrom)

	// Restart the apiserver; the agent's watches must recover.
	start := time.Now()
	if err := cluster.RestartAPIServer(ctx); err != nil {
		t.Fatal(err)
	}
	t.Logf("apiserver restarted in %s", time.Since(start).Round(time.Millisecond))
	swap(oldTarget)
	waitCondition(t, ctx, w.Name, 2*time.Minute, "ready again after the old certificate is back", readyAndUntainted)
	for _, n := range cluster.Workers() {
		if c := certCondition(node(t, ctx, n.Name)); c.Status != corev1.ConditionFalse {
			t.Errorf("%s lost its condition across the apiserver restart: %+v", n.Name, c)
		}
	}
}

// assertNeverReady replays the node's history since resourceVersion rv up
// to a mark it writes now (an annotation), and fails if the condition was
// False anywhere in it. The mark makes the replay complete: a quiet node
// (nothing rewritten since rv) still yields one event to read up to.
func assertNeverReady(t *testing.T, ctx context.Context, name, rv string) {
	t.Helper()
	mark := fmt.Sprintf("%d", time.Now().UnixNano())
	patch := fmt.Sprintf(`{"metadata":{"annotations":{"certready.io/e2e-mark":%q}}}`, mark)
	if _, err := cluster.Clientset().CoreV1().Nodes().Patch(ctx, name, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	w, err := cluster.Clientset().CoreV1().Nodes().Watch(wctx, metav1.ListOptions{FieldSelector: "metadata.name=" + name, ResourceVersion: rv})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	seen := 0
	for ev := range w.ResultChan() {
		n, ok := ev.Object.(*corev1.Node)
		if !ok {
			continue
		}
		seen++
		if c := certCondition(n); c != nil && c.Status == corev1.ConditionFalse {
			t.Fatalf("the restarted agent published False while the kubelet serves a stale certificate: %+v", c)
		}
		if n.Annotations["certready.io/e2e-mark"] == mark {
			t.Logf("%d node updates since the agent restart (the mark included), none with the condition False", seen)
			return
		}
	}
	t.Fatalf("the replay of node %s since %s ended before the mark (%d updates seen)", name, rv, seen)
}

// Leader failover: kill the leading approver's process; the other
// replica takes the Lease and approves the next CSR.
func TestStandbyApproverTakesOverWhenTheLeaderDies(t *testing.T) {
	ctx := ctxT(t, 4*time.Minute)
	// Wait for a leader that is alive: after the apiserver restart of the
	// previous scenario the Lease may still name a process that lost it and
	// exited (its pod's restarted container has another identity). Only the
	// holder itself renews the Lease, so a renewal seen under an unchanged
	// holder proves that process runs; then its pod's processes are killed.
	var leader, leaderPod string
	var start time.Time
	var seen *metav1.MicroTime
	err := localcluster.Poll(ctx, 2*time.Minute, "a leader seen renewing its Lease, then killed", func() (bool, error) {
		lease, err := cluster.Clientset().CoordinationV1().Leases(deploy.Namespace).Get(ctx, "certready-approver", metav1.GetOptions{})
		if err != nil || lease.Spec.HolderIdentity == nil || *lease.Spec.HolderIdentity == "" || lease.Spec.RenewTime == nil {
			return false, nil
		}
		if *lease.Spec.HolderIdentity != leader || seen == nil {
			leader, seen = *lease.Spec.HolderIdentity, lease.Spec.RenewTime
			return false, nil
		}
		if !lease.Spec.RenewTime.After(seen.Time) {
			return false, nil
		}
		leaderPod, _, _ = strings.Cut(leader, "_") // identities are <pod>_<per-process suffix>
		start = time.Now()
		killed, err := cluster.KillPod(ctx, leaderPod)
		return err == nil && killed > 0, nil
	})
	if err != nil {
		t.Fatalf("%v\n%s", err, podsAndEvents(ctx))
	}
	var holder string
	err = localcluster.Poll(ctx, 2*time.Minute, "another replica to take the Lease", func() (bool, error) {
		l, err := cluster.Clientset().CoordinationV1().Leases(deploy.Namespace).Get(ctx, "certready-approver", metav1.GetOptions{})
		if err != nil || l.Spec.HolderIdentity == nil {
			return false, nil
		}
		holder = *l.Spec.HolderIdentity
		return holder != leader, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	newPod, _, _ := strings.Cut(holder, "_")
	who := "the standby replica"
	if newPod == leaderPod {
		who = "the killed pod's restarted container"
	}
	t.Logf("handover: %s -> %s (%s) in %s (lease duration 15s)", leader, holder, who, time.Since(start).Round(time.Millisecond))
	w := cluster.Workers()[0]
	name, _ := requestServingCert(t, ctx, w.Name, w.IP)
	c := waitIssued(t, ctx, name, time.Minute)
	if a := csrCondition(c, certv1.CertificateApproved); a.Reason != "CertReadyValidatedNodeIdentity" {
		t.Errorf("approval %+v", a)
	}
	t.Logf("the new leader approved %s %s after the kill", name, time.Since(start).Round(time.Millisecond))
	_ = cluster.Clientset().CertificatesV1().CertificateSigningRequests().Delete(ctx, name, metav1.DeleteOptions{})
}

// Taint fallback off: nothing removes the taint even with the condition
// False; turning it on removes it.
func TestTaintStaysUntilTheFallbackIsTurnedOn(t *testing.T) {
	ctx := ctxT(t, 5*time.Minute)
	if _, err := cluster.Kubectl(ctx, "apply", "-k", base); err != nil {
		t.Fatal(err)
	}
	if err := deploy.WaitRollout(ctx, cluster, t.Logf); err != nil {
		t.Fatal(err)
	}
	waitApproverArgs(t, ctx, false)
	n, err := cluster.JoinWorker(ctx, "worker-4")
	if err != nil {
		t.Fatal(err)
	}
	waitCondition(t, ctx, n.Name, 2*time.Minute, "condition False", hasReason("KubeletServingCertReady", corev1.ConditionFalse))
	// Give a (wrongly) active fallback ample time to act: it reacts in
	// milliseconds when on (see the benchmarks).
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if !deploy.HasStartupTaint(node(t, ctx, n.Name)) {
			t.Fatal("the taint came off with the fallback off and no node-readiness-controller")
		}
		time.Sleep(500 * time.Millisecond)
	}
	if _, err := cluster.Kubectl(ctx, "apply", "-k", standalone); err != nil {
		t.Fatal(err)
	}
	waitApproverArgs(t, ctx, true)
	waitCondition(t, ctx, n.Name, 2*time.Minute, "untainted once the fallback is on", readyAndUntainted)
}

func waitApproverArgs(t *testing.T, ctx context.Context, fallback bool) {
	t.Helper()
	err := localcluster.Poll(ctx, 2*time.Minute, fmt.Sprintf("approver pods with the taint fallback=%v ready", fallback), func() (bool, error) {
		pods, err := cluster.Clientset().CoreV1().Pods(deploy.Namespace).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/component=approver"})
		if err != nil || len(pods.Items) != 2 {
			return false, nil
		}
		for _, p := range pods.Items {
			has := strings.Contains(strings.Join(p.Spec.Containers[0].Args, " "), "--remove-startup-taint")
			ready := len(p.Status.ContainerStatuses) == 1 && p.Status.ContainerStatuses[0].Ready
			if has != fallback || !ready || p.DeletionTimestamp != nil {
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		t.Fatalf("%v\n%s", err, podsAndEvents(ctx))
	}
}

// RBAC and admission: an agent's own node-bound token cannot change
// another node's status, nor another condition of its own node.
func TestAgentTokenIsConfinedToItsNode(t *testing.T) {
	ctx := ctxT(t, 2*time.Minute)
	w1, w2 := cluster.Workers()[0].Name, cluster.Workers()[1].Name
	pods, err := cluster.Clientset().CoreV1().Pods(deploy.Namespace).List(ctx, metav1.ListOptions{
		LabelSelector: "app.kubernetes.io/component=agent", FieldSelector: "spec.nodeName=" + w1,
	})
	if err != nil || len(pods.Items) != 1 {
		t.Fatalf("agent pod on %s: %v", w1, err)
	}
	token, err := cluster.Kubectl(ctx, "-n", deploy.Namespace, "create", "token", "certready-agent",
		"--bound-object-kind=Pod", "--bound-object-name="+pods.Items[0].Name, "--duration=10m")
	if err != nil {
		t.Fatal(err)
	}
	cfg := rest.AnonymousClientConfig(cluster.AdminConfig())
	cfg.BearerToken = strings.TrimSpace(token)
	as, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	patch := func(nodeName, condType, status string) error {
		body, _ := json.Marshal(map[string]any{"status": map[string]any{"conditions": []map[string]any{{
			"type": condType, "status": status, "reason": "E2E", "message": "e2e", "lastHeartbeatTime": time.Now().UTC().Format(time.RFC3339),
			"lastTransitionTime": time.Now().UTC().Format(time.RFC3339),
		}}}})
		_, err := as.CoreV1().Nodes().PatchStatus(ctx, nodeName, body)
		return err
	}
	cur := certCondition(node(t, ctx, w1))
	cases := []struct {
		name              string
		node, typ, status string
		allowed           bool
	}{
		{"another node's condition", w2, deploy.ConditionType, "True", false},
		{"another condition of its own node", w1, "Ready", "False", false},
		{"its own condition on its own node", w1, deploy.ConditionType, string(cur.Status), true},
	}
	for _, tc := range cases {
		err := patch(tc.node, tc.typ, tc.status)
		switch {
		case tc.allowed && err != nil:
			t.Errorf("%s: refused: %v", tc.name, err)
		case !tc.allowed && err == nil:
			t.Errorf("%s: allowed", tc.name)
		case !tc.allowed && !apierrors.IsForbidden(err) && !apierrors.IsInvalid(err):
			t.Errorf("%s: refused, but not by authorization or admission: %v", tc.name, err)
		case !tc.allowed:
			t.Logf("%s: refused: %v", tc.name, err)
		}
	}
	if c := certCondition(node(t, ctx, w2)); c.Reason == "E2E" {
		t.Errorf("%s's condition was overwritten: %+v", w2, c)
	}

	// The status subresource persists metadata too: everything but its
	// condition is out of the agent's reach, on its own node.
	own := node(t, ctx, w1)
	for _, tc := range []struct {
		name  string
		patch map[string]any
	}{
		{"an annotation (a forged readiness.k8s.io completion mark)", map[string]any{"metadata": map[string]any{"annotations": map[string]string{"readiness.k8s.io/bootstrap-completed-e2e": "true"}}}},
		{"a label", map[string]any{"metadata": map[string]any{"labels": map[string]string{"e2e": "x"}}}},
		{"ownerReferences", map[string]any{"metadata": map[string]any{"ownerReferences": []map[string]any{{"apiVersion": "v1", "kind": "Namespace", "name": "default", "uid": string(own.UID)}}}}},
		{"finalizers", map[string]any{"metadata": map[string]any{"finalizers": []string{"example.com/hold"}}}},
		{"daemonEndpoints", map[string]any{"status": map[string]any{"daemonEndpoints": map[string]any{"kubeletEndpoint": map[string]any{"Port": 10251}}}}},
		{"capacity", map[string]any{"status": map[string]any{"capacity": map[string]any{"pods": "999"}}}},
		{"allocatable", map[string]any{"status": map[string]any{"allocatable": map[string]any{"pods": "999"}}}},
		{"nodeInfo", map[string]any{"status": map[string]any{"nodeInfo": map[string]any{"kubeletVersion": "v0.0.1-e2e"}}}},
	} {
		body, _ := json.Marshal(tc.patch)
		_, err := as.CoreV1().Nodes().Patch(ctx, w1, types.MergePatchType, body, metav1.PatchOptions{}, "status")
		switch {
		case err == nil:
			t.Errorf("the agent's token changed %s of its own node", tc.name)
		case !apierrors.IsForbidden(err):
			t.Errorf("%s: refused, but not by admission: %v", tc.name, err)
		default:
			t.Logf("%s: refused: %v", tc.name, err)
		}
	}

	// Only the agent writes the condition: the node's own credentials (what
	// a compromised kubelet holds) and the cluster admin are refused, by
	// the rule's name, whether they set False, change it or remove it.
	forge := func(cs kubernetes.Interface, status string) error {
		body, _ := json.Marshal(map[string]any{"status": map[string]any{"conditions": []map[string]any{{
			"type": deploy.ConditionType, "status": status, "reason": "Forged", "message": "forged",
			"lastHeartbeatTime": time.Now().UTC().Format(time.RFC3339), "lastTransitionTime": time.Now().UTC().Format(time.RFC3339),
		}}}})
		_, err := cs.CoreV1().Nodes().PatchStatus(ctx, w1, body)
		return err
	}
	for _, who := range []struct {
		name string
		cs   kubernetes.Interface
	}{{"the node's own credentials", nodeClient(t, w1)}, {"the cluster admin", cluster.Clientset()}} {
		for _, status := range []string{"False", "True"} {
			err := forge(who.cs, status)
			if err == nil || !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "certready-condition-writers") {
				t.Errorf("%s set the condition to %s: %v (want Forbidden by certready-condition-writers)", who.name, status, err)
			}
		}
	}
	if c := certCondition(node(t, ctx, w1)); c == nil || c.Reason == "Forged" {
		t.Errorf("%s's condition after the forgeries: %+v", w1, c)
	}
}

// A stale False condition (its agent gone for longer than the approver's
// --condition-max-age) never lifts a re-added taint; the agent's return
// (a fresh heartbeat) does.
func TestStaleConditionNeverLiftsAReAddedTaint(t *testing.T) {
	ctx := ctxT(t, 6*time.Minute)
	w := cluster.Workers()[0].Name
	waitCondition(t, ctx, w, 2*time.Minute, "ready and untainted", readyAndUntainted)
	// A short max age, so that the agent's absence makes the condition
	// stale within the test (the default is twice the 5-minute heartbeat).
	if _, err := cluster.Kubectl(ctx, "-n", deploy.Namespace, "patch", "deployment", "certready-approver", "--type=json", "-p",
		`[{"op":"add","path":"/spec/template/spec/containers/0/args/-","value":"--condition-max-age=15s"}]`); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		if _, err := cluster.Kubectl(ctx, "apply", "-k", standalone); err != nil {
			t.Error(err)
		}
		if err := deploy.WaitRollout(ctx, cluster, t.Logf); err != nil {
			t.Error(err)
		}
	})
	// The agent leaves this node only.
	away := fmt.Sprintf(`{"spec":{"template":{"spec":{"affinity":{"nodeAffinity":{"requiredDuringSchedulingIgnoredDuringExecution":{"nodeSelectorTerms":[{"matchExpressions":[{"key":"kubernetes.io/hostname","operator":"NotIn","values":[%q]}]}]}}}}}}}`, w)
	if _, err := cluster.Kubectl(ctx, "-n", deploy.Namespace, "patch", "daemonset", "certready-agent", "--type=merge", "-p", away); err != nil {
		t.Fatal(err)
	}
	back := func() {
		_, _ = cluster.Kubectl(context.Background(), "-n", deploy.Namespace, "patch", "daemonset", "certready-agent", "--type=json", "-p", `[{"op":"remove","path":"/spec/template/spec/affinity"}]`)
	}
	t.Cleanup(back)
	err := localcluster.Poll(ctx, 2*time.Minute, "the agent gone from "+w+" and the approver restarted with --condition-max-age", func() (bool, error) {
		pods, err := cluster.Clientset().CoreV1().Pods(deploy.Namespace).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/component=agent", FieldSelector: "spec.nodeName=" + w})
		if err != nil || len(pods.Items) != 0 {
			return false, nil
		}
		dep, err := cluster.Clientset().AppsV1().Deployments(deploy.Namespace).Get(ctx, "certready-approver", metav1.GetOptions{})
		return err == nil && dep.Status.UpdatedReplicas == 2 && dep.Status.AvailableReplicas == 2 && dep.Status.Replicas == 2, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	c := certCondition(node(t, ctx, w))
	if c == nil || c.Status != corev1.ConditionFalse {
		t.Fatalf("condition %+v, want the agent's last False", c)
	}
	// Staleness is the passing of time since the last heartbeat, nothing else.
	if err := localcluster.Poll(ctx, time.Minute, "the condition to pass the 15 s max age", func() (bool, error) {
		return time.Since(c.LastHeartbeatTime.Time) > 20*time.Second, nil
	}); err != nil {
		t.Fatal(err)
	}
	// Someone (an operator, or the kubelet registering again) re-adds the taint.
	n := node(t, ctx, w)
	n.Spec.Taints = append(n.Spec.Taints, corev1.Taint{Key: localcluster.StartupTaint, Value: "pending", Effect: corev1.TaintEffectNoSchedule})
	if _, err := cluster.Clientset().CoreV1().Nodes().Update(ctx, n, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	// The fallback reacts within milliseconds when it acts (see the
	// benchmarks): 10 s of a taint that stays is a clear no.
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if !deploy.HasStartupTaint(node(t, ctx, w)) {
			t.Fatal("a stale False condition lifted the re-added taint")
		}
		time.Sleep(500 * time.Millisecond)
	}
	t.Logf("the taint stayed for 10 s on a condition last written %s ago", time.Since(c.LastHeartbeatTime.Time).Round(time.Second))
	back()
	waitCondition(t, ctx, w, 2*time.Minute, "untainted once the agent is back and writes a fresh heartbeat", readyAndUntainted)
}

// Approver placement with the real scheduler, in a trusted pool of two
// workers. The taint fallback keeps the soft (PreferNoSchedule) taint on a
// node whose certificate is not proven: here w, whose agent is gone and
// whose condition went stale. With only unproven nodes to run on, the
// approver still runs there and approves (a new pool must not deadlock);
// as soon as a proven node can take it, it never lands on the unproven one.
func TestApproverPlacementPrefersProvenNodes(t *testing.T) {
	ctx := ctxT(t, 8*time.Minute)
	workers := cluster.Workers()
	if len(workers) < 2 {
		t.Fatalf("%d workers, need 2", len(workers))
	}
	w, x := workers[0], workers[1]
	const soft = "readiness.k8s.io/KubeletServingCertUnproven"
	const hold = "e2e.certready.io/hold"
	kubectl := func(args ...string) {
		t.Helper()
		if out, err := cluster.Kubectl(ctx, args...); err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
	}
	// Agents heartbeat every 5 s and the approver counts 15 s as stale, so
	// that only w, whose agent leaves, goes stale within the test.
	kubectl("-n", deploy.Namespace, "patch", "daemonset", "certready-agent", "--type=json", "-p", fmt.Sprintf(
		`[{"op":"add","path":"/spec/template/spec/containers/0/args/-","value":"--heartbeat=5s"},
		  {"op":"add","path":"/spec/template/spec/affinity","value":{"nodeAffinity":{"requiredDuringSchedulingIgnoredDuringExecution":{"nodeSelectorTerms":[{"matchExpressions":[{"key":"kubernetes.io/hostname","operator":"NotIn","values":[%q]}]}]}}}}]`, w.Name))
	kubectl("-n", deploy.Namespace, "patch", "deployment", "certready-approver", "--type=json", "-p",
		`[{"op":"add","path":"/spec/template/spec/containers/0/args/-","value":"--condition-max-age=15s"}]`)
	// The approver runs only on the control plane or the trusted pool: the
	// workers join the pool, as an operator labels the nodes it trusts.
	const pool = "node-restriction.kubernetes.io/certready-approver-pool"
	kubectl("label", "node", w.Name, x.Name, pool+"=true")
	var held []string
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		for _, n := range held {
			_, _ = cluster.Kubectl(ctx, "taint", "node", n, hold+"-")
		}
		_, _ = cluster.Kubectl(ctx, "label", "node", w.Name, x.Name, pool+"-")
		_, _ = cluster.Kubectl(ctx, "-n", deploy.Namespace, "patch", "daemonset", "certready-agent", "--type=json", "-p", `[{"op":"remove","path":"/spec/template/spec/affinity"}]`)
		if _, err := cluster.Kubectl(ctx, "apply", "-k", standalone); err != nil {
			t.Error(err)
		}
		if err := deploy.WaitRollout(ctx, cluster, t.Logf); err != nil {
			t.Error(err)
		}
	})
	hasSoft := func(name string) bool {
		for _, tt := range node(t, ctx, name).Spec.Taints {
			if tt.Key == soft && tt.Effect == corev1.TaintEffectPreferNoSchedule {
				return true
			}
		}
		return false
	}
	if err := localcluster.Poll(ctx, 3*time.Minute, "the soft taint on "+w.Name+" (agent gone, condition stale) and not on "+x.Name, func() (bool, error) {
		return hasSoft(w.Name) && !hasSoft(x.Name), nil
	}); err != nil {
		t.Fatalf("%v\n%s", err, podsAndEvents(ctx))
	}
	approverNodes := func() []string {
		pods, err := cluster.Clientset().CoreV1().Pods(deploy.Namespace).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/component=approver"})
		if err != nil {
			t.Fatal(err)
		}
		var nodes []string
		for _, p := range pods.Items {
			nodes = append(nodes, p.Spec.NodeName)
		}
		return nodes
	}
	// restart rolls the approver and waits until every replica is new,
	// scheduled and ready; it returns their nodes.
	restart := func(what string) []string {
		t.Helper()
		before, err := cluster.Clientset().AppsV1().Deployments(deploy.Namespace).Get(ctx, "certready-approver", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		kubectl("-n", deploy.Namespace, "rollout", "restart", "deployment/certready-approver")
		err = localcluster.Poll(ctx, 3*time.Minute, what, func() (bool, error) {
			d, err := cluster.Clientset().AppsV1().Deployments(deploy.Namespace).Get(ctx, "certready-approver", metav1.GetOptions{})
			if err != nil || d.Generation == before.Generation || d.Status.ObservedGeneration < d.Generation {
				return false, nil
			}
			return d.Status.UpdatedReplicas == 2 && d.Status.ReadyReplicas == 2 && d.Status.Replicas == 2 && len(approverNodes()) == 2, nil
		})
		if err != nil {
			t.Fatalf("%v\n%s", err, podsAndEvents(ctx))
		}
		return approverNodes()
	}
	// Only unproven nodes: every other node is held (a NoSchedule taint the
	// approver does not tolerate).
	for _, n := range cluster.Nodes() {
		if n.Name != w.Name {
			kubectl("taint", "node", n.Name, hold+"=placement:NoSchedule")
			held = append(held, n.Name)
		}
	}
	nodes := restart("the approver running with only the unproven " + w.Name + " to run on")
	for _, n := range nodes {
		if n != w.Name {
			t.Fatalf("approver on %v, want %s, the only node it may use", nodes, w.Name)
		}
	}
	name, _ := requestServingCert(t, ctx, x.Name, x.IP)
	waitIssued(t, ctx, name, time.Minute)
	t.Logf("only %s (unproven) available: approver ran there and approved %s", w.Name, name)
	_ = cluster.Clientset().CertificatesV1().CertificateSigningRequests().Delete(ctx, name, metav1.DeleteOptions{})

	// A proven node can take it: the approver never lands on w again.
	kubectl("taint", "node", x.Name, hold+"-")
	for i := 0; i < 2; i++ {
		nodes = restart(fmt.Sprintf("the approver rolled (%d) with %s proven and %s unproven", i+1, x.Name, w.Name))
		for _, n := range nodes {
			if n == w.Name {
				t.Fatalf("roll %d: approver on %v: it landed on the unproven %s while %s could take it", i+1, nodes, w.Name, x.Name)
			}
		}
		t.Logf("roll %d: approver on %v (not on the unproven %s)", i+1, nodes, w.Name)
	}
}

// Hostile nodes, each acting under the identity it claims (the admin
// impersonates system:node:<name>, as that node's credentials would): a
// node that reports the API server's own address (learnt from the
// default/kubernetes EndpointSlice, set nowhere in the manifests) and one
// that reports another node's address both ask for a serving certificate
// for it; both stay pending with the rule named.
func TestHostileNodesGetNoCertificateForOthersAddresses(t *testing.T) {
	ctx := ctxT(t, 3*time.Minute)
	slice, err := cluster.Clientset().DiscoveryV1().EndpointSlices("default").Get(ctx, "kubernetes", metav1.GetOptions{})
	if err != nil || len(slice.Endpoints) == 0 || len(slice.Endpoints[0].Addresses) == 0 {
		t.Fatalf("the API server's EndpointSlice default/kubernetes: %v %+v", err, slice)
	}
	apiIP := slice.Endpoints[0].Addresses[0]
	victim := cluster.Workers()[0]
	for _, tc := range []struct {
		node, ip string
		rule     string
	}{
		{"rogue-apiserver", apiIP, "SANDenied"},
		{"rogue-twin", victim.IP, "AddressClaimedByOtherNode"},
	} {
		// A Node object whose status reports the address, as a kubelet
		// with those credentials can write its own status.
		n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: tc.node, Labels: map[string]string{"kubernetes.io/os": "windows"}},
			Status: corev1.NodeStatus{Addresses: []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: tc.ip}}}}
		if _, err := cluster.Clientset().CoreV1().Nodes().Create(ctx, n, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			_ = cluster.Clientset().CoreV1().Nodes().Delete(context.Background(), n.Name, metav1.DeleteOptions{})
		})
		if got := node(t, ctx, tc.node); len(got.Status.Addresses) == 0 || got.Status.Addresses[0].Address != tc.ip {
			t.Fatalf("Node %s reports %+v, want %s", tc.node, got.Status.Addresses, tc.ip)
		}
		user := names.NodeUser(tc.node)
		created, _ := createServingCSR(t, ctx, impersonating(t, user, "system:nodes", "system:authenticated"), user,
			metav1.ObjectMeta{GenerateName: "e2e-" + tc.node + "-"}, tc.node, tc.ip)
		deleteCSRAtCleanup(t, created.Name)
		msg := waitCSREvent(t, ctx, created.Name, tc.rule)
		got, err := cluster.Clientset().CertificatesV1().CertificateSigningRequests().Get(ctx, created.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if csrCondition(got, certv1.CertificateApproved) != nil {
			t.Fatalf("%s's CSR for %s was approved", tc.node, tc.ip)
		}
		t.Logf("%s asking for %s: left pending: %s", tc.node, tc.ip, msg)
	}
}

// waitCSREvent waits for an event with reason on the CSR name and returns
// its message.
func waitCSREvent(t *testing.T, ctx context.Context, name, reason string) string {
	t.Helper()
	var msg string
	if err := localcluster.Poll(ctx, time.Minute, "a Warning "+reason+" on "+name, func() (bool, error) {
		evs, err := cluster.Clientset().CoreV1().Events("").List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=" + name})
		if err != nil {
			return false, nil
		}
		for _, e := range evs.Items {
			if e.Reason == reason {
				msg = e.Message
				return true, nil
			}
		}
		return false, nil
	}); err != nil {
		t.Fatalf("%v\n%s", err, podsAndEvents(ctx))
	}
	return msg
}

// approverWith adds args to the approver's container and waits until both
// replicas run with them; the test's end applies the standalone overlay
// again.
func approverWith(t *testing.T, ctx context.Context, args ...string) {
	t.Helper()
	ops := make([]string, 0, len(args))
	for _, a := range args {
		ops = append(ops, fmt.Sprintf(`{"op":"add","path":"/spec/template/spec/containers/0/args/-","value":%q}`, a))
	}
	if out, err := cluster.Kubectl(ctx, "-n", deploy.Namespace, "patch", "deployment", "certready-approver", "--type=json", "-p", "["+strings.Join(ops, ",")+"]"); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		if _, err := cluster.Kubectl(ctx, "apply", "-k", standalone); err != nil {
			t.Error(err)
		}
		if err := deploy.WaitRollout(ctx, cluster, t.Logf); err != nil {
			t.Error(err)
		}
	})
	err := localcluster.Poll(ctx, 2*time.Minute, fmt.Sprintf("the approver restarted with %v", args), func() (bool, error) {
		dep, err := cluster.Clientset().AppsV1().Deployments(deploy.Namespace).Get(ctx, "certready-approver", metav1.GetOptions{})
		return err == nil && dep.Status.ObservedGeneration == dep.Generation && dep.Status.UpdatedReplicas == 2 &&
			dep.Status.AvailableReplicas == 2 && dep.Status.Replicas == 2, nil
	})
	if err != nil {
		t.Fatalf("%v\n%s", err, podsAndEvents(ctx))
	}
}

// One identity's pile of requests (a stuck kubelet re-requests about every
// 15 minutes) counts once against the flood guard, and identities no Node
// has do not count at all: with --max-pending=5, a node that has filed six
// is superseded down to its newest, six minted identities wait, and a real
// worker asking meanwhile is still approved. (Counting CSRs, as before,
// the six alone tripped the guard for the whole cluster.) The limit leaves
// room for two more nodes whose kubelets happen to have a request pending
// while the approver restarts (seen on kind); the six would still trip it.
func TestOneNodesPileOfRequestsStopsNobody(t *testing.T) {
	ctx := ctxT(t, 4*time.Minute)
	approverWith(t, ctx, "--max-pending=5")
	const flooder = "flood-node" // no Node object: its newest waits (NodeNotInInventory)
	user := names.NodeUser(flooder)
	cs := impersonating(t, user, "system:nodes", "system:authenticated")
	var pile []string
	for i := 0; i < 6; i++ {
		c, _ := createServingCSR(t, ctx, cs, user, metav1.ObjectMeta{Name: fmt.Sprintf("e2e-flood-%d", i)}, flooder, "198.51.100.7")
		deleteCSRAtCleanup(t, c.Name)
		pile = append(pile, c.Name)
	}
	for _, name := range pile[:len(pile)-1] {
		waitCSREvent(t, ctx, name, "SupersededByNewerRequest")
	}
	t.Logf("%s's newest: %s", flooder, waitCSREvent(t, ctx, pile[len(pile)-1], "NodeNotInInventory"))
	// Identities minted with a bootstrap token (any system:node:<name> a
	// holder asks for), more than the limit: no Node has their names, so
	// they are no node of the inventory and do not count.
	var minted []string
	for i := 0; i < 6; i++ {
		m := fmt.Sprintf("minted-%d", i)
		c, _ := createServingCSR(t, ctx, impersonating(t, names.NodeUser(m), "system:nodes", "system:authenticated"), names.NodeUser(m),
			metav1.ObjectMeta{GenerateName: "e2e-" + m + "-"}, m, "198.51.100.8")
		deleteCSRAtCleanup(t, c.Name)
		minted = append(minted, c.Name)
		waitCSREvent(t, ctx, c.Name, "NodeNotInInventory")
	}
	pile = append(pile, minted...)

	w := cluster.Workers()[0]
	name, _ := requestServingCert(t, ctx, w.Name, w.IP)
	deleteCSRAtCleanup(t, name)
	if err := localcluster.Poll(ctx, time.Minute, "the worker's CSR "+name+" approved", func() (bool, error) {
		c, err := cluster.Clientset().CertificatesV1().CertificateSigningRequests().Get(ctx, name, metav1.GetOptions{})
		return err == nil && csrCondition(c, certv1.CertificateApproved) != nil, nil
	}); err != nil {
		t.Fatalf("%v\n%s", err, podsAndEvents(ctx))
	}
	for _, n := range pile {
		c, err := cluster.Clientset().CertificatesV1().CertificateSigningRequests().Get(ctx, n, metav1.GetOptions{})
		if err != nil || csrCondition(c, certv1.CertificateApproved) != nil {
			t.Fatalf("the flooder's %s: %v %+v", n, err, c.Status.Conditions)
		}
	}
	t.Logf("%s approved beside %s's pile and %d minted identities (%d requests)", name, flooder, len(minted), len(pile))
}

// A spoofed certready.io/node label: anyone who may create CSRs can label
// one for a victim node, to fill that node's agent's cache. Created by a
// requester that is no node (here the admin), the label is removed by the
// approver; created by another node, it is set to that node.
func TestSpoofedNodeLabelsAreCorrected(t *testing.T) {
	ctx := ctxT(t, 2*time.Minute)
	victim, other := cluster.Workers()[0], cluster.Workers()[1]
	for _, tc := range []struct {
		user   string
		groups []string
		node   string // the CSR's subject node
		want   string // the label the approver leaves ("": none)
	}{
		{"", nil, victim.Name, ""}, // the admin: any requester that is no node
		{names.NodeUser(other.Name), []string{"system:nodes", "system:authenticated"}, other.Name, other.Name},
	} {
		as, who := cluster.Clientset(), "the admin"
		if tc.user != "" {
			as, who = impersonating(t, tc.user, tc.groups...), tc.user
		}
		created, _ := createServingCSR(t, ctx, as, who,
			metav1.ObjectMeta{GenerateName: "e2e-spoof-", Labels: map[string]string{names.NodeLabel: victim.Name}}, tc.node, "192.0.2.250")
		deleteCSRAtCleanup(t, created.Name)
		var got map[string]string
		if err := localcluster.Poll(ctx, time.Minute, fmt.Sprintf("the label of %s (by %s) corrected to %q", created.Name, tc.user, tc.want), func() (bool, error) {
			c, err := cluster.Clientset().CertificatesV1().CertificateSigningRequests().Get(ctx, created.Name, metav1.GetOptions{})
			if err != nil {
				return false, nil
			}
			got = c.Labels
			return c.Labels[names.NodeLabel] == tc.want, nil
		}); err != nil {
			t.Fatalf("%v; labels %v", err, got)
		}
		t.Logf("CSR by %q (empty: the admin) labelled for %s: label now %q", tc.user, victim.Name, got[names.NodeLabel])
	}
}

// runCertready runs the certready binary built for this host (the
// operator's tools: preflight, status) and returns its standard output and
// exit code; a run that could not start or exit fails the test.
func runCertready(t *testing.T, ctx context.Context, args ...string) (string, int) {
	t.Helper()
	bin := os.Getenv("CERTREADY_BIN")
	if bin == "" {
		t.Fatal("CERTREADY_BIN (the certready binary built for this host) is not set; run the suite through make e2e or make e2e-kind")
	}
	var stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	var exit *exec.ExitError
	switch {
	case err == nil:
		return string(out), 0
	case errors.As(err, &exit):
		return string(out), exit.ExitCode()
	}
	t.Fatalf("certready %s: %v\n%s%s", args[0], err, out, stderr.String())
	return "", -1
}

// The safe rollout's preflight, as an operator runs it with a kubeconfig:
// a node no agent reports on (here a Node object without a kubelet, as a
// Windows node or one with another kubelet directory looks) would stay
// tainted by a new NodeReadinessRule; labelling it out clears the way.
func TestPreflightListsNodesARuleWouldKeepTainted(t *testing.T) {
	ctx := ctxT(t, 3*time.Minute)
	kubeconfig := writeKubeconfig(t, cluster.AdminConfig())
	preflight := func() (string, int) { return runCertready(t, ctx, "preflight", "--kubeconfig="+kubeconfig) }
	for _, w := range cluster.Workers() {
		waitCondition(t, ctx, w.Name, 2*time.Minute, "ready", hasReason("KubeletServingCertReady", corev1.ConditionFalse))
	}
	out, code := preflight()
	if code != 0 || !strings.Contains(out, "safe to create now") {
		t.Fatalf("with every worker ready: exit %d\n%s", code, out)
	}
	for _, w := range cluster.Workers() {
		if !regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(w.Name) + `\s+TaintedBriefly\s`).MatchString(out) {
			t.Errorf("worker %s is not listed as tainted briefly:\n%s", w.Name, out)
		}
	}
	legacy := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "legacy-1", Labels: map[string]string{"kubernetes.io/os": "windows"}}}
	if _, err := cluster.Clientset().CoreV1().Nodes().Create(ctx, legacy, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cluster.Clientset().CoreV1().Nodes().Delete(context.Background(), legacy.Name, metav1.DeleteOptions{})
	})
	out, code = preflight()
	if code != 1 || !regexp.MustCompile(`(?m)^legacy-1\s+StaysTainted\s+no KubeletServingCertNotReady condition`).MatchString(out) ||
		!strings.Contains(out, "1 of ") {
		t.Fatalf("with a node no agent reports on: exit %d, want 1 naming legacy-1\n%s", code, out)
	}
	t.Logf("preflight with an unreported node (exit %d):\n%s", code, out)
	if _, err := cluster.Kubectl(ctx, "label", "node", legacy.Name, "certready.io/readiness-rule-opt-out=true"); err != nil {
		t.Fatal(err)
	}
	out, code = preflight()
	if code != 0 || !regexp.MustCompile(`(?m)^legacy-1\s+Excluded\s`).MatchString(out) {
		t.Fatalf("after opting legacy-1 out: exit %d\n%s", code, out)
	}
}

// writeKubeconfig writes cfg as a kubeconfig file, as an operator has one.
func writeKubeconfig(t *testing.T, cfg *rest.Config) string {
	t.Helper()
	caData, certData, keyData := cfg.CAData, cfg.CertData, cfg.KeyData
	read := func(data []byte, file string) []byte {
		if len(data) > 0 || file == "" {
			return data
		}
		b, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	kc := clientcmdapi.NewConfig()
	kc.Clusters["e2e"] = &clientcmdapi.Cluster{Server: cfg.Host, CertificateAuthorityData: read(caData, cfg.CAFile)}
	kc.AuthInfos["admin"] = &clientcmdapi.AuthInfo{ClientCertificateData: read(certData, cfg.CertFile), ClientKeyData: read(keyData, cfg.KeyFile), Token: cfg.BearerToken}
	kc.Contexts["e2e"] = &clientcmdapi.Context{Cluster: "e2e", AuthInfo: "admin"}
	kc.CurrentContext = "e2e"
	path := filepath.Join(t.TempDir(), "kubeconfig")
	if err := clientcmd.WriteToFile(*kc, path); err != nil {
		t.Fatal(err)
	}
	return path
}

// The fleet view (certready status, also kubectl certready) on the real
// cluster: every node ready with its certificate's expiry and CSR, exit 0;
// a node no agent reports on is listed by --problems, exit 1.
func TestStatusShowsEveryNodeAndItsProblems(t *testing.T) {
	ctx := ctxT(t, 3*time.Minute)
	kubeconfig := writeKubeconfig(t, cluster.AdminConfig())
	type row struct {
		Node      string     `json:"node"`
		Ready     bool       `json:"ready"`
		CSR       string     `json:"csr"`
		NotAfter  *time.Time `json:"notAfter"`
		Tainted   bool       `json:"tainted"`
		Completed []string   `json:"bootstrapCompletedBy"`
		Problem   string     `json:"problem"`
	}
	status := func(args ...string) ([]row, int, string) {
		out, code := runCertready(t, ctx, append([]string{"status", "--kubeconfig=" + kubeconfig, "-o", "json"}, args...)...)
		var doc struct{ Nodes []row }
		if err := json.Unmarshal([]byte(out), &doc); err != nil {
			t.Fatalf("certready status -o json: %v\n%s", err, out)
		}
		return doc.Nodes, code, out
	}
	var rows []row
	err := localcluster.Poll(ctx, 2*time.Minute, "certready status to report every node ready", func() (bool, error) {
		var code int
		rows, code, _ = status()
		return code == 0 && len(rows) == len(cluster.Nodes()), nil
	})
	if err != nil {
		t.Fatalf("%v: %+v", err, rows)
	}
	for _, r := range rows {
		if !r.Ready || r.Tainted || r.NotAfter == nil || r.NotAfter.Before(time.Now()) {
			t.Errorf("node %s: %+v", r.Node, r)
		}
	}
	for _, w := range cluster.Workers() {
		for _, r := range rows {
			if r.Node == w.Name && (r.CSR == "" || len(r.Completed) == 0) {
				t.Errorf("worker %s: no issuing CSR or no bootstrap completion mark: %+v", w.Name, r)
			}
		}
	}
	unreported := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "unreported-1"}}
	if _, err := cluster.Clientset().CoreV1().Nodes().Create(ctx, unreported, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cluster.Clientset().CoreV1().Nodes().Delete(context.Background(), unreported.Name, metav1.DeleteOptions{})
	})
	problems, code, out := status("--problems")
	if code != 1 || len(problems) != 1 || problems[0].Node != unreported.Name || !strings.Contains(problems[0].Problem, "no certready agent reports on this node") {
		t.Fatalf("with %s: exit %d, want 1 and only it listed\n%s", unreported.Name, code, out)
	}
	t.Logf("certready status --problems (exit %d): %s", code, out)
}

// A node registered again (kubectl delete node, then a kubelet
// restart; the agent keeps running): the new Node comes back with the
// startup taint and no condition, and the agent must publish the condition
// at once, not at its next heartbeat (5 min), so that the taint is lifted.
func TestNodeRegisteredAgainIsUntaintedAtOnce(t *testing.T) {
	ctx := ctxT(t, 4*time.Minute)
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
			if !deploy.HasStartupTaint(n) || certCondition(n) != nil {
				t.Fatalf("the kubelet registered %s without the startup taint or with a condition: taints %v, condition %+v", w, n.Spec.Taints, certCondition(n))
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
// renews it and the condition recovers.
func TestExpiredCertificateIsReportedAndRenewalRecovers(t *testing.T) {
	ctx := ctxT(t, 10*time.Minute)
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
	scaleApprover(t, ctx, 0)
	t.Cleanup(func() { restoreApprover(t) })
	c := certCondition(waitCondition(t, ctx, n.Name, 5*time.Minute, "CertificateExpired", hasReason("CertificateExpired", corev1.ConditionTrue)))
	t.Logf("expired: %s", c.Message)
	scaleApprover(t, ctx, 2)
	waitCondition(t, ctx, n.Name, 3*time.Minute, "ready again after renewal", func(n *corev1.Node) bool {
		c := certCondition(n)
		return c != nil && c.Status == corev1.ConditionFalse
	})
}

// restoreApprover brings the approver back after a failed scenario, so that
// one failure does not cascade into the next scenarios.
func restoreApprover(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	d, err := cluster.Clientset().AppsV1().Deployments(deploy.Namespace).Get(ctx, "certready-approver", metav1.GetOptions{})
	if err == nil && d.Spec.Replicas != nil && *d.Spec.Replicas != 2 {
		scaleApprover(t, ctx, 2)
	}
}
