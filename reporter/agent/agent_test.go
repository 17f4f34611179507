package agent_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	certv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
	certv1client "k8s.io/client-go/kubernetes/typed/certificates/v1"
	k8stesting "k8s.io/client-go/testing"

	"github.com/certready/certready/internal/fingerprint"
	"github.com/certready/certready/internal/httpserve"
	"github.com/certready/certready/internal/ledger"
	"github.com/certready/certready/internal/names"
	"github.com/certready/certready/internal/nodeapi"
	"github.com/certready/certready/internal/nodeapi/nodeapitest"
	"github.com/certready/certready/internal/stamp"
	"github.com/certready/certready/internal/testmetrics"
	"github.com/certready/certready/internal/testpki"
	"github.com/certready/certready/internal/testwait"
	"github.com/certready/certready/reporter/agent"
	"github.com/certready/certready/reporter/agent/apiclock"
	"github.com/certready/certready/reporter/servingcert/apipath"
	"github.com/certready/certready/reporter/servingcert/condition"
	"github.com/certready/certready/reporter/servingcert/verdict"
)

// kubelet is a stand-in for the kubelet's serving port: it presents
// whatever certificate it was last given, or fails the handshake with
// internal_error when it has none, exactly like the kubelet's GetCertificate.
type kubelet struct {
	cert       atomic.Pointer[tls.Certificate]
	handshakes atomic.Int64
	accepted   atomic.Int64
	port       int

	mu   sync.Mutex
	hold chan struct{} // non-nil: new connections wait for it before the handshake
}

// stall makes the port accept connections and answer nothing until resume,
// as a wedged kubelet (or a black-holing network) does.
func (k *kubelet) stall() {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.hold == nil {
		k.hold = make(chan struct{})
	}
}

func (k *kubelet) resume() {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.hold != nil {
		close(k.hold)
		k.hold = nil
	}
}

func (k *kubelet) held() chan struct{} {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.hold
}

func startKubelet(t *testing.T) *kubelet {
	t.Helper()
	k := &kubelet{}
	ln, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{
		MinVersion: tls.VersionTLS12,
		GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) {
			k.handshakes.Add(1)
			if c := k.cert.Load(); c != nil {
				return c, nil
			}
			return nil, errors.New("no serving certificate available for the kubelet")
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	k.port = ln.Addr().(*net.TCPAddr).Port
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			hold := k.held()
			k.accepted.Add(1)
			go func() {
				defer c.Close()
				if hold != nil {
					<-hold
				}
				_ = c.(*tls.Conn).Handshake()
			}()
		}
	}()
	t.Cleanup(func() { k.resume(); ln.Close() })
	return k
}

func (k *kubelet) serve(p *testpki.Pair) {
	k.cert.Store(&tls.Certificate{Certificate: [][]byte{p.Cert.Raw}, PrivateKey: p.Key, Leaf: p.Cert})
}

type harness struct {
	t      *testing.T
	ca     *testpki.CA
	dir    string
	cs     *fake.Clientset
	client kubernetes.Interface // the agent's, when not cs itself
	// podLog, when set, answers the agent's log request through the
	// API server (the fake clientset's always succeeds).
	podLog  func() error
	kubelet *kubelet
	reg     *prometheus.Registry
	ready   *httpserve.Readiness
	mu      sync.Mutex
	patches []corev1.NodeCondition
}

func newHarness(t *testing.T, objs ...runtime.Object) *harness {
	t.Helper()
	ca, err := testpki.NewCA("kubelet-ca")
	if err != nil {
		t.Fatal(err)
	}
	h := &harness{t: t, ca: ca, dir: t.TempDir(), kubelet: startKubelet(t), reg: prometheus.NewRegistry(), ready: httpserve.NewReadiness("starting")}
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "w1", UID: "uid-1"}}
	node.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "127.0.0.1"}, {Type: corev1.NodeHostName, Address: "w1"}}
	node.Status.DaemonEndpoints.KubeletEndpoint.Port = int32(h.kubelet.port)
	h.cs = fake.NewClientset(append([]runtime.Object{node}, objs...)...)
	h.cs.PrependReactor("patch", "nodes", func(a k8stesting.Action) (bool, runtime.Object, error) {
		var p struct {
			Status struct {
				Conditions []corev1.NodeCondition `json:"conditions"`
			} `json:"status"`
		}
		if err := json.Unmarshal(a.(k8stesting.PatchAction).GetPatch(), &p); err != nil {
			t.Errorf("undecodable patch: %v", err)
		}
		h.mu.Lock()
		defer h.mu.Unlock()
		h.patches = append(h.patches, p.Status.Conditions...)
		return false, nil, nil
	})
	if err := os.WriteFile(filepath.Join(h.dir, "..", "ca.crt"), ca.PEM(), 0o644); err != nil {
		t.Fatal(err)
	}
	return h
}

func (h *harness) run(cfg agent.Config) (stop func()) {
	h.t.Helper()
	cfg.NodeName = "w1"
	cfg.PKIDir = h.dir
	cfg.CAFile = filepath.Join(h.dir, "..", "ca.crt")
	if cfg.Settle == 0 {
		cfg.Settle = 200 * time.Millisecond
	}
	if cfg.Resync == 0 {
		cfg.Resync = time.Hour // prove the agent reacts to events, not to the resync
	}
	client := h.client
	if client == nil {
		client = h.cs
	}
	api := nodeapitest.FromClientset(client)
	if h.podLog != nil {
		api = podLogAPI{API: api, answer: h.podLog}
	}
	a, err := agent.New(cfg, api, h.reg, h.ready)
	if err != nil {
		h.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				h.t.Errorf("agent: %v", err)
			}
		})
	}
	h.t.Cleanup(stop)
	return stop
}

func (h *harness) condition() *corev1.NodeCondition {
	return condition.Find(h.node(), names.ConditionType)
}

func (h *harness) node() *corev1.Node {
	n, err := h.cs.CoreV1().Nodes().Get(context.Background(), "w1", metav1.GetOptions{})
	if err != nil {
		h.t.Fatal(err)
	}
	return n
}

// facts are the facts the node shows, as the fleet view reads them.
func (h *harness) facts() (verdict.Facts, bool) {
	n := h.node()
	return verdict.NodeFacts(n, condition.Find(n, names.ConditionType))
}

// waitFor polls the node until its condition has reason, or fails at the deadline.
func (h *harness) waitFor(reason verdict.Reason) *corev1.NodeCondition {
	h.t.Helper()
	var last *corev1.NodeCondition
	if testwait.Until(15*time.Second, func() bool {
		last = h.condition()
		return last != nil && last.Reason == string(reason)
	}) {
		return last
	}
	h.t.Fatalf("condition never reached %s; last: %+v", reason, last)
	return nil
}

func (h *harness) issue(node string) *testpki.Pair {
	h.t.Helper()
	p, err := h.ca.Issue(testpki.Serving{Node: node, IPs: []net.IP{net.ParseIP("127.0.0.1")}, NotBefore: time.Now().Add(-5 * time.Minute)})
	if err != nil {
		h.t.Fatal(err)
	}
	return p
}

