package condition_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/record"

	"github.com/certready/certready/internal/nodeapi/nodeapitest"
	"github.com/certready/certready/reporter/servingcert/condition"
)

const (
	condType = corev1.NodeConditionType("KubeletServingCertNotReady")
	factsKey = "certready.io/serving-cert"
)

var t0 = time.Date(2026, 11, 30, 3, 0, 0, 0, time.UTC)

func setup(t *testing.T, existing ...corev1.NodeCondition) (*condition.Writer, *fake.Clientset, *record.FakeRecorder) {
	t.Helper()
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "w1", UID: "uid-w1"}}
	node.Status.Conditions = append([]corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady"}}, existing...)
	cs := fake.NewClientset(node)
	rec := record.NewFakeRecorder(10)
	w := condition.NewWriter(condition.Config{Node: "w1", NodeUID: "uid-w1", Type: condType, Heartbeat: 5 * time.Minute, Annotation: factsKey},
		condition.NewClient(nodeapitest.FromClientset(cs)), rec)
	return w, cs, rec
}

func getNode(t *testing.T, cs *fake.Clientset) *corev1.Node {
	t.Helper()
	n, err := cs.CoreV1().Nodes().Get(context.Background(), "w1", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func nodeCondition(t *testing.T, cs *fake.Clientset, ct corev1.NodeConditionType) *corev1.NodeCondition {
	t.Helper()
	return condition.Find(getNode(t, cs), ct)
}

func patches(cs *fake.Clientset) []k8stesting.PatchAction {
	var out []k8stesting.PatchAction
	for _, a := range cs.Actions() {
		if p, ok := a.(k8stesting.PatchAction); ok {
			out = append(out, p)
		}
	}
	return out
}

var (
	notReady = condition.Desired{Status: corev1.ConditionTrue, Reason: "CSRPending", Message: "CSR csr-1 pending"}
	ready    = condition.Desired{Status: corev1.ConditionFalse, Reason: "KubeletServingCertReady", Message: "serving certificate ok", Annotation: `{"sha256":"a"}`}
	// readyRotated says the same in prose with other facts.
	readyRotated = condition.Desired{Status: ready.Status, Reason: ready.Reason, Message: ready.Message, Annotation: `{"sha256":"b"}`}
)

func TestFirstWriteIsAStrategicMergePatchOfThisConditionOnly(t *testing.T) {
	w, cs, rec := setup(t)
	out, err := w.Write(context.Background(), t0, notReady, nil)
	if err != nil || out != condition.Transitioned {
		t.Fatalf("write = %v, %v", out, err)
	}
	ps := patches(cs)
	if len(ps) != 1 {
		t.Fatalf("%d patches, want 1", len(ps))
	}
	p := ps[0]
	if p.GetSubresource() != "status" || p.GetPatchType() != condition.PatchType || p.GetName() != "w1" {
		t.Errorf("patch %s/%s of %s, want a strategic merge patch of nodes/w1/status", p.GetSubresource(), p.GetPatchType(), p.GetName())
	}
	want := `{"metadata":{"annotations":{"certready.io/serving-cert":null}},"status":{"conditions":[{"type":"KubeletServingCertNotReady","status":"True","lastHeartbeatTime":"2026-11-30T03:00:00Z","lastTransitionTime":"2026-11-30T03:00:00Z","reason":"CSRPending","message":"CSR csr-1 pending"}]}}`
	if string(p.GetPatch()) != want {
		t.Errorf("patch:\n%s\nwant:\n%s", p.GetPatch(), want)
	}
	if c := nodeCondition(t, cs, corev1.NodeReady); c == nil || c.Status != corev1.ConditionTrue {
		t.Errorf("the Ready condition was touched: %+v", c)
	}
	select {
	case ev := <-rec.Events:
		if !strings.HasPrefix(ev, "Warning CSRPending") || !strings.Contains(ev, "was unset") {
			t.Errorf("event %q", ev)
		}
	default:
		t.Error("no event for the first transition")
	}
}

func TestWriteRules(t *testing.T) {
	type step struct {
		at         time.Duration
		d          condition.Desired
		want       condition.Outcome
		transition time.Duration // expected lastTransitionTime offset after the step
		event      string        // expected event prefix, "" for none
	}
	cases := []struct {
		name     string
		existing []corev1.NodeCondition
		facts    string // the node's annotation before the first step
		steps    []step
	}{
		{
			name: "unchanged content is skipped until the heartbeat",
			steps: []step{
				{at: 0, d: notReady, want: condition.Transitioned, transition: 0, event: "Warning CSRPending"},
				{at: time.Minute, d: notReady, want: condition.Skipped, transition: 0},
				{at: 5 * time.Minute, d: notReady, want: condition.Written, transition: 0},
			},
		},
		{
			name: "status change moves lastTransitionTime and emits a Normal event",
			steps: []step{
				{at: 0, d: notReady, want: condition.Transitioned, transition: 0, event: "Warning"},
				{at: time.Minute, d: ready, want: condition.Transitioned, transition: time.Minute, event: "Normal KubeletServingCertReady"},
			},
		},
		{
			name: "message change within the same status keeps lastTransitionTime",
			steps: []step{
				{at: 0, d: notReady, want: condition.Transitioned, transition: 0, event: "Warning"},
				{at: time.Second, d: condition.Desired{Status: corev1.ConditionTrue, Reason: "CSRPending", Message: "other"}, want: condition.Written, transition: 0},
			},
		},
		{
			name: "reason change within the same status is an event but not a transition time",
			steps: []step{
				{at: 0, d: notReady, want: condition.Transitioned, transition: 0, event: "Warning CSRPending"},
				{at: time.Second, d: condition.Desired{Status: corev1.ConditionTrue, Reason: "EndpointNoCertificate", Message: "m"}, want: condition.Transitioned, transition: 0, event: "Warning EndpointNoCertificate"},
			},
		},
		{
			name: "new facts under the same message are written at once",
			steps: []step{
				{at: 0, d: ready, want: condition.Transitioned, transition: 0, event: "Normal KubeletServingCertReady"},
				{at: time.Second, d: readyRotated, want: condition.Written, transition: 0},
				{at: 2 * time.Second, d: readyRotated, want: condition.Skipped, transition: 0},
			},
		},
		{
			name: "a not-ready condition takes the facts away",
			steps: []step{
				{at: 0, d: ready, want: condition.Transitioned, transition: 0, event: "Normal"},
				{at: time.Second, d: notReady, want: condition.Transitioned, transition: time.Second, event: "Warning CSRPending"},
			},
		},
		{
			name:  "a restart keeps the node's transition time and vouches with a heartbeat at once",
			facts: ready.Annotation,
			existing: []corev1.NodeCondition{{Type: condType, Status: corev1.ConditionFalse, Reason: ready.Reason, Message: ready.Message,
				LastHeartbeatTime: metav1.NewTime(t0.Add(-time.Minute)), LastTransitionTime: metav1.NewTime(t0.Add(-time.Hour))}},
			steps: []step{
				{at: 0, d: ready, want: condition.Written, transition: -time.Hour},
				{at: 4 * time.Minute, d: ready, want: condition.Skipped, transition: -time.Hour},
				{at: 5 * time.Minute, d: ready, want: condition.Written, transition: -time.Hour},
			},
		},
		{
			name:  "facts the node shows from another writer are replaced",
			facts: `{"sha256":"forged"}`,
			steps: []step{
				{at: 0, d: ready, want: condition.Transitioned, transition: 0, event: "Normal"},
			},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			w, cs, rec := setup(t, tc.existing...)
			if tc.facts != "" {
				n := getNode(t, cs)
				n.Annotations = map[string]string{factsKey: tc.facts}
				if _, err := cs.CoreV1().Nodes().Update(context.Background(), n, metav1.UpdateOptions{}); err != nil {
					t.Fatal(err)
				}
			}
			for i, s := range tc.steps {
				out, err := w.Write(context.Background(), t0.Add(s.at), s.d, getNode(t, cs))
				if err != nil {
					t.Fatal(err)
				}
				if out != s.want {
					t.Fatalf("step %d: outcome %s, want %s", i, out, s.want)
				}
				n := getNode(t, cs)
				got := condition.Find(n, condType)
				if got == nil {
					t.Fatalf("step %d: condition absent", i)
				}
				if facts, ok := n.Annotations[factsKey]; facts != s.d.Annotation || ok != (s.d.Annotation != "") {
					t.Errorf("step %d: annotation %q (present %v), want %q", i, facts, ok, s.d.Annotation)
				}
				if !got.LastTransitionTime.Time.Equal(t0.Add(s.transition)) {
					t.Errorf("step %d: lastTransitionTime %s, want %s", i, got.LastTransitionTime.UTC(), t0.Add(s.transition))
				}
				if out != condition.Skipped && !got.LastHeartbeatTime.Time.Equal(t0.Add(s.at)) {
					t.Errorf("step %d: lastHeartbeatTime %s, want %s", i, got.LastHeartbeatTime.UTC(), t0.Add(s.at))
				}
				select {
				case ev := <-rec.Events:
					if s.event == "" || !strings.HasPrefix(ev, s.event) {
						t.Errorf("step %d: event %q, want prefix %q", i, ev, s.event)
					}
				default:
					if s.event != "" {
						t.Errorf("step %d: no event, want %q", i, s.event)
					}
				}
			}
		})
	}
}

func TestFailedPatchIsNotRemembered(t *testing.T) {
	w, cs, _ := setup(t)
	cs.PrependReactor("patch", "nodes", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, context.DeadlineExceeded
	})
	if _, err := w.Write(context.Background(), t0, notReady, nil); err == nil || !strings.Contains(err.Error(), "node w1") {
		t.Fatalf("err = %v, want one naming the node", err)
	}
	if w.Last() != nil {
		t.Error("a failed write was remembered as written")
	}
}

