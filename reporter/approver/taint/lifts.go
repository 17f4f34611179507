package taint

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"

	"github.com/certready/certready/internal/ledger"
	"github.com/certready/certready/internal/names"
	"github.com/certready/certready/reporter/approver/events"
	"github.com/certready/certready/reporter/servingcert/condition"
	"github.com/certready/certready/reporter/servingcert/verdict"
)

// Who lifted a readiness taint, as a lift's By says.
const (
	ByCertready = "certready"
	ByNRC       = "node-readiness-controller"
	ByOther     = "other"
)

// Lift is one readiness taint seen leaving a node, with the evidence it
// left with.
type Lift struct {
	Node string
	// By: ByCertready (the fallback's completion mark), ByNRC (a rule's
	// mark; Rule is its UID) or ByOther (no mark: kubectl taint, another
	// controller).
	By, Rule string
	// Condition is the node's condition as the taint left (nil: none):
	// what the lift relied on, or did without.
	Condition *corev1.NodeCondition
	// Fingerprint is the certificate the condition named (a ready
	// message's facts), empty when it named none.
	Fingerprint string
	// Waited is how long after the Node was registered.
	Waited time.Duration
	// First: the node carried no completion mark before (its bootstrap),
	// so Waited is a bootstrap's duration.
	First bool
}

// completed reports whether n carries a completion mark, certready's or
// a node-readiness-controller rule's.
func completed(n *corev1.Node) bool {
	for k := range n.Annotations {
		if k == CompletedAnnotation || strings.HasPrefix(k, names.NRCCompletedPrefix) {
			return true
		}
	}
	return false
}

// Lifted reports the readiness taint t (its key and effect, whatever its
// value, as the node-readiness-controller matches it) leaving the node
// between old and new, with who lifted it by the completion marks new
// gained. A mark is a claim whoever may patch Nodes can make: certready's
// counts only when its fallback runs (fallback), and Lift.Claimed says
// the rest is as claimed.
func Lifted(old, new *corev1.Node, t corev1.Taint, conditionType corev1.NodeConditionType, fallback bool, now time.Time) (Lift, bool) {
	has := func(n *corev1.Node) bool {
		for _, x := range n.Spec.Taints {
			if x.Key == t.Key && x.Effect == t.Effect {
				return true
			}
		}
		return false
	}
	if old == nil || new == nil || old.UID != new.UID || !has(old) || has(new) {
		return Lift{}, false
	}
	l := Lift{Node: new.Name, By: ByOther, Waited: max(now.Sub(new.CreationTimestamp.Time), 0), First: !completed(old)}
	if v, ok := new.Annotations[CompletedAnnotation]; ok && old.Annotations[CompletedAnnotation] != v {
		l.By = ByCertready
		if !fallback {
			l.By, l.Rule = ByOther, "claims certready, whose fallback is off"
		}
	} else {
		var rules []string
		for k := range new.Annotations {
			if uid, ok := strings.CutPrefix(k, names.NRCCompletedPrefix); ok {
				if _, before := old.Annotations[k]; !before {
					rules = append(rules, uid)
				}
			}
		}
		if len(rules) > 0 {
			sort.Strings(rules)
			if len(rules) > 3 {
				rules = append(rules[:3], fmt.Sprintf("and %d more", len(rules)-3))
			}
			for i := range rules {
				rules[i] = events.Clip(rules[i], 64)
			}
			l.By, l.Rule = ByNRC, strings.Join(rules, ",")
		}
	}
	if c := condition.Find(new, conditionType); c != nil {
		c := *c
		l.Condition = &c
		if f, ok := verdict.NodeFacts(new, &c); ok {
			l.Fingerprint = f.Fingerprint.String()
		}
	}
	return l, true
}

