package taint_test

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/certready/certready/internal/testwait"
	"github.com/certready/certready/reporter/approver/taint"
)

const key = "readiness.k8s.io/KubeletServingCertNotReady"

var cfg = taint.Config{Taint: corev1.Taint{Key: key, Value: "pending", Effect: corev1.TaintEffectNoSchedule},
	ConditionType: "KubeletServingCertNotReady", MaxConditionAge: 10 * time.Minute}

// heartbeat is when node() stamps its condition: just before now.
var heartbeat = time.Date(2026, 11, 30, 2, 59, 0, 0, time.UTC)

func node(name string, status corev1.ConditionStatus, taints ...string) *corev1.Node {
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, ResourceVersion: "42"}}
	for _, k := range taints {
		n.Spec.Taints = append(n.Spec.Taints, corev1.Taint{Key: k, Value: "pending", Effect: corev1.TaintEffectNoSchedule})
	}
	if status != "" {
		n.Status.Conditions = []corev1.NodeCondition{{Type: cfg.ConditionType, Status: status, LastHeartbeatTime: metav1.NewTime(heartbeat)}}
	}
	return n
}

func stale(n *corev1.Node, at time.Time) *corev1.Node {
	n.Status.Conditions[0].LastHeartbeatTime = metav1.NewTime(at)
	return n
}

func retaint(n *corev1.Node, t corev1.Taint) *corev1.Node {
	n.Spec.Taints = append(n.Spec.Taints, t)
	return n
}

// patch is what Patch's JSON merge patch says.
type patch struct {
	Metadata struct {
		ResourceVersion string            `json:"resourceVersion"`
		Annotations     map[string]string `json:"annotations"`
	} `json:"metadata"`
	Spec struct {
		Taints []corev1.Taint `json:"taints"`
	} `json:"spec"`
}

func decode(t *testing.T, p []byte) patch {
	t.Helper()
	var got patch
	if err := json.Unmarshal(p, &got); err != nil {
		t.Fatal(err)
	}
	return got
}

func TestParseTaint(t *testing.T) {
	for _, tc := range []struct {
		in, err string
	}{
		{"readiness.k8s.io/KubeletServingCertNotReady=pending:NoSchedule", ""},
		{"example.com/t:NoExecute", ""},
		{"readiness.k8s.io/KubeletServingCertNotReady", "want key=value:effect"},
		{"k=v:Sometimes", "is not NoSchedule"},
		{"=v:NoSchedule", "want key=value:effect"},
	} {
		got, err := taint.ParseTaint(tc.in)
		if tc.err == "" {
			if err != nil || got.ToString() != tc.in {
				t.Errorf("ParseTaint(%q) = %q, %v", tc.in, got.ToString(), err)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), tc.err) || !strings.Contains(err.Error(), tc.in) {
			t.Errorf("ParseTaint(%q) error %v, want one naming the input and %q", tc.in, err, tc.err)
		}
	}
}