func (h *harness) install(p *testpki.Pair) {
	h.t.Helper()
	if _, err := testpki.Install(h.dir, p); err != nil {
		h.t.Fatal(err)
	}
}

// healthy issues a certificate through csr, installs it and serves it: the
// state of a node whose serving certificate is fully in place.
func (h *harness) healthy(csr string) *testpki.Pair {
	h.t.Helper()
	p := h.issue("w1")
	h.issueCSR(csr, p)
	h.install(p)
	h.kubelet.serve(p)
	return p
}

// isSubsequence says whether want's elements appear in got, in order.
func isSubsequence(want, got []string) bool {
	i := 0
	for _, g := range got {
		if i < len(want) && g == want[i] {
			i++
		}
	}
	return i == len(want)
}

func labelledCSR(name string, created time.Time) *certv1.CertificateSigningRequest {
	return testpki.KubeletCSR(name, "w1", testpki.Labelled("w1"), testpki.Created(created))
}

func (h *harness) issueCSR(name string, p *testpki.Pair) {
	h.t.Helper()
	ctx := context.Background()
	c, err := h.cs.CertificatesV1().CertificateSigningRequests().Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		h.t.Fatal(err)
	}
	c.Status.Conditions = append(c.Status.Conditions, certv1.CertificateSigningRequestCondition{Type: certv1.CertificateApproved, Status: corev1.ConditionTrue, Reason: "Test"})
	c.Status.Certificate = p.CertPEM()
	if _, err := h.cs.CertificatesV1().CertificateSigningRequests().UpdateStatus(ctx, c, metav1.UpdateOptions{}); err != nil {
		h.t.Fatal(err)
	}
}

func (h *harness) createCSR(c *certv1.CertificateSigningRequest) {
	h.t.Helper()
	if _, err := h.cs.CertificatesV1().CertificateSigningRequests().Create(context.Background(), c, metav1.CreateOptions{}); err != nil {
		h.t.Fatal(err)
	}
}

func TestBootstrapThenRotation(t *testing.T) {
	h := newHarness(t, labelledCSR("csr-1", time.Now()),
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: metav1.NamespaceSystem, UID: "cluster-uid"}})
	ledgerFile := filepath.Join(t.TempDir(), "ledger.jsonl")
	l, err := ledger.New(ledger.Config{Sinks: []string{"file:" + ledgerFile}, Component: "agent", Actor: "w1", Version: "test"}, prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	h.run(agent.Config{Ledger: l})

	c := h.waitFor(verdict.CSRPending)
	if c.Status != corev1.ConditionTrue || !strings.Contains(c.Message, "csr-1") {
		t.Fatalf("bootstrap condition %+v", c)
	}
	h.poll("readiness after the first published check", h.ready.Ready)

	// Approval, issue, installation, serving: the node becomes ready.
	first := h.issue("w1")
	h.issueCSR("csr-1", first)
	h.install(first)
	h.kubelet.serve(first)
	c = h.waitFor(verdict.Ready)
	if c.Status != corev1.ConditionFalse || !strings.Contains(c.Message, "issued by CSR csr-1") {
		t.Fatalf("ready condition %+v", c)
	}
	// The metric follows the write that the test just saw land.
	h.poll("the ready metric at 1", func() bool {
		return value(t, h.reg, "certready_kubelet_serving_cert_ready", nil) == 1
	})
	// One series per reason: 1 for the published one only.
	if r, p := value(t, h.reg, "certready_condition_reason", map[string]string{"reason": string(verdict.Ready)}),
		value(t, h.reg, "certready_condition_reason", map[string]string{"reason": string(verdict.CSRPending)}); r != 1 || p != 0 {
		t.Errorf("certready_condition_reason: %s %v, %s %v; want 1 and 0", verdict.Ready, r, verdict.CSRPending, p)
	}
	readyAt := c.LastTransitionTime
	h.poll("the CA's NotAfter in certready_ca_not_after_timestamp_seconds", func() bool {
		return value(t, h.reg, "certready_ca_not_after_timestamp_seconds", nil) == float64(h.ca.Cert.NotAfter.Unix())
	})
	if n := value(t, h.reg, "certready_certificate_rotations_total", nil); n != 0 {
		t.Errorf("the first certificate proven counted as %v rotations", n)
	}
	if v := value(t, h.reg, "certready_kubelet_client_cert_not_after_timestamp_seconds", nil); v != 0 {
		t.Errorf("no client certificate, yet certready_kubelet_client_cert_not_after_timestamp_seconds = %v", v)
	}
	// The kubelet's client certificate appears (bootstrap done): its
	// expiry is a metric and a fact of the Ready message.
	client, err := h.ca.Issue(testpki.Serving{Node: "w1", NotAfter: time.Now().Add(90 * 24 * time.Hour).Truncate(time.Second)})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(h.dir, "kubelet-client-current.pem"), client.FilePEM(), 0o600); err != nil {
		t.Fatal(err)
	}
	h.poll("the client certificate's NotAfter in the metric and the facts", func() bool {
		facts, ok := h.facts()
		return value(t, h.reg, "certready_kubelet_client_cert_not_after_timestamp_seconds", nil) == float64(client.Cert.NotAfter.Unix()) &&
			ok && facts.ClientNotAfter.Equal(client.Cert.NotAfter)
	})

	// Rotation: the new file lands but the kubelet keeps serving the old one.
	second := h.issue("w1")
	h.createCSR(labelledCSR("csr-2", time.Now()))
	h.issueCSR("csr-2", second)
	h.install(second)
	c = h.waitFor(verdict.EndpointCertificateMismatch)
	if c.Status != corev1.ConditionTrue || !c.LastTransitionTime.After(readyAt.Time) && !c.LastTransitionTime.Equal(&readyAt) {
		t.Fatalf("mismatch condition %+v", c)
	}

	// The kubelet picks the new certificate up.
	h.kubelet.serve(second)
	h.queueNudge()
	c = h.waitFor(verdict.Ready)
	if !strings.Contains(c.Message, "csr-2") {
		t.Errorf("ready message %q does not name csr-2", c.Message)
	}
	// The rotation's evidence: one Node event with both full fingerprints
	// and NotAfter, and the counter.
	var rotated []string
	h.poll("a CertificateRotated event", func() bool {
		evs, err := h.cs.CoreV1().Events(metav1.NamespaceDefault).List(context.Background(), metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		rotated = nil
		for _, e := range evs.Items {
			if e.Reason == "CertificateRotated" && e.InvolvedObject.Name == "w1" && e.Type == corev1.EventTypeNormal {
				rotated = append(rotated, e.Message)
			}
		}
		return len(rotated) > 0
	})
	for _, want := range []string{fingerprint.Of(first.Cert).String(), fingerprint.Of(second.Cert).String(), stamp.Format(second.Cert.NotAfter), "csr-2"} {
		if len(rotated) != 1 || !strings.Contains(rotated[0], want) {
			t.Errorf("rotation events %q: want one naming %s", rotated, want)
		}
	}
	if n := value(t, h.reg, "certready_certificate_rotations_total", nil); n != 1 {
		t.Errorf("certready_certificate_rotations_total = %v, want 1", n)
	}

	// The ledger holds each change of the condition, in order, and the
	// rotation with both fingerprints and NotAfter.
	var recs []map[string]any
	h.poll("the rotation in the ledger", func() bool {
		recs = ledgerRecords(t, ledgerFile)
		return len(recs) > 0 && recs[len(recs)-1]["action"] == string(ledger.Rotated)
	})
	var verdicts []string
	for _, r := range recs {
		if r["cluster"] != "cluster-uid" || r["node"] != "w1" || r["component"] != "agent" {
			t.Errorf("ledger record %v: want cluster cluster-uid, node w1, component agent", r)
		}
		if r["action"] == string(ledger.VerdictChanged) {
			verdicts = append(verdicts, r["status"].(string)+"/"+r["rule"].(string))
		}
	}
	// Each change the agent published, in order (a check that lands between
	// the test's install and serve steps publishes one more, which the
	// ledger must then hold too); the scenario's own states among them.
	h.mu.Lock()
	var published []string
	for _, c := range h.patches {
		if s := string(c.Status) + "/" + c.Reason; len(published) == 0 || published[len(published)-1] != s {
			published = append(published, s)
		}
	}
	h.mu.Unlock()
	if !slices.Equal(verdicts, published) {
		t.Errorf("ledger verdict changes %v, want the published ones %v", verdicts, published)
	}
	want := []string{"True/" + string(verdict.CSRPending), "False/" + string(verdict.Ready),
		"True/" + string(verdict.EndpointCertificateMismatch), "False/" + string(verdict.Ready)}
	if !isSubsequence(want, verdicts) || verdicts[0] != want[0] || verdicts[len(verdicts)-1] != want[len(want)-1] {
		t.Errorf("ledger verdict changes %v: want them to start with %s, end with %s and pass through %v", verdicts, want[0], want[len(want)-1], want)
	}
	rot := recs[len(recs)-1]
	if rot["previous_certificate_sha256"] != fingerprint.Of(first.Cert).String() || rot["certificate_sha256"] != fingerprint.Of(second.Cert).String() ||
		rot["not_after"] != second.Cert.NotAfter.UTC().Format(time.RFC3339) || rot["csr"] != "csr-2" {
		t.Errorf("rotation record %v", rot)
	}
}

