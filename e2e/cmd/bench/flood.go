package main

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	certv1 "k8s.io/api/certificates/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/certready/certready/e2e/localcluster"
	"github.com/certready/certready/internal/names"
	"github.com/certready/certready/internal/testpki"
)

// floodResult is the large-request flood: N pending CSRs of about Bytes
// each, from Identities node identities no Node has, labelled for the
// bench agent's node (to reach its cache too), while Valid real nodes ask
// for their certificates.
type floodResult struct {
	N          int `json:"n"`
	Bytes      int `json:"bytesEach"`
	Identities int `json:"identities"`
	Failed     int `json:"failedCreations"`
	// Peak resident set during the flood (VmHWM after a reset, and the
	// highest of samples every 50 ms), and before it.
	ApproverPeakRSS   int64 `json:"approverPeakRSSBytes"`
	AgentPeakRSS      int64 `json:"agentPeakRSSBytes"`
	ApproverRSSBefore int64 `json:"approverRSSBytesBefore"`
	AgentRSSBefore    int64 `json:"agentRSSBytesBefore"`
	// Refused counts the approver's RequestTooLarge decisions (one per
	// identity's newest request) and Superseded the requests it left
	// behind a newer one of the same identity (the rest).
	Refused    float64 `json:"refusedTooLarge"`
	Superseded float64 `json:"superseded"`
	// Valid real nodes' CSRs filed during the flood, and how long each
	// took to be approved.
	Valid          int             `json:"valid"`
	ValidLatencies []time.Duration `json:"validLatencies"`
	Duration       time.Duration   `json:"duration"`
	// Restarted names a process that did not survive (empty: none).
	Restarted []string `json:"restarted,omitempty"`
}

// flood files n CSRs of size bytes from identities hostile node identities
// (spoofing the bench agent's node label), 8 at a time, and valid real
// nodes' CSRs in the middle of it; it measures both processes' peak RSS,
// that neither restarted and that the valid ones were approved.
func (b *bench) flood(ctx context.Context, n, size, identities, valid int) (floodResult, error) {
	res := floodResult{N: n, Bytes: size, Identities: identities, Valid: valid}
	b.logf("large-request flood: %d CSRs of %d KiB from %d identities, %d valid nodes asking meanwhile", n, size>>10, identities, valid)
	peaks := b.samplePeaks()
	res.ApproverRSSBefore, res.AgentRSSBefore = rssBytes(peaks.pids["approver"]), rssBytes(peaks.pids["agent"])
	refusedBefore, supersededBefore, err := b.floodDecisions(ctx)
	if err != nil {
		peaks.stop()
		return res, err
	}
	// The valid nodes, ready to ask.
	run := b.stormRuns.Add(1)
	nodes := newStormNodes(valid)
	defer b.removeStormNodes(ctx, nodes.names)
	for i := 0; i < valid; i++ {
		if err := b.prepareStormNode(ctx, run, i, nodes); err != nil {
			peaks.stop()
			return res, err
		}
	}
	w, err := b.c.Client.CertificatesV1().CertificateSigningRequests().Watch(ctx, metav1.ListOptions{LabelSelector: "certready.io/bench=storm"})
	if err != nil {
		peaks.stop()
		return res, err
	}
	defer w.Stop()

	start := time.Now()
	created, validAt, err := b.fileFlood(ctx, run, n, size, identities, nodes, &res)
	defer func() {
		for _, name := range created {
			_ = b.c.Client.CertificatesV1().CertificateSigningRequests().Delete(context.Background(), name, metav1.DeleteOptions{})
		}
	}()
	if err == nil {
		res.ValidLatencies, err = validApproved(w, nodes.csrs, validAt)
	}
	if err == nil {
		err = b.floodDecided(ctx, &res, len(created), refusedBefore, supersededBefore)
	}
	res.Duration = time.Since(start)
	peaks.stop()
	if err != nil {
		return res, err
	}
	res.Restarted = peaks.restarted()
	res.ApproverPeakRSS, res.AgentPeakRSS = peaks.peak("approver"), peaks.peak("agent")
	if len(res.Restarted) > 0 {
		return res, fmt.Errorf("flood: %v did not survive", res.Restarted)
	}
	b.logf("flood: approver peak RSS %.1f MiB (before %.1f), agent %.1f MiB (before %.1f); %d valid approved, p99 %s",
		float64(res.ApproverPeakRSS)/(1<<20), float64(res.ApproverRSSBefore)/(1<<20), float64(res.AgentPeakRSS)/(1<<20), float64(res.AgentRSSBefore)/(1<<20),
		len(res.ValidLatencies), ms(pct(res.ValidLatencies, .99)))
	return res, nil
}

