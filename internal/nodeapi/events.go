package nodeapi

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/klog/v2"
)

// NodeEvents records events about Nodes, the node side's only events: one
// create each, written in the background so that a slow API server never
// holds up a check. client-go's recorder also aggregates repeated events
// and patches their counts; the agent records one event per transition,
// and its event machinery (strategic merge patches) links the OpenAPI
// packages into every agent (bench table 4). Its Eventf has the signature
// of record.EventRecorder's.
type NodeEvents struct {
	api    API
	source corev1.EventSource
	queue  chan *corev1.Event
	now    func() time.Time
	seq    atomic.Int64 // keeps names apart within a clock tick
}

// NewNodeEvents records, as source, through api; Run writes.
func NewNodeEvents(api API, source corev1.EventSource) *NodeEvents {
	return &NodeEvents{api: api, source: source, queue: make(chan *corev1.Event, 64), now: time.Now}
}

// Eventf records an event about obj, a Node or a reference to one. When
// the queue is full (an API server away for long), the event is dropped
// and logged: events are records, the condition is the state.
func (e *NodeEvents) Eventf(obj runtime.Object, eventtype, reason, messageFmt string, args ...any) {
	var ref corev1.ObjectReference
	switch o := obj.(type) {
	case *corev1.ObjectReference:
		ref = *o
	case *corev1.Node:
		ref = corev1.ObjectReference{Kind: "Node", APIVersion: "v1", Name: o.Name, UID: o.UID}
	default:
		klog.Background().Info("Not recording an event about an object that is no Node", "object", fmt.Sprintf("%T", obj), "reason", reason)
		return
	}
	now := metav1.NewTime(e.now())
	ev := &corev1.Event{
		// Node events live in default, named as client-go names them.
		ObjectMeta:          metav1.ObjectMeta{Name: fmt.Sprintf("%v.%x", ref.Name, now.UnixNano()+e.seq.Add(1)), Namespace: metav1.NamespaceDefault},
		InvolvedObject:      ref,
		Reason:              reason,
		Message:             fmt.Sprintf(messageFmt, args...),
		Type:                eventtype,
		Source:              e.source,
		FirstTimestamp:      now,
		LastTimestamp:       now,
		Count:               1,
		ReportingController: e.source.Component,
		ReportingInstance:   e.source.Component + "-" + e.source.Host,
	}
	select {
	case e.queue <- ev:
	default:
		klog.Background().Info("Event queue full; dropping an event", "reason", reason, "object", ref.Name)
	}
}

// Run writes the recorded events until ctx ends.
func (e *NodeEvents) Run(ctx context.Context) {
	logger := klog.FromContext(ctx)
	for {
		select {
		case <-ctx.Done():
			return
		case ev := <-e.queue:
			wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			if err := e.api.CreateEvent(wctx, ev); err != nil {
				logger.Error(err, "Recording an event", "reason", ev.Reason, "object", ev.InvolvedObject.Name)
			}
			cancel()
		}
	}
}
