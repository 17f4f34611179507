package taint_test

import (
	"context"
	"net"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	certv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/record"

	"github.com/certready/certready/internal/testpki"
	"github.com/certready/certready/internal/testwait"
	"github.com/certready/certready/reporter/approver/taint"
)

var loopback = net.ParseIP("127.0.0.1").To4()

// kubeletAt is a node whose kubelet port is addr (host:port).
func kubeletAt(t *testing.T, name, addr string) *corev1.Node {
	t.Helper()
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatal(err)
	}
	p, _ := strconv.Atoi(port)
	n := node(name, corev1.ConditionFalse, key)
	n.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: host}}
	n.Status.DaemonEndpoints.KubeletEndpoint.Port = int32(p)
	return n
}

// issuedCSR is the CSR that issued pair to node, as the signer leaves it.
func issuedCSR(node string, pair *testpki.Pair) *certv1.CertificateSigningRequest {
	return testpki.KubeletCSR("csr-"+node, node, testpki.WithUID("uid-"+node), testpki.Issued(pair.CertPEM()))
}

// TestProverLooksAtTheKubeletItself: a False condition is not enough; the
// kubelet must present, on the address the API server dials, a certificate
// that verifies against the kubelet CA for that address, names the node,
// and was issued to one of its CSRs (or is older than the CSRs' retention).
func TestProverLooksAtTheKubeletItself(t *testing.T) {
	ca, err := testpki.NewCA("kubelet CA")
	if err != nil {
		t.Fatal(err)
	}
	other, err := testpki.NewCA("another CA")
	if err != nil {
		t.Fatal(err)
	}
	issue := func(ca *testpki.CA, node string, notBefore time.Time) *testpki.Pair {
		p, err := ca.Issue(testpki.Serving{Node: node, IPs: []net.IP{loopback}, NotBefore: notBefore})
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	index := taint.NewIssuedIndex()
	record := index.Transform(func(o any) (any, error) { return o, nil })
	good := issue(ca, "w1", time.Now().Add(-time.Minute))
	if _, err := record(issuedCSR("w1", good)); err != nil {
		t.Fatal(err)
	}
	p := &taint.Prover{Roots: ca.Pool(), Issued: index.Of, Retention: time.Hour, Timeout: 2 * time.Second}
	silent, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	silentAddr := silent.Addr().String()
	silent.Close() // nothing listens there now
	for _, tc := range []struct {
		name string
		node *corev1.Node
		want string // "" proven
	}{
		{"serves the certificate its CSR was issued", kubeletAt(t, "w1", testpki.ServeTLS(t, good)), ""},
		{"serves a young certificate no CSR of the node explains", kubeletAt(t, "w1", testpki.ServeTLS(t, issue(ca, "w1", time.Now().Add(-time.Minute)))), "which no issued kubelet-serving CSR of w1 explains"},
		{"serves an old certificate whose CSR is gone", kubeletAt(t, "w1", testpki.ServeTLS(t, issue(ca, "w1", time.Now().Add(-2*time.Hour)))), ""},
		{"serves another node's certificate", kubeletAt(t, "w2", testpki.ServeTLS(t, good)), `for "system:node:w1"`},
		{"serves a certificate of another CA", kubeletAt(t, "w1", testpki.ServeTLS(t, issue(other, "w1", time.Now().Add(-2*time.Hour)))), "does not verify"},
		{"nothing listens", kubeletAt(t, "w1", silentAddr), "serves no certificate"},
		{"reports no address", node("w1", corev1.ConditionFalse, key), "reports no address"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := p.Prove(context.Background(), tc.node)
			if (err == nil) != (tc.want == "") || (err != nil && !strings.Contains(err.Error(), tc.want)) {
				t.Errorf("Prove: %v, want %q", err, tc.want)
			}
		})
	}
	// The CSR deleted: its fingerprint goes with it.
	index.Forget(issuedCSR("w1", good))
	if got := index.Of("w1"); len(got) != 0 {
		t.Errorf("fingerprints after the CSR was deleted: %v", got)
	}
}

// TestRemoverKeepsTheTaintOfAnUnprovenNode: root on a node holds the
// agent's token and publishes False, but the node's kubelet has no
// certificate an approved CSR issued: the taint stays, with a Warning on
// the node; once it serves one, the taint goes.
func TestRemoverKeepsTheTaintOfAnUnprovenNode(t *testing.T) {
	ca, err := testpki.NewCA("kubelet CA")
	if err != nil {
		t.Fatal(err)
	}
	forged, err := ca.Issue(testpki.Serving{Node: "w1", IPs: []net.IP{loopback}, NotBefore: time.Now()})
	if err != nil {
		t.Fatal(err)
	}
	var served atomic.Pointer[testpki.Pair]
	served.Store(forged)
	addr := testpki.ServeCurrent(t, "127.0.0.1:0", served.Load)
	cs := fake.NewClientset(stale(kubeletAt(t, "w1", addr), time.Now()))
	index := taint.NewIssuedIndex()
	rec := record.NewFakeRecorder(100)
	c := cfg
	c.Prove = (&taint.Prover{Roots: ca.Pool(), Issued: index.Of, Retention: time.Hour}).Prove
	c.Events = rec
	ctx := startLifter(t, c, cs)
	var ev string
	if !testwait.Until(10*time.Second, func() bool {
		select {
		case ev = <-rec.Events:
			return true
		default:
			return false
		}
	}) {
		t.Fatal("no event on the unproven node")
	}
	if !strings.HasPrefix(ev, "Warning KubeletServingCertUnproven") || !strings.Contains(ev, "no issued kubelet-serving CSR of w1") {
		t.Errorf("event %q", ev)
	}
	n, err := cs.CoreV1().Nodes().Get(ctx, "w1", metav1.GetOptions{})
	if err != nil || len(n.Spec.Taints) != 1 {
		t.Fatalf("taint lifted on a False condition alone: %v %v", err, n.Spec.Taints)
	}
	// The node's real certificate: issued through its CSR, then served.
	real, err := ca.Issue(testpki.Serving{Node: "w1", IPs: []net.IP{loopback}, NotBefore: time.Now()})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := index.Transform(func(o any) (any, error) { return o, nil })(issuedCSR("w1", real)); err != nil {
		t.Fatal(err)
	}
	served.Store(real)
	if !testwait.Until(30*time.Second, func() bool {
		n, err := cs.CoreV1().Nodes().Get(ctx, "w1", metav1.GetOptions{})
		return err == nil && len(n.Spec.Taints) == 0
	}) {
		t.Fatal("taint never lifted once the kubelet served its issued certificate")
	}
}
