package fleet

import (
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// approverAt is an approver Deployment with placement's node affinity, as
// the chart renders it, tolerating the control-plane and readiness taints.
func approverAt(placement string) *appsv1.Deployment {
	exists := func(key string) corev1.NodeSelectorTerm {
		return corev1.NodeSelectorTerm{MatchExpressions: []corev1.NodeSelectorRequirement{{Key: key, Operator: corev1.NodeSelectorOpExists}}}
	}
	const cp = "node-role.kubernetes.io/control-plane"
	var terms []corev1.NodeSelectorTerm
	switch placement {
	case "trusted":
		terms = []corev1.NodeSelectorTerm{exists(ApproverPoolLabel), exists(cp)}
	case "control-plane":
		terms = []corev1.NodeSelectorTerm{exists(cp)}
	case "pool":
		terms = []corev1.NodeSelectorTerm{exists(ApproverPoolLabel)}
	}
	pod := corev1.PodSpec{
		NodeSelector: map[string]string{corev1.LabelOSStable: "linux"},
		Tolerations: []corev1.Toleration{{Key: cp, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule},
			{Key: "readiness.k8s.io/KubeletServingCertNotReady", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}},
	}
	if terms != nil {
		pod.Affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{NodeSelectorTerms: terms}}}
	}
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "certready-approver", Namespace: "certready-system", Annotations: map[string]string{PlacementAnnotation: placement}},
		Spec:       appsv1.DeploymentSpec{Template: corev1.PodTemplateSpec{Spec: pod}},
	}
}

func testNode(name string, labels map[string]string, taints ...corev1.Taint) corev1.Node {
	l := map[string]string{corev1.LabelOSStable: "linux"}
	for k, v := range labels {
		l[k] = v
	}
	return corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: l}, Spec: corev1.NodeSpec{Taints: taints}}
}

func TestApproverUnplaceable(t *testing.T) {
	cpTaint := corev1.Taint{Key: "node-role.kubernetes.io/control-plane", Effect: corev1.TaintEffectNoSchedule}
	readiness := corev1.Taint{Key: "readiness.k8s.io/KubeletServingCertNotReady", Value: "pending", Effect: corev1.TaintEffectNoSchedule}
	workers := []corev1.Node{testNode("w1", nil, readiness), testNode("w2", nil)}
	controlPlane := testNode("cp", map[string]string{"node-role.kubernetes.io/control-plane": ""}, cpTaint)
	pool := testNode("p1", map[string]string{ApproverPoolLabel: "true"})
	cordoned := pool
	cordoned.Spec.Unschedulable = true
	notReady := testNode("p2", map[string]string{ApproverPoolLabel: "true"}, corev1.Taint{Key: "node.kubernetes.io/not-ready", Effect: corev1.TaintEffectNoSchedule})
	dedicated := testNode("w3", nil, corev1.Taint{Key: "dedicated\x1b[31m", Value: "gpu", Effect: corev1.TaintEffectNoExecute})
	windows := testNode("win", map[string]string{corev1.LabelOSStable: "windows", ApproverPoolLabel: "true"})
	for _, tc := range []struct {
		name, placement string
		nodes           []corev1.Node
		want            []string // in the message; nil: placeable
	}{
		{"managed cluster, trusted: no control plane, no pool", "trusted", workers,
			[]string{"placement trusted", "2 nodes: its nodeSelector or required node affinity excludes them", "label nodes you trust (kubectl label node <name> " + ApproverPoolLabel + "=true)"}},
		{"self-managed, trusted: the control plane takes it (its taint tolerated)", "trusted", append([]corev1.Node{controlPlane}, workers...), nil},
		{"trusted: a labelled pool node takes it", "trusted", append([]corev1.Node{pool}, workers...), nil},
		{"control-plane on a managed cluster", "control-plane", workers, []string{"placement control-plane", "choose approver.placement=pool"}},
		{"pool without labels", "pool", append([]corev1.Node{controlPlane}, workers...), []string{"placement pool", "3 nodes", "Label nodes you trust"}},
		{"pool: its only node cordoned", "pool", []corev1.Node{cordoned}, []string{"1 node: cordoned"}},
		{"pool: its only node not ready", "pool", []corev1.Node{notReady}, []string{"the taint node.kubernetes.io/not-ready:NoSchedule is not tolerated"}},
		{"pool: a Windows pool node", "pool", []corev1.Node{windows}, []string{"excludes them"}},
		{"any: every node tainted, the taint shown escaped", "any", []corev1.Node{dedicated}, []string{`dedicated^[[31m=gpu:NoExecute`, "widen them"}},
		{"any: a worker takes it", "any", workers, nil},
		{"no nodes at all: nothing to say", "trusted", nil, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := ApproverUnplaceable(approverAt(tc.placement), tc.nodes)
			if tc.want == nil {
				if got != nil {
					t.Fatalf("placeable, got %+v", got)
				}
				return
			}
			if got == nil {
				t.Fatal("no problem named")
			}
			if got.Problem != NoEligibleNode || got.Object != "Deployment certready-system/certready-approver" {
				t.Errorf("problem %+v", got)
			}
			for _, w := range tc.want {
				if !strings.Contains(got.Message, w) {
					t.Errorf("message lacks %q:\n%s", w, got.Message)
				}
			}
		})
	}
}

