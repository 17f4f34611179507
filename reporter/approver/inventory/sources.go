package inventory

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/fsnotify/fsnotify"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	"github.com/certready/certready/internal/inventorydoc"
	"github.com/certready/certready/internal/trim"
)

// Nodes reads the Node objects' InternalIP, ExternalIP, Hostname and DNS
// addresses. The kubelet writes those itself, unless a cloud controller
// does: each entry says which addresses are the node's own word
// (Entry.SelfReported, from the trimmed Node's
// trim.InfrastructureAddressTypes) and which it first reported
// (Registered), and the policy bounds the former. It answers who else
// claims an address from Indexer, indexed with addressIndex.
type Nodes struct {
	Lister corelisters.NodeLister
	// Indexer answers Claimants (nil: no address counts as claimed);
	// NamesIndexer answers NameClaimants. Both are the node informer's,
	// with AddressIndexers.
	Indexer      cache.Indexer
	NamesIndexer cache.Indexer
	// Count, when set, is the number of Nodes (kept by informer events);
	// otherwise Size lists them.
	Count func() int
	// Registered, when set, returns the addresses a node first reported
	// (Networks.Registered).
	Registered func(node string) []netip.Addr
}

// Index names of the node informer: IP addresses, and names (the node's
// own and the DNS and host names it reports).
const (
	addressIndex = "certready.io/address"
	nameIndex    = "certready.io/name"
)

// AddressIndexers indexes Nodes by every InternalIP and ExternalIP they
// report (in netip's canonical form) and by their names (normalized).
var AddressIndexers = cache.Indexers{
	addressIndex: func(obj any) ([]string, error) {
		n, ok := obj.(*corev1.Node)
		if !ok {
			return nil, nil
		}
		var out []string
		for _, a := range n.Status.Addresses {
			if a.Type != corev1.NodeInternalIP && a.Type != corev1.NodeExternalIP {
				continue
			}
			if ip, err := netip.ParseAddr(a.Address); err == nil {
				out = append(out, ip.Unmap().String())
			}
		}
		return out, nil
	},
	nameIndex: func(obj any) ([]string, error) {
		n, ok := obj.(*corev1.Node)
		if !ok {
			return nil, nil
		}
		out := []string{normalizeName(n.Name)}
		for _, a := range n.Status.Addresses {
			switch a.Type {
			case corev1.NodeHostName, corev1.NodeInternalDNS, corev1.NodeExternalDNS:
				if v := normalizeName(a.Address); v != "" && !slices.Contains(out, v) {
					out = append(out, v)
				}
			}
		}
		return out, nil
	},
}

// normalizeName compares names as DNS does (policy.NormalizeDNS).
func normalizeName(s string) string { return strings.ToLower(strings.TrimSuffix(s, ".")) }

// Claimants lists the nodes that report ip.
func (n Nodes) Claimants(ip netip.Addr) []string {
	if n.Indexer == nil {
		return nil
	}
	return n.byIndex(n.Indexer, addressIndex, ip.Unmap().String())
}

// NameClaimants lists the nodes named name or reporting it. It answers
// even with --allow-shared-addresses (NamesIndexer): nodes behind one NAT
// share an address, never a name.
func (n Nodes) NameClaimants(name string) []string {
	if n.NamesIndexer == nil {
		return nil
	}
	return n.byIndex(n.NamesIndexer, nameIndex, normalizeName(name))
}

func (Nodes) byIndex(idx cache.Indexer, index, key string) []string {
	objs, err := idx.ByIndex(index, key)
	if err != nil {
		return nil
	}
	out := make([]string, 0, len(objs))
	for _, o := range objs {
		if node, ok := o.(*corev1.Node); ok {
			out = append(out, node.Name)
		}
	}
	sort.Strings(out)
	return out
}

func (n Nodes) Lookup(node string) (Entry, bool) {
	obj, err := n.Lister.Get(node)
	if err != nil {
		return Entry{}, false
	}
	e := EntryOf(obj)
	if n.Registered != nil {
		e.Registered = n.Registered(node)
	}
	return e, true
}

