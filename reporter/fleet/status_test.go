package fleet_test

import (
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/certready/certready/internal/fingerprint"
	"github.com/certready/certready/internal/names"
	"github.com/certready/certready/reporter/fleet"
	"github.com/certready/certready/reporter/servingcert/condition"
	"github.com/certready/certready/reporter/servingcert/verdict"
)

func TestStatusOnFixtures(t *testing.T) {
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	cond := func(status corev1.ConditionStatus, reason, msg string, beat time.Duration) corev1.NodeCondition {
		return corev1.NodeCondition{Type: names.ConditionType, Status: status, Reason: reason, Message: msg,
			LastTransitionTime: metav1.NewTime(now.Add(-time.Hour)), LastHeartbeatTime: metav1.NewTime(now.Add(-beat))}
	}
	node := func(name string, c *corev1.NodeCondition, taint bool, annotations map[string]string) corev1.Node {
		n := corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: annotations}}
		if c != nil {
			n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}, *c}
		}
		if taint {
			n.Spec.Taints = []corev1.Taint{{Key: names.TaintKey, Value: names.TaintValue, Effect: corev1.TaintEffectNoSchedule}}
		}
		return n
	}
	// The agent writes a sentence and the facts in an annotation; agents
	// of the release candidates ended the sentence with them.
	readyMsg := "serving certificate 0123456789abcdef valid until 2027-12-01T12:00:00Z, issued by CSR csr-w1 (created 2026-12-01T11:00:00Z); presented on 192.0.2.11:10250"
	facts := verdict.Facts{NotAfter: time.Date(2027, 12, 1, 12, 0, 0, 0, time.UTC), CSR: "csr-w1", Fingerprint: fingerprint.SHA256{0x01, 0x23},
		CA: fingerprint.SHA256{0xca}, CANotAfter: time.Date(2035, 1, 1, 0, 0, 0, 0, time.UTC),
		ClientNotAfter: time.Date(2027, 2, 3, 0, 0, 0, 0, time.UTC), Agent: "v1.2.3"}
	ready := cond(corev1.ConditionFalse, "KubeletServingCertReady", readyMsg, time.Minute)
	trailer := " [notAfter=2027-12-01T12:00:00Z csr=csr-w1 sha256=" + facts.Fingerprint.String() + " ca=" + facts.CA.String() +
		" caNotAfter=2035-01-01T00:00:00Z clientNotAfter=2027-02-03T00:00:00Z agent=v1.2.3]"
	readyTrailer := cond(corev1.ConditionFalse, "KubeletServingCertReady", readyMsg+trailer, time.Minute)
	pending := cond(corev1.ConditionTrue, "CSRPending", "CSR csr-w2 pending approval since 2026-12-01T11:59:00Z", time.Minute)
	stale := cond(corev1.ConditionFalse, "KubeletServingCertReady", readyMsg+trailer, time.Hour)
	ahead := cond(corev1.ConditionFalse, "KubeletServingCertReady", readyMsg, -time.Hour)
	nodes := []corev1.Node{
		node("w1", &ready, false, map[string]string{names.NRCCompletedPrefix + "kubelet-serving-cert": "true", names.FactsAnnotation: facts.Annotation()}),
		node("w2", &pending, true, map[string]string{names.FactsAnnotation: facts.Annotation()}), // not ready: no facts
		node("w3", nil, true, nil),
		node("w4", &stale, false, nil),
		node("w5", &ready, true, map[string]string{names.FactsAnnotation: facts.Annotation()}),
		node("w6", &readyTrailer, false, map[string]string{names.CompletedAnnotation: "2026-12-01T11:00:00Z"}),
		node("w7", &ahead, false, map[string]string{names.FactsAnnotation: facts.Annotation()}),
	}
	rows := fleet.Status(nodes, names.ConditionType, names.TaintKey, condition.DefaultMaxAge, now)
	byNode := map[string]fleet.NodeStatus{}
	var order []string
	for _, r := range rows {
		byNode[r.Node] = r
		order = append(order, r.Node)
	}
	if got := strings.Join(order, ","); got != "w2,w3,w4,w5,w7,w1,w6" {
		t.Errorf("order %s: want the problems first, then by name", got)
	}
	for _, tc := range []struct {
		node      string
		ready     bool
		problem   string
		completed string
		csr       string
	}{
		{"w1", true, "", "kubelet-serving-cert", "csr-w1"},
		{"w2", false, "CSRPending", "", ""},
		{"w3", false, "no certready agent reports on this node", "", ""},
		{"w4", false, "not written for 1h0m0s", "", "csr-w1"},
		{"w5", false, "still carries " + names.TaintKey, "", "csr-w1"},
		{"w6", true, "", "certready", "csr-w1"},
		// A heartbeat an hour ahead would stand for an hour after its
		// writer is gone.
		{"w7", false, "written 1h0m0s in the future: is the node's clock right?", "", "csr-w1"},
	} {
		r := byNode[tc.node]
		if r.Ready != tc.ready || !strings.Contains(r.Problem, tc.problem) || (tc.problem == "") != (r.Problem == "") ||
			strings.Join(r.Completed, ",") != tc.completed || r.CSR != tc.csr {
			t.Errorf("%s: %+v; want ready %v, problem %q, completed by %q, CSR %q", tc.node, r, tc.ready, tc.problem, tc.completed, tc.csr)
		}
	}
	if na := byNode["w1"].NotAfter; na == nil || !na.Equal(time.Date(2027, 12, 1, 12, 0, 0, 0, time.UTC)) {
		t.Errorf("w1 expiry %v", na)
	}
	if w1, w6 := byNode["w1"], byNode["w6"]; w1.Fingerprint != w6.Fingerprint || w1.CSR != w6.CSR || w1.AgentVersion != w6.AgentVersion {
		t.Errorf("the annotation (w1) and the trailer (w6) read differently: %+v, %+v", w1, w6)
	}
	if v := byNode["w1"].AgentVersion; v != "v1.2.3" {
		t.Errorf("w1's agent version %q", v)
	}
	if w1 := byNode["w1"]; w1.CAFingerprint != (fingerprint.SHA256{0xca}).String() || w1.CANotAfter == nil || w1.CANotAfter.Year() != 2035 {
		t.Errorf("w1's CA: %q, %v", w1.CAFingerprint, w1.CANotAfter)
	}
	if w1 := byNode["w1"]; w1.ClientCertNotAfter == nil || !w1.ClientCertNotAfter.Equal(time.Date(2027, 2, 3, 0, 0, 0, 0, time.UTC)) {
		t.Errorf("w1's client certificate expiry: %v", w1.ClientCertNotAfter)
	}
	if fp := byNode["w1"].Fingerprint; fp != (fingerprint.SHA256{0x01, 0x23}).String() {
		t.Errorf("w1 fingerprint %q", fp)
	}
	if p := fleet.Problems(rows); len(p) != 5 {
		t.Errorf("%d problems, want 5", len(p))
	}
}

