// Package condition decides when and how the node condition is written:
// only this condition is touched (a strategic-merge patch of nodes/status
// keyed by type), with at most one Node annotation in the same request
// (the machine-readable facts behind the message), lastTransitionTime
// moves only when the status changes,
// lastHeartbeatTime on every write, unchanged content is rewritten only once
// the heartbeat period has passed, and every transition leaves a Node event.
package condition

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"

	"github.com/certready/certready/internal/nodeapi"
)

// Client writes one condition of one node. The fake for tests is a
// kubernetes fake clientset behind nodeapitest and NewClient.
type Client interface {
	// PatchCondition sets cond and, in the same request, each annotation
	// (nil: removed).
	PatchCondition(ctx context.Context, node string, cond corev1.NodeCondition, annotations map[string]*string) error
}

// NewClient patches nodes/status through api.
func NewClient(api nodeapi.API) Client { return apiClient{api} }

type apiClient struct{ api nodeapi.API }

func (k apiClient) PatchCondition(ctx context.Context, node string, cond corev1.NodeCondition, annotations map[string]*string) error {
	patch, err := Patch(cond, annotations)
	if err != nil {
		return err
	}
	if err := k.api.PatchNodeStatus(ctx, node, patch); err != nil {
		return fmt.Errorf("patching condition %s on node %s: %w", cond.Type, node, err)
	}
	return nil
}

// Patch is the strategic-merge patch that sets cond and the annotations
// (nil: removed) and nothing else: node conditions merge by type and
// annotations by key, so the others are left as they are. The status
// subresource persists metadata too, so one request carries both.
func Patch(cond corev1.NodeCondition, annotations map[string]*string) ([]byte, error) {
	p := map[string]any{"status": map[string]any{"conditions": []corev1.NodeCondition{cond}}}
	if len(annotations) > 0 {
		p["metadata"] = map[string]any{"annotations": annotations}
	}
	return json.Marshal(p)
}

// PatchType is the patch type Patch produces.
const PatchType = types.StrategicMergePatchType

// Desired is the content the caller wants the condition to have.
type Desired struct {
	Status  corev1.ConditionStatus
	Reason  string
	Message string
	// Annotation is the value of Config.Annotation to write with the
	// condition ("": the annotation is removed).
	Annotation string
}

// Config configures a Writer.
type Config struct {
	Node      string
	NodeUID   types.UID
	Type      corev1.NodeConditionType
	Heartbeat time.Duration
	// Annotation is the Node annotation written with the condition, to
	// Desired.Annotation ("": none).
	Annotation string
}

// Outcome says what Write did.
type Outcome string

const (
	Skipped      Outcome = "Skipped"      // content unchanged and heartbeat fresh
	Written      Outcome = "Written"      // rewritten (heartbeat or message)
	Transitioned Outcome = "Transitioned" // status or reason changed
)

// Writer publishes the condition. It is not safe for concurrent use: the
// agent writes from one worker.
type Writer struct {
	cfg      Config
	client   Client
	recorder Recorder
	last     *corev1.NodeCondition // what this process last wrote
	lastAnno string                // and the annotation it wrote with it
}

// Recorder records events (record.EventRecorder and nodeapi.NodeEvents
// are ones).
type Recorder interface {
	Eventf(obj runtime.Object, eventtype, reason, messageFmt string, args ...any)
}

// NewWriter returns a Writer; recorder may be nil (no events).
func NewWriter(cfg Config, client Client, recorder Recorder) *Writer {
	return &Writer{cfg: cfg, client: client, recorder: recorder}
}

