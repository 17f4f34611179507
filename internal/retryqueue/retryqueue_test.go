package retryqueue_test

import (
	"context"
	"errors"
	"testing"

	"k8s.io/client-go/util/workqueue"

	"github.com/certready/certready/internal/retryqueue"
)

func TestNextRetriesFailuresAndForgetsSuccesses(t *testing.T) {
	q := workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[string]())
	defer q.ShutDown()
	fail := map[string]bool{"bad": true}
	var seen []string
	sync := func(_ context.Context, k string) error {
		seen = append(seen, k)
		if fail[k] {
			return errors.New("boom")
		}
		return nil
	}
	ctx := context.Background()
	q.Add("good")
	q.Add("bad")
	for range 2 {
		if !retryqueue.Next(ctx, q, sync, "failed", "key") {
			t.Fatal("Next reported shutdown on a live queue")
		}
	}
	if len(seen) != 2 || seen[0] != "good" || seen[1] != "bad" {
		t.Fatalf("synced %v, want [good bad]", seen)
	}
	if n := q.NumRequeues("bad"); n != 1 {
		t.Errorf("failed key requeued %d times, want 1", n)
	}
	if n := q.NumRequeues("good"); n != 0 {
		t.Errorf("successful key has %d requeues, want 0 (forgotten)", n)
	}
	// A failure once ctx has ended is shutdown, not something to retry.
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	q.Add("late")
	fail["late"] = true
	retryqueue.Next(cctx, q, sync, "failed", "key")
	if n := q.NumRequeues("late"); n != 0 {
		t.Errorf("a failure after ctx ended was requeued (%d)", n)
	}
	// "bad" is still waiting out its backoff: a shut-down queue hands out
	// nothing more.
	q.ShutDown()
	if retryqueue.Next(ctx, q, sync, "failed", "key") {
		t.Error("Next kept going on a shut-down queue")
	}
}
