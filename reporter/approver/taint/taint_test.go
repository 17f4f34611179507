package taint_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/certready/certready/reporter/approver/taint"
)

const key = "readiness.k8s.io/KubeletServingCertNotReady"

var cfg = taint.Config{TaintKey: key, ConditionType: "KubeletServingCertNotReady"}

func node(name string, status corev1.ConditionStatus, taints ...string) *corev1.Node {
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, ResourceVersion: "42"}}
	for _, k := range taints {
		n.Spec.Taints = append(n.Spec.Taints, corev1.Taint{Key: k, Value: "pending", Effect: corev1.TaintEffectNoSchedule})
	}
	if status != "" {
		n.Status.Conditions = []corev1.NodeCondition{{Type: cfg.ConditionType, Status: status}}
	}
	return n
}

func TestPatch(t *testing.T) {
	now := time.Date(2026, 11, 30, 3, 0, 0, 0, time.UTC)
	cases := []struct {
		name   string
		node   *corev1.Node
		want   bool
		remain []string
	}{
		{name: "condition False and tainted: removed, other taints kept", node: node("a", corev1.ConditionFalse, key, "other"), want: true, remain: []string{"other"}},
		{name: "last taint removed", node: node("a", corev1.ConditionFalse, key), want: true, remain: []string{}},
		{name: "condition True keeps the taint", node: node("a", corev1.ConditionTrue, key)},
		{name: "condition Unknown keeps the taint", node: node("a", corev1.ConditionUnknown, key)},
		{name: "no condition keeps the taint", node: node("a", "", key)},
		{name: "untainted: nothing to do", node: node("a", corev1.ConditionFalse, "other")},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p, ok, err := taint.Patch(tc.node, cfg, now)
			if err != nil || ok != tc.want {
				t.Fatalf("ok=%v err=%v, want %v", ok, err, tc.want)
			}
			if !ok {
				return
			}
			var got struct {
				Metadata struct {
					ResourceVersion string            `json:"resourceVersion"`
					Annotations     map[string]string `json:"annotations"`
				} `json:"metadata"`
				Spec struct {
					Taints []corev1.Taint `json:"taints"`
				} `json:"spec"`
			}
			if err := json.Unmarshal(p, &got); err != nil {
				t.Fatal(err)
			}
			if got.Metadata.ResourceVersion != "42" {
				t.Errorf("no optimistic lock: %s", p)
			}
			if got.Metadata.Annotations[taint.CompletedAnnotation] != "2026-11-30T03:00:00Z" {
				t.Errorf("annotations %v", got.Metadata.Annotations)
			}
			if len(got.Spec.Taints) != len(tc.remain) {
				t.Fatalf("taints %v, want %v", got.Spec.Taints, tc.remain)
			}
			for i, k := range tc.remain {
				if got.Spec.Taints[i].Key != k {
					t.Errorf("taint %d = %s, want %s", i, got.Spec.Taints[i].Key, k)
				}
			}
		})
	}
}

func TestRemoverLiftsTheTaintOnlyWhenReady(t *testing.T) {
	cs := fake.NewClientset(node("ready", corev1.ConditionFalse, key), node("pending", corev1.ConditionTrue, key))
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
	deadline := time.Now().Add(10 * time.Second)
	for len(get("ready").Spec.Taints) != 0 {
		if time.Now().After(deadline) {
			t.Fatal("taint never removed from the ready node")
		}
		time.Sleep(10 * time.Millisecond)
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
	for len(get("pending").Spec.Taints) != 0 {
		if time.Now().After(deadline) {
			t.Fatal("taint never removed after the condition turned False")
		}
		time.Sleep(10 * time.Millisecond)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}
