package fleet

import (
	"fmt"
	"sort"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/component-helpers/scheduling/corev1/nodeaffinity"
	"k8s.io/klog/v2"

	schedhelper "k8s.io/component-helpers/scheduling/corev1"
)

// ApproverSelector selects certready's approver Deployments (chart and
// overlays alike, any release name), in any namespace.
const ApproverSelector = "app.kubernetes.io/name=certready,app.kubernetes.io/component=approver"

// PlacementAnnotation names the approver's placement choice on its
// Deployment (the chart's approver.placement; custom: an affinity of the
// operator's own).
const PlacementAnnotation = "certready.io/placement"

// ApproverPoolLabel marks the nodes trusted to run the approver. Under
// node-restriction.kubernetes.io/ no kubelet can set it on itself.
const ApproverPoolLabel = "node-restriction.kubernetes.io/certready-approver-pool"

// The problems an installation can have that keep every node's readiness
// taint: nothing approves, or nothing reports.
const (
	// NoEligibleNode: no node may run the approver's pods.
	NoEligibleNode = "NoEligibleNode"
	// AgentPodsRefused: the agent DaemonSet's pods are refused at creation
	// (Pod Security, a quota, an admission webhook).
	AgentPodsRefused = "AgentPodsRefused"
)

// InstallProblem is a reason certready, as installed, cannot lift the
// readiness taint from any node.
type InstallProblem struct {
	// Object is the workload: "Deployment <namespace>/<name>".
	Object  string `json:"object"`
	Problem string `json:"problem"`
	// What it means and what to do.
	Message string `json:"message"`
}

// ApproverUnplaceable returns NoEligibleNode when no node in nodes would
// take a pod of dep (its nodeSelector, required affinity, taints it does
// not tolerate, cordons), naming the reasons by count and what to do for
// its placement; nil when some node would. An approver that cannot run
// approves nothing: every new node stays tainted.
func ApproverUnplaceable(dep *appsv1.Deployment, nodes []corev1.Node) *InstallProblem {
	if len(nodes) == 0 {
		return nil
	}
	pod := dep.Spec.Template.Spec
	reasons := map[string]int{}
	for i := range nodes {
		why := unschedulable(&nodes[i], pod)
		if why == "" {
			return nil
		}
		reasons[why]++
	}
	keys := make([]string, 0, len(reasons))
	for k := range reasons {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		if reasons[keys[i]] != reasons[keys[j]] {
			return reasons[keys[i]] > reasons[keys[j]]
		}
		return keys[i] < keys[j]
	})
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%d %s: %s", reasons[k], plural(reasons[k], "node", "nodes"), k)
	}
	placement := dep.Annotations[PlacementAnnotation]
	return &InstallProblem{
		Object:  "Deployment " + dep.Namespace + "/" + dep.Name,
		Problem: NoEligibleNode,
		Message: fmt.Sprintf("no node may run the approver (placement %s; %s), so no serving certificate is approved and every new node stays tainted. %s",
			orUnset(placement), strings.Join(parts, "; "), placementAdvice(placement)),
	}
}

// placementAdvice is what to do when a placement finds no node.
func placementAdvice(placement string) string {
	label := "kubectl label node <name> " + ApproverPoolLabel + "=true"
	switch placement {
	case "trusted":
		return "Managed clusters show no control plane: label nodes you trust (" + label + "), or choose approver.placement=pool or any (docs/install.md: Approver placement)."
	case "control-plane":
		return "No control-plane node takes pods (managed clusters hide theirs): choose approver.placement=pool with labelled nodes (" + label + "), or any."
	case "pool":
		return "Label nodes you trust: " + label + "."
	default:
		return "Its nodeSelector, affinity or tolerations exclude every node: widen them (approver.nodeSelector, approver.affinity, approver.tolerations)."
	}
}

func orUnset(s string) string {
	if s == "" {
		return "not recorded"
	}
	return s
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

// unschedulable says why the scheduler would not bind pod to node, or ""
// when it would: a cordon, the nodeSelector or required node affinity, a
// NoSchedule or NoExecute taint the pod does not tolerate (node.kubernetes.io/*
// included: a not-ready node takes no approver).
func unschedulable(node *corev1.Node, pod corev1.PodSpec) string {
	if node.Spec.Unschedulable && !schedhelper.TolerationsTolerateTaint(klog.Background(), pod.Tolerations,
		&corev1.Taint{Key: corev1.TaintNodeUnschedulable, Effect: corev1.TaintEffectNoSchedule}, true) {
		return "cordoned"
	}
	ok, err := nodeaffinity.NewRequiredNodeAffinity(pod.NodeSelector, pod.Affinity).Match(node)
	switch {
	case err != nil:
		return "its node affinity does not parse: " + Escape(err.Error())
	case !ok:
		return "its nodeSelector or required node affinity excludes them"
	}
	t, untolerated := schedhelper.FindMatchingUntoleratedTaint(klog.Background(), node.Spec.Taints, pod.Tolerations, func(t *corev1.Taint) bool {
		return t.Effect == corev1.TaintEffectNoSchedule || t.Effect == corev1.TaintEffectNoExecute
	}, true)
	if untolerated {
		return "the taint " + Escape(t.ToString()) + " is not tolerated"
	}
	return ""
}

// AgentPodsRefusedBy returns AgentPodsRefused when ds places fewer pods
// than it should and its controller recorded FailedCreate events (events:
// those about ds), quoting the newest; nil otherwise. Pod Security's
// refusal names the namespace label that admits the agent.
func AgentPodsRefusedBy(ds *appsv1.DaemonSet, events []corev1.Event) *InstallProblem {
	missing := ds.Status.DesiredNumberScheduled - ds.Status.CurrentNumberScheduled
	if missing <= 0 {
		return nil
	}
	var newest *corev1.Event
	for i := range events {
		e := &events[i]
		if e.Reason != "FailedCreate" || e.InvolvedObject.Kind != "DaemonSet" || e.InvolvedObject.Name != ds.Name || e.InvolvedObject.Namespace != ds.Namespace {
			continue
		}
		if newest == nil || eventTime(e).After(eventTime(newest)) {
			newest = e
		}
	}
	if newest == nil {
		return nil
	}
	advice := "Fix what refuses them; the DaemonSet controller retries."
	if strings.Contains(newest.Message, "PodSecurity") {
		advice = fmt.Sprintf("The agent needs Pod Security \"privileged\" (hostNetwork, a read-only hostPath, UID 0): kubectl label namespace %s pod-security.kubernetes.io/enforce=privileged --overwrite.", ds.Namespace)
	}
	return &InstallProblem{
		Object:  "DaemonSet " + ds.Namespace + "/" + ds.Name,
		Problem: AgentPodsRefused,
		Message: fmt.Sprintf("%d of %d agent pods are not created (the newest refusal: %s), so their nodes never report and stay tainted. %s",
			missing, ds.Status.DesiredNumberScheduled, Escape(trimMessage(newest.Message)), advice),
	}
}

func trimMessage(s string) string {
	const max = 300
	if len(s) > max {
		return s[:max] + "…"
	}
	return s
}
