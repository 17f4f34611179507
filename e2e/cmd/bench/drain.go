package main

import (
	"context"
	"fmt"
	"strings"
	"time"

	certv1 "k8s.io/api/certificates/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
)

// drainResult is the backlog drain: N kubelet-serving CSRs already pending
// when the approver starts (a leader crash or an upgrade during a
// scale-up), timed from the approver's start.
type drainResult struct {
	N int `json:"n"`
	// From the approver's process start to: its caches synced, the Lease
	// acquired, its workers acting (its own log lines), the first and the
	// last approval (the bench's watch).
	ToSynced time.Duration `json:"toSynced"`
	ToLeader time.Duration `json:"toLeader"`
	ToActing time.Duration `json:"toActing"`
	ToFirst  time.Duration `json:"toFirst"`
	ToLast   time.Duration `json:"toLast"`
	// PerSecond is approvals from the first to the last.
	PerSecond float64 `json:"approvedPerSecond"`
	// Where the time of each approval goes: the approver's own (first
	// event -> approval written), the API server's mean time for one
	// approval write, and the mean wait in API Priority and Fairness.
	OwnP50          time.Duration `json:"approverOwnP50"`
	OwnP99          time.Duration `json:"approverOwnP99"`
	WriteMeanMillis float64       `json:"approvalWriteMeanMilliseconds"`
	APFWaitMillis   float64       `json:"approverAPFWaitMilliseconds"`
	Approved        int           `json:"approved"`
}

// drain stops the approver, files n CSRs from n node identities, starts
// the approver again and times it to the last approval.
func (b *bench) drain(ctx context.Context, n int) (drainResult, error) {
	res := drainResult{N: n}
	run := b.stormRuns.Add(1)
	b.logf("backlog drain: %d pending CSRs before the approver starts", n)
	b.approver.Stop()
	nodes := newStormNodes(n)
	defer b.removeStormNodes(ctx, nodes.names)
	if err := b.fileBacklog(ctx, run, nodes); err != nil {
		return res, err
	}
	w, err := b.c.Client.CertificatesV1().CertificateSigningRequests().Watch(ctx, metav1.ListOptions{LabelSelector: "certready.io/bench=storm"})
	if err != nil {
		return res, err
	}
	defer w.Stop()
	before, err := b.apiCounts(ctx)
	if err != nil {
		return res, err
	}
	writesBefore, err := b.approvalWrites(ctx)
	if err != nil {
		return res, err
	}
	start := time.Now()
	if err := b.startApprover(ctx); err != nil {
		return res, err
	}
	first, last, err := drained(w, fmt.Sprintf("storm%d-csr-", run), n, time.Duration(n)*100*time.Millisecond+2*time.Minute)
	if err != nil {
		return res, fmt.Errorf("drain %d: %w", n, err)
	}
	res.Approved = n
	res.ToFirst, res.ToLast = first.Sub(start), last.Sub(start)
	if d := last.Sub(first); d > 0 {
		res.PerSecond = float64(n-1) / d.Seconds()
	}
	if err := b.addDrainFigures(ctx, &res, start, before, writesBefore); err != nil {
		return res, err
	}
	b.logf("drain %d: caches synced %s, leader %s, acting %s, first approval %s, last %s after the start; %.0f approvals/s; own p50 %s p99 %s; write %.1f ms; APF wait %.2f ms",
		n, res.ToSynced.Round(time.Millisecond), res.ToLeader.Round(time.Millisecond), res.ToActing.Round(time.Millisecond),
		res.ToFirst.Round(time.Millisecond), res.ToLast.Round(time.Millisecond), res.PerSecond, ms(res.OwnP50), ms(res.OwnP99), res.WriteMeanMillis, res.APFWaitMillis)
	return res, nil
}

// fileBacklog makes each node and files its CSR, 16 at a time, while no
// approver runs, then lets the controllers' reactions to the new Nodes
// finish.
func (b *bench) fileBacklog(ctx context.Context, run int64, nodes stormNodes) error {
	err := parallel(len(nodes.csrs), 16, func(i int) error {
		if err := b.prepareStormNode(ctx, run, i, nodes); err != nil {
			return err
		}
		_, err := nodes.clients[i].CertificatesV1().CertificateSigningRequests().Create(ctx, nodes.csrs[i], metav1.CreateOptions{})
		return err
	})
	if err != nil {
		return fmt.Errorf("filing the backlog: %w", err)
	}
	return b.quiesce(ctx, "nodes")
}

