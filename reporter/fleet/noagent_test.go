package fleet_test

import (
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/certready/certready/internal/names"
	"github.com/certready/certready/reporter/fleet"
	"github.com/certready/certready/reporter/servingcert/condition"
)

// The agent DaemonSet as the chart renders it: Linux nodes, every taint
// tolerated.
func shippedAgent() fleet.AgentSet {
	return fleet.AgentSet{Name: "certready/certready-agent", Pod: corev1.PodSpec{
		NodeSelector: map[string]string{corev1.LabelOSStable: "linux"},
		Tolerations:  []corev1.Toleration{{Operator: corev1.TolerationOpExists}},
	}}
}

func TestNoAgentByDesign(t *testing.T) {
	linux := map[string]string{corev1.LabelOSStable: "linux"}
	gpuOnly := fleet.AgentSet{Name: "ops/certready-agent", Pod: corev1.PodSpec{
		Affinity: &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{
			NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchExpressions: []corev1.NodeSelectorRequirement{{Key: "pool", Operator: corev1.NodeSelectorOpIn, Values: []string{"gpu"}}}}}}}},
		Tolerations: []corev1.Toleration{{Key: names.TaintKey, Operator: corev1.TolerationOpExists}},
	}}
	narrow := fleet.AgentSet{Name: "certready/certready-agent", Pod: corev1.PodSpec{
		NodeSelector: linux,
		Tolerations:  []corev1.Toleration{{Key: names.TaintKey, Operator: corev1.TolerationOpExists}},
	}}
	taint := func(key, value string, effect corev1.TaintEffect) corev1.Taint {
		return corev1.Taint{Key: key, Value: value, Effect: effect}
	}
	for _, tc := range []struct {
		name   string
		labels map[string]string
		taints []corev1.Taint
		agents []fleet.AgentSet
		want   string // substring; "" = an agent is expected
	}{
		{name: "a Linux node under the shipped agent", labels: linux, agents: []fleet.AgentSet{shippedAgent()}},
		{name: "opted out, agents unknown", labels: map[string]string{fleet.OptOutLabel: "true"}, want: "opted out (certready.io/readiness-rule-opt-out=true)"},
		{name: "opted out, but an agent runs there: its silence is a problem", labels: map[string]string{fleet.OptOutLabel: "true", corev1.LabelOSStable: "linux"}, agents: []fleet.AgentSet{shippedAgent()}},
		{name: "opt-out label not true", labels: map[string]string{fleet.OptOutLabel: "no", corev1.LabelOSStable: "linux"}, agents: []fleet.AgentSet{shippedAgent()}},
		{name: "Windows", labels: map[string]string{corev1.LabelOSStable: "windows"}, agents: []fleet.AgentSet{shippedAgent()}, want: "certready/certready-agent: its nodeSelector or required node affinity excludes the node"},
		{name: "Windows, agents unknown", labels: map[string]string{corev1.LabelOSStable: "windows"}, want: "kubernetes.io/os=windows"},
		{name: "virtual kubelet by taint, agents unknown", labels: linux, taints: []corev1.Taint{taint(fleet.VirtualKubeletTaint, "azure", corev1.TaintEffectNoSchedule)}, want: "a virtual kubelet (virtual-kubelet.io/provider=azure:NoSchedule)"},
		{name: "a virtual kubelet's taint that schedules anyway", labels: linux, taints: []corev1.Taint{taint(fleet.VirtualKubeletTaint, "azure", corev1.TaintEffectPreferNoSchedule)}},
		{name: "a label alone makes no virtual kubelet", labels: map[string]string{"type": "virtual-kubelet"}},
		{name: "a virtual kubelet the agent tolerates is judged by placement", labels: linux, agents: []fleet.AgentSet{shippedAgent()},
			taints: []corev1.Taint{taint(fleet.VirtualKubeletTaint, "azure", corev1.TaintEffectNoSchedule)}},
		{name: "outside the agent's affinity", labels: linux, agents: []fleet.AgentSet{gpuOnly}, want: "ops/certready-agent: its nodeSelector or required node affinity excludes the node"},
		{name: "inside the affinity", labels: map[string]string{"pool": "gpu"}, agents: []fleet.AgentSet{gpuOnly}},
		{name: "one of two agent sets places a pod", labels: linux, agents: []fleet.AgentSet{gpuOnly, shippedAgent()}},
		{name: "an untolerated NoSchedule taint", labels: linux, taints: []corev1.Taint{taint("dedicated", "db", corev1.TaintEffectNoSchedule)}, agents: []fleet.AgentSet{narrow},
			want: "it does not tolerate the taint dedicated=db:NoSchedule"},
		{name: "an untolerated NoExecute taint", labels: linux, taints: []corev1.Taint{taint("dedicated", "", corev1.TaintEffectNoExecute)}, agents: []fleet.AgentSet{narrow},
			want: "it does not tolerate the taint dedicated:NoExecute"},
		{name: "PreferNoSchedule places anyway", labels: linux, taints: []corev1.Taint{taint("dedicated", "db", corev1.TaintEffectPreferNoSchedule)}, agents: []fleet.AgentSet{narrow}},
		{name: "node.kubernetes.io taints the DaemonSet controller tolerates", labels: linux, agents: []fleet.AgentSet{narrow},
			taints: []corev1.Taint{taint(corev1.TaintNodeNotReady, "", corev1.TaintEffectNoExecute), taint(corev1.TaintNodeUnschedulable, "", corev1.TaintEffectNoSchedule)}},
		{name: "an agent that does not tolerate the readiness taint is a problem, not a design", labels: linux, agents: []fleet.AgentSet{{Name: "x/agent", Pod: corev1.PodSpec{NodeSelector: linux}}},
			taints: []corev1.Taint{taint(names.TaintKey, names.TaintValue, corev1.TaintEffectNoSchedule)}},
		{name: "an affinity that does not parse", labels: linux, agents: []fleet.AgentSet{{Name: "x/agent", Pod: corev1.PodSpec{Affinity: &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{
			RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchExpressions: []corev1.NodeSelectorRequirement{{Key: "pool", Operator: "Bogus"}}}}}}}}}},
			want: "x/agent: its node affinity does not parse"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n", Labels: tc.labels}, Spec: corev1.NodeSpec{Taints: tc.taints}}
			got := fleet.NoAgentByDesign(n, tc.agents, names.TaintKey)
			if tc.want == "" && got != "" || tc.want != "" && !strings.Contains(got, tc.want) {
				t.Errorf("NoAgentByDesign = %q, want %q", got, tc.want)
			}
		})
	}
}

