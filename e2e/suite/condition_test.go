package suite

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/certready/certready/e2e/deploy"
	"github.com/certready/certready/e2e/localcluster"
)

// Stale endpoint and restart safety: a renewed certificate lands
// on disk while the kubelet keeps serving the old one; the condition says
// EndpointCertificateMismatch. Restarting the agent then must never publish
// False, and restarting the apiserver loses nothing: swapping the old file
// back afterwards is still seen.
func TestStaleEndpointIsNamedAndRestartsNeverPublishFalse(t *testing.T) {
	ctx := ctxT(t, 6*time.Minute)
	deployed(t)
	// Not the last worker: on kind the expiry scenario makes that one join
	// again and leaves it a 3-minute certificate, which its kubelet renews
	// by itself minutes later, possibly in the middle of this scenario
	// (seen in CI: a fresh certificate served, and rightly published False).
	w := cluster.Workers()[0]
	restore := serveStaleEndpoint(t, ctx, w.Name, w.IP)
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
	restore()
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

// RBAC and admission: an agent's own node-bound token cannot change
// another node's status, nor another condition of its own node.
func TestAgentTokenIsConfinedToItsNode(t *testing.T) {
	ctx := ctxT(t, 2*time.Minute)
	deployed(t)
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
