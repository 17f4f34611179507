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
}

type pendingCSR struct {
	name    string
	created time.Time
}

func newPendingSet() *pendingSet {
	return &pendingSet{byNode: map[string]map[types.UID]pendingCSR{}}
}

// observe records csr's current state (pending or not); gone removes it.
func (p *pendingSet) observe(csr *certv1.CertificateSigningRequest, gone bool) {
	node, ok := nodeOf(csr)
	if !ok || csr.Spec.SignerName != certv1.KubeletServingSignerName {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
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
	set[csr.UID] = pendingCSR{name: csr.Name, created: csr.CreationTimestamp.Time}
}

// nodes is how many distinct nodes have a pending CSR.
func (p *pendingSet) nodes() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.byNode)
}

// newer returns the name of a pending CSR of csr's node that is newer than
// csr (created later, or at the same second with a greater name), or "".
// A node holds a handful of pending CSRs at most: the kubelet re-requests
// about every 15 minutes and the CSRs are cleaned up after a day.
func (p *pendingSet) newer(csr *certv1.CertificateSigningRequest) string {
	node, ok := nodeOf(csr)
	if !ok {
		return ""
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	newest, at := "", csr.CreationTimestamp.Time
	for uid, c := range p.byNode[node] {
		if uid == csr.UID {
			continue
		}
		if c.created.After(at) || (c.created.Equal(at) && c.name > csr.Name && newest == "") {
			newest, at = c.name, c.created
		}
	}
	return newest
}