func TestPatch(t *testing.T) {
	now := time.Date(2026, 11, 30, 3, 0, 0, 0, time.UTC)
	softKey := soft.Key
	cases := []struct {
		name   string
		soft   bool // with the soft taint configured
		node   *corev1.Node
		proof  error // the approver's own look at the kubelet
		want   bool
		remain []string
	}{
		{name: "condition False and tainted: removed, other taints kept", node: node("a", corev1.ConditionFalse, key, "other"), want: true, remain: []string{"other"}},
		{name: "last taint removed", node: node("a", corev1.ConditionFalse, key), want: true, remain: []string{}},
		{name: "condition True keeps the taint", node: node("a", corev1.ConditionTrue, key)},
		{name: "condition Unknown keeps the taint", node: node("a", corev1.ConditionUnknown, key)},
		{name: "no condition keeps the taint", node: node("a", "", key)},
		{name: "untainted: nothing to do", node: node("a", corev1.ConditionFalse, "other")},
		{name: "stale False (no heartbeat for 11 min) keeps the taint", node: stale(node("a", corev1.ConditionFalse, key), now.Add(-11*time.Minute))},
		{name: "False without a heartbeat keeps the taint", node: stale(node("a", corev1.ConditionFalse, key), time.Time{})},
		{name: "heartbeat 9 min ago is fresh", node: stale(node("a", corev1.ConditionFalse, key), now.Add(-9*time.Minute)), want: true, remain: []string{}},
		{name: "heartbeat from a node clock ahead is fresh", node: stale(node("a", corev1.ConditionFalse, key), now.Add(time.Minute)), want: true, remain: []string{}},
		{name: "heartbeat far in the future (it would stay fresh for good) keeps the taint", node: stale(node("a", corev1.ConditionFalse, key), now.Add(10*time.Minute))},
		{name: "fresh False, not proven by the approver: taint kept", node: node("a", corev1.ConditionFalse, key), proof: errors.New("no certificate served")},
		{name: "soft: fresh False, not proven: soft taint added, readiness taint kept", soft: true, node: node("a", corev1.ConditionFalse, key), proof: errors.New("no certificate served"), want: true, remain: []string{key, softKey}},
		{name: "same key, other value: not ours, kept", node: retaint(node("a", corev1.ConditionFalse), corev1.Taint{Key: key, Value: "quarantine", Effect: corev1.TaintEffectNoSchedule})},
		{name: "same key, other effect: not ours, kept", node: retaint(node("a", corev1.ConditionFalse), corev1.Taint{Key: key, Value: "pending", Effect: corev1.TaintEffectNoExecute})},

		// With the soft (PreferNoSchedule) taint.
		{name: "soft: new node (no condition): soft taint added beside the readiness taint", soft: true, node: node("a", "", key), want: true, remain: []string{key, softKey}},
		{name: "soft: condition True: soft taint added", soft: true, node: node("a", corev1.ConditionTrue), want: true, remain: []string{softKey}},
		{name: "soft: condition True, soft taint there: nothing to do", soft: true, node: retaint(node("a", corev1.ConditionTrue), soft)},
		{name: "soft: fresh False: both taints go in one patch", soft: true, node: retaint(node("a", corev1.ConditionFalse, key), soft), want: true, remain: []string{}},
		{name: "soft: fresh False, untainted: nothing to do", soft: true, node: node("a", corev1.ConditionFalse)},
		{name: "soft: stale False: soft taint back, readiness taint not added", soft: true, node: stale(node("a", corev1.ConditionFalse), now.Add(-time.Hour)), want: true, remain: []string{softKey}},
		{name: "soft: someone else's PreferNoSchedule of another value is kept", soft: true, node: retaint(node("a", corev1.ConditionFalse), corev1.Taint{Key: softKey, Value: "other", Effect: corev1.TaintEffectPreferNoSchedule})},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := cfg
			if tc.soft {
				c.SoftTaint = soft
			}
			p, ok, err := taint.Patch(tc.node, c, now, tc.proof)
			if err != nil || ok != tc.want {
				t.Fatalf("ok=%v err=%v, want %v", ok, err, tc.want)
			}
			if !ok {
				return
			}
			got := decode(t, p)
			if got.Metadata.ResourceVersion != "42" {
				t.Errorf("no optimistic lock: %s", p)
			}
			keys := []string{}
			for _, tt := range got.Spec.Taints {
				keys = append(keys, tt.Key)
				if tt.Key == softKey && tt.Effect != corev1.TaintEffectPreferNoSchedule {
					t.Errorf("soft taint with effect %s", tt.Effect)
				}
			}
			if strings.Join(keys, ",") != strings.Join(tc.remain, ",") {
				t.Errorf("taints %v, want %v", keys, tc.remain)
			}
			// The completion mark comes with the readiness taint's removal only.
			lifted := len(tc.node.Spec.Taints) > 0 && tc.node.Spec.Taints[0].Key == key && !slices.Contains(keys, key)
			want := ""
			if lifted {
				want = "2026-11-30T03:00:00Z"
			}
			if got.Metadata.Annotations[taint.CompletedAnnotation] != want {
				t.Errorf("annotations %v, want the completion mark %q", got.Metadata.Annotations, want)
			}
		})
	}
}

