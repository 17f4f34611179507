// Package controller runs the approver: an informer on kubelet-serving CSRs
// (field selector on the signer, so no other signer's CSR is ever seen), a
// rate-limited workqueue with several workers, and the writes the policy
// decides on: the certready.io/node label, approval (or, when asked,
// denial) through the approval subresource, and Warning events that name the
// failed rule. It writes only while Leading is set.
package controller

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/time/rate"
	certv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	certlisters "k8s.io/client-go/listers/certificates/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/retry"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"

	"github.com/certready/certready/internal/csrstate"
	"github.com/certready/certready/internal/ledger"
	"github.com/certready/certready/internal/names"
	"github.com/certready/certready/internal/workloop"
	"github.com/certready/certready/reporter/approver/events"
	"github.com/certready/certready/reporter/approver/policy"
)

// Config configures the controller.
type Config struct {
	// Policy is the operator's; Evidence is what the cluster tells it
	// (evidence.New builds it for each mode).
	Policy   policy.Config
	Evidence policy.Evidence
	// MaxPending is the flood guard: with this many distinct nodes or more
	// waiting on a pending kubelet-serving CSR, nothing is approved (a burst
	// of new identities). 0: the inventory's size + 100.
	MaxPending     int
	DenyOnMismatch bool
	Workers        int
	// FloodRetry is how soon a CSR held back by the flood guard is retried.
	FloodRetry time.Duration
	// Ledger receives a record of every decision (nil: none).
	Ledger *ledger.Ledger
	// WorkloadCluster names, in Cluster API mode, the workload cluster
	// whose CSRs this controller decides (namespace/name of its Cluster in
	// the management cluster); its ledger records carry it.
	WorkloadCluster string
	// NoteClient writes the refusal annotations (nil: the main client):
	// a client of its own keeps them off the approvals' rate budget.
	NoteClient kubernetes.Interface
}

// Controller approves kubelet-serving CSRs.
type Controller struct {
	cfg      Config
	client   kubernetes.Interface
	csrs     certlisters.CertificateSigningRequestLister
	byNode   cache.Indexer
	synced   cache.InformerSynced
	queue    *workloop.Loop[string]
	recorder record.EventRecorder
	metrics  *metrics
	leading  atomic.Bool

	mu       sync.Mutex
	recorded map[string]policy.Rule // last refusal event per CSR, to not repeat it
	pending  *pendingSet
	// decided holds the UIDs of the CSRs this process approved or denied:
	// until the informer catches up, its stale copy still looks pending and
	// must not be decided twice. By UID, not name: a CSR deleted and created
	// anew under the same name is another request.
	decided sync.Map
	// firstSeen holds, by UID, when the informer first delivered each CSR
	// not yet decided here: certready_approver_decision_seconds. An entry
	// goes with the approval, or with the CSR.
	firstSeen sync.Map

	// notes are the refusals waiting to be kept on their CSRs, by name,
	// written by a loop of their own (writeNote).
	notes     *workloop.Loop[string]
	noteMu    sync.Mutex
	noteQueue map[string]note
}

// note is a refusal to keep on a CSR as annotations.
type note struct {
	uid           types.UID
	rule, message string
}

// maxNoteMessage bounds the message annotation: a refusal's message quotes
// what the request asked for.
const maxNoteMessage = 1024

// errReplaced: the CSR was deleted and created anew under its name between
// evaluation and write. The new one is evaluated on its own.
var errReplaced = errors.New("deleted and created anew under the same name since it was evaluated")

