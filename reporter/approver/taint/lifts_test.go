package taint_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/record"

	"github.com/certready/certready/internal/fingerprint"
	"github.com/certready/certready/internal/names"
	"github.com/certready/certready/internal/stamp"
	"github.com/certready/certready/internal/testmetrics"
	"github.com/certready/certready/internal/testwait"
	"github.com/certready/certready/reporter/approver/taint"
	"github.com/certready/certready/reporter/servingcert/verdict"
)

func TestLiftedNamesWhoAndWhatItReliedOn(t *testing.T) {
	registered := heartbeat.Add(-90 * time.Second)
	fp := fingerprint.SHA256{1, 2, 3}
	// A release candidate's facts trailer (the agent's annotation has
	// cases of its own).
	trailer := " [notAfter=" + stamp.Format(heartbeat.Add(time.Hour)) + " sha256=" + fp.String() + "]"
	ready := "serving certificate ready" + trailer
	base := func(status corev1.ConditionStatus, message string, taints ...string) *corev1.Node {
		n := node("w1", status, taints...)
		n.UID, n.CreationTimestamp = "uid-1", metav1.NewTime(registered)
		if len(n.Status.Conditions) > 0 {
			n.Status.Conditions[0].Message = message
		}
		return n
	}
	annotated := func(n *corev1.Node, kv ...string) *corev1.Node {
		n.Annotations = map[string]string{}
		for i := 0; i+1 < len(kv); i += 2 {
			n.Annotations[kv[i]] = kv[i+1]
		}
		return n
	}
	cases := []struct {
		name          string
		old, new      *corev1.Node
		wantOK        bool
		wantBy, wantR string
		wantFP        string
		noFallback    bool
	}{
		{name: "certready's fallback", old: base(corev1.ConditionFalse, ready, key),
			new:    annotated(base(corev1.ConditionFalse, ready), names.CompletedAnnotation, "2026-11-30T03:00:00Z"),
			wantOK: true, wantBy: taint.ByCertready, wantFP: fp.String()},
		{name: "the agent's facts annotation", old: base(corev1.ConditionFalse, "serving certificate ready", key),
			new: annotated(base(corev1.ConditionFalse, "serving certificate ready"), names.CompletedAnnotation, "2026-11-30T03:00:00Z",
				names.FactsAnnotation, verdict.Facts{NotAfter: heartbeat.Add(time.Hour), Fingerprint: fp}.Annotation()),
			wantOK: true, wantBy: taint.ByCertready, wantFP: fp.String()},
		{name: "a facts annotation beside a not-ready condition is no proof", old: base(corev1.ConditionTrue, "CSR pending", key),
			new:    annotated(base(corev1.ConditionTrue, "CSR pending"), names.FactsAnnotation, verdict.Facts{NotAfter: heartbeat.Add(time.Hour), Fingerprint: fp}.Annotation()),
			wantOK: true, wantBy: taint.ByOther},
		{name: "a node-readiness-controller rule", old: base(corev1.ConditionFalse, ready, key),
			new:    annotated(base(corev1.ConditionFalse, ready), names.NRCCompletedPrefix+"9f1c", "true"),
			wantOK: true, wantBy: taint.ByNRC, wantR: "9f1c", wantFP: fp.String()},
		{name: "an operator's kubectl taint, the condition True", old: base(corev1.ConditionTrue, "CSR pending", key),
			new: base(corev1.ConditionTrue, "CSR pending"), wantOK: true, wantBy: taint.ByOther},
		{name: "facts at the end of a not-ready message are no proof", old: base(corev1.ConditionTrue, "drifted: the agent dials the inventory's fe80::1"+trailer, key),
			new: base(corev1.ConditionTrue, "drifted: the agent dials the inventory's fe80::1"+trailer), wantOK: true, wantBy: taint.ByOther},
		{name: "the taint stays", old: base(corev1.ConditionTrue, "", key), new: base(corev1.ConditionFalse, ready, key)},
		{name: "never tainted", old: base(corev1.ConditionFalse, ready), new: base(corev1.ConditionFalse, ready)},
		{name: "certready's mark while its fallback is off is a claim", old: base(corev1.ConditionFalse, ready, key),
			new:    annotated(base(corev1.ConditionFalse, ready), names.CompletedAnnotation, "2026-11-30T03:00:00Z"),
			wantOK: true, wantBy: taint.ByOther, wantR: "claims certready, whose fallback is off", wantFP: fp.String(), noFallback: true},
		{name: "the key with another value is the readiness taint (NRC matches key and effect)", old: func() *corev1.Node {
			n := base(corev1.ConditionFalse, ready)
			n.Spec.Taints = []corev1.Taint{{Key: key, Value: "other", Effect: corev1.TaintEffectNoSchedule}}
			return n
		}(), new: base(corev1.ConditionFalse, ready), wantOK: true, wantBy: taint.ByOther, wantFP: fp.String()},
		{name: "the key with another effect is not", old: func() *corev1.Node {
			n := base(corev1.ConditionFalse, ready)
			n.Spec.Taints = []corev1.Taint{{Key: key, Value: "pending", Effect: corev1.TaintEffectPreferNoSchedule}}
			return n
		}(), new: base(corev1.ConditionFalse, ready)},
		{name: "a Node registered again is another object", old: base(corev1.ConditionFalse, ready, key), new: func() *corev1.Node {
			n := base(corev1.ConditionFalse, ready)
			n.UID = types.UID("uid-2")
			return n
		}()},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			lift, ok := taint.Lifted(c.old, c.new, cfg.Taint, cfg.ConditionType, !c.noFallback, heartbeat)
			if ok != c.wantOK {
				t.Fatalf("Lifted = %+v, %v; want ok %v", lift, ok, c.wantOK)
			}
			if !ok {
				return
			}
			if lift.By != c.wantBy || lift.Rule != c.wantR || lift.Fingerprint != c.wantFP || lift.Waited != 90*time.Second || lift.Condition == nil || !lift.First {
				t.Errorf("Lifted = %+v; want by %q rule %q fingerprint %q, waited 90s, with the condition", lift, c.wantBy, c.wantR, c.wantFP)
			}
		})
	}
}

