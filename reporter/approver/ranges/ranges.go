// Package ranges knows the cluster's address ranges that are no node's own:
// the Service CIDRs (ServiceCIDR objects, or given) and every Node's Pod
// CIDRs. A serving certificate for an address in them would let a node pose
// as a Service or a pod (policy.Evidence.NotNodeAddress).
package ranges

import (
	"fmt"
	"net/netip"
	"slices"
	"sort"
	"strings"
	"sync"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/client-go/tools/cache"
)

// Set holds named prefixes and answers which holds an address in
// O(number of distinct prefix lengths), whatever the number of prefixes: a
// cluster of thousands of Nodes has thousands of /24 Pod CIDRs.
type Set struct {
	mu      sync.RWMutex
	owners  map[netip.Prefix][]string // prefix -> who has it (sorted)
	byOwner map[string][]netip.Prefix
	lengths map[bool]map[int]int // is4 -> prefix length -> count
}

// newSet returns an empty set.
func newSet() *Set {
	return &Set{owners: map[netip.Prefix][]string{}, byOwner: map[string][]netip.Prefix{}, lengths: map[bool]map[int]int{true: {}, false: {}}}
}

// Set replaces owner's prefixes (none: removes it).
func (s *Set) Set(owner string, prefixes []netip.Prefix) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, p := range s.byOwner[owner] {
		s.owners[p] = slices.DeleteFunc(s.owners[p], func(o string) bool { return o == owner })
		if len(s.owners[p]) == 0 {
			delete(s.owners, p)
		}
		l := s.lengths[p.Addr().Is4()]
		if l[p.Bits()]--; l[p.Bits()] == 0 {
			delete(l, p.Bits())
		}
	}
	delete(s.byOwner, owner)
	var kept []netip.Prefix
	for _, p := range prefixes {
		p = netip.PrefixFrom(p.Addr().Unmap(), p.Bits()-unmapBits(p)).Masked()
		if !p.IsValid() || slices.Contains(kept, p) {
			continue
		}
		kept = append(kept, p)
		s.owners[p] = append(s.owners[p], owner)
		sort.Strings(s.owners[p])
		s.lengths[p.Addr().Is4()][p.Bits()]++
	}
	if len(kept) > 0 {
		s.byOwner[owner] = kept
	}
}

func unmapBits(p netip.Prefix) int {
	if p.Addr().Is4In6() {
		return 96
	}
	return 0
}

// Holder returns the prefix holding ip and its owners, if any.
func (s *Set) Holder(ip netip.Addr) (netip.Prefix, []string, bool) {
	ip = ip.Unmap().WithZone("")
	s.mu.RLock()
	defer s.mu.RUnlock()
	for bits := range s.lengths[ip.Is4()] {
		p, err := ip.Prefix(bits)
		if err != nil {
			continue
		}
		if o, ok := s.owners[p]; ok {
			return p, slices.Clone(o), true
		}
	}
	return netip.Prefix{}, nil, false
}

// Ranges are the Service CIDRs and Pod CIDRs of one cluster.
type Ranges struct {
	services *Set
	pods     *Set
}

// New returns empty ranges; fill them with WatchNodes, WatchServiceCIDRs or
// SetServiceCIDRs and SetPodCIDRs.
func New() *Ranges { return &Ranges{services: newSet(), pods: newSet()} }

// NotNodeAddress says why ip is never a node's own, or "".
func (r *Ranges) NotNodeAddress(ip netip.Addr) string {
	if p, owners, ok := r.services.Holder(ip); ok {
		return fmt.Sprintf("inside the Service CIDR %s (%s)", p, strings.Join(owners, ", "))
	}
	if p, owners, ok := r.pods.Holder(ip); ok {
		return fmt.Sprintf("inside the Pod CIDR %s of %s", p, strings.Join(owners, ", "))
	}
	return ""
}

// SetServiceCIDRs sets the Service CIDRs known as owner (a ServiceCIDR
// object, or a Cluster's spec.clusterNetwork).
func (r *Ranges) SetServiceCIDRs(owner string, cidrs []string) { r.services.Set(owner, parse(cidrs)) }

// SetPodCIDRs sets the Pod CIDRs of owner (a Node, or a Cluster).
func (r *Ranges) SetPodCIDRs(owner string, cidrs []string) { r.pods.Set(owner, parse(cidrs)) }

func parse(cidrs []string) []netip.Prefix {
	var out []netip.Prefix
	for _, c := range cidrs {
		if p, err := netip.ParsePrefix(strings.TrimSpace(c)); err == nil {
			out = append(out, p)
		}
	}
	return out
}

// WatchNodes keeps every Node's spec.podCIDRs from the node informer.
func (r *Ranges) WatchNodes(inf cache.SharedIndexInformer) error {
	return onEvery(inf, func(obj any, gone bool) {
		if n, ok := obj.(*corev1.Node); ok {
			cidrs := append([]string{n.Spec.PodCIDR}, n.Spec.PodCIDRs...)
			if gone {
				cidrs = nil
			}
			r.SetPodCIDRs("node "+n.Name, cidrs)
		}
	})
}

// WatchServiceCIDRs keeps the ServiceCIDR objects' spec.cidrs.
func (r *Ranges) WatchServiceCIDRs(inf cache.SharedIndexInformer) error {
	return onEvery(inf, func(obj any, gone bool) {
		if s, ok := obj.(*networkingv1.ServiceCIDR); ok {
			cidrs := s.Spec.CIDRs
			if gone {
				cidrs = nil
			}
			r.SetServiceCIDRs("ServiceCIDR "+s.Name, cidrs)
		}
	})
}

// onEvery calls f with the object of every add, update (its new state) and
// delete (gone: its last known state) of inf.
func onEvery(inf cache.SharedIndexInformer, f func(obj any, gone bool)) error {
	_, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { f(obj, false) },
		UpdateFunc: func(_, cur any) { f(cur, false) },
		DeleteFunc: func(obj any) {
			if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = d.Obj
			}
			f(obj, true)
		},
	})
	return err
}