func TestRemoverLiftsTheTaintOnlyWhenReady(t *testing.T) {
	fresh := func(n *corev1.Node) *corev1.Node { return stale(n, time.Now()) }
	cs := fake.NewClientset(fresh(node("ready", corev1.ConditionFalse, key)), fresh(node("pending", corev1.ConditionTrue, key)),
		stale(node("silent", corev1.ConditionFalse, key), time.Now().Add(-time.Hour)))
	f := informers.NewSharedInformerFactory(cs, 0)
	r, err := taint.New(cfg, cs, f.Core().V1().Nodes().Informer())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	f.Start(ctx.Done())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()

	get := func(name string) *corev1.Node {
		n, err := cs.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	if !testwait.Until(10*time.Second, func() bool { return len(get("ready").Spec.Taints) == 0 }) {
		t.Fatal("taint never removed from the ready node")
	}
	if get("ready").Annotations[taint.CompletedAnnotation] == "" {
		t.Error("no bootstrap-completed annotation")
	}
	// The pending node turns ready: its taint goes too; until then it stays.
	if len(get("pending").Spec.Taints) != 1 {
		t.Fatal("taint removed while the condition is True")
	}
	p := get("pending")
	p.Status.Conditions[0].Status = corev1.ConditionFalse
	if _, err := cs.CoreV1().Nodes().UpdateStatus(ctx, p, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if !testwait.Until(10*time.Second, func() bool { return len(get("pending").Spec.Taints) == 0 }) {
		t.Fatal("taint never removed after the condition turned False")
	}
	// The silent node's agent stopped writing an hour ago: its False is not
	// evidence, and the taint stayed through the start-up pass and every
	// event above. A fresh heartbeat (its agent is back) lifts it.
	sn := get("silent")
	if len(sn.Spec.Taints) != 1 {
		t.Fatal("taint removed on a stale False condition")
	}
	sn.Status.Conditions[0].LastHeartbeatTime = metav1.Now()
	if _, err := cs.CoreV1().Nodes().UpdateStatus(ctx, sn, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if !testwait.Until(10*time.Second, func() bool { return len(get("silent").Spec.Taints) == 0 }) {
		t.Fatal("taint never removed after a fresh heartbeat")
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

var soft = corev1.Taint{Key: "readiness.k8s.io/KubeletServingCertUnproven", Value: "pending", Effect: corev1.TaintEffectPreferNoSchedule}

// TestSoftTaintReturnsWhenTheConditionGoesStale: staleness comes with no
// event; the lifter looks again when a fresh False is due to go stale.
func TestSoftTaintReturnsWhenTheConditionGoesStale(t *testing.T) {
	c := cfg
	c.SoftTaint = soft
	c.MaxConditionAge = 2 * time.Second
	cs := fake.NewClientset(stale(node("w", corev1.ConditionFalse, key), time.Now()))
	ctx := startLifter(t, c, cs)
	taints := func() []string {
		n, err := cs.CoreV1().Nodes().Get(ctx, "w", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		var keys []string
		for _, tt := range n.Spec.Taints {
			keys = append(keys, tt.Key)
		}
		return keys
	}
	// Fresh False: the readiness taint goes, no soft taint.
	if !testwait.Until(10*time.Second, func() bool { return len(taints()) == 0 }) {
		t.Fatalf("taints %v, want none while the condition is fresh", taints())
	}
	// No write to the node from here on: only the passing of time.
	if !testwait.Until(10*time.Second, func() bool { return strings.Join(taints(), ",") == soft.Key }) {
		t.Fatalf("taints %v, want the soft taint once the condition went stale", taints())
	}
}

// startLifter runs a Lifter with c over cs until the test ends, and
// returns the test's context.
func startLifter(t *testing.T, c taint.Config, cs *fake.Clientset) context.Context {
	t.Helper()
	f := informers.NewSharedInformerFactory(cs, 0)
	r, err := taint.New(c, cs, f.Core().V1().Nodes().Informer())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	f.Start(ctx.Done())
	go func() { _ = r.Run(ctx) }()
	return ctx
}

func TestSoftTaintMustBePreferNoSchedule(t *testing.T) {
	c := cfg
	c.SoftTaint = corev1.Taint{Key: "example.com/x", Effect: corev1.TaintEffectNoSchedule}
	if _, err := taint.New(c, fake.NewClientset(), informers.NewSharedInformerFactory(fake.NewClientset(), 0).Core().V1().Nodes().Informer()); err == nil || !strings.Contains(err.Error(), "PreferNoSchedule") {
		t.Errorf("a NoSchedule soft taint was accepted: %v", err)
	}
}