// The node-readiness-controller marks a node with its rule's UID: the
// fleet view shows the rule's name, keeps a suffix it cannot name (a
// deleted rule) and never renames certready's own mark.
func TestNameRules(t *testing.T) {
	rows := []fleet.NodeStatus{
		{Node: "w1", Completed: []string{"9f1c2b7e-0000-4000-8000-000000000001"}},
		{Node: "w2", Completed: []string{"9f1c2b7e-0000-4000-8000-00000000dead", "certready"}},
		{Node: "w3"},
	}
	if !fleet.NRCMarked(rows) || fleet.NRCMarked(rows[2:]) || fleet.NRCMarked([]fleet.NodeStatus{{Completed: []string{"certready"}}}) {
		t.Fatal("NRCMarked: want true exactly when a row carries a rule's mark")
	}
	fleet.NameRules(rows, map[string]string{"9f1c2b7e-0000-4000-8000-000000000001": "kubelet-serving-cert", "certready": "not-a-rule"})
	for _, tc := range []struct{ node, want string }{
		{"w1", "kubelet-serving-cert"},
		{"w2", "9f1c2b7e-0000-4000-8000-00000000dead,certready"},
		{"w3", ""},
	} {
		for _, r := range rows {
			if r.Node == tc.node && strings.Join(r.Completed, ",") != tc.want {
				t.Errorf("%s completed by %q, want %q", tc.node, strings.Join(r.Completed, ","), tc.want)
			}
		}
	}
}
