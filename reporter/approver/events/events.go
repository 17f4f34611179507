// Package events is the approver's one way to record Kubernetes Events:
// client-go's broadcaster, sink and recorder, wired once. (The agent records
// its Node events with nodeapi's small writer instead: it runs on every
// node and does not link client-go's recorder and scheme.)
package events

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/tools/record"
)

// Recorder records events as component through client until stop, which
// flushes what is queued and ends it. Events are also logged at -v=4.
func Recorder(ctx context.Context, client kubernetes.Interface, component string) (recorder record.EventRecorder, stop func()) {
	broadcaster := record.NewBroadcaster(record.WithContext(ctx))
	broadcaster.StartStructuredLogging(4)
	broadcaster.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: client.CoreV1().Events("")})
	return broadcaster.NewRecorder(scheme.Scheme, corev1.EventSource{Component: component}), broadcaster.Shutdown
}
