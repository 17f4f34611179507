package controller_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	certv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/record"

	"github.com/certready/certready/internal/ledger"
	"github.com/certready/certready/internal/names"
	"github.com/certready/certready/internal/testmetrics"
	"github.com/certready/certready/internal/testpki"
	"github.com/certready/certready/internal/testwait"
	"github.com/certready/certready/reporter/approver/controller"
	"github.com/certready/certready/reporter/approver/inventory"
	"github.com/certready/certready/reporter/approver/policy"
)

func csr(t *testing.T, name, node string, ip string, signer string) *certv1.CertificateSigningRequest {
	t.Helper()
	req, _, err := testpki.NewCSR(testpki.Request{Node: node, IPs: []net.IP{net.ParseIP(ip).To4()}})
	if err != nil {
		t.Fatal(err)
	}
	return testpki.KubeletCSR(name, node, testpki.WithRequest(req), testpki.Created(time.Now().Add(-time.Second)), testpki.Signer(signer))
}

type env struct {
	t    *testing.T
	cs   *fake.Clientset
	rec  *record.FakeRecorder
	seen *storeAtEvent
	inv  *inventory.Static
	ctrl *controller.Controller
	reg  *prometheus.Registry
	stop func()
}

func start(t *testing.T, cfg controller.Config, lead bool, objs ...runtime.Object) *env {
	t.Helper()
	return startOn(t, fake.NewClientset(objs...), cfg, lead)
}

func startWith(t *testing.T, cs *fake.Clientset, cfg controller.Config) *env {
	t.Helper()
	return startOn(t, cs, cfg, true)
}

func startOn(t *testing.T, cs *fake.Clientset, cfg controller.Config, lead bool) *env {
	t.Helper()
	e := &env{t: t, cs: cs, rec: record.NewFakeRecorder(1000), reg: prometheus.NewRegistry()}
	e.seen = &storeAtEvent{FakeRecorder: e.rec, cs: cs, labels: map[string]map[string]string{}}
	e.inv = inventory.NewStatic("test", map[string]inventory.Entry{
		"w1": {IPs: []netip.Addr{netip.MustParseAddr("192.0.2.11")}},
		"w2": {IPs: []netip.Addr{netip.MustParseAddr("192.0.2.12")}},
	})
	cfg.Evidence.Inventory = e.inv
	f := informers.NewSharedInformerFactory(e.cs, 0)
	inf := f.Certificates().V1().CertificateSigningRequests().Informer()
	ctrl, err := controller.New(cfg, e.cs, inf, e.seen, e.reg)
	if err != nil {
		t.Fatal(err)
	}
	e.ctrl = ctrl
	ctx, cancel := context.WithCancel(context.Background())
	f.Start(ctx.Done())
	var wg sync.WaitGroup
	if lead {
		wg.Add(1)
		go func() { defer wg.Done(); _ = ctrl.Run(ctx) }()
	}
	f.WaitForCacheSync(ctx.Done())
	e.stop = func() { cancel(); wg.Wait(); f.Shutdown() }
	t.Cleanup(e.stop)
	return e
}

// storeAtEvent is the fake recorder, and it also notes what the API (the
// fake store) held for the CSR at the moment the controller recorded an
// event about it: what a reader of that event would find.
type storeAtEvent struct {
	*record.FakeRecorder
	cs     *fake.Clientset
	mu     sync.Mutex
	labels map[string]map[string]string // "<csr> <reason>" -> its labels then
}

func (s *storeAtEvent) Event(obj runtime.Object, kind, reason, msg string) {
	if o, ok := obj.(metav1.Object); ok {
		if cur, err := s.cs.CertificatesV1().CertificateSigningRequests().Get(context.Background(), o.GetName(), metav1.GetOptions{}); err == nil {
			s.mu.Lock()
			s.labels[o.GetName()+" "+reason] = cur.Labels
			s.mu.Unlock()
		}
	}
	s.FakeRecorder.Event(obj, kind, reason, msg)
}

func (s *storeAtEvent) labelsAt(name, reason string) (map[string]string, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	l, ok := s.labels[name+" "+reason]
	return l, ok
}

func (e *env) get(name string) *certv1.CertificateSigningRequest {
	c, err := e.cs.CertificatesV1().CertificateSigningRequests().Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		e.t.Fatal(err)
	}
	return c
}

func (e *env) waitFor(name string, what string, ok func(*certv1.CertificateSigningRequest) bool) *certv1.CertificateSigningRequest {
	e.t.Helper()
	var c *certv1.CertificateSigningRequest
	if !testwait.Until(10*time.Second, func() bool { c = e.get(name); return ok(c) }) {
		e.t.Fatalf("CSR %s never %s: %+v", name, what, c.Status)
	}
	return c
}

func (e *env) waitEvent(prefix string) string {
	e.t.Helper()
	deadline := time.After(10 * time.Second)
	for {
		select {
		case ev := <-e.rec.Events:
			if strings.HasPrefix(ev, prefix) {
				return ev
			}
		case <-deadline:
			e.t.Fatalf("no event with prefix %q", prefix)
		}
	}
}

func condition(c *certv1.CertificateSigningRequest, typ certv1.RequestConditionType) *certv1.CertificateSigningRequestCondition {
	for i := range c.Status.Conditions {
		if c.Status.Conditions[i].Type == typ {
			return &c.Status.Conditions[i]
		}
	}
	return nil
}

