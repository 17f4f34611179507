package controller

import (
	"context"

	certv1 "k8s.io/api/certificates/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/certready/certready/internal/workloop"
	"github.com/certready/certready/reporter/approver/policy"
)

// Sync handles one CSR as a worker would (nothing unless leading), so that
// a test knows the CSR was handled rather than hoping a worker got to it.
func (c *Controller) Sync(ctx context.Context, name string) (workloop.Result, error) {
	return c.sync(ctx, name)
}

// Leading reports whether Run has started leading (its caches and
// handlers synced).
func (c *Controller) Leading() bool { return c.leading.Load() }

// FirstSeen counts the CSRs whose first event awaits their decision.
func (c *Controller) FirstSeen() int {
	n := 0
	c.firstSeen.Range(func(any, any) bool { n++; return true })
	return n
}

// QueueLen is how many CSRs wait to be handled.
func (c *Controller) QueueLen() int { return c.queue.Len() }

// DrainQueue takes every waiting CSR off the queue unhandled.
func (c *Controller) DrainQueue() {
	for c.queue.Len() > 0 {
		k, _ := c.queue.Get()
		c.queue.Forget(k)
		c.queue.Done(k)
	}
}

// NoteLater queues a refusal to keep on csr; WriteNote writes the one of
// name now.
func (c *Controller) NoteLater(csr *certv1.CertificateSigningRequest, rule policy.Rule, msg string) {
	c.noteLater(csr, rule, msg)
}

func (c *Controller) WriteNote(ctx context.Context, name string) error { return c.writeNote(ctx, name) }

// CachedUID is the UID of the informer's copy of name.
func (c *Controller) CachedUID(name string) (types.UID, error) {
	csr, err := c.csrs.Get(name)
	if err != nil {
		return "", err
	}
	return csr.UID, nil
}
