package events_test

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/certready/certready/internal/testwait"
	"github.com/certready/certready/reporter/approver/events"
)

// An event recorded reaches the API as an Event of the component about the
// object, with its reason and message.
func TestRecorderWritesEvents(t *testing.T) {
	client := fake.NewClientset()
	recorder, stop := events.Recorder(context.Background(), client, "certready-test")
	defer stop()
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "w1", UID: "u1"}}
	recorder.Eventf(node, corev1.EventTypeWarning, "SomethingHappened", "it happened to %s", node.Name)
	var got []corev1.Event
	if !testwait.Until(10*time.Second, func() bool {
		l, err := client.CoreV1().Events("").List(context.Background(), metav1.ListOptions{})
		if err != nil {
			return false
		}
		got = l.Items
		return len(got) == 1
	}) {
		t.Fatalf("events written: %d, want 1", len(got))
	}
	e := got[0]
	if e.Source.Component != "certready-test" || e.Reason != "SomethingHappened" || e.Message != "it happened to w1" ||
		e.Type != corev1.EventTypeWarning || e.InvolvedObject.Name != "w1" || e.InvolvedObject.Kind != "Node" {
		t.Errorf("event = %+v", e)
	}
}