// New wires the controller to a CSR informer that must already be limited
// to the kubelet-serving signer.
func New(cfg Config, client kubernetes.Interface, csrInformer cache.SharedIndexInformer, recorder record.EventRecorder, reg prometheus.Registerer) (*Controller, error) {
	if cfg.Workers <= 0 {
		cfg.Workers = 4
	}
	if cfg.FloodRetry <= 0 {
		cfg.FloodRetry = 30 * time.Second
	}
	if cfg.Evidence.Inventory == nil {
		return nil, fmt.Errorf("no inventory configured")
	}
	c := &Controller{
		cfg:       cfg,
		client:    client,
		csrs:      certlisters.NewCertificateSigningRequestLister(csrInformer.GetIndexer()),
		recorder:  recorder,
		recorded:  map[string]policy.Rule{},
		pending:   newPendingSet(),
		noteQueue: map[string]note{},
	}
	if c.cfg.NoteClient == nil {
		c.cfg.NoteClient = client
	}
	// Notes are records: the default controller backoff and its 10/s
	// overall bound, so that a flood of refused requests costs the API
	// server little, and on a client of their own.
	c.notes = workloop.New(workloop.Config[string]{Name: "certready-approver-notes", KeyName: "csr", Failure: "Keeping the refusal on the CSR failed; retrying"},
		workloop.Errors(c.writeNote))
	c.queue = workloop.New(workloop.Config[string]{
		Name: "certready-approver",
		RateLimiter: workqueue.NewTypedMaxOfRateLimiter(
			workqueue.NewTypedItemExponentialFailureRateLimiter[string](200*time.Millisecond, 5*time.Minute),
			&workqueue.TypedBucketRateLimiter[string]{Limiter: newLimiter()},
		),
		KeyName: "csr", Failure: "Syncing CSR failed; retrying",
	}, c.sync)
	c.metrics = newMetrics(reg, c)
	if err := csrInformer.AddIndexers(cache.Indexers{byRequester: func(obj any) ([]string, error) {
		if csr, ok := obj.(*certv1.CertificateSigningRequest); ok {
			if node, ok := nodeOf(csr); ok {
				return []string{node}, nil
			}
		}
		return nil, nil
	}}); err != nil {
		return nil, err
	}
	c.byNode = csrInformer.GetIndexer()
	handler, err := csrInformer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) {
			if csr, ok := obj.(*certv1.CertificateSigningRequest); ok {
				c.pending.observe(csr, false)
				if csrstate.IsPending(csr) {
					c.firstSeen.Store(csr.UID, time.Now())
				}
			}
			c.enqueue(obj)
		},
		UpdateFunc: func(oldObj, obj any) {
			if csr, ok := obj.(*certv1.CertificateSigningRequest); ok {
				c.pending.observe(csr, false)
				if old, ok := oldObj.(*certv1.CertificateSigningRequest); ok && !approved(old) && approved(csr) {
					c.noteApproval(csr)
				}
			}
			c.enqueue(obj)
		},
		DeleteFunc: func(obj any) {
			if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = d.Obj
			}
			if csr, ok := obj.(*certv1.CertificateSigningRequest); ok {
				c.pending.observe(csr, true)
				c.mu.Lock()
				delete(c.recorded, csr.Name)
				c.mu.Unlock()
				c.decided.Delete(csr.UID)
				c.firstSeen.Delete(csr.UID)
				// A request it superseded may be the node's newest now.
				if node, ok := nodeOf(csr); ok {
					c.EnqueueNode(node)
				}
			}
		},
	})
	if err != nil {
		return nil, err
	}
	// Synced once the handler has seen every CSR of the initial list, not
	// merely once the cache holds them: the flood guard's pending set must
	// count every node that waits before anything is decided.
	c.synced = handler.HasSynced
	return c, nil
}

func (c *Controller) enqueue(obj any) {
	if key, err := cache.MetaNamespaceKeyFunc(obj); err == nil {
		c.queue.Add(key)
	}
}

// byRequester indexes CSRs by the node in spec.username: the requester,
// labelled or not yet.
const byRequester = "certready.io/requester"