func TestPatchShape(t *testing.T) {
	b, err := condition.Patch(corev1.NodeCondition{Type: condType, Status: corev1.ConditionUnknown}, nil)
	if err != nil {
		t.Fatal(err)
	}
	var decoded struct {
		Status struct {
			Conditions []map[string]any `json:"conditions"`
		} `json:"status"`
	}
	if err := json.Unmarshal(b, &decoded); err != nil || len(decoded.Status.Conditions) != 1 || decoded.Status.Conditions[0]["type"] != string(condType) {
		t.Errorf("patch %s", b)
	}
}

// A Writer without an annotation never touches the Node's annotations.
func TestNoAnnotationConfiguredLeavesAnnotationsAlone(t *testing.T) {
	cs := fake.NewClientset(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "w1", Annotations: map[string]string{factsKey: "theirs"}}})
	w := condition.NewWriter(condition.Config{Node: "w1", Type: condType, Heartbeat: time.Minute}, condition.NewClient(nodeapitest.FromClientset(cs)), nil)
	if _, err := w.Write(context.Background(), t0, ready, nil); err != nil {
		t.Fatal(err)
	}
	if n := getNode(t, cs); n.Annotations[factsKey] != "theirs" {
		t.Errorf("annotations %v, want them untouched", n.Annotations)
	}
	for _, p := range patches(cs) {
		if strings.Contains(string(p.GetPatch()), "metadata") {
			t.Errorf("patch %s touches metadata", p.GetPatch())
		}
	}
}