// drained follows the watch until n CSRs named with prefix are approved,
// and says when the first and the last approval were seen.
func drained(w watch.Interface, prefix string, n int, timeout time.Duration) (first, last time.Time, err error) {
	approved := map[string]bool{}
	deadline := time.After(timeout)
	for len(approved) < n {
		select {
		case ev, ok := <-w.ResultChan():
			if !ok {
				return first, last, fmt.Errorf("the CSR watch closed after %d approvals", len(approved))
			}
			csr, isCSR := ev.Object.(*certv1.CertificateSigningRequest)
			if !isCSR || !strings.HasPrefix(csr.Name, prefix) || approved[csr.Name] || !isApproved(csr) {
				continue
			}
			now := time.Now()
			if first.IsZero() {
				first = now
			}
			last = now
			approved[csr.Name] = true
		case <-deadline:
			return first, last, fmt.Errorf("%d approved in time", len(approved))
		}
	}
	return first, last, nil
}

// addDrainFigures reads where the drain's time went: the approver's start-up
// stages from its log, its own decision histogram, the API server's
// approval writes and the APF wait.
func (b *bench) addDrainFigures(ctx context.Context, res *drainResult, start time.Time, before apiCounts, writesBefore writeStats) error {
	for line, dst := range map[string]*time.Duration{"Approver caches synced": &res.ToSynced, "Acquired the leader Lease": &res.ToLeader, "Approver acting": &res.ToActing} {
		if at, ok := logTime(b.c.Logs("bench-approver", 1<<20), line, start); ok {
			*dst = at.Sub(start)
		}
	}
	own, err := b.approverHistogram(ctx, "certready_approver_decision_seconds")
	if err != nil {
		return err
	}
	// A new process: its histogram starts empty.
	res.OwnP50, res.OwnP99 = own.quantile(histogram{}, .5), own.quantile(histogram{}, .99)
	after, err := b.apiCounts(ctx)
	if err != nil {
		return err
	}
	res.APFWaitMillis = after.apfWaitMillisSince(before)
	writesAfter, err := b.approvalWrites(ctx)
	if err != nil {
		return err
	}
	if c := writesAfter.count - writesBefore.count; c > 0 {
		res.WriteMeanMillis = (writesAfter.sum - writesBefore.sum) / c * 1000
	}
	return nil
}

type writeStats struct{ sum, count float64 }

// approvalWrites sums the API server's own duration histogram of approval
// writes (PUT certificatesigningrequests/approval).
func (b *bench) approvalWrites(ctx context.Context) (writeStats, error) {
	families, err := b.apiMetrics(ctx)
	if err != nil {
		return writeStats{}, err
	}
	var out writeStats
	for _, m := range families["apiserver_request_duration_seconds"].GetMetric() {
		l := labelsOf(m)
		if l["resource"] == "certificatesigningrequests" && l["subresource"] == "approval" && l["verb"] == "PUT" {
			out.sum += m.GetHistogram().GetSampleSum()
			out.count += float64(m.GetHistogram().GetSampleCount())
		}
	}
	return out, nil
}

// logTime finds, in a klog log, the last line holding msg and stamped at or
// after since, and returns its time (klog writes the month, day and time
// of day; the year is since's).
func logTime(log, msg string, since time.Time) (time.Time, bool) {
	var found time.Time
	for _, line := range strings.Split(log, "\n") {
		if !strings.Contains(line, msg) || len(line) < 21 {
			continue
		}
		t, err := time.Parse("0102 15:04:05.000000", line[1:21])
		if err != nil {
			continue
		}
		t = time.Date(since.Year(), t.Month(), t.Day(), t.Hour(), t.Minute(), t.Second(), t.Nanosecond(), since.Location())
		if !t.Before(since.Truncate(time.Second)) {
			found = t
		}
	}
	return found, !found.IsZero()
}
