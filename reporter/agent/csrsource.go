package agent

import (
	"context"
	"fmt"
	"time"

	certv1 "k8s.io/api/certificates/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/kubernetes"
	certlisters "k8s.io/client-go/listers/certificates/v1"
	"k8s.io/klog/v2"

	"github.com/certready/certready/reporter/csrmatch"
	"github.com/certready/certready/reporter/fingerprint"
)

const (
	fallbackPageSize = 250
	fallbackMaxPages = 8 // at most 2000 CSRs per fallback list
)

// csrSource gives the CSR evidence for one node. Its main input is the
// informer on CSRs labelled certready.io/node=<node>, so an agent never holds
// other nodes' CSRs. Only while no labelled CSR explains the installed
// certificate (no certready approver labelled it, or not yet) does it list
// kubelet-serving CSRs by signer, bounded in size and backed off in time.
type csrSource struct {
	node     string
	labelled certlisters.CertificateSigningRequestLister
	client   kubernetes.Interface

	minBackoff, maxBackoff time.Duration
	backoff                time.Duration
	nextFallback           time.Time
	fallback               []*certv1.CertificateSigningRequest
	fallbackErr            error
}

func (s *csrSource) evidence(ctx context.Context, now time.Time, installed fingerprint.SHA256, proven bool) (csrmatch.Result, error) {
	cached, err := s.labelled.List(labels.Everything())
	if err != nil {
		return csrmatch.Result{}, fmt.Errorf("reading the labelled CSR cache: %w", err)
	}
	// The API server's selectors keep other CSRs out of the cache; what
	// got in anyway (a client that does not apply them) is not evidence.
	mine := cached[:0:0]
	for _, c := range cached {
		if labelledFor(c, s.node) {
			mine = append(mine, c)
		}
	}
	res := csrmatch.Match(mine, s.node, installed)
	if res.State == csrmatch.Issued || proven {
		s.backoff, s.nextFallback, s.fallback, s.fallbackErr = 0, time.Time{}, nil, nil
		return res, nil
	}
	if !now.Before(s.nextFallback) {
		s.fallback, s.fallbackErr = s.list(ctx)
		s.backoff = min(max(s.backoff*2, s.minBackoff), s.maxBackoff)
		s.nextFallback = now.Add(s.backoff)
		klog.FromContext(ctx).V(2).Info("Listed kubelet-serving CSRs by signer: no labelled CSR explains the installed certificate",
			"found", len(s.fallback), "err", s.fallbackErr, "nextList", s.backoff)
	}
	if s.fallbackErr != nil && len(mine) == 0 {
		return csrmatch.Result{}, s.fallbackErr
	}
	return csrmatch.Match(append(mine, s.fallback...), s.node, installed), nil
}

// labelledFor reports whether c is a kubelet-serving CSR labelled for node.
func labelledFor(c *certv1.CertificateSigningRequest, node string) bool {
	return c.Spec.SignerName == csrmatch.SignerName && c.Labels[csrmatch.NodeLabel] == node
}

// list returns this node's kubelet-serving CSRs, reading at most
// fallbackMaxPages pages of the signer's CSRs.
func (s *csrSource) list(ctx context.Context) ([]*certv1.CertificateSigningRequest, error) {
	user := csrmatch.UserPrefix + s.node
	opts := metav1.ListOptions{
		FieldSelector: fields.OneTermEqualSelector("spec.signerName", csrmatch.SignerName).String(),
		Limit:         fallbackPageSize,
	}
	var out []*certv1.CertificateSigningRequest
	for page := 0; page < fallbackMaxPages; page++ {
		lctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		list, err := s.client.CertificatesV1().CertificateSigningRequests().List(lctx, opts)
		cancel()
		if err != nil {
			return out, fmt.Errorf("listing kubelet-serving CSRs: %w", err)
		}
		for i := range list.Items {
			if list.Items[i].Spec.Username == user {
				out = append(out, &list.Items[i])
			}
		}
		if list.Continue == "" {
			break
		}
		opts.Continue = list.Continue
	}
	return out, nil
}