func TestAgentPodsRefusedBy(t *testing.T) {
	now := time.Date(2026, 12, 4, 12, 0, 0, 0, time.UTC)
	ds := func(desired, current int32) *appsv1.DaemonSet {
		return &appsv1.DaemonSet{ObjectMeta: metav1.ObjectMeta{Name: "certready-agent", Namespace: "certready-system"},
			Status: appsv1.DaemonSetStatus{DesiredNumberScheduled: desired, CurrentNumberScheduled: current}}
	}
	event := func(name, msg string, at time.Time) corev1.Event {
		return corev1.Event{Reason: "FailedCreate", Message: msg, LastTimestamp: metav1.NewTime(at),
			InvolvedObject: corev1.ObjectReference{Kind: "DaemonSet", Name: name, Namespace: "certready-system"}}
	}
	const podSecurity = `pods "certready-agent-x" is forbidden: violates PodSecurity "baseline:latest": host namespaces (hostNetwork=true), hostPath volumes (volumes "kubelet-pki")`
	for _, tc := range []struct {
		name   string
		ds     *appsv1.DaemonSet
		events []corev1.Event
		want   []string
	}{
		{"Pod Security rejects every pod", ds(3, 0), []corev1.Event{event("certready-agent", "old quota", now.Add(-time.Hour)), event("certready-agent", podSecurity, now)},
			[]string{"3 of 3 agent pods are not created", "violates PodSecurity", "kubectl label namespace certready-system pod-security.kubernetes.io/enforce=privileged --overwrite"}},
		{"a quota: quoted, no Pod Security advice", ds(3, 2), []corev1.Event{event("certready-agent", "exceeded quota: pods", now)},
			[]string{"1 of 3", "exceeded quota", "Fix what refuses them"}},
		{"every pod created: stale events say nothing", ds(3, 3), []corev1.Event{event("certready-agent", podSecurity, now)}, nil},
		{"missing pods, no refusal recorded (still rolling out)", ds(3, 1), nil, nil},
		{"another DaemonSet's events do not count", ds(3, 0), []corev1.Event{event("other", podSecurity, now)}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := AgentPodsRefusedBy(tc.ds, tc.events)
			if tc.want == nil {
				if got != nil {
					t.Fatalf("got %+v", got)
				}
				return
			}
			if got == nil || got.Problem != AgentPodsRefused || got.Object != "DaemonSet certready-system/certready-agent" {
				t.Fatalf("got %+v", got)
			}
			for _, w := range tc.want {
				if !strings.Contains(got.Message, w) {
					t.Errorf("message lacks %q:\n%s", w, got.Message)
				}
			}
		})
	}
}