// Lifts records every readiness taint removal it sees, whoever made it,
// while this replica leads: a Node event ReadinessTaintLifted, a ledger
// record (readiness-taint-lifted) with the proof it relied on, and how
// long the node waited (certready_readiness_taint_wait_seconds{by}).
type Lifts struct {
	taint         corev1.Taint
	conditionType corev1.NodeConditionType
	fallback      bool
	events        record.EventRecorder
	ledger        *ledger.Ledger
	waited        *prometheus.HistogramVec
	active        atomic.Bool
	now           func() time.Time
}

// NewLifts watches nodeInformer for removals of t; fallback says whether
// certready's taint fallback runs (only then is its mark its own).
func NewLifts(t corev1.Taint, conditionType corev1.NodeConditionType, fallback bool, events record.EventRecorder, led *ledger.Ledger,
	reg prometheus.Registerer, nodeInformer cache.SharedIndexInformer) (*Lifts, error) {
	l := &Lifts{taint: t, conditionType: conditionType, fallback: fallback, events: events, ledger: led, now: time.Now,
		waited: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "certready_readiness_taint_wait_seconds",
			Help: "From a Node's registration to its readiness taint's first removal (its bootstrap; no completion mark before), by who removed it: certready (the fallback), node-readiness-controller, other.",
			// 1 s to about 2.3 h.
			Buckets: prometheus.ExponentialBuckets(1, 2, 14),
		}, []string{"by"}),
	}
	if err := reg.Register(l.waited); err != nil {
		return nil, err
	}
	_, err := nodeInformer.AddEventHandler(cache.ResourceEventHandlerFuncs{UpdateFunc: func(o, n any) {
		old, _ := o.(*corev1.Node)
		new, _ := n.(*corev1.Node)
		if l.active.Load() {
			if lift, ok := Lifted(old, new, l.taint, l.conditionType, l.fallback, l.now()); ok {
				l.record(new, lift)
			}
		}
	}})
	return l, err
}

// Run records while ctx lasts; the caller runs it only while leading, so
// that one replica records each lift.
func (l *Lifts) Run(ctx context.Context) {
	l.active.Store(true)
	<-ctx.Done()
	l.active.Store(false)
}

func (l *Lifts) record(node *corev1.Node, lift Lift) {
	by := lift.By
	if lift.Rule != "" {
		by += " rule " + lift.Rule
	}
	relied := "no condition"
	status := ""
	if c := lift.Condition; c != nil {
		status = string(c.Status)
		relied = fmt.Sprintf("%s=%s (%s) since %s, written %s", l.conditionType, c.Status, events.Clip(c.Reason, 64),
			c.LastTransitionTime.UTC().Format(time.RFC3339), c.LastHeartbeatTime.UTC().Format(time.RFC3339))
		if lift.Fingerprint != "" {
			relied += ", certificate sha256 " + lift.Fingerprint
		}
	}
	msg := fmt.Sprintf("readiness taint %s removed by %s %s after the node registered; it relied on %s",
		l.taint.ToString(), by, lift.Waited.Round(time.Second), relied)
	if lift.Condition == nil || lift.Condition.Status != corev1.ConditionFalse {
		msg += ": the node's serving certificate was not proven ready"
	}
	klog.Background().Info("Readiness taint removed", "node", lift.Node, "by", by, "waited", lift.Waited.Round(time.Second), "condition", status, "certificate", lift.Fingerprint)
	if lift.First {
		l.waited.WithLabelValues(lift.By).Observe(lift.Waited.Seconds())
	}
	if l.events != nil {
		typ := corev1.EventTypeNormal
		if lift.Condition == nil || lift.Condition.Status != corev1.ConditionFalse {
			typ = corev1.EventTypeWarning
		}
		l.events.Eventf(node, typ, "ReadinessTaintLifted", "%s", msg)
	}
	// Key: each lift of each Node object is its own record (a node
	// tainted and lifted again repeats every other field).
	l.ledger.Record(ledger.Record{Action: ledger.TaintLifted, Node: lift.Node, Rule: by, Status: status,
		CertificateSHA256: lift.Fingerprint, Message: msg, Key: string(node.UID) + "/" + node.ResourceVersion})
}