// Nodes without a condition by design are neither ready nor problems and
// sort last; one that carries the readiness taint stays a problem (nothing
// lifts it), as does a Linux node the agent should be on.
func TestMarkNoAgent(t *testing.T) {
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	ready := corev1.NodeCondition{Type: names.ConditionType, Status: corev1.ConditionFalse, Reason: "KubeletServingCertReady",
		LastTransitionTime: metav1.NewTime(now.Add(-time.Hour)), LastHeartbeatTime: metav1.NewTime(now.Add(-time.Minute))}
	node := func(name, os string, cond bool, tainted bool) corev1.Node {
		n := corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{corev1.LabelOSStable: os}}}
		if cond {
			n.Status.Conditions = []corev1.NodeCondition{ready}
		}
		if tainted {
			n.Spec.Taints = []corev1.Taint{{Key: names.TaintKey, Value: names.TaintValue, Effect: corev1.TaintEffectNoSchedule}}
		}
		return n
	}
	nodes := []corev1.Node{
		node("a-win", "windows", false, false),
		node("b-linux", "linux", true, false),
		node("c-win-tainted", "windows", false, true),
		node("d-linux-no-agent", "linux", false, false),
	}
	rows := fleet.Status(nodes, names.ConditionType, names.TaintKey, condition.DefaultMaxAge, now)
	fleet.MarkNoAgent(rows, nodes, []fleet.AgentSet{shippedAgent()}, names.TaintKey)
	var order []string
	for _, r := range rows {
		order = append(order, r.Node)
	}
	if got := strings.Join(order, ","); got != "c-win-tainted,d-linux-no-agent,b-linux,a-win" {
		t.Errorf("order %s: want problems, ready, then no agent by design", got)
	}
	if r := rows[3]; r.Ready || r.Problem != "" || !strings.Contains(r.NoAgent, "nodeSelector or required node affinity excludes the node") {
		t.Errorf("a-win: %+v", r)
	}
	if r := rows[0]; r.NoAgent != "" || r.Problem == "" {
		t.Errorf("c-win-tainted must stay a problem: %+v", r)
	}
	var problems []string
	for _, r := range fleet.Problems(rows) {
		problems = append(problems, r.Node)
	}
	if got := strings.Join(problems, ","); got != "c-win-tainted,d-linux-no-agent" {
		t.Errorf("Problems = %s", got)
	}
}