// peakSampler reads the approver's and the agent's RSS every 50 ms from its
// start (their kernel peak, VmHWM, reset then too) until stop.
type peakSampler struct {
	procs   map[string]*localcluster.Process
	pids    map[string]int
	peaks   map[string]*atomic.Int64
	done    chan struct{}
	sampled chan struct{}
}

func (b *bench) samplePeaks() *peakSampler {
	s := &peakSampler{procs: map[string]*localcluster.Process{"approver": b.approver, "agent": b.agent},
		pids: map[string]int{}, peaks: map[string]*atomic.Int64{}, done: make(chan struct{}), sampled: make(chan struct{})}
	for name, p := range s.procs {
		s.pids[name] = p.PID()
		s.peaks[name] = new(atomic.Int64)
		// Linux resets the peak RSS (VmHWM) on writing 5 to clear_refs.
		_ = os.WriteFile(fmt.Sprintf("/proc/%d/clear_refs", p.PID()), []byte("5"), 0)
	}
	go func() {
		defer close(s.sampled)
		t := time.NewTicker(50 * time.Millisecond)
		defer t.Stop()
		for {
			for name, peak := range s.peaks {
				if r := rssBytes(s.pids[name]); r > peak.Load() {
					peak.Store(r)
				}
			}
			select {
			case <-s.done:
				return
			case <-t.C:
			}
		}
	}()
	return s
}

func (s *peakSampler) stop() {
	select {
	case <-s.done:
	default:
		close(s.done)
	}
	<-s.sampled
}

// peak is the highest RSS sampled or recorded by the kernel.
func (s *peakSampler) peak(name string) int64 {
	return max(s.peaks[name].Load(), vmHWM(s.pids[name]))
}

// restarted names the processes that are not the ones sampled any more.
func (s *peakSampler) restarted() []string {
	var out []string
	for name, p := range s.procs {
		if p.PID() != s.pids[name] || !alive(s.pids[name]) {
			out = append(out, name)
		}
	}
	return out
}

// fileFlood creates the n large CSRs, 8 at a time, and half-way through
// the valid nodes' requests (validAt: when each was sent). It returns the
// names of the large CSRs created, for their removal.
func (b *bench) fileFlood(ctx context.Context, run int64, n, size, identities int, valid stormNodes, res *floodResult) (created []string, validAt []time.Time, err error) {
	var failed errorSet
	var mu sync.Mutex
	sem := make(chan struct{}, 8)
	var wg sync.WaitGroup
	validAt = make([]time.Time, len(valid.csrs))
	for i := 0; i < n; i++ {
		if i == n/2 {
			for k, csr := range valid.csrs {
				validAt[k] = time.Now()
				if _, err := valid.clients[k].CertificatesV1().CertificateSigningRequests().Create(ctx, csr, metav1.CreateOptions{}); err != nil {
					wg.Wait() // created is complete only then
					return created, nil, fmt.Errorf("valid node %s: %w", valid.names[k], err)
				}
			}
		}
		sem <- struct{}{}
		wg.Add(1)
		go func(i int) {
			defer func() { <-sem; wg.Done() }()
			id := fmt.Sprintf("flood-%d", i%identities)
			name, err := b.createLarge(ctx, id, fmt.Sprintf("flood%d-%d", run, i), size)
			if err != nil {
				failed.add(err)
				return
			}
			mu.Lock()
			created = append(created, name)
			mu.Unlock()
		}(i)
	}
	wg.Wait()
	res.Failed = failed.count
	if err := failed.err(); err != nil {
		b.logf("flood: %v", err)
	}
	return created, validAt, nil
}