// EnqueueNode re-evaluates the pending CSRs of node (its addresses or its
// labels changed), found through the index: O(that node's CSRs), not a
// scan of the cache on every Node event of a scale-up.
func (c *Controller) EnqueueNode(node string) {
	objs, err := c.byNode.ByIndex(byRequester, node)
	if err != nil {
		return
	}
	for _, obj := range objs {
		if csr, ok := obj.(*certv1.CertificateSigningRequest); ok && csrstate.IsPending(csr) {
			c.queue.Add(csr.Name)
		}
	}
}

// EnqueueAll re-evaluates every pending CSR (the inventory was reloaded).
func (c *Controller) EnqueueAll() {
	list, _ := c.csrs.List(labels.Everything())
	for _, csr := range list {
		if csrstate.IsPending(csr) {
			c.queue.Add(csr.Name)
		}
	}
}

// Run processes the queue with the configured workers while ctx lasts. The
// caller runs it only while it holds the leader Lease.
func (c *Controller) Run(ctx context.Context) error {
	logger := klog.FromContext(ctx)
	if !cache.WaitForCacheSync(ctx.Done(), c.synced) {
		return fmt.Errorf("the CSR cache did not sync")
	}
	c.leading.Store(true)
	c.metrics.leader.Set(1)
	defer func() {
		c.leading.Store(false)
		c.metrics.leader.Set(0)
	}()
	c.EnqueueAll()
	// Labelled and already-decided CSRs need a pass too (labels).
	all, _ := c.csrs.List(labels.Everything())
	for _, csr := range all {
		c.queue.Add(csr.Name)
	}
	logger.Info("Approver acting", "workers", c.cfg.Workers, "inventory", c.cfg.Evidence.Inventory.Describe())
	go c.notes.Run(ctx, 2)
	c.queue.Run(ctx, c.cfg.Workers)
	return nil
}

// sync handles one CSR and says when to look at it again.
func (c *Controller) sync(ctx context.Context, name string) (workloop.Result, error) {
	if !c.leading.Load() {
		return workloop.Done(), nil
	}
	csr, err := c.csrs.Get(name)
	if apierrors.IsNotFound(err) {
		return workloop.Done(), nil
	}
	if err != nil {
		return workloop.Done(), err
	}
	if csr.Spec.SignerName != certv1.KubeletServingSignerName {
		return workloop.Done(), nil // never touch another signer's CSR, whatever its content
	}
	if !csrstate.IsPending(csr) {
		c.decided.Delete(csr.UID)
		return c.relabel(ctx, csr)
	}
	if _, done := c.decided.Load(csr.UID); done {
		return workloop.Done(), nil // a stale cached copy of a CSR decided here; its update event follows
	}
	return c.act(ctx, csr, c.evaluate(csr))
}

// evaluate runs the policy on csr with the backlog the queue knows: only a
// node's newest request is a candidate (the kubelet waits for that one
// alone, and a node's pile of requests cannot crowd out others), and the
// flood guard defers all while too many nodes wait.
func (c *Controller) evaluate(csr *certv1.CertificateSigningRequest) policy.Decision {
	max := c.maxPending()
	backlog := policy.Backlog{Newer: c.newer(csr), PendingNodes: c.pending.nodes(c.known, max), MaxPending: max}
	return policy.Evaluate(csr, c.cfg.Policy, c.cfg.Evidence, backlog)
}

// Evaluate is what the controller would decide on csr now, writing
// nothing: 'certready csr explain' asks it.
func (c *Controller) Evaluate(csr *certv1.CertificateSigningRequest) policy.Decision {
	return c.evaluate(csr)
}

// HasSynced reports whether the controller has seen every CSR of the
// informer's initial list (the flood guard's pending set is complete).
func (c *Controller) HasSynced() bool { return c.synced() }

