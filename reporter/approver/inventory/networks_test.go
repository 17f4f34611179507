package inventory_test

import (
	"net/netip"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/certready/certready/internal/trim"
	"github.com/certready/certready/reporter/approver/inventory"
)

// reporting is a trimmed Node reporting addresses (type=address), with
// infra the types a cloud controller wrote (trim.InfrastructureAddressTypes).
func reporting(name, infra string, addresses ...corev1.NodeAddress) *corev1.Node {
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}, Status: corev1.NodeStatus{Addresses: addresses}}
	if infra != "" {
		n.Annotations = map[string]string{trim.InfrastructureAddressTypes: infra}
	}
	return n
}

func internal(a string) corev1.NodeAddress {
	return corev1.NodeAddress{Type: corev1.NodeInternalIP, Address: a}
}

func external(a string) corev1.NodeAddress {
	return corev1.NodeAddress{Type: corev1.NodeExternalIP, Address: a}
}

func mustAddrs(s ...string) []netip.Addr {
	var out []netip.Addr
	for _, v := range s {
		out = append(out, netip.MustParseAddr(v))
	}
	return out
}

// What the Node objects say about who wrote an address: a cloud
// controller's are the infrastructure's, every other one self-reported.
func TestNodesEntrySaysWhichAddressesTheNodeReportedItself(t *testing.T) {
	for _, tc := range []struct {
		name  string
		node  *corev1.Node
		self  []netip.Addr
		total int
	}{
		{"the kubelet's", reporting("w1", "", internal("192.0.2.11"), external("198.51.100.11")), mustAddrs("192.0.2.11", "198.51.100.11"), 2},
		{"a cloud controller's InternalIPs", reporting("w1", "InternalIP", internal("10.0.1.5"), internal("fd00::5"), external("203.0.113.5")), mustAddrs("203.0.113.5"), 3},
		{"all a cloud controller's", reporting("w1", "ExternalIP,InternalIP", internal("10.0.1.5"), external("203.0.113.5")), nil, 2},
		{"a type name inside another is not it", reporting("w1", "InternalIPv9,XInternalIP", internal("10.0.1.5")), mustAddrs("10.0.1.5"), 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := inventory.EntryOf(tc.node)
			if len(e.IPs) != tc.total || !slices.Equal(e.SelfReported, tc.self) {
				t.Errorf("IPs %v, self-reported %v; want %d IPs, self-reported %v", e.IPs, e.SelfReported, tc.total, tc.self)
			}
		})
	}
}

// The addresses a node first reported: its registration, as the approver
// saw it. Later additions are not; a Node deleted and created again
// registers anew.
func TestNetworksRemembersTheAddressesANodeFirstReported(t *testing.T) {
	nets := inventory.NewNetworks()
	idx := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	src := inventory.Nodes{Lister: corelisters.NewNodeLister(idx), Registered: nets.Registered}
	empty := reporting("w1", "")
	first := reporting("w1", "", internal("192.0.2.11"))
	more := reporting("w1", "", internal("192.0.2.11"), external("198.51.100.77"))
	steps := []struct {
		name     string
		old, cur *corev1.Node
		want     []netip.Addr
	}{
		{"registered without addresses", nil, empty, nil},
		{"the first addresses it reports", empty, first, mustAddrs("192.0.2.11")},
		{"an address added later", first, more, mustAddrs("192.0.2.11")},
		{"deleted", more, nil, nil},
		{"created again", nil, more, mustAddrs("192.0.2.11", "198.51.100.77")},
	}
	for _, s := range steps {
		nets.Observe(s.old, s.cur)
		if got := nets.Registered("w1"); !slices.Equal(got, s.want) {
			t.Errorf("%s: registered %v, want %v", s.name, got, s.want)
		}
	}
	if err := idx.Add(more); err != nil {
		t.Fatal(err)
	}
	if e, ok := src.Lookup("w1"); !ok || !slices.Equal(e.Registered, mustAddrs("192.0.2.11", "198.51.100.77")) {
		t.Errorf("lookup = %+v, %v: want the registered addresses", e, ok)
	}
}

// Node networks are learned from the InternalIPs a cloud controller wrote
// (its /24, its /64), never from an ExternalIP (other customers'
// neighbours) nor a self-reported address; a network goes with its last
// Node; Learn is told of a new one only.
func TestNetworksLearnsFromCloudControllersInternalIPs(t *testing.T) {
	learnt := 0
	nets := inventory.NewNetworks()
	nets.Learn = func() { learnt++ }
	a := reporting("a", "ExternalIP,InternalIP", internal("10.0.1.5"), internal("fd00:1::5"), external("203.0.113.5"))
	b := reporting("b", "InternalIP", internal("10.0.1.6"))
	self := reporting("c", "", internal("10.0.7.7"))
	for i, step := range []struct {
		node  *corev1.Node
		calls int
	}{{a, 1}, {b, 1}, {self, 1}} { // a's two networks at once; b's is a's; c's is self-reported
		nets.Observe(nil, step.node)
		if learnt != step.calls {
			t.Errorf("step %d (%s): Learn called %d times, want %d", i, step.node.Name, learnt, step.calls)
		}
	}
	for ip, want := range map[string]bool{
		"10.0.1.200": true, "fd00:1::ffff": true, "10.0.2.1": false, "203.0.113.6": false, "10.0.7.8": false, "fd00:2::1": false,
	} {
		if p, got := nets.Learned(netip.MustParseAddr(ip)); got != want {
			t.Errorf("%s: learned %v (%s), want %v", ip, got, p, want)
		}
	}
	nets.Observe(a, nil)
	if _, ok := nets.Learned(netip.MustParseAddr("10.0.1.200")); !ok {
		t.Error("10.0.1.0/24 forgotten while b's InternalIP is in it")
	}
	if _, ok := nets.Learned(netip.MustParseAddr("fd00:1::1")); ok {
		t.Error("fd00:1::/64 kept after its only Node went")
	}
	moved := reporting("b", "", internal("10.0.1.6")) // the kubelet took the address over
	nets.Observe(b, moved)
	if _, ok := nets.Learned(netip.MustParseAddr("10.0.1.200")); ok {
		t.Error("10.0.1.0/24 kept after no cloud controller's address is left in it")
	}
}