func approved(c *certv1.CertificateSigningRequest) bool {
	return condition(c, certv1.CertificateApproved) != nil
}

func labelled(c *certv1.CertificateSigningRequest) bool {
	return c.Labels[names.NodeLabel] != ""
}

// writesTo lists the write actions on one CSR.
func writesTo(cs *fake.Clientset, name string) []k8stesting.Action {
	var out []k8stesting.Action
	for _, a := range cs.Actions() {
		switch a := a.(type) {
		case k8stesting.UpdateAction:
			if o, ok := a.GetObject().(metav1.Object); ok && o.GetName() == name {
				out = append(out, a)
			}
		case k8stesting.PatchAction:
			if a.GetName() == name {
				out = append(out, a)
			}
		}
	}
	return out
}

const signer = certv1.KubeletServingSignerName

func TestApprovesAndLabelsAValidRequest(t *testing.T) {
	e := start(t, controller.Config{}, true, csr(t, "csr-ok", "w1", "192.0.2.11", signer))
	c := e.waitFor("csr-ok", "approved", approved)
	cond := condition(c, certv1.CertificateApproved)
	if cond.Reason != string(policy.RuleApproved) || cond.Status != corev1.ConditionTrue || !strings.Contains(cond.Message, "192.0.2.11") {
		t.Errorf("approval condition %+v", cond)
	}
	if c.Labels[names.NodeLabel] != "w1" {
		t.Errorf("labels %v", c.Labels)
	}
	e.waitEvent("Normal " + string(policy.RuleApproved))
	// The approver's own share is timed, and its record goes with the
	// decision (nothing kept per decided CSR). Both follow the approval
	// write and its event: wait for the observation, then look.
	testwait.Until(10*time.Second, func() bool { return histogramCount(t, e.reg, "certready_approver_decision_seconds") > 0 })
	if n := histogramCount(t, e.reg, "certready_approver_decision_seconds"); n != 1 {
		t.Errorf("certready_approver_decision_seconds counted %d decisions, want 1", n)
	}
	if n := e.ctrl.FirstSeen(); n != 0 {
		t.Errorf("%d first-seen records left after the approval", n)
	}
	// One write for the whole decision: the approval subresource carries
	// the label (it persists metadata), so a storm costs one request per CSR.
	writes := writesTo(e.cs, "csr-ok")
	if len(writes) != 1 || writes[0].GetSubresource() != "approval" {
		var got []string
		for _, w := range writes {
			got = append(got, w.GetVerb()+" "+w.GetSubresource())
		}
		t.Fatalf("writes %q, want exactly one, to the approval subresource", got)
	}
	if o := writes[0].(k8stesting.UpdateAction).GetObject().(*certv1.CertificateSigningRequest); o.Labels[names.NodeLabel] != "w1" || !approved(o) {
		t.Errorf("the approval write carries labels %v and conditions %+v, want the node label with the approval", o.Labels, o.Status.Conditions)
	}
}

func TestApprovalRetriesAConflict(t *testing.T) {
	conflicts := 0
	c := csr(t, "csr-ok", "w1", "192.0.2.11", signer)
	cs := fake.NewClientset(c)
	cs.PrependReactor("update", "certificatesigningrequests", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if a.GetSubresource() == "approval" && conflicts == 0 {
			conflicts++
			return true, nil, apierrors.NewConflict(certv1.Resource("certificatesigningrequests"), "csr-ok", errors.New("changed"))
		}
		return false, nil, nil
	})
	env := startWith(t, cs, controller.Config{})
	got := env.waitFor("csr-ok", "approved after a conflict", approved)
	if conflicts != 1 || condition(got, certv1.CertificateApproved).Reason != string(policy.RuleApproved) {
		t.Errorf("conflicts=%d, status %+v", conflicts, got.Status)
	}
}

func TestMismatchStaysPendingWithAWarningNamingTheRule(t *testing.T) {
	e := start(t, controller.Config{}, true, csr(t, "csr-bad", "w1", "192.0.2.99", signer))
	ev := e.waitEvent("Warning IPSANNotInInventory")
	if !strings.Contains(ev, "192.0.2.99 not recorded for w1") {
		t.Errorf("event %q", ev)
	}
	c := e.waitFor("csr-bad", "labelled", labelled)
	if len(c.Status.Conditions) != 0 {
		t.Errorf("a mismatch was decided: %+v", c.Status.Conditions)
	}
}

