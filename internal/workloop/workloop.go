// Package workloop is the one worker loop every certready controller runs
// (the approver's CSR controller, the taint fallback, the Cluster API
// manager and the agent): client-go's rate-limited workqueue of keys, a
// number of workers, and a sync whose answer says what happens to the key
// next. Written once, so that retry, backoff and shutdown mean the same in
// every loop.
package workloop

import (
	"context"
	"sync"
	"time"

	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"
)

// Sync handles one key and says what happens to it next. An error retries
// it with the queue's backoff and is logged.
type Sync[T comparable] func(ctx context.Context, key T) (Result, error)

// Result is a sync's answer when it did not fail: done, look again after a
// while, or retry with the queue's backoff.
type Result struct {
	after time.Duration
	retry bool
}

// Done: nothing more to do for the key until it is added again.
func Done() Result { return Result{} }

// After looks at the key again after d (d <= 0: Done).
func After(d time.Duration) Result { return Result{after: max(d, 0)} }

// Retry retries the key with the queue's backoff: not a failure, a
// precondition not met yet (a newer object's own event follows, a
// transient refusal), so nothing is logged.
func Retry() Result { return Result{retry: true} }

// IsDone reports whether r is Done.
func (r Result) IsDone() bool { return r == Result{} }

// Config names a loop's queue (client-go's workqueue metrics carry the
// name), its backoff, and how its failures are logged.
type Config[T comparable] struct {
	// Name of the queue.
	Name string
	// RateLimiter paces retries; client-go's default controller rate
	// limiter when nil.
	RateLimiter workqueue.TypedRateLimiter[T]
	// KeyName is the log key of the item ("csr", "node", "cluster").
	KeyName string
	// Failure is the log message of a failed sync.
	Failure string
}

// Loop is a rate-limited workqueue and the sync its workers run. The queue's
// own methods (Add, AddAfter, Len…) are the loop's.
type Loop[T comparable] struct {
	workqueue.TypedRateLimitingInterface[T]
	sync Sync[T]
	cfg  Config[T]
}

// New makes a loop; nothing runs until Run.
func New[T comparable](cfg Config[T], sync Sync[T]) *Loop[T] {
	if cfg.RateLimiter == nil {
		cfg.RateLimiter = workqueue.DefaultTypedControllerRateLimiter[T]()
	}
	return &Loop[T]{
		TypedRateLimitingInterface: workqueue.NewTypedRateLimitingQueueWithConfig(cfg.RateLimiter,
			workqueue.TypedRateLimitingQueueConfig[T]{Name: cfg.Name}),
		sync: sync,
		cfg:  cfg,
	}
}

// Errors adapts a sync that either succeeds or is retried.
func Errors[T comparable](sync func(context.Context, T) error) Sync[T] {
	return func(ctx context.Context, key T) (Result, error) { return Done(), sync(ctx, key) }
}

// Run works the queue with the given number of workers until ctx ends, then
// shuts the queue down and waits for the workers to finish their keys.
func (l *Loop[T]) Run(ctx context.Context, workers int) {
	var wg sync.WaitGroup
	for range max(workers, 1) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for l.Next(ctx) {
			}
		}()
	}
	<-ctx.Done()
	l.ShutDown()
	wg.Wait()
}

// Next hands the next key to the sync and acts on its answer. A sync cut
// short because ctx ended is no failure and is not retried. False once the
// queue has shut down.
func (l *Loop[T]) Next(ctx context.Context) bool {
	key, shutdown := l.Get()
	if shutdown {
		return false
	}
	defer l.Done(key)
	res, err := l.sync(ctx, key)
	switch {
	case ctx.Err() != nil:
	case err != nil:
		klog.FromContext(ctx).Error(err, l.cfg.Failure, l.cfg.KeyName, key)
		l.AddRateLimited(key)
	case res.retry:
		l.AddRateLimited(key)
	default:
		l.Forget(key)
		if res.after > 0 {
			l.AddAfter(key, res.after)
		}
	}
	return true
}
