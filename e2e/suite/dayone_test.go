package suite

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/certready/certready/e2e/deploy"
	"github.com/certready/certready/e2e/localcluster"
	"github.com/certready/certready/reporter/fleet"
)

// upgrade helm-upgrades the release to values (nil: the defaults).
func upgrade(t *testing.T, ctx context.Context, values map[string]any) int {
	t.Helper()
	rev, err := deploy.ChartUpgrade(ctx, cluster, chartDir, values, t.Logf)
	if err != nil {
		t.Fatal(err)
	}
	return rev
}

// restoreRelease brings the release back to the chart's defaults and waits
// for the rollout, for the scenarios after this one.
func restoreRelease(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	if _, err := deploy.ChartUpgrade(ctx, cluster, chartDir, nil, t.Logf); err != nil {
		t.Errorf("restoring the release's defaults: %v", err)
		return
	}
	if err := deploy.WaitRollout(ctx, cluster, t.Logf); err != nil {
		t.Errorf("after restoring the release's defaults: %v\n%s", err, podsAndEvents(ctx))
	}
}

// approverNodes waits until the approver's pods of the current template are
// all Running and ready, and returns the nodes they run on.
func approverNodes(t *testing.T, ctx context.Context, what string) []string {
	t.Helper()
	var on []string
	err := localcluster.Poll(ctx, 3*time.Minute, what, func() (bool, error) {
		on = nil
		d, err := cluster.Clientset().AppsV1().Deployments(deploy.Namespace).Get(ctx, "certready-approver", metav1.GetOptions{})
		if err != nil || !deploy.DeploymentRolledOut(d) {
			return false, nil
		}
		pods, err := cluster.Clientset().CoreV1().Pods(deploy.Namespace).List(ctx, metav1.ListOptions{LabelSelector: fleet.ApproverSelector})
		if err != nil {
			return false, nil
		}
		for _, p := range pods.Items {
			if p.DeletionTimestamp != nil {
				return false, nil // the old template's, still terminating
			}
			on = append(on, p.Spec.NodeName)
		}
		return len(on) == int(*d.Spec.Replicas), nil
	})
	if err != nil {
		t.Fatalf("%v\n%s", err, podsAndEvents(ctx))
	}
	return on
}

func labelNode(t *testing.T, ctx context.Context, name, key string, value *string) {
	t.Helper()
	v := "null"
	if value != nil {
		v = fmt.Sprintf("%q", *value)
	}
	patch := fmt.Sprintf(`{"metadata":{"labels":{%q:%s}}}`, key, v)
	if _, err := cluster.Clientset().CoreV1().Nodes().Patch(ctx, name, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
}

// A managed cluster's first day: each approver.placement choice schedules
// the approver where it says, and one no node can satisfy is named by
// `certready preflight` (exit 1) while the approver stays Pending.
func TestApproverPlacementChoices(t *testing.T) {
	ctx := ctxT(t, 14*time.Minute)
	deployed(t)
	w := cluster.Workers()[0].Name
	on := "true"
	// Cleanups run last first: the label goes, then the defaults return.
	t.Cleanup(func() { restoreRelease(t) })
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		labelNode(t, ctx, w, fleet.ApproverPoolLabel, nil)
	})
	nodes, err := cluster.Clientset().CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: "node-role.kubernetes.io/control-plane"})
	if err != nil || len(nodes.Items) == 0 {
		t.Fatalf("no control-plane node to place on: %v", err)
	}
	var controlPlane []string
	for _, n := range nodes.Items {
		controlPlane = append(controlPlane, n.Name)
	}
	kubeconfig := writeKubeconfig(t, cluster.AdminConfig())

	// pool, and no node labelled: Pending, named.
	upgrade(t, ctx, map[string]any{"approver": map[string]any{"placement": "pool"}})
	err = localcluster.Poll(ctx, 2*time.Minute, "an approver pod Pending for want of a node", func() (bool, error) {
		pods, err := cluster.Clientset().CoreV1().Pods(deploy.Namespace).List(ctx, metav1.ListOptions{LabelSelector: fleet.ApproverSelector})
		if err != nil {
			return false, nil
		}
		return slices.ContainsFunc(pods.Items, func(p corev1.Pod) bool {
			return p.Status.Phase == corev1.PodPending && p.Spec.NodeName == "" && p.DeletionTimestamp == nil
		}), nil
	})
	if err != nil {
		t.Fatalf("%v\n%s", err, podsAndEvents(ctx))
	}
	out, code := runCertready(t, ctx, "preflight", "--kubeconfig="+kubeconfig)
	if code != 1 || !strings.Contains(out, "Install problem NoEligibleNode, Deployment "+deploy.Namespace+"/certready-approver") ||
		!strings.Contains(out, "placement pool") || !strings.Contains(out, "kubectl label node <name> "+fleet.ApproverPoolLabel+"=true") {
		t.Errorf("preflight with no node for the approver: exit %d\n%s", code, out)
	}
	t.Logf("pool, no node labelled: preflight says\n%s", out)

	// pool, one worker labelled: every replica there.
	labelNode(t, ctx, w, fleet.ApproverPoolLabel, &on)
	got := approverNodes(t, ctx, "the approver on the labelled worker")
	for _, n := range got {
		if n != w {
			t.Errorf("placement pool: an approver on %s, only %s is labelled (all on %v)", n, w, got)
		}
	}
	if out, code := runCertready(t, ctx, "preflight", "--kubeconfig="+kubeconfig); code != 0 || strings.Contains(out, "Install problem") {
		t.Errorf("preflight with the approver placed: exit %d\n%s", code, out)
	}

	// control-plane: only there, whatever the pool label says.
	upgrade(t, ctx, map[string]any{"approver": map[string]any{"placement": "control-plane"}})
	for _, n := range approverNodes(t, ctx, "the approver on the control plane") {
		if !slices.Contains(controlPlane, n) {
			t.Errorf("placement control-plane: an approver on %s (control plane: %v)", n, controlPlane)
		}
	}

	// any: no required node affinity, and it runs.
	upgrade(t, ctx, map[string]any{"approver": map[string]any{"placement": "any"}})
	d, err := cluster.Clientset().AppsV1().Deployments(deploy.Namespace).Get(ctx, "certready-approver", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if na := d.Spec.Template.Spec.Affinity.NodeAffinity; na.RequiredDuringSchedulingIgnoredDuringExecution != nil {
		t.Errorf("placement any: required affinity %+v", na.RequiredDuringSchedulingIgnoredDuringExecution)
	}
	t.Logf("placement any: approver on %v", approverNodes(t, ctx, "the approver placed anywhere"))
}