// Write publishes d at now. node is the Node as the informer shows it (nil
// if unknown). The newer of its condition and this process's last write is
// the baseline, so a restart keeps the node's lastTransitionTime and a
// lagging informer does not cause a rewrite. The
// first write of a process always goes out: its heartbeat says that a
// running agent checked, which is what the taint fallback's freshness rule
// (and any reader of lastHeartbeatTime) relies on after an agent outage.
func (w *Writer) Write(ctx context.Context, now time.Time, d Desired, node *corev1.Node) (Outcome, error) {
	current := Find(node, w.cfg.Type)
	base, anno := newer(current, w.last), w.lastAnno
	if base != w.last && node != nil {
		anno = node.Annotations[w.cfg.Annotation]
	}
	if w.cfg.Annotation == "" {
		d.Annotation, anno = "", ""
	}
	if w.last != nil && same(base, d) && anno == d.Annotation && now.Sub(base.LastHeartbeatTime.Time) < w.cfg.Heartbeat {
		return Skipped, nil
	}
	cond := corev1.NodeCondition{
		Type:               w.cfg.Type,
		Status:             d.Status,
		Reason:             d.Reason,
		Message:            d.Message,
		LastHeartbeatTime:  metav1.NewTime(now),
		LastTransitionTime: metav1.NewTime(now),
	}
	if base != nil && base.Status == d.Status {
		cond.LastTransitionTime = base.LastTransitionTime
	}
	if err := w.client.PatchCondition(ctx, w.cfg.Node, cond, w.annotations(d)); err != nil {
		return "", err
	}
	w.last, w.lastAnno = &cond, d.Annotation
	if base != nil && base.Status == d.Status && base.Reason == d.Reason {
		return Written, nil
	}
	w.event(base, cond)
	return Transitioned, nil
}

// annotations is what a write of d does to the Node's annotations.
func (w *Writer) annotations(d Desired) map[string]*string {
	if w.cfg.Annotation == "" {
		return nil
	}
	if d.Annotation == "" {
		return map[string]*string{w.cfg.Annotation: nil}
	}
	return map[string]*string{w.cfg.Annotation: &d.Annotation}
}

func (w *Writer) event(from *corev1.NodeCondition, to corev1.NodeCondition) {
	if w.recorder == nil {
		return
	}
	ref := &corev1.ObjectReference{Kind: "Node", APIVersion: "v1", Name: w.cfg.Node, UID: w.cfg.NodeUID}
	kind := corev1.EventTypeWarning
	if to.Status == corev1.ConditionFalse {
		kind = corev1.EventTypeNormal
	}
	was := "unset"
	if from != nil {
		was = fmt.Sprintf("%s/%s", from.Status, from.Reason)
	}
	w.recorder.Eventf(ref, kind, to.Reason, "%s=%s (was %s): %s", w.cfg.Type, to.Status, was, to.Message)
}

// Last is what this process last wrote, or nil.
func (w *Writer) Last() *corev1.NodeCondition { return w.last }

func same(c *corev1.NodeCondition, d Desired) bool {
	return c.Status == d.Status && c.Reason == d.Reason && c.Message == d.Message
}

func newer(a, b *corev1.NodeCondition) *corev1.NodeCondition {
	switch {
	case a == nil:
		return b
	case b == nil:
		return a
	case b.LastHeartbeatTime.After(a.LastHeartbeatTime.Time):
		return b
	}
	return a
}

// DefaultMaxAge is how long a written condition stands: twice the agent's
// default heartbeat (5 min). The taint fallback, the fleet view and
// preflight judge freshness by it unless told otherwise
// (--condition-max-age).
const DefaultMaxAge = 10 * time.Minute

// MaxHeartbeatAhead is how far in the future a heartbeat may lie (a node
// clock ahead; the agent reports a skew beyond its --max-clock-skew, 1m,
// as ClockSkew, never False). A heartbeat further ahead would keep a False
// fresh long after its writer is gone: it is stale.
const MaxHeartbeatAhead = 2 * time.Minute

// Fresh reports whether c's writer still stands behind it at now: its
// heartbeat lies within maxAge before now (any age when maxAge <= 0) and at
// most MaxHeartbeatAhead after it. A condition never written (nil, no
// heartbeat) is not fresh.
func Fresh(c *corev1.NodeCondition, maxAge time.Duration, now time.Time) bool {
	if c == nil || c.LastHeartbeatTime.IsZero() {
		return false
	}
	hb := c.LastHeartbeatTime.Time
	return (maxAge <= 0 || now.Sub(hb) <= maxAge) && hb.Sub(now) <= MaxHeartbeatAhead
}

// Find returns node's condition of type t, or nil.
func Find(node *corev1.Node, t corev1.NodeConditionType) *corev1.NodeCondition {
	if node == nil {
		return nil
	}
	for i := range node.Status.Conditions {
		if node.Status.Conditions[i].Type == t {
			return &node.Status.Conditions[i]
		}
	}
	return nil
}
