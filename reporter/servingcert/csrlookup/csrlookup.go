// Package csrlookup is the one way a node's kubelet-serving CSRs are
// found: the selector and predicates that say which CSRs are the node's,
// the rule that says which to read first, and the sources that read them
// (the agent's cache with a backed-off signer-wide list, the API for the
// one-shot check). csrmatch then judges what was found; it reads nothing.
package csrlookup

import (
	"context"
	"fmt"
	"sync"
	"time"

	certv1 "k8s.io/api/certificates/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/tools/cache"

	"github.com/certready/certready/internal/fingerprint"
	"github.com/certready/certready/internal/names"
	"github.com/certready/certready/internal/nodeapi"
	"github.com/certready/certready/internal/trim"
	"github.com/certready/certready/reporter/servingcert/csrmatch"
)

// Selector selects the kubelet-serving CSRs labelled for node. Anyone
// who may create CSRs can set the label; only the kubelet-serving signer's
// are selected (the approver corrects the label on those), so others
// cannot fill the agent's cache.
func Selector(node string) func(*metav1.ListOptions) {
	return func(o *metav1.ListOptions) {
		o.LabelSelector = labels.Set{names.NodeLabel: node}.String()
		o.FieldSelector = fields.OneTermEqualSelector("spec.signerName", names.SignerName).String()
	}
}

// API reads a node's CSRs from the API on every check (the
// node-problem-detector check's source: it runs once, so it has no cache
// to read).
type API struct {
	Client nodeapi.API
	Node   string
}

// Evidence lists the labelled CSRs, then, by the same rule as the agent,
// the signer's.
func (a API) Evidence(ctx context.Context, _ time.Time, installed fingerprint.SHA256, proven bool) (csrmatch.Result, error) {
	var opts metav1.ListOptions
	Selector(a.Node)(&opts)
	list, err := a.Client.ListCSRs(ctx, opts)
	if err != nil {
		return csrmatch.Result{}, fmt.Errorf("listing CSRs labelled %s=%s: %w", names.NodeLabel, a.Node, err)
	}
	labelled := make([]*certv1.CertificateSigningRequest, 0, len(list.Items))
	for i := range list.Items {
		labelled = append(labelled, &list.Items[i])
	}
	return Evidence(labelled, a.Node, installed, proven, func() ([]*certv1.CertificateSigningRequest, error) {
		return ListBySigner(ctx, a.Client, a.Node)
	})
}

// Evidence is the one rule for finding a node's CSRs: the ones labelled
// for it (names.NodeLabel) first; only when none of them explains the
// installed certificate, and it is not already proven, those that fallback
// returns (the signer-wide list, which an approver other than certready's
// leaves unlabelled). A fallback error counts only when nothing labelled
// is known either.
func Evidence(labelled []*certv1.CertificateSigningRequest, node string, installed fingerprint.SHA256, proven bool,
	fallback func() ([]*certv1.CertificateSigningRequest, error)) (csrmatch.Result, error) {
	mine := labelled[:0:0]
	for _, c := range labelled {
		// The API server's selectors keep other CSRs out; what got in anyway
		// (a client that does not apply them) is not evidence.
		if Labelled(c, node) {
			mine = append(mine, c)
		}
	}
	res := csrmatch.Match(mine, node, installed)
	if res.State == csrmatch.Issued || proven {
		return res, nil
	}
	more, err := fallback()
	if err != nil && len(mine) == 0 {
		return csrmatch.Result{}, err
	}
	return csrmatch.Match(append(mine, more...), node, installed), nil
}

// Labelled reports whether c is a kubelet-serving CSR labelled for node.
func Labelled(c *certv1.CertificateSigningRequest, node string) bool {
	return c.Spec.SignerName == names.SignerName && c.Labels[names.NodeLabel] == node
}

// ListBySigner returns node's kubelet-serving CSRs from one read of every
// CSR of the signer. Anyone who may create CSRs can make that read large
// (hundreds of pending requests of a megabyte each): it is streamed (the
// informer's watch-list; pages where the API server cannot stream), and
// each CSR is trimmed as it arrives, others' to their name and every
// request dropped. In memory: the CSR in flight, and a name per CSR.
func ListBySigner(ctx context.Context, api nodeapi.API, node string) ([]*certv1.CertificateSigningRequest, error) {
	inf := cache.NewSharedIndexInformer(api.CSRs(func(o *metav1.ListOptions) {
		o.FieldSelector = fields.OneTermEqualSelector("spec.signerName", names.SignerName).String()
	}), &certv1.CertificateSigningRequest{}, 0, cache.Indexers{})
	mine := trim.CSR(trim.CSROptions{KeepCertificate: true, DropRequest: true})
	isMine := func(c *certv1.CertificateSigningRequest) bool { return csrmatch.FiledBy(c, node) }
	if err := inf.SetTransform(func(obj any) (any, error) {
		c, ok := obj.(*certv1.CertificateSigningRequest)
		if !ok || isMine(c) {
			return mine(obj)
		}
		return &certv1.CertificateSigningRequest{ObjectMeta: metav1.ObjectMeta{Name: c.Name, ResourceVersion: c.ResourceVersion}}, nil
	}); err != nil {
		return nil, err
	}
	var mu sync.Mutex
	var lastErr error
	if err := inf.SetWatchErrorHandlerWithContext(func(_ context.Context, _ *cache.Reflector, err error) {
		mu.Lock()
		lastErr = err
		mu.Unlock()
	}); err != nil {
		return nil, err
	}
	lctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	stopped := make(chan struct{})
	defer func() { cancel(); <-stopped }() // the informer's goroutines end with the call
	go func() { defer close(stopped); inf.RunWithContext(lctx) }()
	if !cache.WaitForCacheSync(lctx.Done(), inf.HasSynced) {
		mu.Lock()
		defer mu.Unlock()
		return nil, fmt.Errorf("listing kubelet-serving CSRs: not done within 30s (last error: %w)", lastErr)
	}
	var out []*certv1.CertificateSigningRequest
	for _, obj := range inf.GetStore().List() {
		if c, ok := obj.(*certv1.CertificateSigningRequest); ok && isMine(c) {
			out = append(out, c)
		}
	}
	return out, nil
}
