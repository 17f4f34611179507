// Package taint is the readiness-taint fallback for clusters without the
// node-readiness-controller: when a node carries the readiness taint and its
// KubeletServingCertNotReady condition is False and fresh, the taint is
// removed with an optimistic-lock patch that also records
// certready.io/bootstrap-completed. It never adds the taint, never removes
// it while the condition is True, Unknown, absent or stale (no heartbeat
// within MaxConditionAge), and never removes a taint with the same key but
// another value or effect: that one is somebody else's. Optionally it also
// keeps a PreferNoSchedule "soft" taint on every node whose condition is not
// False and fresh, so that the scheduler steers the approver (and anything
// else that does not tolerate it) to proven nodes while any exist.
package taint

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"

	"github.com/certready/certready/internal/names"
	"github.com/certready/certready/internal/workloop"
	"github.com/certready/certready/reporter/servingcert/condition"
)

// CompletedAnnotation records when certready lifted the readiness taint.
const CompletedAnnotation = names.CompletedAnnotation

// Config names the taint and the condition.
type Config struct {
	// Taint is the readiness taint, matched by key, value and effect.
	Taint corev1.Taint
	// SoftTaint (optional, PreferNoSchedule) is kept on every node whose
	// condition is not False and fresh: pods that do not tolerate it, the
	// approver first, then prefer nodes that proved their serving
	// certificate, without ever being kept from scheduling.
	SoftTaint     corev1.Taint
	ConditionType corev1.NodeConditionType
	// MaxConditionAge: a False condition whose lastHeartbeatTime is older
	// than this (twice the agent's heartbeat) is not evidence any more: its
	// agent may be gone.
	MaxConditionAge time.Duration
	// Prove, when set, must pass before a fresh False lifts a taint: the
	// approver's own look at the node's kubelet (Prover.Prove), so that a
	// False condition alone (root on a node holds the agent's token) does
	// not lift it.
	Prove func(ctx context.Context, node *corev1.Node) error
	// Events records why a node's taint stays (nil: none).
	Events record.EventRecorder
}

// ParseTaint reads kubectl's taint syntax, key=value:effect.
func ParseTaint(s string) (corev1.Taint, error) {
	kv, effect, ok := strings.Cut(s, ":")
	key, value, _ := strings.Cut(kv, "=")
	t := corev1.Taint{Key: key, Value: value, Effect: corev1.TaintEffect(effect)}
	switch {
	case !ok || key == "":
		return t, fmt.Errorf("%q: want key=value:effect, e.g. readiness.k8s.io/KubeletServingCertNotReady=pending:NoSchedule", s)
	case t.Effect != corev1.TaintEffectNoSchedule && t.Effect != corev1.TaintEffectPreferNoSchedule && t.Effect != corev1.TaintEffectNoExecute:
		return t, fmt.Errorf("%q: effect %q is not NoSchedule, PreferNoSchedule or NoExecute", s, effect)
	}
	return t, nil
}

// same reports whether t is the configured taint (TimeAdded aside).
func same(t, want corev1.Taint) bool {
	return t.Key == want.Key && t.Value == want.Value && t.Effect == want.Effect
}

// Patch returns the JSON merge patch that brings node's taints in line with
// its condition and the approver's own proof (nil: proven), or ok=false
// when nothing changes. A False and fresh condition, proven, removes
// cfg.Taint (recording CompletedAnnotation) and cfg.SoftTaint; any other
// state keeps cfg.Taint where it is (it is never added) and adds
// cfg.SoftTaint when set, so that the scheduler prefers proven nodes for
// pods that do not tolerate it. metadata.resourceVersion makes the patch
// fail on a concurrent change instead of overwriting another writer's
// taints.
func Patch(node *corev1.Node, cfg Config, now time.Time, proof error) (patch []byte, ok bool, err error) {
	ready := freshFalse(node, cfg, now) != nil && proof == nil
	soft := cfg.SoftTaint.Key != ""
	keep := []corev1.Taint{}
	lifted, hasSoft, changed := false, false, false
	for _, t := range node.Spec.Taints {
		switch {
		case ready && same(t, cfg.Taint):
			lifted, changed = true, true
			continue
		case soft && same(t, cfg.SoftTaint):
			hasSoft = true
			if ready {
				changed = true
				continue
			}
		}
		keep = append(keep, t)
	}
	if soft && !ready && !hasSoft {
		added := metav1.NewTime(now)
		t := cfg.SoftTaint
		t.TimeAdded = &added
		keep = append(keep, t)
		changed = true
	}
	if !changed {
		return nil, false, nil
	}
	meta := map[string]any{"resourceVersion": node.ResourceVersion}
	if lifted {
		meta["annotations"] = map[string]string{CompletedAnnotation: now.UTC().Format(time.RFC3339)}
	}
	patch, err = json.Marshal(map[string]any{"metadata": meta, "spec": map[string]any{"taints": keep}})
	return patch, err == nil, err
}