func ledgerRecords(t *testing.T, path string) []map[string]any {
	t.Helper()
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	var out []map[string]any
	for _, line := range bytes.Split(bytes.TrimSpace(b), []byte("\n")) {
		if len(line) == 0 {
			continue
		}
		var m map[string]any
		if err := json.Unmarshal(line, &m); err != nil {
			return nil // a line being written: read again
		}
		out = append(out, m)
	}
	return out
}

// poll waits for cond, or fails at the deadline.
func (h *harness) poll(what string, cond func() bool) {
	h.t.Helper()
	if !testwait.Until(15*time.Second, cond) {
		h.t.Fatalf("timed out waiting for %s", what)
	}
}

// queueNudge makes a file event: the agent re-checks on pki folder changes.
func (h *harness) queueNudge() {
	h.t.Helper()
	if err := os.WriteFile(filepath.Join(h.dir, "kubelet-server-nudge.tmp"), nil, 0o600); err != nil {
		h.t.Fatal(err)
	}
}

func TestNoFalseBeforeACompleteCheck(t *testing.T) {
	h := newHarness(t, labelledCSR("csr-1", time.Now()))
	h.healthy("csr-1")
	h.cs.PrependReactor("patch", "nodes", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if strings.Contains(string(a.(k8stesting.PatchAction).GetPatch()), `"status":"False"`) && h.kubelet.handshakes.Load() == 0 {
			t.Errorf("False published before the kubelet endpoint was probed")
		}
		return false, nil, nil
	})
	h.run(agent.Config{})
	h.waitFor(verdict.Ready)
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.patches) != 1 {
		t.Errorf("%d patches, want exactly one (no intermediate states): %+v", len(h.patches), h.patches)
	}
}

