package apiserver

import (
	"sync"

	corev1 "k8s.io/api/core/v1"

	"github.com/certready/certready/reporter/approver/inventory"
)

// Hosts remembers, for each node seen gaining the API server host label
// while the approver ran, the addresses and names it reported just before:
// those are its own (policy.Evidence.HostOwn). A node labelled before the
// approver first saw it has no record; the policy then accepts, of the API
// server's addresses, only those an API server advertises as its endpoint
// and the node reports, and of its names only the node's own name.
// It keeps nothing for nodes that never carry the label.
type Hosts struct {
	Label string

	mu     sync.Mutex
	before map[string]inventory.Entry
}

// Observe takes a Node update (old nil on add, cur nil on delete).
func (h *Hosts) Observe(old, cur *corev1.Node) {
	if h.Label == "" {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	switch {
	case cur == nil:
		if old != nil {
			delete(h.before, old.Name)
		}
	case old != nil && !h.labelled(old) && h.labelled(cur):
		if h.before == nil {
			h.before = map[string]inventory.Entry{}
		}
		h.before[cur.Name] = inventory.EntryOf(old)
	case !h.labelled(cur):
		delete(h.before, cur.Name) // unlabelled again: a new record if relabelled
	}
}

func (h *Hosts) labelled(n *corev1.Node) bool {
	_, ok := n.Labels[h.Label]
	return ok
}

// Own returns what node reported before it was labelled, if that was seen.
func (h *Hosts) Own(node string) (inventory.Entry, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	e, ok := h.before[node]
	return e, ok
}