// TestAWarningComesAfterTheLabel: every path that keeps a CSR pending labels
// it before it records why, so that whoever reads the Warning finds the
// request already visible to the node's agent (the label is what the
// agent's informer selects on). storeAtEvent notes the stored CSR's labels
// at the moment the controller records each event.
func TestAWarningComesAfterTheLabel(t *testing.T) {
	older := func(name, node, ip string) *certv1.CertificateSigningRequest {
		c := csr(t, name, node, ip, signer)
		c.UID = types.UID(name)
		c.CreationTimestamp = metav1.NewTime(time.Now().Add(-time.Hour))
		return c
	}
	newer := csr(t, "csr-newer", "w1", "192.0.2.99", signer)
	newer.UID = "csr-newer"
	for _, tc := range []struct {
		name, csr, node string
		rule            policy.Rule
		cfg             controller.Config
		objs            []runtime.Object
	}{
		{"left pending", "csr-bad", "w1", policy.RuleIPSANNotInInventory, controller.Config{}, []runtime.Object{csr(t, "csr-bad", "w1", "192.0.2.99", signer)}},
		{"will retry", "csr-new", "w3", policy.RuleNodeNotInInventory, controller.Config{}, []runtime.Object{csr(t, "csr-new", "w3", "192.0.2.13", signer)}},
		{"flood guard", "csr-1", "w1", policy.RuleFloodGuard, controller.Config{MaxPending: 1, FloodRetry: time.Hour}, []runtime.Object{csr(t, "csr-1", "w1", "192.0.2.11", signer)}},
		{"superseded", "csr-older", "w1", policy.RuleSuperseded, controller.Config{}, []runtime.Object{older("csr-older", "w1", "192.0.2.99"), newer}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := start(t, tc.cfg, true, tc.objs...)
			e.waitEvent("Warning " + string(tc.rule))
			l, ok := e.seen.labelsAt(tc.csr, string(tc.rule))
			if !ok {
				t.Fatalf("the %s Warning was not about %s", tc.rule, tc.csr)
			}
			if l[names.NodeLabel] != tc.node {
				t.Errorf("%s recorded while %s carried labels %v: the node's agent could not yet see its request", tc.rule, tc.csr, l)
			}
		})
	}
}

func TestDenyOnMismatch(t *testing.T) {
	e := start(t, controller.Config{DenyOnMismatch: true}, true, csr(t, "csr-bad", "w1", "192.0.2.12", signer))
	c := e.waitFor("csr-bad", "denied", func(c *certv1.CertificateSigningRequest) bool { return condition(c, certv1.CertificateDenied) != nil })
	if d := condition(c, certv1.CertificateDenied); d.Reason != string(policy.RuleIPSANNotInInventory) {
		t.Errorf("denial %+v", d)
	}
	if approved(c) {
		t.Error("denied and approved")
	}
}

func TestOtherSignersAreNeverTouched(t *testing.T) {
	other := csr(t, "csr-other", "w1", "192.0.2.11", "kubernetes.io/kube-apiserver-client-kubelet")
	e := start(t, controller.Config{}, true, other)
	if !testwait.Until(10*time.Second, e.ctrl.Leading) {
		t.Fatal("the controller never started leading")
	}
	// Handled here, as a worker would, so that the test cannot pass before
	// the CSR was seen. It is valid in every other respect: only the
	// signer check keeps it from being judged (and then refused, with an
	// event).
	if _, err := e.ctrl.Sync(context.Background(), "csr-other"); err != nil {
		t.Fatal(err)
	}
	if w := writesTo(e.cs, "csr-other"); len(w) != 0 {
		t.Errorf("another signer's CSR was written: %v", w)
	}
	select {
	case ev := <-e.rec.Events:
		t.Errorf("an event about another signer's CSR: %q", ev)
	default:
	}
}

func TestAlreadyDecidedCSRsAreLeftAlone(t *testing.T) {
	denied := csr(t, "csr-denied", "w1", "192.0.2.11", signer)
	denied.Labels = map[string]string{names.NodeLabel: "w1"}
	denied.Status.Conditions = []certv1.CertificateSigningRequestCondition{{Type: certv1.CertificateDenied, Status: corev1.ConditionTrue}}
	e := start(t, controller.Config{}, true, denied, csr(t, "csr-ok", "w2", "192.0.2.12", signer))
	e.waitFor("csr-ok", "approved", approved)
	if w := writesTo(e.cs, "csr-denied"); len(w) != 0 {
		t.Errorf("a denied CSR was written: %v", w)
	}
}

func TestFloodGuardApprovesNothing(t *testing.T) {
	e := start(t, controller.Config{MaxPending: 2, FloodRetry: time.Hour}, true,
		csr(t, "csr-1", "w1", "192.0.2.11", signer), csr(t, "csr-2", "w2", "192.0.2.12", signer))
	ev := e.waitEvent("Warning FloodGuard")
	if !strings.Contains(ev, "2 or more distinct nodes of the inventory have kubelet-serving CSRs pending, the limit is 2") {
		t.Errorf("event %q", ev)
	}
	for _, n := range []string{"csr-1", "csr-2"} {
		if approved(e.get(n)) {
			t.Errorf("%s approved above the flood guard", n)
		}
	}
}

// TestMintedIdentitiesDoNotTripTheFloodGuard: a bootstrap token's holder
// can get client certificates for any system:node:<name> and file a CSR
// under each. Identities the inventory does not know are not counted: the
// real nodes' requests are still approved, the minted ones wait
// (NodeNotInInventory).
func TestMintedIdentitiesDoNotTripTheFloodGuard(t *testing.T) {
	objs := []runtime.Object{csr(t, "csr-w1", "w1", "192.0.2.11", signer)}
	for i := 0; i < 20; i++ {
		objs = append(objs, csr(t, fmt.Sprintf("csr-minted-%02d", i), fmt.Sprintf("minted-%02d", i), "192.0.2.11", signer))
	}
	e := start(t, controller.Config{MaxPending: 5, FloodRetry: time.Hour}, true, objs...)
	e.waitFor("csr-w1", "approved while 20 minted identities wait", approved)
	e.waitEvent("Warning " + string(policy.RuleNodeNotInInventory))
	for _, m := range testmetrics.Series(t, e.reg, "certready_approver_decisions_total", map[string]string{"decision": "deferred", "reason": string(policy.RuleFloodGuard)}) {
		if testmetrics.Value(m) > 0 {
			t.Errorf("the flood guard deferred %v decisions: minted identities were counted", testmetrics.Value(m))
		}
	}
}

