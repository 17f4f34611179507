package suite

import (
	"context"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"fmt"
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

	"github.com/certready/certready/e2e/deploy"
	"github.com/certready/certready/e2e/localcluster"
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

// 1. Happy path: without a human, each worker goes from tainted to
// KubeletServingCertNotReady=False and untainted, and kubectl logs through
// its kubelet fails before and works after.
func Test01HappyPath(t *testing.T) {
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

	start := time.Now()
	if err := deploy.Certready(ctx, cluster, standalone, t.Logf); err != nil {
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

// 2. Approver stopped when a worker joins: it stays tainted with CSRPending;
// scaling the approver back up lifts it.
func Test02ApproverStoppedWhenAWorkerJoins(t *testing.T) {
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

// 3. Identity mismatch: a CSR with another IP, made with the worker's own
// credentials, stays pending with a Warning naming the rule; the worker's
// condition stays truthful.
func Test03IdentityMismatch(t *testing.T) {
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
	if c.Labels["certready.io/node"] != w.Name {
		t.Errorf("labels %v", c.Labels)
	}
	if got := certCondition(node(t, ctx, w.Name)); got.Status != corev1.ConditionFalse {
		t.Errorf("a foreign pending CSR changed %s's truthful condition: %+v", w.Name, got)
	}
	_ = cluster.Clientset().CertificatesV1().CertificateSigningRequests().Delete(ctx, name, metav1.DeleteOptions{})
}

// 4 and 6. Stale endpoint and restart safety: a renewed certificate lands
// on disk while the kubelet keeps serving the old one; the condition says
// EndpointCertificateMismatch. Restarting the agent then must never publish
// False, and restarting the apiserver loses nothing: swapping the old file
// back afterwards is still seen.
func Test04StaleEndpointAndRestartSafety(t *testing.T) {
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

// 5. Leader failover: kill the leading approver's process; the other
// replica takes the Lease and approves the next CSR.
func Test05LeaderFailover(t *testing.T) {
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

// 8. Taint fallback off: nothing removes the taint even with the condition
// False; turning it on removes it.
func Test08TaintFallbackOff(t *testing.T) {
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

// 9. RBAC and admission: an agent's own node-bound token cannot change
// another node's status, nor another condition of its own node.
func Test09AgentTokenIsConfinedToItsNode(t *testing.T) {
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
}

// 10. A node registered again (kubectl delete node, then a kubelet
// restart; the agent keeps running): the new Node comes back with the
// startup taint and no condition, and the agent must publish the condition
// at once, not at its next heartbeat (5 min), so that the taint is lifted.
func Test10NodeRegisteredAgain(t *testing.T) {
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

// 7. Expiry (runs last: it is the slowest): with 3-minute certificates and no approver, the certificate
// expires unrenewed and the condition says so; the approver's return
// renews it and the condition recovers.
func Test07Expiry(t *testing.T) {
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
