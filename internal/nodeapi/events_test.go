package nodeapi_test

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/certready/certready/internal/nodeapi"
	"github.com/certready/certready/internal/nodeapi/nodeapitest"
	"github.com/certready/certready/internal/testwait"
)

// NodeEvents writes each event about a Node once, in default, with the
// fields kubectl describe node and the agent-events policy read; events
// about anything else are not recorded.
func TestNodeEventsAreWrittenWhereNodeEventsGo(t *testing.T) {
	cs := fake.NewClientset()
	ev := nodeapi.NewNodeEvents(nodeapitest.FromClientset(cs), corev1.EventSource{Component: "certready-agent", Host: "w1"})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go ev.Run(ctx)
	ev.Eventf(&corev1.ObjectReference{Kind: "Node", APIVersion: "v1", Name: "w1", UID: "uid-w1"}, corev1.EventTypeWarning, "CSRPending", "%s=%s", "KubeletServingCertNotReady", "True")
	ev.Eventf(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "w1", UID: "uid-w1"}}, corev1.EventTypeNormal, "KubeletServingCertReady", "ready")
	ev.Eventf(&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "default"}}, corev1.EventTypeNormal, "Other", "not a node")
	var list *corev1.EventList
	if !testwait.Until(10*time.Second, func() bool {
		list, _ = cs.CoreV1().Events("default").List(ctx, metav1.ListOptions{})
		return list != nil && len(list.Items) == 2
	}) {
		t.Fatalf("events %+v, want the two about the Node", list)
	}
	for _, e := range list.Items {
		if e.InvolvedObject.Kind != "Node" || e.InvolvedObject.Name != "w1" || e.InvolvedObject.UID != "uid-w1" || e.Source.Component != "certready-agent" ||
			e.Source.Host != "w1" || e.Count != 1 || e.FirstTimestamp.IsZero() || e.Namespace != "default" {
			t.Errorf("event %+v", e)
		}
	}
	if list.Items[0].Name == list.Items[1].Name {
		t.Errorf("two events named %s", list.Items[0].Name)
	}
}