// TestTheNextNewestIsACandidateOnceTheNewestIsGone: a node's newer request
// supersedes its older one; when the newer one is deleted, the older one is
// the node's newest and is handled again (no other event would bring it
// back): its deletion queues the node's other requests.
func TestTheNextNewestIsACandidateOnceTheNewestIsGone(t *testing.T) {
	older := csr(t, "csr-older", "w1", "192.0.2.11", signer)
	older.UID = "older"
	newer := csr(t, "csr-newer", "w1", "192.0.2.99", signer)
	newer.UID = "newer"
	newer.CreationTimestamp = metav1.NewTime(older.CreationTimestamp.Add(time.Minute))
	e := start(t, controller.Config{}, false, older, newer) // no workers: the queue is the test's to read
	if !testwait.Until(10*time.Second, func() bool { return e.ctrl.QueueLen() == 2 }) {
		t.Fatalf("%d CSRs queued by their first events, want 2", e.ctrl.QueueLen())
	}
	e.ctrl.DrainQueue()
	if err := e.cs.CertificatesV1().CertificateSigningRequests().Delete(context.Background(), "csr-newer", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if !testwait.Until(10*time.Second, func() bool { return e.ctrl.QueueLen() == 1 }) {
		t.Fatalf("%d CSRs queued after the node's newest request was deleted, want its older one", e.ctrl.QueueLen())
	}
}

// TestARequestDroppedForItsSizeIsRefusedUnwritten: the CSR cache dropped
// the request (names.DroppedRequestKey); the Warning names the rule, and
// the CSR is never written, not even to correct the node label it spoofs:
// each write would have the API server store and send its megabytes again.
func TestARequestDroppedForItsSizeIsRefusedUnwritten(t *testing.T) {
	big := csr(t, "csr-big", "w1", "192.0.2.11", signer)
	big.Spec.Request = nil
	big.Spec.Extra = map[string]certv1.ExtraValue{names.DroppedRequestKey: {"1048576"}}
	big.Labels = map[string]string{names.NodeLabel: "w2"}
	e := start(t, controller.Config{}, true, big, csr(t, "csr-ok", "w2", "192.0.2.12", signer))
	ev := e.waitEvent("Warning " + string(policy.RuleRequestTooLarge))
	if !strings.Contains(ev, "1048576 bytes") {
		t.Errorf("event %q", ev)
	}
	e.waitFor("csr-ok", "approved", approved)
	if w := writesTo(e.cs, "csr-big"); len(w) != 0 {
		t.Errorf("the oversized CSR was written: %v", w)
	}
}

func TestNodeMissingFromTheInventoryIsRetried(t *testing.T) {
	e := start(t, controller.Config{}, true, csr(t, "csr-new", "w3", "192.0.2.13", signer))
	e.waitEvent("Warning NodeNotInInventory")
	e.inv.Replace(map[string]inventory.Entry{"w3": {IPs: []netip.Addr{netip.MustParseAddr("192.0.2.13")}}})
	e.ctrl.EnqueueAll()
	e.waitFor("csr-new", "approved once the node is in the inventory", approved)
}

func TestOnlyTheLeaderWrites(t *testing.T) {
	e := start(t, controller.Config{}, false, csr(t, "csr-ok", "w1", "192.0.2.11", signer))
	if _, err := e.ctrl.Sync(context.Background(), "csr-ok"); err != nil {
		t.Fatal(err)
	}
	if w := writesTo(e.cs, "csr-ok"); len(w) != 0 {
		t.Errorf("a standby wrote: %v", w)
	}
}

// TestRecreatedCSRIsNeverApprovedUnevaluated reproduces the race: the CSR
// is evaluated, then deleted and created anew under the same name (another
// request, for an address its node does not have) before the approval
// lands. The approval must not go to the new object; the new one is
// evaluated on its own and refused.
func TestRecreatedCSRIsNeverApprovedUnevaluated(t *testing.T) {
	good := csr(t, "csr-race", "w1", "192.0.2.11", signer)
	good.UID = "uid-evaluated"
	cs := fake.NewClientset(good)
	gvr := certv1.SchemeGroupVersion.WithResource("certificatesigningrequests")
	var once sync.Once
	cs.PrependReactor("update", "certificatesigningrequests", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if a.GetSubresource() != "approval" {
			return false, nil, nil
		}
		replaced := false
		once.Do(func() {
			evil := csr(t, "csr-race", "w1", "192.0.2.99", signer)
			evil.UID = "uid-replacement"
			if err := cs.Tracker().Delete(gvr, "", "csr-race"); err != nil {
				t.Error(err)
			}
			if err := cs.Tracker().Create(gvr, evil, ""); err != nil {
				t.Error(err)
			}
			replaced = true
		})
		if replaced {
			return true, nil, apierrors.NewConflict(certv1.Resource("certificatesigningrequests"), "csr-race", errors.New("the object has been modified"))
		}
		return false, nil, nil
	})
	e := startWith(t, cs, controller.Config{})
	// The replacement is evaluated on its own: refused for its address.
	e.waitEvent("Warning " + string(policy.RuleIPSANNotInInventory))
	got := e.get("csr-race")
	if got.UID != "uid-replacement" {
		t.Fatalf("CSR uid %s, want the replacement", got.UID)
	}
	if approved(got) {
		t.Fatalf("the replacement CSR (192.0.2.99, never evaluated as approvable) was approved: %+v", got.Status)
	}
	// The fake's plain updates overwrite status, so look at the writes too.
	for _, a := range writesTo(cs, "csr-race") {
		if u, ok := a.(k8stesting.UpdateAction); ok && a.GetSubresource() == "approval" && u.GetObject().(metav1.Object).GetUID() == "uid-replacement" {
			t.Fatalf("an approval was written to the replacement CSR, which was never evaluated as approvable")
		}
	}
	if v := decisions(t, e.reg, "replaced"); v != 1 {
		t.Errorf("decisions{decision=replaced} = %v, want 1", v)
	}
}

