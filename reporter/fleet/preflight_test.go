package fleet_test

import (
	"os"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/certready/certready/reporter/fleet"
)

var now = time.Date(2026, 12, 1, 6, 0, 0, 0, time.UTC)

func node(name string, labels map[string]string, status corev1.ConditionStatus, heartbeat time.Time) corev1.Node {
	n := corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}}
	if status != "" {
		n.Status.Conditions = []corev1.NodeCondition{{Type: "KubeletServingCertNotReady", Status: status, Reason: "R", Message: "m",
			LastHeartbeatTime: metav1.NewTime(heartbeat), LastTransitionTime: metav1.NewTime(heartbeat)}}
	}
	return n
}

func TestPreflight(t *testing.T) {
	fresh := now.Add(-time.Minute)
	nodes := []corev1.Node{
		node("a-ready", nil, corev1.ConditionFalse, fresh),
		node("b-cp", map[string]string{"node-role.kubernetes.io/control-plane": ""}, "", time.Time{}),
		node("c-windows-no-agent", nil, "", time.Time{}),
		node("d-self-signed", nil, corev1.ConditionTrue, fresh),
		node("e-unknown", nil, corev1.ConditionUnknown, fresh),
		node("f-opted-out", map[string]string{fleet.OptOutLabel: "true"}, corev1.ConditionTrue, fresh),
		node("g-silent-agent", nil, corev1.ConditionFalse, now.Add(-2*time.Hour)),
	}
	rows := fleet.Preflight(nodes, fleet.ShippedRule(), now)
	want := []struct {
		node    string
		outcome fleet.Outcome
		why     string
	}{
		// Blocking rows first, each naming the way out.
		{"c-windows-no-agent", fleet.Stays, "no KubeletServingCertNotReady condition"},
		{"d-self-signed", fleet.Stays, "is True (R: m); fix it or label the node certready.io/readiness-rule-opt-out=true"},
		{"e-unknown", fleet.Stays, "is Unknown"},
		{"a-ready", fleet.Lifted, "is False since"},
		{"b-cp", fleet.Excluded, "not selected"},
		{"f-opted-out", fleet.Excluded, "not selected"},
		{"g-silent-agent", fleet.Lifted, "but condition not written for 2h0m0s: is the agent running?"},
	}
	if len(rows) != len(want) {
		t.Fatalf("%d rows, want %d: %+v", len(rows), len(want), rows)
	}
	for i, w := range want {
		r := rows[i]
		if r.Node != w.node || r.Outcome != w.outcome || !strings.Contains(r.Why, w.why) {
			t.Errorf("row %d = %+v, want %s %s (…%s…)", i, r, w.node, w.outcome, w.why)
		}
	}
	if got := fleet.Blocking(rows); got != 3 {
		t.Errorf("Blocking = %d, want 3", got)
	}
}

// TestShippedRuleIsTheOverlays: the preflight's default rule is the one
// manifests/overlays/nrc creates.
func TestShippedRuleIsTheOverlays(t *testing.T) {
	f, err := os.Open("../../manifests/overlays/nrc/nodereadinessrule.yaml")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	got, err := fleet.ReadRule(f, "nodereadinessrule.yaml", "KubeletServingCertNotReady")
	if err != nil {
		t.Fatal(err)
	}
	want := fleet.ShippedRule()
	if got.Name != want.Name || got.Selector.String() != want.Selector.String() || got.Taint != want.Taint || got.RequiredStatus != want.RequiredStatus {
		t.Errorf("overlay rule %+v (selector %s)\nShippedRule  %+v (selector %s)", got, got.Selector, want, want.Selector)
	}
}

// TestReadRuleSkipsSoftRules: the nrc overlay's build holds the startup
// rule and the PreferNoSchedule placement rule; the preflight reads the first.
func TestReadRuleSkipsSoftRules(t *testing.T) {
	var all strings.Builder
	for _, f := range []string{"../../manifests/overlays/nrc/placementrule.yaml", "../../manifests/overlays/nrc/nodereadinessrule.yaml"} {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		all.WriteString("---\n" + string(b))
	}
	got, err := fleet.ReadRule(strings.NewReader(all.String()), "nrc", "KubeletServingCertNotReady")
	if err != nil || got.Name != fleet.ShippedRule().Name {
		t.Errorf("ReadRule = %q, %v; want the startup rule %q", got.Name, err, fleet.ShippedRule().Name)
	}
}

func TestReadRuleErrorsNameTheInput(t *testing.T) {
	rule := "apiVersion: readiness.node.x-k8s.io/v1alpha1\nkind: NodeReadinessRule\nmetadata: {name: %s}\nspec:\n  conditions: [{type: KubeletServingCertNotReady, requiredStatus: \"False\"}]\n  taint: {key: k, value: v, effect: NoSchedule}\n"
	for _, tc := range []struct {
		name, in, err string
	}{
		{"none", "kind: ConfigMap\nmetadata: {name: x}\n", "no NodeReadinessRule with the condition KubeletServingCertNotReady"},
		{"two", strings.Replace(rule, "%s", "a", 1) + "---\n" + strings.Replace(rule, "%s", "b", 1), "2 NodeReadinessRules"},
		{"bad selector", strings.Replace(rule, "%s", "a", 1) + "  nodeSelector: {matchExpressions: [{key: x, operator: Sometimes}]}\n", "nodeSelector"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := fleet.ReadRule(strings.NewReader(tc.in), "rules.yaml", "KubeletServingCertNotReady")
			if err == nil || !strings.Contains(err.Error(), tc.err) || !strings.Contains(err.Error(), "rules.yaml") {
				t.Errorf("error %v, want one naming rules.yaml and %q", err, tc.err)
			}
		})
	}
}