// Only the leading replica records a lift: an event and the wait.
func TestLiftsRecordOnlyWhileLeading(t *testing.T) {
	n := node("w1", corev1.ConditionFalse, key)
	n.UID, n.CreationTimestamp = "uid-1", metav1.NewTime(time.Now().Add(-time.Minute))
	cs := fake.NewClientset(n)
	factory := informers.NewSharedInformerFactory(cs, 0)
	replica := func() (*taint.Lifts, *record.FakeRecorder, *prometheus.Registry) {
		events, reg := record.NewFakeRecorder(10), prometheus.NewRegistry()
		l, err := taint.NewLifts(cfg.Taint, cfg.ConditionType, true, events, nil, reg, factory.Core().V1().Nodes().Informer())
		if err != nil {
			t.Fatal(err)
		}
		return l, events, reg
	}
	leader, leaderEvents, reg := replica()
	_, standbyEvents, _ := replica()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	factory.Start(ctx.Done())
	factory.WaitForCacheSync(ctx.Done())
	go leader.Run(ctx)
	setTaints := func(taints []corev1.Taint) {
		t.Helper()
		cur, err := cs.CoreV1().Nodes().Get(ctx, "w1", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		cur.Spec.Taints = taints
		if _, err := cs.CoreV1().Nodes().Update(ctx, cur, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	// Lift (and taint again, until the leader is running and sees one).
	if !testwait.Until(5*time.Second, func() bool {
		setTaints(nil)
		if len(leaderEvents.Events) > 0 {
			return true
		}
		setTaints([]corev1.Taint{cfg.Taint})
		return false
	}) {
		t.Fatal("no event for a lift while leading")
	}
	ev := <-leaderEvents.Events
	if !strings.Contains(ev, "ReadinessTaintLifted") || !strings.Contains(ev, taint.ByOther) {
		t.Errorf("event %q: want ReadinessTaintLifted naming who", ev)
	}
	if got := testmetrics.Series(t, reg, "certready_readiness_taint_wait_seconds", map[string]string{"by": taint.ByOther}); len(got) != 1 {
		t.Errorf("wait histogram series %v, want one for by=other", got)
	}
	select {
	case ev := <-standbyEvents.Events:
		t.Errorf("the standby recorded %q", ev)
	default:
	}
}
