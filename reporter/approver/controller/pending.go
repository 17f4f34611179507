package controller

import (
	"sync"
	"time"

	certv1 "k8s.io/api/certificates/v1"
	"k8s.io/apimachinery/pkg/types"
)

// pendingSet tracks the pending kubelet-serving CSRs per requesting node,
// fed by the informer's events, so that a decision asks it in O(1): how
// many distinct nodes wait, and which CSR is a node's newest. A kubelet
// waits only for its newest request, so older ones are superseded, and one
// node (or two stuck kubelets re-requesting every 15 minutes) counts once
// against the flood guard, not once per CSR.
type pendingSet struct {
	mu     sync.Mutex
	byNode map[string]map[types.UID]pendingCSR
	// latest is each node's newest CSR in any state: once a node's newest
	// request is decided, its older pending ones stay superseded.
	latest map[string]pendingCSR
}

type pendingCSR struct {
	uid     types.UID
	name    string
	created time.Time
}

// after reports whether c was made after o (later, or in the same second
// with a greater name).
func (c pendingCSR) after(o pendingCSR) bool {
	return c.created.After(o.created) || (c.created.Equal(o.created) && c.name > o.name)
}

func newPendingSet() *pendingSet {
	return &pendingSet{byNode: map[string]map[types.UID]pendingCSR{}, latest: map[string]pendingCSR{}}
}

// observe records csr's current state (pending or not); gone removes it.
func (p *pendingSet) observe(csr *certv1.CertificateSigningRequest, gone bool) {
	node, ok := nodeOf(csr)
	if !ok || csr.Spec.SignerName != certv1.KubeletServingSignerName {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	this := pendingCSR{uid: csr.UID, name: csr.Name, created: csr.CreationTimestamp.Time}
	if gone {
		if p.latest[node].uid == csr.UID {
			delete(p.latest, node)
		}
	} else if l, ok := p.latest[node]; !ok || l.uid == csr.UID || this.after(l) {
		p.latest[node] = this
	}
	set := p.byNode[node]
	if gone || !isPending(csr) {
		delete(set, csr.UID)
		if len(set) == 0 {
			delete(p.byNode, node)
		}
		return
	}
	if set == nil {
		set = map[types.UID]pendingCSR{}
		p.byNode[node] = set
	}
	set[csr.UID] = this
}

// nodes is how many distinct nodes have a pending CSR.
func (p *pendingSet) nodes() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.byNode)
}

// newer returns the name of a CSR of csr's node that is newer than csr:
// a pending one (created later, or in the same second with a greater
// name), or the node's newest in any state (created in a later second),
// or "". A node holds a handful
// of pending CSRs at most: the kubelet re-requests about every 15 minutes
// and the CSRs are cleaned up after a day.
func (p *pendingSet) newer(csr *certv1.CertificateSigningRequest) string {
	node, ok := nodeOf(csr)
	if !ok {
		return ""
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	this := pendingCSR{uid: csr.UID, name: csr.Name, created: csr.CreationTimestamp.Time}
	newest := this
	for uid, c := range p.byNode[node] {
		if uid != csr.UID && c.after(newest) {
			newest = c
		}
	}
	// A decided CSR supersedes only when strictly newer: creation times
	// have one-second resolution, and a same-second tie broken by name
	// would let an already decided request block a node's next one.
	if l, ok := p.latest[node]; ok && l.uid != csr.UID && l.created.After(newest.created) {
		newest = l
	}
	if newest.uid == csr.UID {
		return ""
	}
	return newest.name
}