// relabel makes csr's node label truthful. A decision carries the label in
// the same write (the approval subresource keeps metadata changes): one
// write per approved CSR. Every other path that keeps a CSR labels it on
// its own, off the critical path, so that the node's agent sees its
// pending request.
func (c *Controller) relabel(ctx context.Context, csr *certv1.CertificateSigningRequest) (workloop.Result, error) {
	if _, err := c.label(ctx, csr); err != nil {
		if errors.Is(err, errReplaced) {
			return workloop.Retry(), nil // the new object's own event follows
		}
		return workloop.Done(), err
	}
	return workloop.Done(), nil
}

// keep leaves csr pending: the label first, so that by the time an
// operator (or a test) reads the Warning, the node's agent already sees its
// request; then the Warning. When the label could not be written, no
// Warning yet: the retry records it. A request the cache dropped for its
// size is not relabelled: every write of the object would have the API
// server store and send its megabytes once more (a flood's cost doubled),
// and an agent whose label it spoofs keeps a trimmed copy that is no other
// node's evidence (the agent matches by requester).
func (c *Controller) keep(ctx context.Context, csr *certv1.CertificateSigningRequest, rule policy.Rule, msg string) (requeue workloop.Result, warned bool, err error) {
	if !policy.RequestDropped(csr) {
		if requeue, err = c.relabel(ctx, csr); !requeue.IsDone() || err != nil {
			return requeue, false, err
		}
	}
	warned = c.warnOnce(csr, rule, msg)
	if warned && !policy.RequestDropped(csr) {
		c.noteLater(csr, rule, msg)
	}
	return workloop.Done(), warned, nil
}

// act carries out decision d on csr: approve it (or deny it with
// --deny-on-mismatch) in one write, or keep it pending with its reason.
// Superseded and flood-guarded requests are never denied.
func (c *Controller) act(ctx context.Context, csr *certv1.CertificateSigningRequest, d policy.Decision) (workloop.Result, error) {
	logger := klog.FromContext(ctx).WithValues("csr", csr.Name)
	keep := func(rule policy.Rule, msg string) (workloop.Result, bool, error) { return c.keep(ctx, csr, rule, msg) }
	switch d.Rule {
	case policy.RuleSuperseded:
		c.metrics.decisions.WithLabelValues("superseded", string(d.Rule)).Inc()
		requeue, warned, err := keep(d.Rule, d.Message)
		if warned {
			c.record(ledger.Superseded, csr, d, d.Message)
		}
		return requeue, err
	case policy.RuleFloodGuard:
		c.metrics.floodGuard.Set(1)
		c.metrics.decisions.WithLabelValues("deferred", string(d.Rule)).Inc()
		requeue, warned, err := keep(d.Rule, d.Message)
		if warned {
			c.record(ledger.Deferred, csr, d, d.Message)
		}
		if !requeue.IsDone() || err != nil {
			return requeue, err
		}
		return workloop.After(c.cfg.FloodRetry), nil
	}
	c.metrics.floodGuard.Set(0)
	switch {
	case d.Approve:
		by, err := c.decide(ctx, csr, certv1.CertificateApproved, d)
		if err != nil || by != "" {
			return c.notOurs(ctx, csr, by, err)
		}
		c.metrics.decisions.WithLabelValues("approved", string(d.Rule)).Inc()
		c.metrics.latency.Observe(time.Since(csr.CreationTimestamp.Time).Seconds())
		if t, ok := c.firstSeen.LoadAndDelete(csr.UID); ok {
			c.metrics.decisionTime.Observe(time.Since(t.(time.Time)).Seconds())
		}
		logger.Info("Approved", "node", d.Node, "message", d.Message)
		c.record(ledger.Approved, csr, d, d.Message)
		return workloop.Done(), nil
	case d.Transient:
		c.metrics.decisions.WithLabelValues("deferred", string(d.Rule)).Inc()
		msg := d.Message + " (will retry)"
		_, warned, err := keep(d.Rule, msg)
		if warned {
			c.record(ledger.Deferred, csr, d, msg)
		}
		if err != nil {
			return workloop.Done(), err
		}
		return workloop.Retry(), nil
	case c.cfg.DenyOnMismatch:
		by, err := c.decide(ctx, csr, certv1.CertificateDenied, d)
		if err != nil || by != "" {
			return c.notOurs(ctx, csr, by, err)
		}
		c.metrics.decisions.WithLabelValues("denied", string(d.Rule)).Inc()
		logger.Info("Denied", "node", d.Node, "message", d.Message)
		c.record(ledger.Denied, csr, d, d.Message)
		return workloop.Done(), nil
	default:
		c.metrics.decisions.WithLabelValues("refused", string(d.Rule)).Inc()
		msg := d.Message + " (left pending)"
		requeue, warned, err := keep(d.Rule, msg)
		if warned {
			logger.Info("Left pending", "node", d.Node, "message", d.Message)
			c.record(ledger.LeftPending, csr, d, msg)
		}
		return requeue, err
	}
}

