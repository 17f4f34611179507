package main

import (
	"context"
	"fmt"
	mrand "math/rand/v2"
	"os"
	"path/filepath"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
)

type readinessResult struct {
	ToFalse     []time.Duration `json:"toFalse"`
	ToUntainted []time.Duration `json:"toUntainted"`
	Poller      []time.Duration `json:"poller10s"`
}

// readiness measures install -> False and -> untainted over n transitions,
// with a 10 s existence poller of random phase running beside the agent.
func (b *bench) readiness(ctx context.Context, n int) (*readinessResult, error) {
	b.logf("readiness latency: %d transitions (each: uninstall -> condition True, reinstall -> condition False and taint removed)", n)
	res := &readinessResult{}
	current := filepath.Join(b.pki, "kubelet-server-current.pem")
	for i := 0; i < n; i++ {
		// Back to not ready: no certificate, then the readiness taint
		// re-applied (before the condition is True, the fallback would
		// rightly remove it again at once).
		b.serving.Store(nil)
		if err := os.Remove(current); err != nil {
			return nil, err
		}
		if err := b.waitNode(ctx, time.Minute, "condition True", func(n *corev1.Node) bool {
			c := cond(n)
			return c != nil && c.Status == corev1.ConditionTrue
		}); err != nil {
			return nil, err
		}
		patch := fmt.Sprintf(`{"spec":{"taints":[{"key":%q,"value":"pending","effect":"NoSchedule"}]}}`, taintKey)
		if _, err := b.c.Client.CoreV1().Nodes().Patch(ctx, simNode, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
			return nil, err
		}
		w, err := b.c.Client.CoreV1().Nodes().Watch(ctx, metav1.ListOptions{FieldSelector: "metadata.name=" + simNode})
		if err != nil {
			return nil, err
		}
		// The reference: a poller whose 10 s ticks fall at a random phase
		// relative to the install, testing the file's existence for real.
		phase := time.Duration(mrand.Int64N(int64(10 * time.Second)))
		pollerDone := make(chan time.Duration, 1)
		k := i % 2
		b.serving.Store(b.certs[k]) // the kubelet serves what it installs
		t0 := time.Now()
		go func() {
			next := t0.Add(phase)
			for {
				time.Sleep(time.Until(next))
				if _, err := os.Stat(current); err == nil {
					pollerDone <- time.Since(t0)
					return
				}
				next = next.Add(10 * time.Second)
			}
		}()
		if err := b.swap(b.pairs[k]); err != nil {
			return nil, err
		}
		var toFalse, toUntainted time.Duration
		deadline := time.After(time.Minute)
		for toFalse == 0 || toUntainted == 0 {
			select {
			case ev := <-w.ResultChan():
				if ev.Type != watch.Modified {
					continue
				}
				node := ev.Object.(*corev1.Node)
				if toFalse == 0 && ready(node) {
					toFalse = time.Since(t0)
				}
				if toFalse != 0 && toUntainted == 0 && !tainted(node) {
					toUntainted = time.Since(t0)
				}
			case <-deadline:
				w.Stop()
				return nil, fmt.Errorf("transition %d: not ready and untainted within a minute", i)
			}
		}
		w.Stop()
		res.ToFalse = append(res.ToFalse, toFalse)
		res.ToUntainted = append(res.ToUntainted, toUntainted)
		res.Poller = append(res.Poller, <-pollerDone)
	}
	b.logf("readiness: agent p50 %s, poller p50 %s", ms(pct(res.ToFalse, .5)), ms(pct(res.Poller, .5)))
	return res, nil
}