// TestDecidedElsewhereIsNotRecordedAsOurApproval: another actor approves
// the CSR between the informer's copy and this write. Nothing is written,
// and no Approved event, metric or latency is recorded.
func TestDecidedElsewhereIsNotRecordedAsOurApproval(t *testing.T) {
	c := csr(t, "csr-other", "w1", "192.0.2.11", signer)
	c.UID = "uid-1"
	c.Labels = map[string]string{names.NodeLabel: "w1"}
	cs := fake.NewClientset(c)
	gvr := certv1.SchemeGroupVersion.WithResource("certificatesigningrequests")
	var once sync.Once
	cs.PrependReactor("update", "certificatesigningrequests", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if a.GetSubresource() != "approval" {
			return false, nil, nil
		}
		first := false
		once.Do(func() {
			other := c.DeepCopy()
			other.Status.Conditions = []certv1.CertificateSigningRequestCondition{{Type: certv1.CertificateApproved, Status: corev1.ConditionTrue, Reason: "KubectlApprove"}}
			if err := cs.Tracker().Update(gvr, other, ""); err != nil {
				t.Error(err)
			}
			first = true
		})
		if first {
			return true, nil, apierrors.NewConflict(certv1.Resource("certificatesigningrequests"), "csr-other", errors.New("the object has been modified"))
		}
		t.Error("a second approval write after another actor approved")
		return false, nil, nil
	})
	e := startWith(t, cs, controller.Config{})
	if !testwait.Until(10*time.Second, func() bool { return decisions(t, e.reg, "decided-elsewhere") == 1 }) {
		t.Fatal("the other actor's decision was never recorded")
	}
	if got := condition(e.get("csr-other"), certv1.CertificateApproved); got == nil || got.Reason != "KubectlApprove" {
		t.Errorf("approval condition %+v, want the other actor's only", got)
	}
	if v := decisions(t, e.reg, "approved"); v != 0 {
		t.Errorf("decisions{decision=approved} = %v for a CSR another actor approved", v)
	}
	select {
	case ev := <-e.rec.Events:
		if strings.HasPrefix(ev, "Normal "+string(policy.RuleApproved)) {
			t.Errorf("event %q for an approval this process did not write", ev)
		}
	default:
	}
}

// decisions sums certready_approver_decisions_total for one decision.
func decisions(t *testing.T, reg *prometheus.Registry, decision string) float64 {
	t.Helper()
	sum := 0.0
	for _, m := range testmetrics.Series(t, reg, "certready_approver_decisions_total", map[string]string{"decision": decision}) {
		sum += testmetrics.Value(m)
	}
	return sum
}

// TestAPIServerAddressesAreNeverApproved: a node that reports the API
// server's address (from its EndpointSlice) as its own is refused, even in
// node-objects mode where the address is recorded for it.
func TestAPIServerAddressesAreNeverApproved(t *testing.T) {
	api := netip.MustParseAddr("192.0.2.11") // w1's recorded address, here also the API server's
	e := start(t, controller.Config{Evidence: policy.Evidence{APIServer: func() policy.APIServer {
		return policy.APIServer{Addresses: map[netip.Addr]string{api: "an endpoint of default/kubernetes"}, Endpoints: map[netip.Addr]bool{api: true}}
	}}}, true,
		csr(t, "csr-api", "w1", "192.0.2.11", signer), csr(t, "csr-ok", "w2", "192.0.2.12", signer))
	e.waitFor("csr-ok", "approved", approved)
	ev := e.waitEvent("Warning " + string(policy.RuleSANDenied))
	if !strings.Contains(ev, "192.0.2.11 is an API server address") {
		t.Errorf("event %q", ev)
	}
	if approved(e.get("csr-api")) {
		t.Error("a CSR for the API server's address was approved")
	}
}

