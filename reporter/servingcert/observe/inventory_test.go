package observe_test

import (
	"context"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/certready/certready/reporter/servingcert/evidence"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/certready/certready/internal/testpki"
	"github.com/certready/certready/reporter/servingcert/certfile"
	"github.com/certready/certready/reporter/servingcert/observe"
	"github.com/certready/certready/reporter/servingcert/probe"
	"github.com/certready/certready/reporter/servingcert/verdict"
)

// A Node whose reported InternalIP moved to an address where no kubelet
// listens: the agent dials the address the inventory records (a real
// listener, a real handshake), and names the drift; without an inventory
// it dials the Node's address and finds nothing there.
func TestTheInventorysAddressIsTheOneDialled(t *testing.T) {
	ca, err := testpki.NewCA("kubelet-ca")
	if err != nil {
		t.Fatal(err)
	}
	pair, err := ca.Issue(testpki.Serving{Node: "w1", IPs: []net.IP{net.ParseIP("127.0.0.1"), net.ParseIP("127.0.0.5")}})
	if err != nil {
		t.Fatal(err)
	}
	_, portText, err := net.SplitHostPort(testpki.ServeTLSOn(t, "127.0.0.1:0", pair))
	if err != nil {
		t.Fatal(err)
	}
	port, _ := strconv.Atoi(portText)
	dir := t.TempDir()
	if _, err := testpki.Install(dir, pair); err != nil {
		t.Fatal(err)
	}
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "w1"}}
	node.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "127.0.0.5"}, {Type: corev1.NodeHostName, Address: "w1"}}
	for _, tc := range []struct {
		name        string
		inv         *evidence.Inventory
		wantAddr    string
		wantOutcome probe.Outcome
		wantDrift   string
	}{
		{name: "no inventory: the Node's InternalIP", wantAddr: "127.0.0.5", wantOutcome: probe.Unreachable},
		{name: "not listed: the Node's InternalIP", inv: &evidence.Inventory{Source: "file inv.yaml"}, wantAddr: "127.0.0.5", wantOutcome: probe.Unreachable},
		{name: "listed: the inventory's address", inv: &evidence.Inventory{Source: "file inv.yaml", Listed: true, IPs: []netip.Addr{netip.MustParseAddr("127.0.0.1")}},
			wantAddr: "127.0.0.1", wantOutcome: probe.Presented, wantDrift: "the Node reports 127.0.0.5 (InternalIP), which it does not record; it records 127.0.0.1, which the Node does not report; the agent dials the inventory's 127.0.0.1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := evidence.Evidence{Node: observe.NodeInfo(node, nil), Now: time.Now(), CA: ca.Pool(), File: certfile.Read(dir), SkipCSR: true, Inventory: tc.inv}
			target := observe.EndpointTarget(in, port, 2*time.Second)
			if want := net.JoinHostPort(tc.wantAddr, portText); target.Addr != want {
				t.Fatalf("probe dials %s, want %s", target.Addr, want)
			}
			res := probe.Probe(context.Background(), target)
			if res.Outcome != tc.wantOutcome {
				t.Fatalf("probe of %s: %s, want %s", target.Addr, res.Describe(), tc.wantOutcome)
			}
			in.Endpoint = &res
			v := verdict.Evaluate(in)
			if v.Ready() != (tc.wantOutcome == probe.Presented) {
				t.Errorf("verdict %s %s: %s", v.Status, v.Reason, v.Message)
			}
			got := verdict.Drift(in)
			if tc.wantDrift == "" && (got != "" || strings.Contains(v.Message, "drift")) {
				t.Errorf("drift %q, message %q: want none", got, v.Message)
			}
			if tc.wantDrift != "" && (!strings.Contains(got, tc.wantDrift) || !strings.Contains(v.Message, tc.wantDrift)) {
				t.Errorf("drift %q, message %q: want %q in both", got, v.Message, tc.wantDrift)
			}
		})
	}
}
