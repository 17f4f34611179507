package controller

import (
	"sync"

	certv1 "k8s.io/api/certificates/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/certready/certready/internal/csrstate"
)

// pendingSet tracks the pending kubelet-serving CSRs per requesting node,
// fed by the informer's events, so that the flood guard asks in O(1) how
// many distinct nodes wait: one node (or two stuck kubelets re-requesting
// every 15 minutes) counts once, not once per CSR.
type pendingSet struct {
	mu     sync.Mutex
	byNode map[string]map[types.UID]struct{}
}

func newPendingSet() *pendingSet {
	return &pendingSet{byNode: map[string]map[types.UID]struct{}{}}
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
	if gone || !csrstate.IsPending(csr) {
		delete(set, csr.UID)
		if len(set) == 0 {
			delete(p.byNode, node)
		}
		return
	}
	if set == nil {
		set = map[types.UID]struct{}{}
		p.byNode[node] = set
	}
	set[csr.UID] = struct{}{}
}

// nodes is how many distinct nodes known to the inventory (known) have a
// pending CSR, counted up to limit. Identities that are no node of the
// inventory do not count: a bootstrap token's holder can mint client
// certificates for any system:node:<name>, and must not be able to stop
// approvals for the real nodes. Below limit pending identities in all, the
// count is not needed: O(1) in a storm of real nodes.
func (p *pendingSet) nodes(known func(node string) bool, limit int) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.byNode) < limit {
		return len(p.byNode)
	}
	n := 0
	for node := range p.byNode {
		if known(node) {
			if n++; n >= limit {
				break
			}
		}
	}
	return n
}

// newer returns the name of a CSR of csr's node that supersedes csr, or "".
// A kubelet waits only for its newest request, so older ones are not
// candidates: a pending CSR created later (or in the same second with a
// greater name), or one already decided created in a later second (one
// second is the resolution of creation times, and a tie broken by name
// would let an already decided request block the node's next one). The
// requester index holds the node's CSRs in every state; a node has a
// handful at most (the kubelet re-requests about every 15 minutes and
// the CSRs are cleaned up after a day).
func (c *Controller) newer(csr *certv1.CertificateSigningRequest) string {
	node, ok := nodeOf(csr)
	if !ok {
		return ""
	}
	objs, err := c.byNode.ByIndex(byRequester, node)
	if err != nil {
		return ""
	}
	newest := csr
	for _, obj := range objs {
		other, ok := obj.(*certv1.CertificateSigningRequest)
		if !ok || other.UID == csr.UID || other.Spec.SignerName != certv1.KubeletServingSignerName {
			continue
		}
		at, than := other.CreationTimestamp.Time, newest.CreationTimestamp.Time
		if at.After(than) || (csrstate.IsPending(other) && at.Equal(than) && other.Name > newest.Name) {
			newest = other
		}
	}
	if newest == csr {
		return ""
	}
	return newest.Name
}