// TestSettledRunsOnceAfterTheFirstCheck: the process's start-up hook (it
// returns garbage to the OS) runs when the first check completed, never
// before the readiness it waits for, and not again on later checks.
func TestSettledRunsOnceAfterTheFirstCheck(t *testing.T) {
	h := newHarness(t, labelledCSR("csr-1", time.Now()))
	h.healthy("csr-1")
	var calls atomic.Int32
	var readyAtFirstCall atomic.Bool
	h.run(agent.Config{Settled: func() {
		if calls.Add(1) == 1 {
			readyAtFirstCall.Store(h.ready.Ready())
		}
	}})
	h.waitFor(verdict.Ready)
	// More checks: a Node update queues one each.
	for i := range 3 {
		n := h.node()
		n.Labels = map[string]string{"round": strconv.Itoa(i)}
		if _, err := h.cs.CoreV1().Nodes().Update(context.Background(), n, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	checks := func() uint64 {
		s := testmetrics.Series(t, h.reg, "certready_check_duration_seconds", map[string]string{"check": "file"})
		if len(s) == 0 {
			return 0
		}
		return s[0].GetHistogram().GetSampleCount()
	}
	if !testwait.Until(10*time.Second, func() bool { return checks() >= 4 }) {
		t.Fatalf("the Node updates were not checked: %d checks", checks())
	}
	if got := calls.Load(); got != 1 {
		t.Errorf("Settled ran %d times, want once", got)
	}
	if !readyAtFirstCall.Load() {
		t.Error("Settled ran before the first check completed (readiness not set)")
	}
}

// Shutting down cuts a probe short; what it then says (unreachable) is
// about the agent, not the kubelet, and must not be published.
func TestShutdownPublishesNothing(t *testing.T) {
	h := newHarness(t, labelledCSR("csr-1", time.Now()))
	h.healthy("csr-1")
	stop := h.run(agent.Config{ProbeTimeout: time.Minute})
	h.waitFor(verdict.Ready)
	h.kubelet.stall()
	accepted := h.kubelet.accepted.Load()
	h.queueNudge()
	h.poll("a check stuck in its probe", func() bool { return h.kubelet.accepted.Load() > accepted })
	stop()
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.patches) != 1 {
		t.Errorf("%d patches, want only the ready one: %+v", len(h.patches), h.patches)
	}
}

// A check stuck on the API server (a list that never answers) must not
// leave False standing: the watchdog publishes Unknown/CheckStalled naming
// the stuck step, and the first check completed after it takes over (the
// one that was stuck longer than --check-stalled-after is thrown away).
func TestStalledChecksAreNotLeftFalse(t *testing.T) {
	unlabelled := func(name string) *certv1.CertificateSigningRequest {
		c := labelledCSR(name, time.Now())
		c.Labels = nil // found only by the signer-wide fallback list
		return c
	}
	h := newHarness(t, unlabelled("csr-1"))
	h.healthy("csr-1")
	release := make(chan struct{})
	stalling := &stallingCSRLists{Clientset: h.cs, release: release}
	h.client = stalling
	ledgerFile := filepath.Join(t.TempDir(), "ledger.jsonl")
	l, err := ledger.New(ledger.Config{Sinks: []string{"file:" + ledgerFile}, Component: "agent", Actor: "w1", Version: "test"}, prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	h.run(agent.Config{Resync: 50 * time.Millisecond, ProbeTimeout: 500 * time.Millisecond, CheckStalledAfter: 2 * time.Second,
		FallbackMinBackoff: 10 * time.Millisecond, FallbackMaxBackoff: 10 * time.Millisecond, Ledger: l})
	// Cleanups run last first: the list is released before the agent is
	// stopped, whatever failed.
	unblock := sync.OnceFunc(func() { stalling.blocked.Store(false); close(release) })
	t.Cleanup(unblock)
	h.waitFor(verdict.Ready)

	// Rotation to a certificate only the fallback list can explain, while
	// the API server stops answering that list.
	stalling.blocked.Store(true)
	next := h.issue("w1")
	h.createCSR(unlabelled("csr-2"))
	h.issueCSR("csr-2", next)
	h.kubelet.serve(next)
	// Swapped without the kubelet's gap, so that the check that gets stuck
	// is one that read the new certificate (a check in the gap would say
	// CertificateMissing, stuck or not).
	pair := filepath.Join(h.dir, "kubelet-server-next.pem")
	if err := os.WriteFile(pair, next.FilePEM(), 0o600); err != nil {
		t.Fatal(err)
	}
	current := filepath.Join(h.dir, "kubelet-server-current.pem")
	if err := os.Symlink(pair, current+".next"); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(current+".next", current); err != nil {
		t.Fatal(err)
	}
	c := h.waitFor(verdict.CheckStalled)
	if c.Status != corev1.ConditionUnknown || !strings.Contains(c.Message, "looking up CSRs") {
		t.Fatalf("stalled condition %+v: want Unknown naming the stuck step", c)
	}
	if v := value(t, h.reg, "certready_check_stalled", nil); v != 1 {
		t.Errorf("certready_check_stalled = %v while stalled, want 1", v)
	}
	// The watchdog's Unknown is a verdict change like any other: in the
	// ledger, with no CSR (no check completed).
	h.poll("the stalled verdict in the ledger", func() bool {
		for _, r := range ledgerRecords(t, ledgerFile) {
			if r["action"] == string(ledger.VerdictChanged) && r["status"] == "Unknown" && r["rule"] == string(verdict.CheckStalled) {
				return r["csr"] == nil
			}
		}
		return false
	})
	// Meanwhile the certificate goes away. The stuck check read the file
	// before it stalled and would say ready: it must not be published.
	h.mu.Lock()
	stalledAt := len(h.patches)
	h.mu.Unlock()
	if err := os.Remove(filepath.Join(h.dir, "kubelet-server-current.pem")); err != nil {
		t.Fatal(err)
	}
	unblock()
	h.waitFor(verdict.CertificateMissing)
	h.mu.Lock()
	for _, p := range h.patches[stalledAt:] {
		if p.Status == corev1.ConditionFalse {
			t.Errorf("False published from the check that was stuck past --check-stalled-after: %+v", p)
		}
	}
	h.mu.Unlock()
	h.poll("certready_check_stalled back at 0", func() bool { return value(t, h.reg, "certready_check_stalled", nil) == 0 })
}

// stallingCSRLists is an API that, while blocked, does not answer the
// signer-wide CSR list (the one without a label selector) until release.
// The fake clientset serialises every call, so the stall sits in front of
// it: the rest of the API keeps answering. (It embeds the fake itself, not
// kubernetes.Interface, so that informers still see that the fake cannot
// serve watch lists.)
type stallingCSRLists struct {
	*fake.Clientset
	blocked atomic.Bool
	release chan struct{}
}

func (s *stallingCSRLists) CertificatesV1() certv1client.CertificatesV1Interface {
	return stallingCertificates{s.Clientset.CertificatesV1(), s}
}

type stallingCertificates struct {
	certv1client.CertificatesV1Interface
	s *stallingCSRLists
}

func (c stallingCertificates) CertificateSigningRequests() certv1client.CertificateSigningRequestInterface {
	return stallingCSRs{c.CertificatesV1Interface.CertificateSigningRequests(), c.s}
}

type stallingCSRs struct {
	certv1client.CertificateSigningRequestInterface
	s *stallingCSRLists
}

func (c stallingCSRs) List(ctx context.Context, opts metav1.ListOptions) (*certv1.CertificateSigningRequestList, error) {
	if c.s.blocked.Load() && opts.LabelSelector == "" {
		<-c.s.release
	}
	return c.CertificateSigningRequestInterface.List(ctx, opts)
}

// Validity is judged by the API server's clock, read from the Date of its
// responses: a node clock ten minutes behind is reported, not trusted.
func TestClockSkewAgainstTheAPIServersDate(t *testing.T) {
	ahead := 10 * time.Minute // the API server's clock, ahead of the node's
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Date", time.Now().Add(ahead).UTC().Format(http.TimeFormat))
	}))
	defer srv.Close()
	clock := apiclock.New()
	resp, err := (&http.Client{Transport: clock.Wrap(http.DefaultTransport)}).Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()

	h := newHarness(t, labelledCSR("csr-1", time.Now()))
	h.healthy("csr-1")
	h.run(agent.Config{Clock: clock})
	c := h.waitFor(verdict.ClockSkew)
	if c.Status != corev1.ConditionTrue || !strings.Contains(c.Message, "behind the API server's") {
		t.Fatalf("condition %+v", c)
	}
	if v := value(t, h.reg, "certready_clock_skew_seconds", nil); v > -590 || v < -610 {
		t.Errorf("certready_clock_skew_seconds = %v, want about -600", v)
	}
}