// TestOneNodesPileOfRequestsBlocksNobody: two stuck kubelets with 150
// pending requests each (a day of re-requests every 15 minutes, and more)
// count as two identities, not 300 requests: a third node is approved, and
// of each stuck node only the newest request is a candidate.
func TestOneNodesPileOfRequestsBlocksNobody(t *testing.T) {
	var objs []runtime.Object
	base := time.Now().Add(-48 * time.Hour)
	for i := 0; i < 150; i++ {
		for _, stuck := range []struct{ node, ip string }{{"w1", "192.0.2.99"}, {"w2", "192.0.2.98"}} {
			c := csr(t, fmt.Sprintf("csr-%s-%03d", stuck.node, i), stuck.node, stuck.ip, signer)
			c.UID = types.UID(c.Name)
			c.CreationTimestamp = metav1.NewTime(base.Add(time.Duration(i) * 15 * time.Minute))
			objs = append(objs, c)
		}
	}
	third := csr(t, "csr-w3", "w3", "192.0.2.13", signer)
	third.UID = "csr-w3"
	objs = append(objs, third)
	e := start(t, controller.Config{FloodRetry: time.Hour}, true, objs...)
	e.inv.Replace(map[string]inventory.Entry{
		"w1": {IPs: []netip.Addr{netip.MustParseAddr("192.0.2.11")}},
		"w2": {IPs: []netip.Addr{netip.MustParseAddr("192.0.2.12")}},
		"w3": {IPs: []netip.Addr{netip.MustParseAddr("192.0.2.13")}},
	})
	e.ctrl.EnqueueAll()
	e.waitFor("csr-w3", "approved despite 300 pending requests of two stuck nodes", approved)
	// The stuck nodes' newest requests were evaluated (refused for their
	// address); every older one was superseded, never evaluated.
	if !testwait.Until(10*time.Second, func() bool { return decisions(t, e.reg, "superseded") >= 298 }) {
		t.Fatalf("superseded decisions %v, want 298 (all but each stuck node's newest)", decisions(t, e.reg, "superseded"))
	}
	if v := decisions(t, e.reg, "deferred"); v != 0 {
		t.Errorf("deferred decisions %v: the flood guard held back approvals for two identities", v)
	}
}

// TestFloodGuardCountsIdentitiesNotRequests: a burst of distinct identities
// still trips the guard.
func TestFloodGuardCountsIdentitiesNotRequests(t *testing.T) {
	a1 := csr(t, "csr-a1", "w1", "192.0.2.11", signer)
	a1.UID = "a1"
	a2 := csr(t, "csr-a2", "w1", "192.0.2.11", signer)
	a2.UID = "a2"
	a2.CreationTimestamp = metav1.NewTime(a1.CreationTimestamp.Add(time.Minute))
	// Two requests of one node: one identity, under a limit of 2.
	e := start(t, controller.Config{MaxPending: 2, FloodRetry: time.Hour}, true, a1, a2)
	e.waitFor("csr-a2", "approved (one identity is under the limit of 2)", approved)
	// Once the newer one is decided the older one is still superseded:
	// handled again and again while the controller's cache takes in the
	// approval (a second at most), it is never approved.
	for end := time.Now().Add(time.Second); time.Now().Before(end); time.Sleep(10 * time.Millisecond) {
		if _, err := e.ctrl.Sync(context.Background(), "csr-a1"); err != nil {
			t.Fatal(err)
		}
		if approved(e.get("csr-a1")) {
			t.Fatal("the older, superseded request of w1 was approved once the newer one was")
		}
	}
}

// TestSpoofedNodeLabelsAreCorrected: the certready.io/node label says whose
// agent watches a CSR. A non-node requester's label is removed; a node's
// label naming another node is set to the requester.
func TestSpoofedNodeLabelsAreCorrected(t *testing.T) {
	byUser := csr(t, "csr-spoof-user", "w1", "192.0.2.11", signer)
	byUser.Spec.Username = "mallory"
	byUser.Labels = map[string]string{names.NodeLabel: "w2"}
	byNode := csr(t, "csr-spoof-node", "w1", "192.0.2.99", signer)
	byNode.Labels = map[string]string{names.NodeLabel: "w2"}
	e := start(t, controller.Config{}, true, byUser, byNode)
	e.waitFor("csr-spoof-user", "unlabelled", func(c *certv1.CertificateSigningRequest) bool {
		_, has := c.Labels[names.NodeLabel]
		return !has
	})
	e.waitFor("csr-spoof-node", "labelled with its requester", func(c *certv1.CertificateSigningRequest) bool {
		return c.Labels[names.NodeLabel] == "w1"
	})
}

// A node's new address re-evaluates its pending CSRs, found by requester
// (spec.username) through an index: labelled or not, and without a scan of
// every cached CSR on each Node event of a scale-up.
func TestNodeChangeReevaluatesItsUnlabelledCSRs(t *testing.T) {
	cs := fake.NewClientset(csr(t, "csr-new-ip", "w1", "192.0.2.99", signer))
	// Label writes are answered but never stored (as if another writer
	// removed the label at once): the CSR stays as the kubelet created it,
	// and nothing retries it.
	cs.PrependReactor("update", "certificatesigningrequests", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if a.GetSubresource() == "" {
			return true, a.(k8stesting.UpdateAction).GetObject(), nil
		}
		return false, nil, nil
	})
	e := startWith(t, cs, controller.Config{})
	e.waitEvent("Warning IPSANNotInInventory")
	if labelled(e.get("csr-new-ip")) {
		t.Fatal("labelled although label writes are not stored")
	}
	e.inv.Replace(map[string]inventory.Entry{"w1": {IPs: []netip.Addr{netip.MustParseAddr("192.0.2.99")}}})
	e.ctrl.EnqueueNode("w1")
	e.waitFor("csr-new-ip", "approved once w1 reports the address", approved)
}

