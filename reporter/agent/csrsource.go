package agent

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
	"github.com/certready/certready/reporter/agent/csrmatch"
	"github.com/certready/certready/reporter/agent/observe"
)

// csrSource gives the CSR evidence for one node. Its main input is the
// informer on CSRs labelled certready.io/node=<node>, so an agent never holds
// other nodes' CSRs. Only while no labelled CSR explains the installed
// certificate (no certready approver labelled it, or not yet) does it list
// kubelet-serving CSRs by signer, bounded in size and backed off in time.
type csrSource struct {
	node     string
	labelled certlisters.CertificateSigningRequestLister
	client   nodeapi.API

	minBackoff, maxBackoff time.Duration
	backoff                time.Duration
	nextFallback           time.Time
	fallback               []*certv1.CertificateSigningRequest
	fallbackErr            error
}

func (s *csrSource) Evidence(ctx context.Context, now time.Time, installed fingerprint.SHA256, proven bool) (csrmatch.Result, error) {
	cached, err := s.labelled.List(labels.Everything())
	if err != nil {
		return csrmatch.Result{}, fmt.Errorf("reading the labelled CSR cache: %w", err)
	}
	listed := false
	res, err := observe.Evidence(cached, s.node, installed, proven, func() ([]*certv1.CertificateSigningRequest, error) {
		listed = true
		if !now.Before(s.nextFallback) {
			s.fallback, s.fallbackErr = observe.ListBySigner(ctx, s.client, s.node)
			s.backoff = min(max(s.backoff*2, s.minBackoff), s.maxBackoff)
			s.nextFallback = now.Add(s.backoff)
			klog.FromContext(ctx).V(2).Info("Listed kubelet-serving CSRs by signer: no labelled CSR explains the installed certificate",
				"found", len(s.fallback), "err", s.fallbackErr, "nextList", s.backoff)
		}
		return s.fallback, s.fallbackErr
	})
	if !listed {
		// Explained by a labelled CSR (or already proven): the next gap
		// starts listing at once again.
		s.backoff, s.nextFallback, s.fallback, s.fallbackErr = 0, time.Time{}, nil, nil
	}
	return res, err
}