// label sets certready.io/node=<name> from spec.username when it is a
// node's, so that each agent can watch only its own CSRs, and removes the
// label from a CSR whose requester is no node: anyone who may create CSRs
// can set it, to fill a victim agent's cache.
func (c *Controller) label(ctx context.Context, csr *certv1.CertificateSigningRequest) (*certv1.CertificateSigningRequest, error) {
	if !relabelled(csr.DeepCopy()) {
		return csr, nil
	}
	api := c.client.CertificatesV1().CertificateSigningRequests()
	out, err := c.update(ctx, csr, relabelled, func(cur *certv1.CertificateSigningRequest) (*certv1.CertificateSigningRequest, error) {
		return api.Update(ctx, cur, metav1.UpdateOptions{})
	})
	if err != nil {
		return nil, fmt.Errorf("labelling CSR %s: %w", csr.Name, err)
	}
	return out, nil
}

// relabelled makes cur's certready.io/node label truthful (the requesting
// node, or none when the requester is no node) and says whether it changed.
func relabelled(cur *certv1.CertificateSigningRequest) bool {
	node, isNode := nodeOf(cur)
	v, has := cur.Labels[names.NodeLabel]
	switch {
	case !isNode && has:
		delete(cur.Labels, names.NodeLabel)
		return true
	case !isNode || (has && v == node):
		return false
	}
	if cur.Labels == nil {
		cur.Labels = map[string]string{}
	}
	cur.Labels[names.NodeLabel] = node
	return true
}

// notOurs handles a decision this process did not write: the CSR was
// replaced under its name (err is errReplaced: look again, the new one is
// evaluated on its own), another actor decided it first (by names what it
// shows: recorded as that, never as our approval), or the write failed.
func (c *Controller) notOurs(ctx context.Context, csr *certv1.CertificateSigningRequest, by string, err error) (workloop.Result, error) {
	logger := klog.FromContext(ctx).WithValues("csr", csr.Name, "uid", csr.UID)
	switch {
	case errors.Is(err, errReplaced):
		c.metrics.decisions.WithLabelValues("replaced", "CSRReplaced").Inc()
		logger.Info("Not written: the CSR was replaced since it was evaluated; evaluating the new one")
		return workloop.Retry(), nil
	case err != nil:
		return workloop.Done(), err
	}
	c.metrics.decisions.WithLabelValues("decided-elsewhere", by).Inc()
	logger.V(1).Info("Already decided by another actor; nothing written", "state", by)
	node, _ := nodeOf(csr)
	c.record(ledger.DecidedElsewhere, csr, policy.Decision{Rule: policy.Rule(by), Node: node}, "the CSR shows "+by+"; another actor decided it first")
	return workloop.Done(), nil
}

// ruleName is what a policy rule's name looks like.
var ruleName = regexp.MustCompile(`^[A-Za-z]{1,64}$`)

// FieldManager is the field manager of certready's approvals.
const FieldManager = "certready-approver"