// Anyone who may create CSRs can put this node's label on one: only
// kubelet-serving CSRs are asked for (label and signer selectors, which
// the fake clientset records but does not apply), and anything else that
// arrives anyway is counted and ignored.
func TestForeignCSRsAreNotCachedOrChecked(t *testing.T) {
	h := newHarness(t, labelledCSR("csr-1", time.Now()))
	h.healthy("csr-1")
	var selectors []string
	var mu sync.Mutex
	h.cs.PrependReactor("list", "certificatesigningrequests", func(a k8stesting.Action) (bool, runtime.Object, error) {
		r := a.(k8stesting.ListAction).GetListRestrictions()
		mu.Lock()
		selectors = append(selectors, r.Labels.String()+" "+r.Fields.String())
		mu.Unlock()
		return false, nil, nil
	})
	h.run(agent.Config{})
	h.waitFor(verdict.Ready)
	mu.Lock()
	got := strings.Join(selectors, "; ")
	mu.Unlock()
	if !strings.Contains(got, names.NodeLabel+"=w1 spec.signerName="+names.SignerName) {
		t.Errorf("the CSR informer listed with %q, want the node label and the kubelet-serving signer", got)
	}
	checks := value(t, h.reg, "certready_watch_events_total", map[string]string{"resource": "csrs"})
	for i := 0; i < 20; i++ {
		spoofed := labelledCSR(fmt.Sprintf("spoofed-%d", i), time.Now())
		spoofed.Spec.SignerName = "example.com/anything"
		h.createCSR(spoofed)
	}
	h.poll("20 foreign CSRs counted", func() bool { return value(t, h.reg, "certready_foreign_csrs_total", nil) == 20 })
	if now := value(t, h.reg, "certready_watch_events_total", map[string]string{"resource": "csrs"}); now != checks {
		t.Errorf("foreign CSRs triggered checks: csrs events %v -> %v", checks, now)
	}
}

func TestRotationGapIsNotPublished(t *testing.T) {
	for _, tc := range []struct {
		name string
		// newCSR, when set, is the kubelet's new request as the agent's
		// cache holds it during the gap: created, its issue not yet seen.
		newCSR *certv1.CertificateSigningRequest
	}{
		{name: "no new request in the cache"},
		{name: "the new request still pending in the cache", newCSR: labelledCSR("csr-2", time.Now().Add(time.Second))},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, labelledCSR("csr-1", time.Now()))
			h.healthy("csr-1")
			h.run(agent.Config{Settle: time.Second})
			h.waitFor(verdict.Ready)
			skipped := value(t, h.reg, "certready_condition_writes_total", map[string]string{"outcome": "Skipped"})
			if tc.newCSR != nil {
				// A check that ran after the request's creation has it in
				// the cache the gap's checks read.
				h.createCSR(tc.newCSR)
				h.queueNudge()
				h.poll("a check that saw the new request", func() bool {
					return value(t, h.reg, "certready_condition_writes_total", map[string]string{"outcome": "Skipped"}) > skipped
				})
				skipped = value(t, h.reg, "certready_condition_writes_total", map[string]string{"outcome": "Skipped"})
			}

			// The kubelet's own sequence: file removed, then a new symlink
			// renamed onto it. Here the gap is stretched to a tenth of the
			// settle period.
			current := filepath.Join(h.dir, "kubelet-server-current.pem")
			target, err := os.Readlink(current)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.Remove(current); err != nil {
				t.Fatal(err)
			}
			h.queueNudge()
			time.Sleep(100 * time.Millisecond) // the gap being simulated, not a wait for a condition
			if err := os.Symlink(target, current); err != nil {
				t.Fatal(err)
			}
			h.queueNudge()
			// A check after the gap has published (the unchanged Ready: Skipped).
			h.poll("a re-check after the gap", func() bool {
				return value(t, h.reg, "certready_condition_writes_total", map[string]string{"outcome": "Skipped"}) > skipped
			})
			h.mu.Lock()
			defer h.mu.Unlock()
			for _, c := range h.patches {
				if c.Status != corev1.ConditionFalse {
					t.Fatalf("the rotation gap was published: %+v", c)
				}
			}
		})
	}
}

func TestPersistentMissingFileIsPublishedAfterSettle(t *testing.T) {
	h := newHarness(t)
	h.run(agent.Config{})
	c := h.waitFor(verdict.CertificateMissing)
	if !strings.Contains(c.Message, "no kubelet-serving CSR from this node exists") {
		t.Errorf("message %q", c.Message)
	}
}