// EntryOf reads what a Node reports: its InternalIP and ExternalIP
// addresses (those a cloud controller did not write also as
// SelfReported), and its Hostname, InternalDNS and ExternalDNS names.
func EntryOf(node *corev1.Node) Entry {
	var e Entry
	infra := node.Annotations[trim.InfrastructureAddressTypes]
	for _, a := range node.Status.Addresses {
		switch a.Type {
		case corev1.NodeInternalIP, corev1.NodeExternalIP:
			if ip, err := netip.ParseAddr(a.Address); err == nil {
				e.IPs = append(e.IPs, ip)
				if !listed(infra, string(a.Type)) {
					e.SelfReported = append(e.SelfReported, ip)
				}
			}
		case corev1.NodeHostName, corev1.NodeInternalDNS, corev1.NodeExternalDNS:
			e.DNSNames = append(e.DNSNames, a.Address)
		}
	}
	return e
}

// listed says whether the comma-separated list holds v.
func listed(list, v string) bool {
	for rest, more := list, list != ""; more; {
		var item string
		item, rest, more = strings.Cut(rest, ",")
		if item == v {
			return true
		}
	}
	return false
}

func (n Nodes) Size() int {
	if n.Count != nil {
		return n.Count()
	}
	all, err := n.Lister.List(labels.Everything())
	if err != nil {
		return 0
	}
	return len(all)
}

func (Nodes) Describe() string { return "node objects (self-reported addresses)" }

// Static is a mapping held in memory and swapped whole on reload.
type Static struct {
	mu    sync.RWMutex
	nodes map[string]Entry
	desc  string
}

// NewStatic returns a Static source named desc.
func NewStatic(desc string, nodes map[string]Entry) *Static {
	return &Static{nodes: nodes, desc: desc}
}

func (s *Static) Lookup(node string) (Entry, bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	e, ok := s.nodes[node]
	return e, ok
}

func (s *Static) Size() int {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return len(s.nodes)
}

func (s *Static) Describe() string { return s.desc }

// Replace swaps the whole mapping.
func (s *Static) Replace(nodes map[string]Entry) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.nodes = nodes
}

// ConfigMapKey is the key of the mapping in an inventory ConfigMap.
const ConfigMapKey = inventorydoc.ConfigMapKey

// FromConfigMap parses the mapping in cm's ConfigMapKey.
func FromConfigMap(cm *corev1.ConfigMap) (map[string]Entry, error) {
	data, ok := cm.Data[ConfigMapKey]
	if !ok {
		return nil, fmt.Errorf("ConfigMap %s/%s has no key %q", cm.Namespace, cm.Name, ConfigMapKey)
	}
	nodes, err := Parse([]byte(data))
	if err != nil {
		return nil, fmt.Errorf("ConfigMap %s/%s key %s: %w", cm.Namespace, cm.Name, ConfigMapKey, err)
	}
	return nodes, nil
}

// LoadFile parses the mapping in path.
func LoadFile(path string) (map[string]Entry, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("inventory file: %w", err)
	}
	nodes, err := Parse(data)
	if err != nil {
		return nil, fmt.Errorf("inventory file %s: %w", path, err)
	}
	return nodes, nil
}

// WatchFile reloads path into s whenever it changes, until ctx ends. A
// reload that fails keeps the previous mapping and is logged: a typo in the
// file must not turn every node into a mismatch. It watches the folder,
// because ConfigMap volumes and editors replace files by rename.
func WatchFile(ctx context.Context, path string, s *Static, onReload func(error)) error {
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return err
	}
	defer w.Close()
	if err := w.Add(filepath.Dir(path)); err != nil {
		return fmt.Errorf("watching %s: %w", filepath.Dir(path), err)
	}
	logger := klog.FromContext(ctx).WithValues("file", path)
	var timer <-chan time.Time
	for {
		select {
		case <-ctx.Done():
			return nil
		case _, ok := <-w.Events:
			if !ok {
				return nil
			}
			// Coalesce the bursts of a rename-based update.
			timer = time.After(100 * time.Millisecond)
		case err, ok := <-w.Errors:
			if !ok {
				return nil
			}
			logger.Error(err, "Watching the inventory file")
		case <-timer:
			nodes, err := LoadFile(path)
			if err != nil {
				logger.Error(err, "Inventory reload failed; keeping the previous inventory")
			} else {
				s.Replace(nodes)
				logger.Info("Inventory reloaded", "nodes", len(nodes))
			}
			if onReload != nil {
				onReload(err)
			}
		}
	}
}
