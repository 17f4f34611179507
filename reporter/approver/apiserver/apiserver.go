// Package apiserver learns the API server's own addresses from the
// EndpointSlice of the default/kubernetes Service, which the API servers
// keep up to date themselves. A serving certificate for one of those,
// signed by the cluster CA, would let its holder pose as the API server to
// every client that trusts that CA: the approver never approves one.
package apiserver

import (
	"context"
	"net/netip"
	"slices"
	"sync/atomic"

	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
)

// Namespace and Name of the API server's Service and EndpointSlice.
const (
	Namespace = "default"
	Name      = "kubernetes"
)

// Endpoints holds the API server's current addresses.
type Endpoints struct {
	addrs    atomic.Pointer[[]netip.Addr]
	informer cache.SharedIndexInformer
	factory  informers.SharedInformerFactory
}

// New watches the EndpointSlice default/kubernetes (by name: the RBAC grant
// is for that one object). onChange runs after each change of addresses.
func New(client kubernetes.Interface, onChange func()) (*Endpoints, error) {
	f := informers.NewSharedInformerFactoryWithOptions(client, 0, informers.WithNamespace(Namespace),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) {
			o.FieldSelector = fields.OneTermEqualSelector("metadata.name", Name).String()
		}))
	e := &Endpoints{factory: f, informer: f.Discovery().V1().EndpointSlices().Informer()}
	e.addrs.Store(&[]netip.Addr{})
	update := func() {
		var out []netip.Addr
		for _, obj := range e.informer.GetStore().List() {
			// The field selector already says so; the check keeps it true
			// whatever serves the list.
			if s := obj.(*discoveryv1.EndpointSlice); s.Namespace == Namespace && s.Name == Name {
				out = append(out, Addresses(s)...)
			}
		}
		slices.SortFunc(out, func(a, b netip.Addr) int { return a.Compare(b) })
		out = slices.Compact(out)
		if old := e.addrs.Swap(&out); !slices.Equal(*old, out) && onChange != nil {
			onChange()
		}
	}
	_, err := e.informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { update() },
		UpdateFunc: func(_, _ any) { update() },
		DeleteFunc: func(any) { update() },
	})
	return e, err
}

// Start runs the watch until ctx ends; HasSynced says when the first list
// is in.
func (e *Endpoints) Start(ctx context.Context) { e.factory.Start(ctx.Done()) }

// HasSynced reports whether the first list has been read.
func (e *Endpoints) HasSynced() bool { return e.informer.HasSynced() }

// Addresses returns the API server's addresses now (sorted, unmapped).
func (e *Endpoints) Addresses() []netip.Addr { return *e.addrs.Load() }

// Addresses reads every endpoint address of one slice.
func Addresses(s *discoveryv1.EndpointSlice) []netip.Addr {
	var out []netip.Addr
	for _, ep := range s.Endpoints {
		for _, a := range ep.Addresses {
			if ip, err := netip.ParseAddr(a); err == nil {
				out = append(out, ip.Unmap())
			}
		}
	}
	return out
}