// Pod Security: a release namespace that enforces baseline is refused by
// the chart before anything is applied, and agent pods it refuses are named
// by `certready preflight` with the label that admits them.
func TestPodSecurityRefusalsAreNamed(t *testing.T) {
	ctx := ctxT(t, 8*time.Minute)
	deployed(t)
	const enforce = "pod-security.kubernetes.io/enforce"
	nsPatch := func(value string) {
		t.Helper()
		v := "null"
		if value != "" {
			v = fmt.Sprintf("%q", value)
		}
		patch := fmt.Sprintf(`{"metadata":{"labels":{%q:%s}}}`, enforce, v)
		if _, err := cluster.Clientset().CoreV1().Namespaces().Patch(ctx, deploy.Namespace, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	before, err := deploy.ChartRevision(cluster, t.Logf)
	if err != nil {
		t.Fatal(err)
	}
	nsPatch("baseline")
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
		defer cancel()
		if _, err := cluster.Clientset().CoreV1().Namespaces().Patch(ctx, deploy.Namespace, types.MergePatchType,
			[]byte(fmt.Sprintf(`{"metadata":{"labels":{%q:null}}}`, enforce)), metav1.PatchOptions{}); err != nil {
			t.Error(err)
		}
		// The DaemonSet controller retries a refused pod with backoff; an
		// update of the DaemonSet queues it at once.
		nudge := fmt.Sprintf(`{"metadata":{"annotations":{"e2e.certready.io/retry":%q}}}`, time.Now().Format(time.RFC3339Nano))
		if _, err := cluster.Clientset().AppsV1().DaemonSets(deploy.Namespace).Patch(ctx, "certready-agent", types.MergePatchType, []byte(nudge), metav1.PatchOptions{}); err != nil {
			t.Error(err)
		}
		if err := deploy.WaitRollout(ctx, cluster, t.Logf); err != nil {
			t.Errorf("agents after Pod Security was lifted: %v\n%s", err, podsAndEvents(ctx))
		}
	})

	_, err = deploy.ChartUpgrade(ctx, cluster, chartDir, nil, t.Logf)
	if err == nil || !strings.Contains(err.Error(), `namespace `+deploy.Namespace+` enforces Pod Security "baseline"`) ||
		!strings.Contains(err.Error(), "kubectl label namespace "+deploy.Namespace+" pod-security.kubernetes.io/enforce=privileged --overwrite") {
		t.Errorf("helm upgrade into a baseline namespace: %v", err)
	}
	if after, err := deploy.ChartRevision(cluster, t.Logf); err != nil || after != before {
		t.Errorf("the refused upgrade left revision %d (%v), want %d: something was applied", after, err, before)
	}

	// A pod of the agent, deleted, cannot come back.
	w := cluster.Workers()[0].Name
	pods, err := cluster.Clientset().CoreV1().Pods(deploy.Namespace).List(ctx, metav1.ListOptions{LabelSelector: fleet.AgentSelector, FieldSelector: "spec.nodeName=" + w})
	if err != nil || len(pods.Items) != 1 {
		t.Fatalf("the agent on %s: %v %d pods", w, err, len(pods.Items))
	}
	if err := cluster.Clientset().CoreV1().Pods(deploy.Namespace).Delete(ctx, pods.Items[0].Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	kubeconfig := writeKubeconfig(t, cluster.AdminConfig())
	var out string
	err = localcluster.Poll(ctx, 2*time.Minute, "preflight to name the refused agent pod", func() (bool, error) {
		var code int
		out, code = runCertready(t, ctx, "preflight", "--kubeconfig="+kubeconfig, "-o", "json")
		return code == 1 && strings.Contains(out, fleet.AgentPodsRefused), nil
	})
	if err != nil {
		t.Fatalf("%v\n%s\n%s", err, out, podsAndEvents(ctx))
	}
	if !strings.Contains(out, "violates PodSecurity") || !strings.Contains(out, "pod-security.kubernetes.io/enforce=privileged --overwrite") {
		t.Errorf("preflight -o json does not quote the refusal and the fix:\n%s", out)
	}
	t.Logf("preflight names the refused agent pod:\n%s", out)
}

// The readiness rule's safe Helm path: created in dry run, switched live
// by one upgrade, and an upgrade that would change an immutable field
// refused before anything is applied.
func TestReadinessRuleHelmPath(t *testing.T) {
	ctx := ctxT(t, 8*time.Minute)
	deployed(t)
	// The CRD alone: no node-readiness-controller runs here, so no rule
	// taints anything; what is checked is what the chart asks of the API.
	if out, err := cluster.Kubectl(ctx, "apply", "-f", "../../manifests/crds/nodereadinessrules.crd.yaml"); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if out, err := cluster.Kubectl(ctx, "wait", "--for=condition=Established", "--timeout=60s", "crd/nodereadinessrules.readiness.node.x-k8s.io"); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	t.Cleanup(func() {
		restoreRelease(t)
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if out, err := cluster.Kubectl(ctx, "delete", "--ignore-not-found", "-f", "../../manifests/crds/nodereadinessrules.crd.yaml"); err != nil {
			t.Errorf("%v\n%s", err, out)
		}
	})
	rule := func() string {
		out, err := cluster.Kubectl(ctx, "get", "nodereadinessrule", "kubelet-serving-cert", "-o", "jsonpath={.spec.dryRun} {.spec.nodeSelector}")
		if err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
		return out
	}
	rev := upgrade(t, ctx, map[string]any{"taint": map[string]any{"mode": "nrc"}})
	if got := rule(); !strings.HasPrefix(got, "true ") {
		t.Errorf("taint.mode=nrc created the rule with dryRun/nodeSelector %q, want dry run", got)
	}
	created := rule()

	_, err := deploy.ChartUpgrade(ctx, cluster, chartDir, map[string]any{"taint": map[string]any{"mode": "nrc",
		"nrc": map[string]any{"nodeSelector": map[string]any{"matchLabels": map[string]any{"pool": "gpu"}}}}}, t.Logf)
	if err == nil || !strings.Contains(err.Error(), "NodeReadinessRule kubelet-serving-cert exists and its nodeSelector") ||
		!strings.Contains(err.Error(), "nothing was applied") {
		t.Errorf("an upgrade changing the rule's nodeSelector: %v", err)
	}
	if now, err := deploy.ChartRevision(cluster, t.Logf); err != nil || now != rev {
		t.Errorf("after the refused upgrade: revision %d (%v), want %d", now, err, rev)
	}
	if got := rule(); got != created {
		t.Errorf("the refused upgrade changed the rule: %q, was %q", got, created)
	}

	upgrade(t, ctx, map[string]any{"taint": map[string]any{"mode": "nrc", "nrc": map[string]any{"dryRun": false}}})
	if got := rule(); !strings.HasPrefix(got, "false ") {
		t.Errorf("dryRun=false upgrade: rule %q", got)
	}
}
