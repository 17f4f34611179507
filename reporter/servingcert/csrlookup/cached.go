package csrlookup

import (
	"context"
	"fmt"
	"time"

	certv1 "k8s.io/api/certificates/v1"
	"k8s.io/apimachinery/pkg/labels"
	certlisters "k8s.io/client-go/listers/certificates/v1"
	"k8s.io/klog/v2"

	"github.com/certready/certready/internal/fingerprint"
	"github.com/certready/certready/internal/nodeapi"
	"github.com/certready/certready/reporter/servingcert/csrmatch"
)

// Cached gives the CSR evidence for one node (the agent's source). Its main input is the
// informer on CSRs labelled certready.io/node=<node>, so an agent never holds
// other nodes' CSRs. Only while no labelled CSR explains the installed
// certificate (no certready approver labelled it, or not yet), or while a
// renewal looks stuck (the approver that labels requests may be the thing
// that is down), does it list kubelet-serving CSRs by signer, bounded in
// size and backed off in time, each use on its own backoff.
type Cached struct {
	node     string
	labelled certlisters.CertificateSigningRequestLister
	client   nodeapi.API

	minBackoff, maxBackoff time.Duration
	evidence, renewal      signerList
}

// NewCached reads node's labelled CSRs from labelled (an informer's lister
// over Selector(node)) and lists the signer's through client, backing off
// from minBackoff to maxBackoff between lists.
func NewCached(node string, labelled certlisters.CertificateSigningRequestLister, client nodeapi.API, minBackoff, maxBackoff time.Duration) *Cached {
	return &Cached{node: node, labelled: labelled, client: client, minBackoff: minBackoff, maxBackoff: maxBackoff}
}

// signerList is one use's backed-off list of the node's CSRs by signer.
type signerList struct {
	backoff time.Duration
	next    time.Time
	items   []*certv1.CertificateSigningRequest
	err     error
}

// get lists again once the backoff has passed, else returns the last list.
func (s *Cached) get(ctx context.Context, l *signerList, now time.Time, why string) ([]*certv1.CertificateSigningRequest, error) {
	if !now.Before(l.next) {
		l.items, l.err = ListBySigner(ctx, s.client, s.node)
		l.backoff = min(max(l.backoff*2, s.minBackoff), s.maxBackoff)
		l.next = now.Add(l.backoff)
		klog.FromContext(ctx).V(2).Info("Listed kubelet-serving CSRs by signer: "+why, "found", len(l.items), "err", l.err, "nextList", l.backoff)
	}
	return l.items, l.err
}

// Evidence applies Evidence's rule to the cache and the backed-off list.
func (s *Cached) Evidence(ctx context.Context, now time.Time, installed fingerprint.SHA256, proven bool) (csrmatch.Result, error) {
	cached, err := s.labelled.List(labels.Everything())
	if err != nil {
		return csrmatch.Result{}, fmt.Errorf("reading the labelled CSR cache: %w", err)
	}
	listed := false
	res, err := Evidence(cached, s.node, installed, proven, func() ([]*certv1.CertificateSigningRequest, error) {
		listed = true
		return s.get(ctx, &s.evidence, now, "no labelled CSR explains the installed certificate")
	})
	if !listed {
		// Explained by a labelled CSR (or already proven): the next gap
		// starts listing at once again.
		s.evidence = signerList{}
	}
	return res, err
}

// Labelled returns the node's labelled CSRs from the cache.
func (s *Cached) Labelled() []*certv1.CertificateSigningRequest {
	cached, _ := s.labelled.List(labels.Everything())
	return cached
}

// WithUnlabelled returns cached (Labelled's answer) and the CSRs of the backed-off list
// by signer, for a renewal the labelled ones alone call stuck: a request
// the approver never saw (none runs?) carries no label. A failed list
// leaves the labelled ones.
func (s *Cached) WithUnlabelled(ctx context.Context, now time.Time, cached []*certv1.CertificateSigningRequest) []*certv1.CertificateSigningRequest {
	listed, err := s.get(ctx, &s.renewal, now, "a renewal looks stuck")
	if err != nil {
		return cached
	}
	seen := make(map[string]bool, len(cached))
	for _, c := range cached {
		seen[c.Name] = true
	}
	out := append([]*certv1.CertificateSigningRequest{}, cached...)
	for _, c := range listed {
		if !seen[c.Name] {
			out = append(out, c)
		}
	}
	return out
}

// RenewalNotStuck ends WithUnlabelled's backoff: the next stuck renewal
// lists at once.
func (s *Cached) RenewalNotStuck() { s.renewal = signerList{} }