// approved reports whether c carries a true Approved condition.
func approved(c *certv1.CertificateSigningRequest) bool {
	a, _, _ := csrstate.Conditions(c)
	return a != nil
}

// ApprovedElsewhereReason is the Warning event reason (on the CSR) of an
// approval another actor wrote.
const ApprovedElsewhereReason = "ApprovedElsewhere"

// noteApproval records, while leading, an approval of csr that certready
// did not write: another identity vouched for a node's serving
// certificate, perhaps one certready's policy refused. It is certready's
// when this process decided it, or when its condition carries certready's
// reason and the approval's field manager is certready's (a previous
// leader's): both of which a client could imitate, so this is a record,
// not a control.
func (c *Controller) noteApproval(csr *certv1.CertificateSigningRequest) {
	if !c.leading.Load() {
		return
	}
	if _, ours := c.decided.Load(csr.UID); ours {
		return
	}
	cond, _, _ := csrstate.Conditions(csr)
	manager := ""
	if v := csr.Spec.Extra[names.ApprovedByKey]; len(v) == 1 {
		manager = v[0]
	}
	if cond != nil && cond.Reason == string(policy.RuleApproved) && manager == FieldManager {
		return
	}
	// The rule certready's policy left it pending by: this process's own
	// memory first; the annotation (which the requester may set too) only
	// when it reads as a rule name.
	c.mu.Lock()
	rule := string(c.recorded[csr.Name])
	c.mu.Unlock()
	if a := csr.Annotations[names.DecisionRuleAnnotation]; rule == "" && ruleName.MatchString(a) {
		rule = a
	}
	refused := "unknown"
	switch policy.Rule(rule) {
	case "":
	case policy.RuleFloodGuard, policy.RuleSuperseded, policy.RuleNodeNotInInventory:
		refused = "deferred"
	default:
		refused = "refused"
	}
	msg := fmt.Sprintf("approved by another actor than certready (field manager %q", events.Clip(manager, 128))
	if cond != nil {
		msg += fmt.Sprintf(", reason %q: %q", events.Clip(cond.Reason, 128), events.Clip(cond.Message, maxNoteMessage))
	}
	msg += ")"
	if rule != "" {
		// The kept message begins with its rule's name.
		why := rule
		if m := csr.Annotations[names.DecisionMessageAnnotation]; strings.HasPrefix(m, rule+":") {
			why = events.Clip(m, maxNoteMessage)
		}
		msg += "; certready's policy had left it pending: " + why
	}
	c.metrics.elsewhere.WithLabelValues(refused).Inc()
	node, _ := nodeOf(csr)
	klog.Background().Info("CSR approved by another actor", "csr", csr.Name, "node", node, "manager", manager, "refusedRule", rule)
	c.record(ledger.ApprovedElsewhere, csr, policy.Decision{Rule: policy.Rule(rule), Node: node}, msg)
	if c.recorder != nil {
		c.recorder.Event(csr, corev1.EventTypeWarning, ApprovedElsewhereReason, msg)
	}
}

// record writes decision d on csr to the ledger.
func (c *Controller) record(action ledger.Action, csr *certv1.CertificateSigningRequest, d policy.Decision, msg string) {
	if c.cfg.Ledger == nil {
		return
	}
	r := ledger.Record{Action: action, Rule: string(d.Rule), Message: msg, Node: d.Node,
		CSR: csr.Name, CSRUID: string(csr.UID), Requester: csr.Spec.Username, WorkloadCluster: c.cfg.WorkloadCluster}
	if d.Request != nil {
		r.SANs, r.KeyType = policy.SANs(d.Request), policy.KeyType(d.Request.PublicKey)
	}
	c.cfg.Ledger.Record(r)
}

