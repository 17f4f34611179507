package workloop_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/certready/certready/internal/testwait"
	"github.com/certready/certready/internal/workloop"
)

// Each answer of a sync leaves the key where the loop's contract says.
func TestNextActsOnTheSyncsAnswer(t *testing.T) {
	for _, tc := range []struct {
		name          string
		res           workloop.Result
		err           error
		cancelled     bool
		wantRequeues  int  // the backoff counter after the step (one failure seen before it)
		wantScheduled bool // the key comes back on its own
	}{
		{name: "done forgets the backoff", res: workloop.Done(), wantRequeues: 0},
		{name: "failure retries with backoff", res: workloop.Done(), err: errors.New("boom"), wantRequeues: 2, wantScheduled: true},
		{name: "retry asks for backoff without failing", res: workloop.Retry(), wantRequeues: 2, wantScheduled: true},
		{name: "after looks again later, backoff forgotten", res: workloop.After(10 * time.Millisecond), wantRequeues: 0, wantScheduled: true},
		{name: "after with no delay is done", res: workloop.After(-time.Second), wantRequeues: 0},
		{name: "a failure after ctx ended is shutdown, not retried", err: errors.New("cut short"), cancelled: true, wantRequeues: 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synced := 0
			l := workloop.New(workloop.Config[string]{Name: "test", KeyName: "key", Failure: "failed"},
				func(context.Context, string) (workloop.Result, error) { synced++; return tc.res, tc.err })
			defer l.ShutDown()
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			// A failure seen before counts: "after" must clear it.
			l.AddRateLimited("k")
			if !testwait.Until(5*time.Second, func() bool { return l.Len() == 1 }) {
				t.Fatal("the rate-limited key did not arrive")
			}
			if tc.cancelled {
				cancel()
			}
			if !l.Next(ctx) {
				t.Fatal("Next reported shutdown on a live queue")
			}
			if synced != 1 {
				t.Fatalf("synced %d times, want 1", synced)
			}
			if n := l.NumRequeues("k"); n != tc.wantRequeues {
				t.Errorf("NumRequeues = %d, want %d", n, tc.wantRequeues)
			}
			if tc.wantScheduled {
				if !testwait.Until(5*time.Second, func() bool { return l.Len() == 1 }) {
					t.Error("the key did not come back")
				}
			} else if l.Len() != 0 {
				t.Errorf("queue holds %d keys, want none", l.Len())
			}
		})
	}
}

// Run's workers handle every key and stop, queue shut down, when ctx ends.
func TestRunWorksUntilCancelled(t *testing.T) {
	seen := make(chan string, 10)
	l := workloop.New(workloop.Config[string]{Name: "test"}, workloop.Errors(func(_ context.Context, k string) error {
		seen <- k
		return nil
	}))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { l.Run(ctx, 3); close(done) }()
	for _, k := range []string{"a", "b", "c"} {
		l.Add(k)
	}
	got := map[string]bool{}
	for len(got) < 3 {
		select {
		case k := <-seen:
			got[k] = true
		case <-time.After(10 * time.Second):
			t.Fatalf("workers handled %v, want a, b and c", got)
		}
	}
	cancel()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return after ctx ended")
	}
	if !l.ShuttingDown() {
		t.Error("the queue is not shut down after Run returned")
	}
	if l.Next(context.Background()) {
		t.Error("Next kept going on a shut-down queue")
	}
}
