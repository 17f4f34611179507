package fleet_test

import (
	"reflect"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/certready/certready/reporter/agent/verdict"
	"github.com/certready/certready/reporter/fleet"
)

func TestFindingsComeFromRecentAgentEvents(t *testing.T) {
	now := time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC)
	ev := func(node, reason, typ string, kind string, last time.Time) corev1.Event {
		return corev1.Event{InvolvedObject: corev1.ObjectReference{Kind: kind, Name: node}, Reason: reason, Type: typ, LastTimestamp: metav1.NewTime(last)}
	}
	const r = verdict.FindingAPIServerVerifiesNoKubelet
	cases := []struct {
		name      string
		events    []corev1.Event
		wantNodes []string
		wantLast  time.Time
	}{
		{name: "none"},
		{name: "two nodes, one twice", events: []corev1.Event{
			ev("w2", r, corev1.EventTypeWarning, "Node", now.Add(-5*time.Minute)),
			ev("w1", r, corev1.EventTypeWarning, "Node", now.Add(-20*time.Minute)),
			ev("w2", r, corev1.EventTypeWarning, "Node", now.Add(-15*time.Minute)),
		}, wantNodes: []string{"w1", "w2"}, wantLast: now.Add(-5 * time.Minute)},
		{name: "older than the window", events: []corev1.Event{ev("w1", r, corev1.EventTypeWarning, "Node", now.Add(-fleet.FindingWindow-time.Minute))}},
		{name: "another reason, a Normal event, another kind", events: []corev1.Event{
			ev("w1", "CertificateRotated", corev1.EventTypeWarning, "Node", now),
			ev("w1", r, corev1.EventTypeNormal, "Node", now),
			ev("p1", r, corev1.EventTypeWarning, "Pod", now),
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := fleet.Findings(c.events, now)
			if c.wantNodes == nil {
				if got != nil {
					t.Errorf("findings %+v, want none", got)
				}
				return
			}
			if len(got) != 1 || got[0].Name != r || !reflect.DeepEqual(got[0].Nodes, c.wantNodes) || !got[0].LastSeen.Equal(c.wantLast) || got[0].Message == "" {
				t.Errorf("findings %+v, want %s on %v last %s", got, r, c.wantNodes, c.wantLast)
			}
		})
	}
}
