package suite

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"

	"github.com/certready/certready/e2e/deploy"
	"github.com/certready/certready/e2e/localcluster"
)

// Taint fallback off: nothing removes the taint even with the condition
// False; turning it on removes it.
func TestTaintStaysUntilTheFallbackIsTurnedOn(t *testing.T) {
	ctx := ctxT(t, 5*time.Minute)
	deployed(t)
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
		if !deploy.HasReadinessTaint(node(t, ctx, n.Name)) {
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
			has := strings.Contains(strings.Join(p.Spec.Containers[0].Args, " "), "--lift-readiness-taint")
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

// A stale False condition (its agent gone for longer than the approver's
// --condition-max-age) never lifts a re-added taint; the agent's return
// (a fresh heartbeat) does.
func TestStaleConditionNeverLiftsAReAddedTaint(t *testing.T) {
	ctx := ctxT(t, 6*time.Minute)
	deployed(t)
	w := cluster.Workers()[0].Name
	waitCondition(t, ctx, w, 2*time.Minute, "ready and untainted", readyAndUntainted)
	// A short max age, so that the agent's absence makes the condition
	// stale within the test (the default is twice the 5-minute heartbeat).
	// (Waited for below, together with the agent leaving the node.)
	patchApprover(t, ctx, "--condition-max-age=15s")
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
		return err == nil && deploy.DeploymentRolledOut(dep) && dep.Status.Replicas == 2, nil
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
	// The kubelet's heartbeats change the Node's resourceVersion: retry the
	// update on a conflict.
	if err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		n := node(t, ctx, w)
		n.Spec.Taints = append(n.Spec.Taints, corev1.Taint{Key: localcluster.ReadinessTaint, Value: "pending", Effect: corev1.TaintEffectNoSchedule})
		_, err := cluster.Clientset().CoreV1().Nodes().Update(ctx, n, metav1.UpdateOptions{})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	// The fallback reacts within milliseconds when it acts (see the
	// benchmarks): 10 s of a taint that stays is a clear no.
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if !deploy.HasReadinessTaint(node(t, ctx, w)) {
			t.Fatal("a stale False condition lifted the re-added taint")
		}
		time.Sleep(500 * time.Millisecond)
	}
	t.Logf("the taint stayed for 10 s on a condition last written %s ago", time.Since(c.LastHeartbeatTime.Time).Round(time.Second))
	back()
	waitCondition(t, ctx, w, 2*time.Minute, "untainted once the agent is back and writes a fresh heartbeat", readyAndUntainted)
}