// One freshness rule for the taint fallback, the fleet view and preflight.
func TestFresh(t *testing.T) {
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	beat := func(d time.Duration) *corev1.NodeCondition {
		return &corev1.NodeCondition{Type: condType, Status: corev1.ConditionFalse, LastHeartbeatTime: metav1.NewTime(now.Add(d))}
	}
	for _, tc := range []struct {
		name   string
		c      *corev1.NodeCondition
		maxAge time.Duration
		want   bool
	}{
		{"no condition", nil, condition.DefaultMaxAge, false},
		{"never written", &corev1.NodeCondition{Type: condType}, condition.DefaultMaxAge, false},
		{"written now", beat(0), condition.DefaultMaxAge, true},
		{"at the bound", beat(-condition.DefaultMaxAge), condition.DefaultMaxAge, true},
		{"past the bound", beat(-condition.DefaultMaxAge - time.Second), condition.DefaultMaxAge, false},
		{"a day old, no bound", beat(-24 * time.Hour), 0, true},
		{"a clock ahead within the bound", beat(condition.MaxHeartbeatAhead), condition.DefaultMaxAge, true},
		{"further ahead: stands after its writer is gone", beat(condition.MaxHeartbeatAhead + time.Second), condition.DefaultMaxAge, false},
		{"further ahead, no age bound", beat(time.Hour), 0, false},
	} {
		if got := condition.Fresh(tc.c, tc.maxAge, now); got != tc.want {
			t.Errorf("%s: Fresh = %v, want %v", tc.name, got, tc.want)
		}
	}
}
