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
	procs := map[string]*localcluster.Process{"approver": b.approver, "agent": b.agent}
	pids := map[string]int{}
	for name, p := range procs {
		pids[name] = p.PID()
		// Linux resets the peak RSS (VmHWM) on writing 5 to clear_refs.
		_ = os.WriteFile(fmt.Sprintf("/proc/%d/clear_refs", p.PID()), []byte("5"), 0)
	}
	res.ApproverRSSBefore, res.AgentRSSBefore = rssBytes(pids["approver"]), rssBytes(pids["agent"])
	var peakApprover, peakAgent atomic.Int64
	stop := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		t := time.NewTicker(50 * time.Millisecond)
		defer t.Stop()
		for {
			for name, peak := range map[string]*atomic.Int64{"approver": &peakApprover, "agent": &peakAgent} {
				if r := rssBytes(pids[name]); r > peak.Load() {
					peak.Store(r)
				}
			}
			select {
			case <-stop:
				return
			case <-t.C:
			}
		}
	}()
	refusedBefore, supersededBefore, err := b.floodDecisions(ctx)
	if err != nil {
		return res, err
	}
	// The valid nodes, ready to ask.
	run := b.stormRuns.Add(1)
	validNames := make([]string, valid)
	validClients := make([]kubernetes.Interface, valid)
	validCSRs := make([]*certv1.CertificateSigningRequest, valid)
	defer b.removeStormNodes(ctx, validNames)
	for i := 0; i < valid; i++ {
		if err := b.prepareStormNode(ctx, run, i, validNames, validClients, validCSRs); err != nil {
			return res, err
		}
	}
	w, err := b.c.Client.CertificatesV1().CertificateSigningRequests().Watch(ctx, metav1.ListOptions{LabelSelector: "certready.io/bench=storm"})
	if err != nil {
		return res, err
	}
	defer w.Stop()

	start := time.Now()
	var failed errorSet
	var created []string
	var mu sync.Mutex
	sem := make(chan struct{}, 8)
	var wg sync.WaitGroup
	validAt := make([]time.Time, valid)
	for i := 0; i < n; i++ {
		if i == n/2 {
			for k := 0; k < valid; k++ {
				validAt[k] = time.Now()
				if _, err := validClients[k].CertificatesV1().CertificateSigningRequests().Create(ctx, validCSRs[k], metav1.CreateOptions{}); err != nil {
					return res, fmt.Errorf("valid node %s: %w", validNames[k], err)
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
	defer func() {
		for _, name := range created {
			_ = b.c.Client.CertificatesV1().CertificateSigningRequests().Delete(context.Background(), name, metav1.DeleteOptions{})
		}
	}()
	// The valid ones approved, each timed from its creation.
	approved := map[string]time.Duration{}
	deadline := time.After(2 * time.Minute)
	for len(approved) < valid {
		select {
		case ev, ok := <-w.ResultChan():
			if !ok {
				return res, fmt.Errorf("the watch on the valid CSRs ended")
			}
			csr, isCSR := ev.Object.(*certv1.CertificateSigningRequest)
			if !isCSR || ev.Type == watch.Deleted || !isApproved(csr) {
				continue
			}
			for k, want := range validCSRs {
				if csr.Name == want.Name {
					if _, seen := approved[csr.Name]; !seen {
						approved[csr.Name] = time.Since(validAt[k])
					}
				}
			}
		case <-deadline:
			return res, fmt.Errorf("flood: %d of %d valid CSRs approved within 2 minutes", len(approved), valid)
		}
	}
	for _, d := range approved {
		res.ValidLatencies = append(res.ValidLatencies, d)
	}
	// Every flood CSR decided: the newest of each identity refused unread,
	// the others superseded.
	want := float64(len(created))
	if err := localcluster.Poll(ctx, 3*time.Minute, "the approver to decide every flood CSR", func() (bool, error) {
		refused, superseded, err := b.floodDecisions(ctx)
		res.Refused, res.Superseded = refused-refusedBefore, superseded-supersededBefore
		return err == nil && res.Refused >= float64(min(identities, len(created))) && res.Refused+res.Superseded >= want, nil
	}); err != nil {
		return res, fmt.Errorf("%w (refused %v, superseded %v of %v)", err, res.Refused, res.Superseded, want)
	}
	res.Duration = time.Since(start)
	close(stop)
	<-sampled
	for name, p := range procs {
		if p.PID() != pids[name] || !alive(pids[name]) {
			res.Restarted = append(res.Restarted, name)
		}
	}
	res.ApproverPeakRSS = max(peakApprover.Load(), vmHWM(pids["approver"]))
	res.AgentPeakRSS = max(peakAgent.Load(), vmHWM(pids["agent"]))
	if len(res.Restarted) > 0 {
		return res, fmt.Errorf("flood: %v did not survive", res.Restarted)
	}
	b.logf("flood: approver peak RSS %.1f MiB (before %.1f), agent %.1f MiB (before %.1f); %d valid approved, p99 %s",
		float64(res.ApproverPeakRSS)/(1<<20), float64(res.ApproverRSSBefore)/(1<<20), float64(res.AgentPeakRSS)/(1<<20), float64(res.AgentRSSBefore)/(1<<20),
		len(res.ValidLatencies), ms(pct(res.ValidLatencies, .99)))
	return res, nil
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
