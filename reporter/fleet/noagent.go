package fleet

import (
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/component-helpers/scheduling/corev1/nodeaffinity"
	"k8s.io/klog/v2"

	schedhelper "k8s.io/component-helpers/scheduling/corev1"
)

// AgentSelector selects certready's agent DaemonSets (chart and overlays
// alike), in any namespace.
const AgentSelector = "app.kubernetes.io/name=certready,app.kubernetes.io/component=agent"

// VirtualKubeletTaint is the taint virtual kubelets (Virtual Kubelet,
// Azure virtual nodes, ...) register with; their "node" has no kubelet
// pki for an agent to read.
const VirtualKubeletTaint = "virtual-kubelet.io/provider"

// AgentSet is what the fleet view needs of an agent DaemonSet: its name
// (namespace/name) and where its pods may run.
type AgentSet struct {
	Name string
	Pod  corev1.PodSpec
}

// NoAgentByDesign says why node runs no certready agent by design, or ""
// when an agent is expected there.
//
// With agents listed, placement alone decides, as the DaemonSet controller
// would: by design only when no agent DaemonSet places a pod there
// (nodeSelector, required affinity, a NoSchedule/NoExecute taint none of
// them tolerates). The node's own labels and taints cannot override it: a
// kubelet chooses them at registration, and an opt-out label on a node an
// agent runs on must not hide that agent's silence. Without agents (they
// could not be listed, or none exist: node-problem-detector writes the
// condition) placement cannot be judged, and only the signs a node
// carries count: the opt-out label, an OS other than Linux, a virtual
// kubelet's NoSchedule/NoExecute taint. readinessTaint is never a reason:
// an agent that does not tolerate it keeps its nodes tainted for good.
func NoAgentByDesign(node *corev1.Node, agents []AgentSet, readinessTaint string) string {
	if len(agents) > 0 {
		var why []string
		for _, a := range agents {
			reason := unplaced(node, a.Pod, readinessTaint)
			if reason == "" {
				return "" // an agent belongs here: its absence is a problem
			}
			why = append(why, a.Name+": "+reason)
		}
		return "no agent DaemonSet places a pod here (" + strings.Join(why, "; ") + ")"
	}
	if node.Labels[OptOutLabel] == "true" {
		return fmt.Sprintf("opted out (%s=true)", OptOutLabel)
	}
	if os := node.Labels[corev1.LabelOSStable]; os != "" && os != "linux" {
		return fmt.Sprintf("%s=%s: the agent runs on Linux nodes", corev1.LabelOSStable, os)
	}
	for _, t := range node.Spec.Taints {
		if t.Key == VirtualKubeletTaint && (t.Effect == corev1.TaintEffectNoSchedule || t.Effect == corev1.TaintEffectNoExecute) {
			return fmt.Sprintf("a virtual kubelet (%s): no kubelet pki to read", t.ToString())
		}
	}
	return ""
}

// unplaced says why the DaemonSet controller would not place pod on node,
// or "" when it would. The controller itself tolerates node.kubernetes.io/*
// (not-ready, unreachable, pressure, unschedulable), so those never count;
// nor does the readiness taint (see NoAgentByDesign).
func unplaced(node *corev1.Node, pod corev1.PodSpec, readinessTaint string) string {
	ok, err := nodeaffinity.NewRequiredNodeAffinity(pod.NodeSelector, pod.Affinity).Match(node)
	switch {
	case err != nil:
		return "its node affinity does not parse: " + err.Error()
	case !ok:
		return "its nodeSelector or required node affinity excludes the node"
	}
	t, untolerated := schedhelper.FindMatchingUntoleratedTaint(klog.Background(), node.Spec.Taints, pod.Tolerations, func(t *corev1.Taint) bool {
		return (t.Effect == corev1.TaintEffectNoSchedule || t.Effect == corev1.TaintEffectNoExecute) &&
			t.Key != readinessTaint && !strings.HasPrefix(t.Key, "node.kubernetes.io/")
	}, true)
	if untolerated {
		return fmt.Sprintf("it does not tolerate the taint %s", t.ToString())
	}
	return ""
}

// MarkNoAgent sets NoAgent on the rows of nodes that have no condition and
// no readiness taint and run no agent by design (NoAgentByDesign): they
// are neither ready nor a problem. A node that carries the readiness taint
// stays a problem whatever the design: nothing will lift it. Rows are
// sorted again: problems, ready, then these.
func MarkNoAgent(rows []NodeStatus, nodes []corev1.Node, agents []AgentSet, readinessTaint string) {
	byName := make(map[string]*corev1.Node, len(nodes))
	for i := range nodes {
		byName[nodes[i].Name] = &nodes[i]
	}
	for i := range rows {
		r := &rows[i]
		n := byName[r.Node]
		if n == nil || r.Status != "" || r.Tainted {
			continue
		}
		if why := NoAgentByDesign(n, agents, readinessTaint); why != "" {
			r.NoAgent, r.Problem = why, ""
		}
	}
	sortRows(rows)
}
