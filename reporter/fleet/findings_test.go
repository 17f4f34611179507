package fleet_test

import (
	"fmt"
	"reflect"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/certready/certready/reporter/fleet"
	"github.com/certready/certready/reporter/servingcert/verdict"
)

func TestFindingsComeFromRecentAgentEvents(t *testing.T) {
	now := time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC)
	const r = verdict.FindingAPIServerVerifiesNoKubelet
	ev := func(node, reason, typ string, kind string, last time.Time) corev1.Event {
		return corev1.Event{InvolvedObject: corev1.ObjectReference{Kind: kind, Name: node, UID: types.UID("uid-" + node)}, Reason: reason, Type: typ,
			LastTimestamp: metav1.NewTime(last), Source: corev1.EventSource{Component: "certready-agent", Host: node}}
	}
	nodes := func(names ...string) []corev1.Node {
		out := []corev1.Node{}
		for _, n := range names {
			out = append(out, corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: n, UID: types.UID("uid-" + n)}})
		}
		return out
	}
	forged := ev("w1", r, corev1.EventTypeWarning, "Node", now)
	forged.Source.Component = "kubelet"
	series := ev("w3", r, corev1.EventTypeWarning, "Node", now.Add(-2*fleet.FindingWindow))
	series.Series = &corev1.EventSeries{Count: 7, LastObservedTime: metav1.NewMicroTime(now.Add(-time.Minute))}
	var many []corev1.Event
	var manyNames []string
	for i := range 12 {
		name := fmt.Sprintf("n%02d", i)
		many = append(many, ev(name, r, corev1.EventTypeWarning, "Node", now))
		manyNames = append(manyNames, name)
	}
	cases := []struct {
		name      string
		events    []corev1.Event
		nodes     []corev1.Node
		wantNodes []string
		wantMore  int
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
		{name: "another source (a node credential can record events too)", events: []corev1.Event{forged}},
		{name: "a node that is not listed, or listed under another UID", events: []corev1.Event{
			ev("gone", r, corev1.EventTypeWarning, "Node", now), ev("w1", r, corev1.EventTypeWarning, "Node", now),
		}, nodes: []corev1.Node{{ObjectMeta: metav1.ObjectMeta{Name: "w1", UID: "uid-other"}}}},
		{name: "a listed node", events: []corev1.Event{ev("gone", r, corev1.EventTypeWarning, "Node", now), ev("w1", r, corev1.EventTypeWarning, "Node", now)},
			nodes: nodes("w1", "w2"), wantNodes: []string{"w1"}, wantLast: now},
		{name: "an event series seen again", events: []corev1.Event{series}, wantNodes: []string{"w3"}, wantLast: now.Add(-time.Minute)},
		{name: "many nodes: ten named, the rest counted", events: many, wantNodes: manyNames[:10], wantMore: 2, wantLast: now},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := fleet.Findings(c.events, c.nodes, now)
			if c.wantNodes == nil {
				if got != nil {
					t.Errorf("findings %+v, want none", got)
				}
				return
			}
			if len(got) != 1 || got[0].Name != r || !reflect.DeepEqual(got[0].Nodes, c.wantNodes) || !got[0].LastSeen.Equal(c.wantLast) || got[0].MoreNodes != c.wantMore || got[0].Message == "" {
				t.Errorf("findings %+v, want %s on %v last %s", got, r, c.wantNodes, c.wantLast)
			}
		})
	}
}
