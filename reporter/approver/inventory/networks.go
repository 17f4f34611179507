package inventory

import (
	"net/netip"
	"slices"
	"sync"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/certready/certready/internal/trim"
)

// Networks keeps, from the Node informer's events, what the policy checks
// the addresses a node reports about itself against (node inventory):
//   - the addresses each Node first reported, as this process saw it: its
//     registration for a Node that registers while the approver runs; for
//     Nodes that existed when the approver started (a restart, a new
//     leader), what they reported then, so an address a node added while
//     no approver watched counts as registered after the restart;
//   - the node networks learned from the InternalIPs a cloud controller
//     wrote (trim.InfrastructureAddressTypes), each the LearnedNetwork
//     around one, counted so that a network goes with its last address.
//     ExternalIPs teach nothing: their neighbours are other customers' of
//     the same cloud.
//
// It holds a few addresses per Node and one counter per network; lookups
// are O(1) of the fleet.
type Networks struct {
	// Learn, when set, is called after a network was learned (outside the
	// lock): a request refused before may pass now.
	Learn func()

	mu         sync.RWMutex
	registered map[string][]netip.Addr
	learned    map[netip.Prefix]int
}

// NewNetworks returns an empty Networks.
func NewNetworks() *Networks {
	return &Networks{registered: map[string][]netip.Addr{}, learned: map[netip.Prefix]int{}}
}

// Handler feeds n from a Node informer.
func (n *Networks) Handler() cache.ResourceEventHandler {
	return cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { n.Observe(nil, nodeOf(obj)) },
		UpdateFunc: func(old, cur any) { n.Observe(nodeOf(old), nodeOf(cur)) },
		DeleteFunc: func(obj any) {
			if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = d.Obj
			}
			n.Observe(nodeOf(obj), nil)
		},
	}
}

func nodeOf(obj any) *corev1.Node {
	n, _ := obj.(*corev1.Node)
	return n
}

// Observe takes a Node change (old nil on add, cur nil on delete).
func (n *Networks) Observe(old, cur *corev1.Node) {
	var before, after []netip.Prefix
	if old != nil {
		before = cloudNetworks(old)
	}
	if cur != nil {
		after = cloudNetworks(cur)
	}
	learnt := false
	n.mu.Lock()
	for _, p := range before {
		if slices.Contains(after, p) {
			continue
		}
		if n.learned[p]--; n.learned[p] <= 0 {
			delete(n.learned, p)
		}
	}
	for _, p := range after {
		if slices.Contains(before, p) {
			continue
		}
		if n.learned[p]++; n.learned[p] == 1 {
			learnt = true
		}
	}
	switch {
	case cur == nil && old != nil:
		delete(n.registered, old.Name)
	case cur != nil:
		if _, seen := n.registered[cur.Name]; !seen {
			if ips := EntryOf(cur).IPs; len(ips) > 0 {
				n.registered[cur.Name] = ips
			}
		}
	}
	n.mu.Unlock()
	if learnt && n.Learn != nil {
		n.Learn()
	}
}

// cloudNetworks are the networks around the InternalIPs of node that a
// cloud controller wrote, each once.
func cloudNetworks(node *corev1.Node) []netip.Prefix {
	if !listed(node.Annotations[trim.InfrastructureAddressTypes], string(corev1.NodeInternalIP)) {
		return nil
	}
	var out []netip.Prefix
	for _, a := range node.Status.Addresses {
		if a.Type != corev1.NodeInternalIP {
			continue
		}
		if ip, err := netip.ParseAddr(a.Address); err == nil {
			if p := LearnedNetwork(ip); !slices.Contains(out, p) {
				out = append(out, p)
			}
		}
	}
	return out
}

// Registered returns the addresses node first reported (nil: none seen).
// The slice is shared: callers only read it.
func (n *Networks) Registered(node string) []netip.Addr {
	n.mu.RLock()
	defer n.mu.RUnlock()
	return n.registered[node]
}

// Learned says whether ip lies in a network learned from a cloud
// controller's InternalIPs, and which (policy.Evidence.NodeNetwork).
func (n *Networks) Learned(ip netip.Addr) (netip.Prefix, bool) {
	p := LearnedNetwork(ip)
	n.mu.RLock()
	defer n.mu.RUnlock()
	_, ok := n.learned[p]
	return p, ok
}

// LearnedNetwork is the node network learned around an address a cloud
// controller wrote: the /24 of an IPv4 address (the smallest subnet the
// large clouds hand out by default, so no wider than the node's own), the
// /64 of an IPv6 one (the subnet size of IPv6, RFC 4291).
func LearnedNetwork(ip netip.Addr) netip.Prefix {
	u := ip.Unmap().WithZone("")
	bits := 64
	if u.Is4() {
		bits = 24
	}
	p, _ := u.Prefix(bits)
	return p
}