// Two requests of one node in the same second (a harness, or a kubelet
// restarted at once): the one decided first must not block the other by
// an arbitrary tie-break on names.
func TestADecidedRequestInTheSameSecondSupersedesNothing(t *testing.T) {
	first := csr(t, "csr-z-first", "w1", "192.0.2.11", signer)
	first.UID = "z"
	e := start(t, controller.Config{}, true, first)
	e.waitFor("csr-z-first", "approved", approved)
	second := csr(t, "csr-a-second", "w1", "192.0.2.11", signer)
	second.UID = "a"
	second.CreationTimestamp = first.CreationTimestamp
	if _, err := e.cs.CertificatesV1().CertificateSigningRequests().Create(context.Background(), second, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	e.waitFor("csr-a-second", "approved although the other request of its second is decided", approved)
}

func histogramCount(t *testing.T, reg *prometheus.Registry, name string) uint64 {
	t.Helper()
	if s := testmetrics.Series(t, reg, name, nil); len(s) > 0 {
		return s[0].GetHistogram().GetSampleCount()
	}
	return 0
}

// lockedBuffer is a ledger's standard output, read while it writes.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

// records decodes the ledger lines written so far.
func (l *lockedBuffer) records(t *testing.T) []map[string]any {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []map[string]any
	for _, line := range bytes.Split(bytes.TrimSpace(l.b.Bytes()), []byte("\n")) {
		if len(line) == 0 {
			continue
		}
		var m map[string]any
		if err := json.Unmarshal(line, &m); err != nil {
			t.Fatalf("ledger line %q: %v", line, err)
		}
		out = append(out, m)
	}
	return out
}

func startLedger(t *testing.T) (*ledger.Ledger, *lockedBuffer) {
	t.Helper()
	out := &lockedBuffer{}
	l, err := ledger.New(ledger.Config{Sinks: []string{ledger.SinkStdout}, Component: "approver", Actor: "leader-1", Version: "test", Stdout: out}, prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { l.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	return l, out
}

// Every decision is one ledger record naming the CSR, its requester, what
// it asked for and the rule; a refusal is also kept on the CSR itself, and
// a refusal seen again is not recorded twice.
func TestDecisionsAreRecordedAndRefusalsKeptOnTheCSR(t *testing.T) {
	l, out := startLedger(t)
	e := start(t, controller.Config{Ledger: l}, true,
		csr(t, "csr-ok", "w1", "192.0.2.11", signer), csr(t, "csr-bad", "w2", "192.0.2.99", signer))
	e.waitFor("csr-ok", "approved", approved)
	bad := e.waitFor("csr-bad", "annotated with its refusal", func(c *certv1.CertificateSigningRequest) bool {
		return c.Annotations[names.DecisionRuleAnnotation] != ""
	})
	if got := bad.Annotations[names.DecisionRuleAnnotation]; got != string(policy.RuleIPSANNotInInventory) {
		t.Errorf("decision-rule annotation %q", got)
	}
	if got := bad.Annotations[names.DecisionMessageAnnotation]; !strings.Contains(got, "192.0.2.99 not recorded for w2") {
		t.Errorf("decision-message annotation %q", got)
	}
	var recs []map[string]any
	if !testwait.Until(10*time.Second, func() bool { recs = out.records(t); return len(recs) >= 2 }) {
		t.Fatalf("ledger records %v, want 2", recs)
	}
	// Evaluating the refused CSR again (a resync) records nothing new.
	if _, err := e.ctrl.Sync(context.Background(), "csr-bad"); err != nil {
		t.Fatal(err)
	}
	byCSR := map[string]map[string]any{}
	for _, r := range out.records(t) {
		if _, dup := byCSR[r["csr"].(string)]; dup {
			t.Errorf("CSR %s recorded twice", r["csr"])
		}
		byCSR[r["csr"].(string)] = r
	}
	ok, refused := byCSR["csr-ok"], byCSR["csr-bad"]
	for k, want := range map[string]any{"action": "approved", "rule": string(policy.RuleApproved), "node": "w1",
		"requester": "system:node:w1", "key_type": "ECDSA P-256", "actor": "leader-1", "component": "approver"} {
		if ok[k] != want {
			t.Errorf("approval record %s = %v, want %v", k, ok[k], want)
		}
	}
	if sans, _ := ok["sans"].([]any); len(sans) != 1 || sans[0] != "192.0.2.11" {
		t.Errorf("approval record sans %v", ok["sans"])
	}
	if ok["csr_uid"] != "uid-csr-ok" {
		t.Errorf("approval record csr_uid %v", ok["csr_uid"])
	}
	if refused["action"] != "left-pending" || refused["rule"] != string(policy.RuleIPSANNotInInventory) {
		t.Errorf("refusal record %v", refused)
	}
}

// A refusal is kept only on the object that was refused: a CSR replaced
// under its name before the note is written keeps the new one's state.
func TestARefusalIsNeverKeptOnAReplacedCSR(t *testing.T) {
	e := start(t, controller.Config{}, false, csr(t, "csr-bad", "w2", "192.0.2.99", signer))
	e.ctrl.NoteLater(e.get("csr-bad"), policy.RuleIPSANNotInInventory, "refused")
	api := e.cs.CertificatesV1().CertificateSigningRequests()
	if err := api.Delete(context.Background(), "csr-bad", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	fresh := csr(t, "csr-bad", "w2", "192.0.2.12", signer)
	fresh.UID = "uid-new"
	if _, err := api.Create(context.Background(), fresh, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if !testwait.Until(10*time.Second, func() bool { c, err := e.ctrl.CachedUID("csr-bad"); return err == nil && c == "uid-new" }) {
		t.Fatal("the informer never saw the new CSR")
	}
	if err := e.ctrl.WriteNote(context.Background(), "csr-bad"); err != nil {
		t.Fatal(err)
	}
	if got := e.get("csr-bad").Annotations; len(got) != 0 {
		t.Errorf("the new CSR got the old one's refusal: %v", got)
	}
}

// The backlog counts what waits for a certificate, an approved request
// the signer has not signed included; every stage has its own count.
func TestStageGaugesAndTheBacklog(t *testing.T) {
	approvedCond := testpki.Condition(certv1.CertificateApproved, "ok")
	// The unsigned request is the oldest that waits; older ones were
	// decided, or are not kubelet-serving.
	twoHours, fiveHours := testpki.Created(time.Now().Add(-2*time.Hour)), testpki.Created(time.Now().Add(-5*time.Hour))
	e := start(t, controller.Config{}, false,
		csr(t, "csr-pending", "w1", "192.0.2.11", signer),
		testpki.KubeletCSR("csr-unsigned", "w1", approvedCond, twoHours),
		testpki.KubeletCSR("csr-issued", "w1", testpki.Issued([]byte("-----BEGIN CERTIFICATE-----\n")), fiveHours),
		testpki.KubeletCSR("csr-denied", "w2", testpki.Condition(certv1.CertificateDenied, "no"), fiveHours),
		testpki.KubeletCSR("csr-failed", "w2", approvedCond, testpki.Condition(certv1.CertificateFailed, "signer"), fiveHours),
		testpki.KubeletCSR("csr-client", "w2", testpki.Signer(certv1.KubeAPIServerClientKubeletSignerName), fiveHours),
	)
	want := map[string]float64{"pending": 1, "approved-not-issued": 1, "issued": 1, "denied": 1, "failed": 1}
	for stage, n := range want {
		s := testmetrics.Series(t, e.reg, "certready_approver_csrs", map[string]string{"stage": stage})
		if len(s) != 1 || testmetrics.Value(s[0]) != n {
			t.Errorf("certready_approver_csrs{stage=%q}: %v, want %v", stage, s, n)
		}
	}
	if s := testmetrics.Series(t, e.reg, "certready_approver_pending_csrs", nil); len(s) != 1 || testmetrics.Value(s[0]) != 2 {
		t.Errorf("certready_approver_pending_csrs %v, want 2: the pending one and the approved one not signed", s)
	}
	s := testmetrics.Series(t, e.reg, "certready_approver_oldest_pending_csr_age_seconds", nil)
	if len(s) != 1 || testmetrics.Value(s[0]) < 2*3600 || testmetrics.Value(s[0]) > 2*3600+60 {
		t.Errorf("certready_approver_oldest_pending_csr_age_seconds %v, want about two hours: the unsigned request's age", s)
	}
}

// Another identity approving a request certready's policy left pending is
// recorded (event, metric), naming the rule it failed; certready's own
// approvals never are.
func TestApprovalByAnotherActorIsRecorded(t *testing.T) {
	e := start(t, controller.Config{}, true, csr(t, "csr-ok", "w1", "192.0.2.11", signer), csr(t, "csr-bad", "w2", "192.0.2.99", signer))
	e.waitFor("csr-ok", "approved", approved)
	e.waitFor("csr-bad", "its refusal kept on it", func(c *certv1.CertificateSigningRequest) bool {
		return c.Annotations[names.DecisionRuleAnnotation] == "IPSANNotInInventory"
	})
	// An admin's kubectl certificate approve.
	c := e.get("csr-bad")
	c.Status.Conditions = append(c.Status.Conditions, certv1.CertificateSigningRequestCondition{Type: certv1.CertificateApproved, Status: corev1.ConditionTrue,
		Reason: "KubectlApprove", Message: "This CSR was approved by kubectl certificate approve."})
	if _, err := e.cs.CertificatesV1().CertificateSigningRequests().UpdateApproval(context.Background(), "csr-bad", c, metav1.UpdateOptions{FieldManager: "kubectl-certificate"}); err != nil {
		t.Fatal(err)
	}
	ev := e.waitEvent("Warning " + controller.ApprovedElsewhereReason)
	if !strings.Contains(ev, "KubectlApprove") || !strings.Contains(ev, "IPSANNotInInventory") {
		t.Errorf("event %q: want it naming the approval's reason and the rule certready refused it by", ev)
	}
	if v := testmetrics.Value(testmetrics.Series(t, e.reg, "certready_approver_approved_elsewhere_total", map[string]string{"policy": "refused"})[0]); v != 1 {
		t.Errorf("approved elsewhere (refused) = %v, want 1", v)
	}
	if v := testmetrics.Value(testmetrics.Series(t, e.reg, "certready_approver_approved_elsewhere_total", map[string]string{"policy": "unknown"})[0]); v != 0 {
		t.Errorf("approved elsewhere (unknown) = %v, want 0: certready's own approval of csr-ok counted", v)
	}
}
