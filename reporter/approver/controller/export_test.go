package controller

import (
	"context"
	"time"
)

// Sync handles one CSR as a worker would (nothing unless leading), so that
// a test knows the CSR was handled rather than hoping a worker got to it.
func (c *Controller) Sync(ctx context.Context, name string) (time.Duration, error) {
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
