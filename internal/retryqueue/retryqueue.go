// Package retryqueue is the worker step of a controller whose sync either
// succeeds or is retried: the client-go workqueue idiom, written once.
package retryqueue

import (
	"context"

	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"
)

// Next hands q's next key to sync. A key whose sync fails is retried with
// q's backoff and the error logged as msg with the key under keyName
// (unless ctx has ended: a sync cut short by shutdown is no failure); one
// that succeeds is forgotten. False once q has shut down.
func Next[T comparable](ctx context.Context, q workqueue.TypedRateLimitingInterface[T], sync func(context.Context, T) error, msg, keyName string) bool {
	key, shutdown := q.Get()
	if shutdown {
		return false
	}
	defer q.Done(key)
	if err := sync(ctx, key); err != nil && ctx.Err() == nil {
		klog.FromContext(ctx).Error(err, msg, keyName, key)
		q.AddRateLimited(key)
		return true
	}
	q.Forget(key)
	return true
}