func TestGarbageCollectedCSRKeepsAVerifiedNodeReady(t *testing.T) {
	h := newHarness(t, labelledCSR("csr-1", time.Now()))
	h.healthy("csr-1")
	h.run(agent.Config{})
	h.waitFor(verdict.Ready)
	if err := h.cs.CertificatesV1().CertificateSigningRequests().Delete(context.Background(), "csr-1", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	var c *corev1.NodeCondition
	if !testwait.Until(15*time.Second, func() bool {
		c = h.condition()
		return strings.Contains(c.Message, "since garbage-collected")
	}) {
		t.Fatalf("message never named the remembered proof: %+v", c)
	}
	if c.Status != corev1.ConditionFalse {
		t.Fatalf("condition %+v", c)
	}
}

func TestUnlabelledCSRIsFoundByTheBoundedFallback(t *testing.T) {
	unlabelled := labelledCSR("csr-x", time.Now())
	unlabelled.Labels = nil
	h := newHarness(t, unlabelled)
	h.healthy("csr-x")
	h.run(agent.Config{})
	c := h.waitFor(verdict.Ready)
	if !strings.Contains(c.Message, "csr-x") {
		t.Errorf("message %q does not name the CSR found by the fallback", c.Message)
	}
	// Every CSR read carries the signer's field selector, and all but the
	// fallback the node's label: RBAC cannot narrow the agent's reads, so
	// they are as narrow as the selectors make them.
	labelled, fallback := 0, 0
	for _, a := range h.cs.Actions() {
		if a.GetResource().Resource != "certificatesigningrequests" {
			continue
		}
		var fs, ls string
		switch r := a.(type) {
		case k8stesting.ListActionImpl:
			fs, ls = r.ListRestrictions.Fields.String(), r.ListRestrictions.Labels.String()
		case k8stesting.WatchActionImpl:
			fs, ls = r.WatchRestrictions.Fields.String(), r.WatchRestrictions.Labels.String()
		default:
			continue // the harness's own gets and writes; the agent may not get (RBAC)
		}
		if fs != "spec.signerName=kubernetes.io/kubelet-serving" {
			t.Errorf("%s of CSRs with field selector %q, want the signer's", a.GetVerb(), fs)
		}
		switch ls {
		case names.NodeLabel + "=w1":
			labelled++
		case "":
			fallback++
		default:
			t.Errorf("%s of CSRs with label selector %q", a.GetVerb(), ls)
		}
	}
	if labelled == 0 || fallback == 0 {
		t.Errorf("%d labelled and %d signer-wide CSR reads, want both", labelled, fallback)
	}
}

func TestConfigErrorsNameTheFlag(t *testing.T) {
	cases := map[string]agent.Config{
		"--node-name":    {CAFile: "/ca"},
		"--ca-file":      {NodeName: "w1"},
		"--kubelet-port": {NodeName: "w1", CAFile: "/ca", KubeletPort: 70000},
		"--expiry-critical=48h0m0s is longer than --expiry-warning=24h0m0s": {NodeName: "w1", CAFile: "/ca", ExpiryWarning: 24 * time.Hour, ExpiryCritical: 48 * time.Hour},
		"--ca-expiry-warning": {NodeName: "w1", CAFile: "/ca", CAExpiryWarning: -time.Hour},
	}
	for flag, cfg := range cases {
		_, err := agent.New(cfg, nodeapitest.FromClientset(fake.NewClientset()), prometheus.NewRegistry(), nil)
		if err == nil || !strings.Contains(err.Error(), flag) {
			t.Errorf("%s: err = %v", flag, err)
		}
	}
}

// The expiry windows are published for the alerts to compare with: the
// defaults, or what the flags say.
func TestExpiryWindowsArePublished(t *testing.T) {
	for _, tc := range []struct {
		cfg                          agent.Config
		warning, critical, caWarning time.Duration
	}{
		{agent.Config{}, 7 * 24 * time.Hour, 24 * time.Hour, 30 * 24 * time.Hour},
		{agent.Config{ExpiryWarning: 14 * 24 * time.Hour, ExpiryCritical: 48 * time.Hour, CAExpiryWarning: 90 * 24 * time.Hour}, 14 * 24 * time.Hour, 48 * time.Hour, 90 * 24 * time.Hour},
	} {
		reg := prometheus.NewRegistry()
		cfg := tc.cfg
		cfg.NodeName, cfg.CAFile = "w1", "/ca"
		if _, err := agent.New(cfg, nodeapitest.FromClientset(fake.NewClientset()), reg, nil); err != nil {
			t.Fatal(err)
		}
		for window, want := range map[string]time.Duration{"warning": tc.warning, "critical": tc.critical, "ca-warning": tc.caWarning} {
			if got := value(t, reg, "certready_expiry_window_seconds", map[string]string{"window": window}); got != want.Seconds() {
				t.Errorf("%+v: window %s = %v s, want %v", tc.cfg, window, got, want.Seconds())
			}
		}
	}
}

// value reads one series from reg: the first metric named name whose
// labels include want.
func value(t *testing.T, reg *prometheus.Registry, name string, want map[string]string) float64 {
	t.Helper()
	if s := testmetrics.Series(t, reg, name, want); len(s) > 0 {
		return testmetrics.Value(s[0])
	}
	return 0
}

// An operator deletes the Node (kubectl delete node) and the kubelet
// registers it again under the same name: the new object has no condition,
// and the agent must publish it again now, not at its next heartbeat.
func TestReRegisteredNodeGetsItsConditionBack(t *testing.T) {
	h := newHarness(t, labelledCSR("csr-1", time.Now()))
	h.healthy("csr-1")
	h.run(agent.Config{Heartbeat: time.Hour})
	h.waitFor(verdict.Ready)

	ctx := context.Background()
	old, err := h.cs.CoreV1().Nodes().Get(ctx, "w1", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := h.cs.CoreV1().Nodes().Delete(ctx, "w1", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	again := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "w1", UID: "uid-2"}, Status: old.Status}
	again.Status.Conditions = nil
	if _, err := h.cs.CoreV1().Nodes().Create(ctx, again, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	c := h.waitFor(verdict.Ready)
	if c.Status != corev1.ConditionFalse {
		t.Fatalf("condition on the re-registered node: %+v", c)
	}
}

// overdue issues through csr, installs and serves a certificate that is 10
// hours into an 11-hour life at now: past the kubelet's latest rotation
// point, still valid.
func (h *harness) overdue(csr string, now time.Time) *testpki.Pair {
	h.t.Helper()
	p, err := h.ca.Issue(testpki.Serving{Node: "w1", IPs: []net.IP{net.ParseIP("127.0.0.1")}, NotBefore: now.Add(-10 * time.Hour), NotAfter: now.Add(20 * time.Minute)})
	if err != nil {
		h.t.Fatal(err)
	}
	h.issueCSR(csr, p)
	h.install(p)
	h.kubelet.serve(p)
	return p
}

// A renewal that is stuck while the old certificate still works (past the
// kubelet's latest rotation point, the newest request pending, then denied)
// is a Warning event per cause and certready_renewal_stuck, never a
// condition that is not ready; the renewed certificate clears it.
func TestStuckRenewalWarnsButKeepsTheNodeReady(t *testing.T) {
	now := time.Now()
	h := newHarness(t, labelledCSR("csr-old", now.Add(-10*time.Hour)), labelledCSR("csr-new", now.Add(-30*time.Minute)))
	old := h.overdue("csr-old", now)
	ledgerFile := filepath.Join(t.TempDir(), "ledger.jsonl")
	l, err := ledger.New(ledger.Config{Sinks: []string{"file:" + ledgerFile}, Component: "agent", Actor: "w1", Version: "test"}, prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	h.run(agent.Config{Ledger: l})
	stuckRecords := func() []map[string]any {
		var out []map[string]any
		for _, r := range ledgerRecords(t, ledgerFile) {
			if r["action"] == string(ledger.RenewalStuck) {
				out = append(out, r)
			}
		}
		return out
	}

	stuck := func(reason string) func() bool {
		return func() bool {
			return value(t, h.reg, "certready_renewal_stuck", map[string]string{"reason": reason}) == 1
		}
	}
	warnings := func() []string {
		evs, err := h.cs.CoreV1().Events(metav1.NamespaceDefault).List(context.Background(), metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, e := range evs.Items {
			if e.Reason == "RenewalStuck" && e.InvolvedObject.Name == "w1" && e.Type == corev1.EventTypeWarning {
				out = append(out, e.Message)
			}
		}
		return out
	}
	c := h.waitFor(verdict.Ready)
	if c.Status != corev1.ConditionFalse {
		t.Fatalf("condition %+v, want ready", c)
	}
	h.poll("certready_renewal_stuck{reason=RenewalPending} at 1", stuck("RenewalPending"))
	h.poll("a RenewalStuck event", func() bool { return len(warnings()) == 1 })
	if w := warnings()[0]; !strings.Contains(w, "RenewalPending") || !strings.Contains(w, "csr-new") || !strings.Contains(w, fingerprint.Of(old.Cert).String()) {
		t.Errorf("event %q: want the reason, the pending CSR and the full fingerprint", w)
	}

	// The ledger keeps what the Event loses after an hour.
	h.poll("a renewal-stuck ledger record", func() bool { return len(stuckRecords()) == 1 })
	if r := stuckRecords()[0]; r["rule"] != "RenewalPending" || r["csr"] != "csr-new" || r["node"] != "w1" ||
		r["certificate_sha256"] != fingerprint.Of(old.Cert).String() || r["not_after"] != old.Cert.NotAfter.UTC().Format(time.RFC3339) {
		t.Errorf("renewal-stuck record %v: want rule RenewalPending, csr csr-new, node w1, the installed certificate's fingerprint and NotAfter", r)
	}

	// Denied: another cause, another event; the node stays ready.
	ctx := context.Background()
	csr, err := h.cs.CertificatesV1().CertificateSigningRequests().Get(ctx, "csr-new", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	csr.Status.Conditions = append(csr.Status.Conditions, certv1.CertificateSigningRequestCondition{Type: certv1.CertificateDenied, Status: corev1.ConditionTrue, Message: "not yours"})
	if _, err := h.cs.CertificatesV1().CertificateSigningRequests().UpdateStatus(ctx, csr, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	h.poll("certready_renewal_stuck{reason=RenewalDenied} at 1", stuck("RenewalDenied"))
	h.poll("a second RenewalStuck event", func() bool { return len(warnings()) == 2 })
	if v := value(t, h.reg, "certready_renewal_stuck", map[string]string{"reason": "RenewalPending"}); v != 0 {
		t.Errorf("RenewalPending still %v", v)
	}
	if c := h.condition(); c.Reason != string(verdict.Ready) {
		t.Errorf("a stuck renewal changed the condition: %+v", c)
	}

	// The renewal goes through: nothing is stuck any more. (Installed
	// before its CSR appears, so that no moment of it is a stuck renewal
	// however slowly this test runs.)
	renewed := h.issue("w1")
	h.install(renewed)
	h.kubelet.serve(renewed)
	h.createCSR(testpki.KubeletCSR("csr-renewed", "w1", testpki.Labelled("w1"), testpki.Created(time.Now()), testpki.Issued(renewed.CertPEM())))
	h.poll("ready on the renewed certificate", func() bool {
		c := h.condition()
		return c != nil && c.Reason == string(verdict.Ready) && strings.Contains(c.Message, "csr-renewed")
	})
	h.poll("certready_renewal_stuck all 0 after the renewal", func() bool {
		return !stuck("RenewalDenied")() && !stuck("RenewalNotRequested")() && !stuck("RenewalPending")()
	})
	if n := len(warnings()); n != 2 {
		t.Errorf("%d RenewalStuck events, want 2", n)
	}
	recs := stuckRecords()
	if len(recs) != 2 || recs[1]["rule"] != "RenewalDenied" || recs[0]["event_id"] == recs[1]["event_id"] {
		t.Errorf("renewal-stuck records %v: want RenewalPending then RenewalDenied, with distinct event_ids", recs)
	}
}

// The approver that labels requests may be what is down: a renewal request
// without the label is found by the backed-off list by signer, and the
// renewal is pending, not unrequested.
func TestStuckRenewalSeesARequestNoApproverLabelled(t *testing.T) {
	now := time.Now()
	h := newHarness(t, labelledCSR("csr-old", now.Add(-10*time.Hour)), testpki.KubeletCSR("csr-unlabelled", "w1", testpki.Created(now.Add(-30*time.Minute))))
	h.overdue("csr-old", now)
	h.run(agent.Config{})
	h.waitFor(verdict.Ready)
	h.poll("certready_renewal_stuck{reason=RenewalPending} at 1", func() bool {
		return value(t, h.reg, "certready_renewal_stuck", map[string]string{"reason": "RenewalPending"}) == 1
	})
	if v := value(t, h.reg, "certready_renewal_stuck", map[string]string{"reason": "RenewalNotRequested"}); v != 0 {
		t.Errorf("RenewalNotRequested = %v: the unlabelled request was missed", v)
	}
}

type podLogAPI struct {
	nodeapi.API
	answer func() error
}

func (p podLogAPI) PodLog(context.Context, string, string, string) error { return p.answer() }

// With --apiserver-proof=required the condition is False only once the
// API server answered the agent's log request; when its error says it
// cannot reach the kubelet, the node is not ready for that reason,
// whatever the node itself serves.
func TestTheAPIServersPathIsPartOfTheProof(t *testing.T) {
	proofCfg := agent.Config{APIServerProof: apipath.Required, PodNamespace: "certready-system", PodName: "certready-agent-x1", Container: "agent"}

	h := newHarness(t, labelledCSR("csr-1", time.Now()))
	h.healthy("csr-1")
	var asked atomic.Int32
	h.podLog = func() error { asked.Add(1); return nil }
	h.run(proofCfg)
	c := h.waitFor(verdict.Ready)
	if asked.Load() == 0 || !strings.Contains(c.Message, "the API server reached the kubelet") {
		t.Errorf("ready after %d log requests: %q", asked.Load(), c.Message)
	}
	if v := value(t, h.reg, "certready_apiserver_path_proofs_total", map[string]string{"outcome": "proven"}); v < 1 {
		t.Errorf("proven proofs counted %v", v)
	}

	h2 := newHarness(t, labelledCSR("csr-1", time.Now()))
	h2.healthy("csr-1")
	h2.podLog = func() error {
		return apierrors.NewInternalError(errors.New(`Get "https://127.0.0.1:10250/containerLogs/certready-system/certready-agent-x1/agent?limitBytes=1": dial tcp 127.0.0.1:10250: i/o timeout`))
	}
	h2.run(proofCfg)
	c = h2.waitFor(verdict.APIServerCannotReachKubelet)
	if c.Status != corev1.ConditionTrue || !strings.Contains(c.Message, "i/o timeout") {
		t.Errorf("condition %+v, want True naming the API server's error", c)
	}
	h2.mu.Lock()
	defer h2.mu.Unlock()
	for _, p := range h2.patches {
		if p.Status == corev1.ConditionFalse {
			t.Errorf("published False before the API server's path was proven: %+v", p)
		}
	}
}

// A kubelet whose configuration turns serving certificate bootstrap off
// serves a self-signed certificate and never asks for another: the first
// verdict the agent publishes names that, not a missing file to wait for.
// When the API server still reads the pod's log over that certificate, it
// verifies no kubelet: a finding about the cluster (metric, Node event),
// while the node stays not ready.
func TestKubeletConfigAndAnAPIServerThatVerifiesNothing(t *testing.T) {
	rogueCA, err := testpki.NewCA("kubelet-self-signed")
	if err != nil {
		t.Fatal(err)
	}
	configFile := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(configFile, []byte("apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\nserverTLSBootstrap: false\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg := agent.Config{APIServerProof: apipath.Required, PodNamespace: "certready-system", PodName: "certready-agent-x1", Container: "agent",
		KubeletConfig: configFile}
	events := func(h *harness, reason string) []string {
		evs, err := h.cs.CoreV1().Events(metav1.NamespaceDefault).List(context.Background(), metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, e := range evs.Items {
			if e.Reason == reason && e.InvolvedObject.Name == "w1" {
				out = append(out, e.Message)
			}
		}
		return out
	}
	for _, tc := range []struct {
		name        string
		answer      error
		wantFinding float64
	}{
		{name: "the API server verifies nothing", wantFinding: 1},
		{name: "the API server refuses the self-signed certificate", answer: apierrors.NewInternalError(errors.New(
			`Get "https://127.0.0.1:10250/containerLogs/certready-system/certready-agent-x1/agent?limitBytes=1": tls: failed to verify certificate: x509: certificate signed by unknown authority`))},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t)
			self, err := rogueCA.Issue(testpki.Serving{Node: "w1", IPs: []net.IP{net.ParseIP("127.0.0.1")}})
			if err != nil {
				t.Fatal(err)
			}
			h.kubelet.serve(self)
			var asked atomic.Int32
			h.podLog = func() error { asked.Add(1); return tc.answer }
			h.run(cfg)
			// The file is missing, which settles first (the configuration
			// may be stale), and is then published with its cause.
			c := h.waitFor(verdict.KubeletServingBootstrapOff)
			if c.Status != corev1.ConditionTrue || !strings.Contains(c.Message, configFile) {
				t.Errorf("condition %+v: want True naming %s", c, configFile)
			}
			if !testwait.Until(10*time.Second, func() bool {
				return asked.Load() > 0 && value(t, h.reg, "certready_kubelet_certificate_rotation", map[string]string{"certificate": "serving"}) == 0 &&
					len(testmetrics.Series(t, h.reg, "certready_kubelet_certificate_rotation", map[string]string{"certificate": "serving"})) == 1
			}) {
				t.Fatalf("the agent asked the API server %d times; rotation series %v", asked.Load(),
					testmetrics.Series(t, h.reg, "certready_kubelet_certificate_rotation", nil))
			}
			if tc.wantFinding == 1 && !testwait.Until(10*time.Second, func() bool {
				return len(events(h, verdict.FindingAPIServerVerifiesNoKubelet)) > 0 && value(t, h.reg, "certready_apiserver_verifies_no_kubelet", nil) == 1
			}) {
				t.Fatalf("no finding: events %q, metric %v", events(h, verdict.FindingAPIServerVerifiesNoKubelet), value(t, h.reg, "certready_apiserver_verifies_no_kubelet", nil))
			}
			if got := value(t, h.reg, "certready_apiserver_verifies_no_kubelet", nil); got != tc.wantFinding {
				t.Errorf("certready_apiserver_verifies_no_kubelet = %v, want %v", got, tc.wantFinding)
			}
			if tc.wantFinding == 0 && len(events(h, verdict.FindingAPIServerVerifiesNoKubelet)) > 0 {
				t.Errorf("a finding recorded though the API server refused the certificate: %q", events(h, verdict.FindingAPIServerVerifiesNoKubelet))
			}
			if rot := events(h, "KubeletClientRotationOff"); len(rot) != 1 || !strings.Contains(rot[0], configFile) {
				t.Errorf("client rotation events %q: want one naming %s", rot, configFile)
			}
			h.mu.Lock()
			defer h.mu.Unlock()
			for _, p := range h.patches {
				if p.Status == corev1.ConditionFalse || (p.Status == corev1.ConditionTrue && p.Reason != string(verdict.KubeletServingBootstrapOff)) {
					t.Errorf("published %s/%s: the configuration is the cause from the first verdict", p.Status, p.Reason)
				}
			}
		})
	}
}

// A Node whose reported InternalIP drifted to where no kubelet listens:
// with --inventory the agent dials the address the ConfigMap records and
// names the drift (message, one Node event, the metric); a new document is
// a new check, and dialling the Node's address then finds nothing.
func TestTheInventorysAddressIsDialledAndTheDriftNamed(t *testing.T) {
	inv := func(ip string) *corev1.ConfigMap {
		return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "certready-inventory", Namespace: "certready-system"},
			Data: map[string]string{"inventory.yaml": "nodes: {w1: {ips: [" + ip + "]}}"}}
	}
	h := newHarness(t, labelledCSR("csr-1", time.Now()), inv("127.0.0.1"))
	node, err := h.cs.CoreV1().Nodes().Get(context.Background(), "w1", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	node.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "127.0.0.5"}, {Type: corev1.NodeHostName, Address: "w1"}}
	if _, err := h.cs.CoreV1().Nodes().UpdateStatus(context.Background(), node, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	p, err := h.ca.Issue(testpki.Serving{Node: "w1", IPs: []net.IP{net.ParseIP("127.0.0.1"), net.ParseIP("127.0.0.5")}, NotBefore: time.Now().Add(-5 * time.Minute)})
	if err != nil {
		t.Fatal(err)
	}
	h.issueCSR("csr-1", p)
	h.install(p)
	h.kubelet.serve(p)
	h.run(agent.Config{Inventory: "configmap:certready-system/certready-inventory"})

	c := h.waitFor(verdict.Ready)
	port := strconv.Itoa(h.kubelet.port)
	for _, want := range []string{"presented on 127.0.0.1:" + port, "the Node reports 127.0.0.5 (InternalIP), which it does not record", "the agent dials the inventory's 127.0.0.1"} {
		if !strings.Contains(c.Message, want) {
			t.Errorf("ready message %q lacks %q", c.Message, want)
		}
	}
	drifts := func() []string {
		evs, err := h.cs.CoreV1().Events(metav1.NamespaceDefault).List(context.Background(), metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, e := range evs.Items {
			if e.Reason == agent.EventNodeAddressDrift && e.Type == corev1.EventTypeWarning {
				out = append(out, e.Message)
			}
		}
		return out
	}
	h.poll("one drift event and the metric at 1", func() bool {
		return len(drifts()) == 1 && value(t, h.reg, "certready_node_address_drift", nil) == 1
	})
	writes := func() (n float64) {
		for _, m := range testmetrics.Series(t, h.reg, "certready_condition_writes_total", nil) {
			n += testmetrics.Value(m)
		}
		return n
	}
	before := writes()
	h.queueNudge()
	h.poll("another check written", func() bool { return writes() > before })
	if value(t, h.reg, "certready_node_address_drift", nil) != 1 {
		t.Error("the drift metric left 1 while the drift holds")
	}
	if d := drifts(); len(d) != 1 {
		t.Errorf("drift events %q: want one per distinct drift", d)
	}

	if _, err := h.cs.CoreV1().ConfigMaps("certready-system").Update(context.Background(), inv("127.0.0.5"), metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	c = h.waitFor(verdict.EndpointUnreachable)
	if !strings.Contains(c.Message, "127.0.0.5:"+port) || strings.Contains(c.Message, "drift") {
		t.Errorf("after the inventory follows the Node: %q, want 127.0.0.5 dialled and no drift", c.Message)
	}
	h.poll("the metric back at 0", func() bool { return value(t, h.reg, "certready_node_address_drift", nil) == 0 })
}

// An inventory the agent may not read (RBAC) is evidence missing, not a
// precondition: the agent checks with the Node's addresses and says so.
func TestAnUnreadableInventoryNeverStopsTheChecks(t *testing.T) {
	h := newHarness(t, labelledCSR("csr-1", time.Now()))
	h.cs.PrependReactor("list", "configmaps", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewForbidden(corev1.Resource("configmaps"), "", errors.New("RBAC: access denied"))
	})
	h.healthy("csr-1")
	h.run(agent.Config{Inventory: "configmap:certready-system/certready-inventory", InventorySyncWait: 200 * time.Millisecond})
	c := h.waitFor(verdict.Ready)
	if want := "the inventory (ConfigMap certready-system/certready-inventory) cannot be read, so the Node's addresses were used: the agent may not read it: failed to list"; !strings.Contains(c.Message, want) {
		t.Errorf("ready message %q lacks %q", c.Message, want)
	}
	if _, ok := h.facts(); !ok {
		t.Errorf("ready node (%q) without its facts", c.Message)
	}
}