// noteLater queues the refusal of csr to be kept on it (writeNote).
func (c *Controller) noteLater(csr *certv1.CertificateSigningRequest, rule policy.Rule, msg string) {
	if len(msg) > maxNoteMessage {
		msg = msg[:maxNoteMessage-3] + "..."
	}
	c.noteMu.Lock()
	c.noteQueue[csr.Name] = note{uid: csr.UID, rule: string(rule), message: msg}
	c.noteMu.Unlock()
	c.notes.AddRateLimited(csr.Name) // through the bucket: at most 10 a second
}

// writeNote keeps the latest refusal of a CSR on it, as the annotations
// certready.io/decision-rule and -message: Events expire after an hour, a
// pending CSR lasts until it is decided or garbage-collected. Only on the
// object that was refused (the patch carries its UID as a precondition),
// and only while it is pending.
func (c *Controller) writeNote(ctx context.Context, name string) error {
	c.noteMu.Lock()
	n, ok := c.noteQueue[name]
	delete(c.noteQueue, name)
	c.noteMu.Unlock()
	if !ok {
		return nil
	}
	csr, err := c.csrs.Get(name)
	if err != nil || csr.UID != n.uid || !csrstate.IsPending(csr) ||
		(csr.Annotations[names.DecisionRuleAnnotation] == n.rule && csr.Annotations[names.DecisionMessageAnnotation] == n.message) {
		return nil // gone, replaced, decided, or already kept
	}
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"uid": n.uid, "annotations": map[string]string{
		names.DecisionRuleAnnotation: n.rule, names.DecisionMessageAnnotation: n.message,
	}}})
	if err != nil {
		return err
	}
	_, err = c.cfg.NoteClient.CertificatesV1().CertificateSigningRequests().Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{})
	switch {
	case apierrors.IsNotFound(err) || apierrors.IsConflict(err):
		return nil // deleted, or replaced under its name (UID precondition)
	case err != nil:
		c.noteMu.Lock()
		if _, newer := c.noteQueue[name]; !newer {
			c.noteQueue[name] = n
		}
		c.noteMu.Unlock()
		return fmt.Errorf("annotating CSR %s with its refusal: %w", name, err)
	}
	return nil
}

// decide writes Approved or Denied, and the truthful certready.io/node
// label, through the approval subresource in one request, only on the
// evaluated object (same UID). When another actor decided the CSR
// first, it writes nothing and returns what the CSR shows (Approved,
// Denied, Failed or Issued) as by; by is empty when this call decided.
func (c *Controller) decide(ctx context.Context, csr *certv1.CertificateSigningRequest, typ certv1.RequestConditionType, d policy.Decision) (by string, err error) {
	api := c.client.CertificatesV1().CertificateSigningRequests()
	// Known as this process's before the write lands: the watch may bring
	// the approval before the write returns, and it must not look like
	// another actor's (noteApproval).
	c.decided.Store(csr.UID, struct{}{})
	_, err = c.update(ctx, csr, func(cur *certv1.CertificateSigningRequest) bool {
		if !csrstate.IsPending(cur) {
			by = string(csrstate.Of(cur))
			return false
		}
		// The label in the same request: the approval subresource
		// persists metadata changes (it resets only spec and status but
		// the conditions), so a decision costs one write.
		relabelled(cur)
		cur.Status.Conditions = append(cur.Status.Conditions, certv1.CertificateSigningRequestCondition{
			Type:           typ,
			Status:         corev1.ConditionTrue,
			Reason:         string(d.Rule),
			Message:        d.Message,
			LastUpdateTime: metav1.Now(),
		})
		return true
	}, func(cur *certv1.CertificateSigningRequest) (*certv1.CertificateSigningRequest, error) {
		return api.UpdateApproval(ctx, cur.Name, cur, metav1.UpdateOptions{FieldManager: FieldManager})
	})
	if err != nil {
		c.decided.Delete(csr.UID)
		return "", fmt.Errorf("writing %s on CSR %s: %w", typ, csr.Name, err)
	}
	if by != "" {
		c.decided.Delete(csr.UID)
		return by, nil
	}
	if c.recorder != nil {
		kind := corev1.EventTypeNormal
		if typ == certv1.CertificateDenied {
			kind = corev1.EventTypeWarning
		}
		c.recorder.Event(csr, kind, string(d.Rule), d.Message)
	}
	return "", nil
}