// validApproved waits (2 minutes at most) until every valid CSR is
// approved, and times each from its creation.
func validApproved(w watch.Interface, valid []*certv1.CertificateSigningRequest, sentAt []time.Time) ([]time.Duration, error) {
	approved := map[string]time.Duration{}
	deadline := time.After(2 * time.Minute)
	for len(approved) < len(valid) {
		select {
		case ev, ok := <-w.ResultChan():
			if !ok {
				return nil, fmt.Errorf("the watch on the valid CSRs ended")
			}
			csr, isCSR := ev.Object.(*certv1.CertificateSigningRequest)
			if !isCSR || ev.Type == watch.Deleted || !isApproved(csr) {
				continue
			}
			for k, want := range valid {
				if _, seen := approved[csr.Name]; csr.Name == want.Name && !seen {
					approved[csr.Name] = time.Since(sentAt[k])
				}
			}
		case <-deadline:
			return nil, fmt.Errorf("flood: %d of %d valid CSRs approved within 2 minutes", len(approved), len(valid))
		}
	}
	out := make([]time.Duration, 0, len(approved))
	for _, d := range approved {
		out = append(out, d)
	}
	return out, nil
}

// floodDecided waits until the approver has decided every flood CSR: the
// newest of each identity refused unread, the others superseded.
func (b *bench) floodDecided(ctx context.Context, res *floodResult, created int, refusedBefore, supersededBefore float64) error {
	want := float64(created)
	if err := localcluster.Poll(ctx, 3*time.Minute, "the approver to decide every flood CSR", func() (bool, error) {
		refused, superseded, err := b.floodDecisions(ctx)
		res.Refused, res.Superseded = refused-refusedBefore, superseded-supersededBefore
		return err == nil && res.Refused >= float64(min(res.Identities, created)) && res.Refused+res.Superseded >= want, nil
	}); err != nil {
		return fmt.Errorf("%w (refused %v, superseded %v of %v)", err, res.Refused, res.Superseded, want)
	}
	return nil
}

// createLarge files, as node identity id, a kubelet-serving CSR padded to
// about size bytes (a valid request first: the API server stores the
// rest as it is), labelled for the bench agent's node.
func (b *bench) createLarge(ctx context.Context, id, name string, size int) (string, error) {
	req, _, err := testpki.NewCSR(testpki.Request{Node: id, IPs: nil, DNSNames: []string{id}})
	if err != nil {
		return "", err
	}
	if pad := size - len(req); pad > 0 {
		req = append(req, []byte(strings.Repeat("#", pad-1)+"\n")...)
	}
	cfg := rest.CopyConfig(b.c.RESTConfig)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: names.NodeUser(id), Groups: []string{names.NodesGroup, "system:authenticated"}}
	cfg.ContentType = runtime.ContentTypeProtobuf
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return "", err
	}
	csr := &certv1.CertificateSigningRequest{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{names.NodeLabel: simNode, "certready.io/bench": "flood"}},
		Spec: certv1.CertificateSigningRequestSpec{Request: req, SignerName: names.SignerName,
			Usages: []certv1.KeyUsage{certv1.UsageDigitalSignature, certv1.UsageServerAuth}},
	}
	created, err := cs.CertificatesV1().CertificateSigningRequests().Create(ctx, csr, metav1.CreateOptions{})
	if err != nil {
		return "", err
	}
	return created.Name, nil
}

// floodDecisions are the approver's counts of RequestTooLarge refusals and
// of requests superseded by a newer one.
func (b *bench) floodDecisions(ctx context.Context) (refused, superseded float64, err error) {
	read := func(want map[string]string) (float64, error) {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, approverMetrics, nil)
		resp, err := b.c.HTTPClient().Do(req)
		if err != nil {
			return 0, err
		}
		defer resp.Body.Close()
		return sumSeries(resp.Body, "certready_approver_decisions_total", want)
	}
	if refused, err = read(map[string]string{"decision": "refused", "reason": "RequestTooLarge"}); err != nil {
		return 0, 0, err
	}
	superseded, err = read(map[string]string{"decision": "superseded"})
	return refused, superseded, err
}

// vmHWM is pid's peak resident set since its last reset (0 when unknown).
func vmHWM(pid int) int64 {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			if err == nil {
				return kb << 10
			}
		}
	}
	return 0
}

func alive(pid int) bool {
	_, err := os.Stat(fmt.Sprintf("/proc/%d", pid))
	return err == nil
}