// freshFalse returns node's condition when it is False and fresh, else nil.
func freshFalse(node *corev1.Node, cfg Config, now time.Time) *corev1.NodeCondition {
	c := condition.Find(node, cfg.ConditionType)
	if c == nil || c.Status != corev1.ConditionFalse || !condition.Fresh(c, maxAge(cfg), now) {
		return nil
	}
	return c
}

// maxAge is cfg's bound on a condition's age (condition.DefaultMaxAge
// when unset): a taint fallback never trusts a condition of any age.
func maxAge(cfg Config) time.Duration {
	if cfg.MaxConditionAge <= 0 {
		return condition.DefaultMaxAge
	}
	return cfg.MaxConditionAge
}

// carries reports whether node has the startup or the soft taint.
func carries(node *corev1.Node, cfg Config) bool {
	return slices.ContainsFunc(node.Spec.Taints, func(t corev1.Taint) bool {
		return same(t, cfg.Taint) || (cfg.SoftTaint.Key != "" && same(t, cfg.SoftTaint))
	})
}

// Lifter applies Patch to every node it sees, while Leading.
type Lifter struct {
	cfg    Config
	client kubernetes.Interface
	nodes  corelisters.NodeLister
	synced cache.InformerSynced
	queue  *workloop.Loop[string]
	active atomic.Bool
}

// New wires the lifter to a node informer.
func New(cfg Config, client kubernetes.Interface, nodeInformer cache.SharedIndexInformer) (*Lifter, error) {
	if cfg.Taint.Key == "" || cfg.Taint.Effect == "" || cfg.ConditionType == "" {
		return nil, fmt.Errorf("taint fallback needs a taint (key=value:effect) and a condition type")
	}
	if cfg.MaxConditionAge <= 0 {
		cfg.MaxConditionAge = condition.DefaultMaxAge
	}
	if cfg.SoftTaint.Key != "" && (cfg.SoftTaint.Effect != corev1.TaintEffectPreferNoSchedule || cfg.SoftTaint.Key == cfg.Taint.Key) {
		return nil, fmt.Errorf("soft taint %s: want effect PreferNoSchedule and a key other than the readiness taint's", cfg.SoftTaint.ToString())
	}
	r := &Lifter{
		cfg: cfg, client: client,
		nodes:  corelisters.NewNodeLister(nodeInformer.GetIndexer()),
		synced: nodeInformer.HasSynced,
	}
	r.queue = workloop.New(workloop.Config[string]{Name: "certready-taint-fallback", KeyName: "node",
		Failure: "Removing the readiness taint failed; retrying"}, workloop.Errors(r.sync))
	add := func(obj any) {
		if key, err := cache.MetaNamespaceKeyFunc(obj); err == nil {
			r.queue.Add(key)
		}
	}
	_, err := nodeInformer.AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: add, UpdateFunc: func(_, o any) { add(o) }})
	return r, err
}

// Run works while ctx lasts; the caller runs it only while leading.
func (r *Lifter) Run(ctx context.Context) error {
	if !cache.WaitForCacheSync(ctx.Done(), r.synced) {
		return fmt.Errorf("the node cache did not sync")
	}
	r.active.Store(true)
	defer r.active.Store(false)
	nodes, _ := r.nodes.List(labels.Everything())
	for _, n := range nodes {
		r.queue.Add(n.Name)
	}
	klog.FromContext(ctx).Info("Readiness taint fallback active", "taint", r.cfg.Taint.ToString(), "condition", r.cfg.ConditionType, "maxConditionAge", r.cfg.MaxConditionAge)
	r.queue.Run(ctx, 2)
	return nil
}

func (r *Lifter) sync(ctx context.Context, name string) error {
	if !r.active.Load() {
		return nil
	}
	node, err := r.nodes.Get(name)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	now := time.Now()
	c := freshFalse(node, r.cfg, now)
	// A fresh False turns stale with no event: look again then.
	if c != nil && r.cfg.SoftTaint.Key != "" {
		r.queue.AddAfter(name, c.LastHeartbeatTime.Add(r.cfg.MaxConditionAge).Sub(now)+time.Second)
	}
	// The approver's own proof, only when a taint would go.
	var proof error
	if c != nil && r.cfg.Prove != nil && carries(node, r.cfg) {
		if proof = r.cfg.Prove(ctx, node); proof != nil && r.cfg.Events != nil {
			r.cfg.Events.Eventf(node, corev1.EventTypeWarning, "KubeletServingCertUnproven",
				"certready: the condition is False, but the taint stays: %v", proof)
		}
	}
	patch, ok, err := Patch(node, r.cfg, now, proof)
	if err != nil {
		return err
	}
	if ok {
		if _, err = r.client.CoreV1().Nodes().Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
			// A conflict means the node changed: the informer brings the
			// new version and the retry re-evaluates it.
			return fmt.Errorf("patching node %s: %w", name, err)
		}
		klog.FromContext(ctx).Info("Updated the node's taints", "node", name, "readinessTaint", r.cfg.Taint.ToString(), "softTaint", r.cfg.SoftTaint.ToString(), "proven", proof == nil)
	}
	if proof != nil {
		return fmt.Errorf("node %s: the condition is False but its serving certificate is not proven: %w", name, proof)
	}
	return nil
}