// update applies mutate to a copy of csr and writes it. The first attempt
// uses the object at hand (the informer's, or the one a previous write
// returned), so a storm of CSRs costs one request per write, not two; a
// conflict re-reads the CSR and tries again, but only on the same object:
// a CSR that now has another UID was replaced under its name, and nothing
// is written to it (errReplaced). Every write carries the resourceVersion
// it was computed from. mutate returning false means there is nothing
// (left) to write.
func (c *Controller) update(ctx context.Context, csr *certv1.CertificateSigningRequest,
	mutate func(*certv1.CertificateSigningRequest) bool,
	write func(*certv1.CertificateSigningRequest) (*certv1.CertificateSigningRequest, error),
) (*certv1.CertificateSigningRequest, error) {
	cur, out := csr, csr
	first := true
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if !first {
			fresh, err := c.client.CertificatesV1().CertificateSigningRequests().Get(ctx, csr.Name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			if fresh.UID != csr.UID {
				return fmt.Errorf("CSR %s (uid %s, now %s): %w", csr.Name, csr.UID, fresh.UID, errReplaced)
			}
			cur = fresh
		}
		first = false
		next := cur.DeepCopy()
		if !mutate(next) {
			out = cur
			return nil
		}
		written, err := write(next)
		if err != nil {
			return err
		}
		out = written
		return nil
	})
	return out, err
}

// warnOnce records a Warning event naming the rule, once per CSR and rule.
func (c *Controller) warnOnce(csr *certv1.CertificateSigningRequest, rule policy.Rule, msg string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.recorded[csr.Name] == rule {
		return false
	}
	c.recorded[csr.Name] = rule
	if c.recorder != nil {
		c.recorder.Event(csr, corev1.EventTypeWarning, string(rule), msg)
	}
	return true
}

// known says whether node is in the inventory.
func (c *Controller) known(node string) bool {
	_, ok := c.cfg.Evidence.Inventory.Lookup(node)
	return ok
}

func (c *Controller) maxPending() int {
	if c.cfg.MaxPending > 0 {
		return c.cfg.MaxPending
	}
	return c.cfg.Evidence.Inventory.Size() + 100
}

// survey counts the kubelet-serving CSRs in the cache by state, and the
// age of the oldest one that waits for a certificate: pending, or approved
// and not yet signed (for the node, both are a certificate it does not
// have). One pass over the cache.
func (c *Controller) survey(now time.Time) (counts map[csrstate.State]int, oldestWaiting time.Duration) {
	counts = map[csrstate.State]int{}
	for _, csr := range c.kubeletServing() {
		s := csrstate.Of(csr)
		counts[s]++
		if s == csrstate.Pending || s == csrstate.Approved {
			oldestWaiting = max(oldestWaiting, now.Sub(csr.CreationTimestamp.Time))
		}
	}
	return counts, oldestWaiting
}

func (c *Controller) kubeletServing() []*certv1.CertificateSigningRequest {
	list, err := c.csrs.List(labels.Everything())
	if err != nil {
		return nil
	}
	out := list[:0]
	for _, csr := range list {
		if csr.Spec.SignerName == certv1.KubeletServingSignerName {
			out = append(out, csr)
		}
	}
	return out
}

func nodeOf(csr *certv1.CertificateSigningRequest) (string, bool) {
	return names.NodeOf(csr.Spec.Username)
}

// newLimiter bounds the queue's overall retry rate (per-item backoff aside).
func newLimiter() *rate.Limiter { return rate.NewLimiter(rate.Limit(50), 100) }
