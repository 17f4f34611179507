package main

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	certv1 "k8s.io/api/certificates/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/certready/certready/e2e/localcluster"
	"github.com/certready/certready/internal/names"
)

type stormResult struct {
	// Approach is "certready" (the approver under test) or "naive" (the
	// approach before: label, approve and event on one client; naive.go).
	Approach  string          `json:"approach"`
	N         int             `json:"n"`
	Latencies []time.Duration `json:"latencies"`
	// SinceSeen times each CSR from its first event on the bench's watch to
	// its Approved event on the same watch: the approver's share, without
	// the creation request and the watch delivery, which a saturated API
	// server delays for every watcher alike. SeenLag is creation -> first
	// event (those two).
	SinceSeen []time.Duration `json:"sinceSeen"`
	SeenLag   []time.Duration `json:"seenLag"`
	// OwnP50 and OwnP99: the real approver's first event -> approval
	// written (certready_approver_decision_seconds, interpolated in its
	// buckets), the part no API server delay is in but its write's.
	OwnP50    time.Duration `json:"approverOwnP50,omitempty"`
	OwnP99    time.Duration `json:"approverOwnP99,omitempty"`
	PerSecond float64       `json:"approvedPerSecond"`
	Duration  time.Duration `json:"duration"`
	// CreatedPerSecond is the rate at which the storm's CSRs were created.
	CreatedPerSecond float64 `json:"createdPerSecond"`
	// Requests counts the API server's requests on CSRs during the storm,
	// by "verb subresource" (its apiserver_request_total), every client's.
	Requests map[string]float64 `json:"csrRequests"`
	// WritesPerApproval: the approver's writes (update and patch, but not
	// the signer's status updates) per CSR approved.
	WritesPerApproval float64 `json:"writesPerApproval"`
	// APFWaitMillis is the mean time the approver's requests waited in API
	// Priority and Fairness (its FlowSchema), when it has one.
	APFWaitMillis float64 `json:"approverAPFWaitMilliseconds"`
	// The real approver only: RSS growth (peak minus before the storm's
	// Nodes were created) and live heap growth (after a forced GC, once
	// every CSR is approved, minus the same before the Nodes were created)
	// per storm node (its Node and its CSR), CPU per approval.
	RSSPerNode     float64 `json:"approverRSSBytesPerNode,omitempty"`
	HeapPerNode    float64 `json:"approverHeapBytesPerNode,omitempty"`
	CPUPerApproval float64 `json:"approverCPUMillisecondsPerApproval,omitempty"`
	// Failed counts creations the API server did not accept; Errors holds
	// their distinct messages. Only accepted CSRs are waited for and timed.
	Failed int      `json:"failedCreations"`
	Errors []string `json:"creationErrors,omitempty"`
}

// nodeClient is a client with the node identity certPEM/keyPEM that dials
// the API server directly inside the namespace and closes its connection
// after each request: a storm of N identities then holds at most as many
// connections as it has requests in flight, not N idle ones.
func (b *bench) nodeClient(certPEM, keyPEM []byte) (kubernetes.Interface, error) {
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return nil, err
	}
	tr := &http.Transport{
		DialContext:       b.c.DialContext,
		TLSClientConfig:   &tls.Config{Certificates: []tls.Certificate{pair}, RootCAs: b.roots, MinVersion: tls.VersionTLS12},
		DisableKeepAlives: true,
	}
	// Protobuf, as kubelets talk.
	return kubernetes.NewForConfig(&rest.Config{Host: "https://" + net.JoinHostPort(localcluster.APIServerIP, "6443"),
		Transport: tr, QPS: 5, Burst: 10, ContentConfig: rest.ContentConfig{ContentType: runtime.ContentTypeProtobuf}})
}

// errorSet keeps the distinct messages of failed calls, and their count.
type errorSet struct {
	mu    sync.Mutex
	count int
	list  []string // at most 5
}

func (e *errorSet) add(err error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.count++
	if msg := err.Error(); len(e.list) < 5 && !slices.Contains(e.list, msg) {
		e.list = append(e.list, msg)
	}
}

func (e *errorSet) err() error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.count == 0 {
		return nil
	}
	return fmt.Errorf("%d failed, e.g. %s", e.count, strings.Join(e.list, "; "))
}

// storm creates n nodes and n CSRs from n distinct node identities in
// parallel, and times creation -> Approved=True as seen by a watch. With
// approach "naive" the real approver is stopped for the storm and the
// naive one (naive.go) approves instead. Its phases: prepare (Nodes,
// identities, requests; not timed), create every CSR at once, follow the
// watch until every accepted CSR is approved, then read the API server's
// and the approver's own figures.
func (b *bench) storm(ctx context.Context, n int, approach string) (stormResult, []footprintSample, error) {
	run := b.stormRuns.Add(1)
	b.logf("approval storm (%s): %d CSRs from %d node identities", approach, n, n)
	if approach == "naive" {
		restore, err := b.useNaive(ctx)
		if err != nil {
			return stormResult{}, nil, err
		}
		defer restore()
	}
	nodes := newStormNodes(n)
	// Clean up so the next size starts from the same state.
	defer b.removeStormNodes(ctx, nodes.names)
	// Memory per node counts the storm's Nodes too: the base is taken
	// before they exist.
	var base approverBase
	if approach == "certready" {
		var err error
		if base, err = b.approverBase(ctx); err != nil {
			return stormResult{}, nil, err
		}
	}
	if err := b.prepareStorm(ctx, run, nodes); err != nil {
		return stormResult{}, nil, err
	}
	watch, err := b.watchStorm(ctx, run)
	if err != nil {
		return stormResult{}, nil, err
	}
	defer watch.stop()
	before, err := b.apiCounts(ctx)
	if err != nil {
		return stormResult{}, nil, err
	}
	meter := b.newMeter(fmt.Sprintf("storm %d (peak RSS, mean CPU)", n), approach)
	start := time.Now()
	created := createStorm(ctx, nodes)
	timeout := time.Duration(n)*200*time.Millisecond + 2*time.Minute
	if err := watch.follow(ctx, created, meter, timeout); err != nil {
		return stormResult{}, nil, fmt.Errorf("storm %d: %w", n, err)
	}
	elapsed := time.Since(start)
	res := created.result(approach, n, start, elapsed, watch)
	if err := b.addRequests(ctx, &res, before); err != nil {
		return stormResult{}, nil, err
	}
	samples, err := b.addFootprint(ctx, &res, meter, base, elapsed)
	if err != nil {
		return stormResult{}, nil, err
	}
	b.logf("storm %d (%s): seen on the watch -> Approved p50 %s p99 %s; creation -> seen p50 %s p99 %s; approver's own p50 %s p99 %s", n, approach,
		ms(pct(res.SinceSeen, .5)), ms(pct(res.SinceSeen, .99)), ms(pct(res.SeenLag, .5)), ms(pct(res.SeenLag, .99)), ms(res.OwnP50), ms(res.OwnP99))
	b.logf("storm %d (%s): %d accepted, %d failed; p50 %s p99 %s, %.1f created/s, %.1f approved/s, %.2f writes per approval", n, approach, len(res.Latencies), res.Failed,
		ms(pct(res.Latencies, .5)), ms(pct(res.Latencies, .99)), res.CreatedPerSecond, res.PerSecond, res.WritesPerApproval)
	if res.Failed > 0 {
		b.logf("storm %d: creations failed: %v", n, created.errs.err())
	}
	return res, samples, nil
}

// useNaive stops the real approver and starts the naive one; restore
// undoes that.
func (b *bench) useNaive(ctx context.Context) (restore func(), err error) {
	b.approver.Stop()
	naive, err := startNaive(ctx, b.approverCfg)
	if err != nil {
		return nil, err
	}
	return func() {
		naive.stop()
		if err := b.startApprover(ctx); err != nil {
			b.logf("restarting the approver after the naive storm: %v", err)
		}
	}, nil
}

// stormNodes are the storm's node names, node identities and requests, by
// index.
type stormNodes struct {
	names   []string
	clients []kubernetes.Interface
	csrs    []*certv1.CertificateSigningRequest
}

func newStormNodes(n int) stormNodes {
	return stormNodes{names: make([]string, n), clients: make([]kubernetes.Interface, n), csrs: make([]*certv1.CertificateSigningRequest, n)}
}

// parallel calls f for 0..n-1 on that many workers and returns the
// failures' count and distinct messages (errorSet), or nil.
func parallel(n, workers int, f func(i int) error) error {
	var errs errorSet
	jobs := make(chan int)
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range jobs {
				if err := f(i); err != nil {
					errs.add(err)
				}
			}
		}()
	}
	for i := range n {
		jobs <- i
	}
	close(jobs)
	wg.Wait()
	return errs.err()
}

// approverBase is what the real approver held and had recorded before the
// storm's Nodes existed.
type approverBase struct {
	rss  int64
	heap float64
	own  histogram
}

func (b *bench) approverBase(ctx context.Context) (approverBase, error) {
	base := approverBase{rss: rssBytes(b.approver.PID())}
	var err error
	if base.heap, err = b.approverLiveHeap(ctx); err != nil {
		return base, err
	}
	base.own, err = b.approverHistogram(ctx, "certready_approver_decision_seconds")
	return base, err
}

// prepareStorm makes every node, identity and request before the clock
// starts (only creation -> approval is timed), then lets the controllers'
// reactions to the new Nodes (pod CIDRs, taints) finish: they are the
// preparation's, not the storm's.
func (b *bench) prepareStorm(ctx context.Context, run int64, nodes stormNodes) error {
	if err := parallel(len(nodes.csrs), 8, func(i int) error { return b.prepareStormNode(ctx, run, i, nodes) }); err != nil {
		return fmt.Errorf("preparing the storm's nodes: %w", err)
	}
	return b.quiesce(ctx, "nodes")
}

// creations records, while the storm's CSRs are being created (32 at a
// time, each by its own node identity), when each was sent and which the
// API server accepted. done closes when every creation has returned; from
// then on nothing writes it.
type creations struct {
	mu          sync.Mutex
	accepted    map[string]int // CSR name -> index
	sent        []time.Time
	lastCreated time.Time
	errs        errorSet
	done        chan struct{}
}

func createStorm(ctx context.Context, nodes stormNodes) *creations {
	c := &creations{accepted: map[string]int{}, sent: make([]time.Time, len(nodes.csrs)), done: make(chan struct{})}
	jobs := make(chan int)
	var wg sync.WaitGroup
	for k := 0; k < 32; k++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range jobs {
				csr := nodes.csrs[i]
				t := time.Now()
				if _, err := nodes.clients[i].CertificatesV1().CertificateSigningRequests().Create(ctx, csr, metav1.CreateOptions{}); err != nil {
					c.errs.add(fmt.Errorf("creating %s: %w", csr.Name, err))
					continue
				}
				done := time.Now()
				c.mu.Lock()
				c.accepted[csr.Name] = i
				c.sent[i] = t
				if done.After(c.lastCreated) {
					c.lastCreated = done
				}
				c.mu.Unlock()
			}
		}()
	}
	go func() {
		for i := range nodes.csrs {
			jobs <- i
		}
		close(jobs)
	}()
	go func() { wg.Wait(); close(c.done) }()
	return c
}

// result times every accepted CSR from its creation to its approval on the
// watch.
func (c *creations) result(approach string, n int, start time.Time, elapsed time.Duration, w *stormWatch) stormResult {
	res := stormResult{Approach: approach, N: n, Duration: elapsed}
	c.mu.Lock()
	defer c.mu.Unlock()
	for name, i := range c.accepted {
		res.Latencies = append(res.Latencies, w.approvedAt[name].Sub(c.sent[i]))
		res.SinceSeen = append(res.SinceSeen, w.approvedAt[name].Sub(w.seenAt[name]))
		res.SeenLag = append(res.SeenLag, w.seenAt[name].Sub(c.sent[i]))
	}
	if d := c.lastCreated.Sub(start); d > 0 {
		res.CreatedPerSecond = float64(len(c.accepted)) / d.Seconds()
	}
	res.PerSecond = float64(len(res.Latencies)) / elapsed.Seconds()
	res.Failed, res.Errors = c.errs.count, c.errs.list
	return res
}

// stormWatch follows this run's CSRs on a watch of its own, recording when
// each was first seen and when it was seen approved.
type stormWatch struct {
	client     kubernetes.Interface
	opts       metav1.ListOptions
	prefix     string
	w          watch.Interface
	rewatches  int
	seenAt     map[string]time.Time
	approvedAt map[string]time.Time
}

// watchStorm opens the watch. It decodes protobuf: the instrument should
// cost the 2-core machine as little as it can.
func (b *bench) watchStorm(ctx context.Context, run int64) (*stormWatch, error) {
	pcfg := rest.CopyConfig(b.c.RESTConfig)
	pcfg.ContentType, pcfg.AcceptContentTypes = runtime.ContentTypeProtobuf, runtime.ContentTypeProtobuf
	client, err := kubernetes.NewForConfig(pcfg)
	if err != nil {
		return nil, err
	}
	sw := &stormWatch{client: client, opts: metav1.ListOptions{LabelSelector: "certready.io/bench=storm"},
		prefix: fmt.Sprintf("storm%d-csr-", run), seenAt: map[string]time.Time{}, approvedAt: map[string]time.Time{}}
	if sw.w, err = client.CertificatesV1().CertificateSigningRequests().Watch(ctx, sw.opts); err != nil {
		return nil, err
	}
	return sw, nil
}

func (sw *stormWatch) stop() { sw.w.Stop() }

// follow reads the watch until every creation has returned and every
// accepted CSR is approved, sampling the processes' RSS each second. The
// watch may report an approval before its Create returns, so approvals
// are matched to accepted CSRs once creation is over.
func (sw *stormWatch) follow(ctx context.Context, c *creations, m *meter, timeout time.Duration) error {
	sampleTick := time.NewTicker(time.Second)
	defer sampleTick.Stop()
	deadline := time.After(timeout)
	creating := c.done
	approvedAccepted := 0
	for creating != nil || approvedAccepted < len(c.accepted) {
		select {
		case <-creating:
			creating = nil
			for name := range sw.approvedAt {
				if _, ok := c.accepted[name]; ok {
					approvedAccepted++
				}
			}
		case ev, ok := <-sw.w.ResultChan():
			if !ok {
				if err := sw.resume(ctx); err != nil {
					return err
				}
				continue
			}
			csr, isCSR := ev.Object.(*certv1.CertificateSigningRequest)
			if !isCSR {
				continue
			}
			sw.opts.ResourceVersion = csr.ResourceVersion
			if sw.record(csr) && creating == nil { // accepted is final: no creator writes it any more
				if _, ok := c.accepted[csr.Name]; ok {
					approvedAccepted++
				}
			}
		case <-sampleTick.C:
			m.sample()
		case <-deadline:
			c.mu.Lock()
			defer c.mu.Unlock()
			if err := c.errs.err(); err != nil {
				return fmt.Errorf("%d CSRs approved, %d accepted, in time (creations: %w)", len(sw.approvedAt), len(c.accepted), err)
			}
			return fmt.Errorf("%d CSRs approved, %d accepted, in time (every creation accepted)", len(sw.approvedAt), len(c.accepted))
		}
	}
	return nil
}

// resume watches again from the last event seen: a saturated API server
// drops watchers that fall behind, and none may be missed (an approval is
// then seen late, never not at all).
func (sw *stormWatch) resume(ctx context.Context) error {
	if sw.rewatches++; sw.rewatches > 20 {
		return fmt.Errorf("the CSR watch closed %d times", sw.rewatches)
	}
	var err error
	if sw.w, err = sw.client.CertificatesV1().CertificateSigningRequests().Watch(ctx, sw.opts); err != nil {
		return fmt.Errorf("watching CSRs again: %w", err)
	}
	return nil
}

// record notes when one of this run's CSRs was first seen, and says whether
// this event is the first to show it approved.
func (sw *stormWatch) record(csr *certv1.CertificateSigningRequest) bool {
	if !strings.HasPrefix(csr.Name, sw.prefix) {
		return false
	}
	now := time.Now()
	if _, seen := sw.seenAt[csr.Name]; !seen {
		sw.seenAt[csr.Name] = now
	}
	if _, seen := sw.approvedAt[csr.Name]; seen || !isApproved(csr) {
		return false
	}
	sw.approvedAt[csr.Name] = now
	return true
}

// meter samples the peak RSS and the CPU of the agent and (unless the
// naive approver stands in) the approver during a phase.
type meter struct {
	procs map[string]*localcluster.Process
	peak  map[string]footprintSample
	cpu0  map[string]float64
}

func (b *bench) newMeter(phase, approach string) *meter {
	m := &meter{procs: map[string]*localcluster.Process{"agent": b.agent, "approver": b.approver},
		peak: map[string]footprintSample{}, cpu0: map[string]float64{}}
	if approach == "naive" {
		delete(m.procs, "approver")
	}
	for name, p := range m.procs {
		m.peak[name] = footprintSample{Phase: phase, Process: name, RSSBytes: rssBytes(p.PID())}
		m.cpu0[name] = cpuSeconds(p.PID())
	}
	return m
}

func (m *meter) sample() {
	for name, p := range m.procs {
		if rss := rssBytes(p.PID()); rss > m.peak[name].RSSBytes {
			s := m.peak[name]
			s.RSSBytes = rss
			m.peak[name] = s
		}
	}
}

// addRequests counts the API server's requests on CSRs during the storm,
// the approver's writes per approval and its mean wait in API Priority and
// Fairness.
func (b *bench) addRequests(ctx context.Context, res *stormResult, before apiCounts) error {
	after, err := b.apiCounts(ctx)
	if err != nil {
		return err
	}
	res.APFWaitMillis = after.apfWaitMillisSince(before)
	res.Requests = map[string]float64{}
	writes := 0.0
	for k, v := range after.csr {
		if d := v - before.csr[k]; d > 0 {
			res.Requests[k] = d
			if verb, sub, _ := strings.Cut(k, " "); (verb == "PUT" || verb == "PATCH") && sub != "status" {
				writes += d
			}
		}
	}
	if len(res.Latencies) > 0 {
		res.WritesPerApproval = writes / float64(len(res.Latencies))
	}
	return nil
}

// addFootprint turns the meter's samples into the phase's footprint and,
// for the real approver, its cost per node and per approval and its own
// latency histogram's quantiles.
func (b *bench) addFootprint(ctx context.Context, res *stormResult, m *meter, base approverBase, elapsed time.Duration) ([]footprintSample, error) {
	var samples []footprintSample
	for _, name := range []string{"agent", "approver"} {
		p, ok := m.procs[name]
		if !ok {
			continue
		}
		s := m.peak[name]
		cpu := cpuSeconds(p.PID()) - m.cpu0[name]
		s.Millicores = cpu / elapsed.Seconds() * 1000
		samples = append(samples, s)
		if name != "approver" || len(res.Latencies) == 0 {
			continue
		}
		res.CPUPerApproval = cpu * 1000 / float64(len(res.Latencies))
		res.RSSPerNode = float64(s.RSSBytes-base.rss) / float64(res.N)
		heap, err := b.approverLiveHeap(ctx)
		if err != nil {
			return nil, err
		}
		res.HeapPerNode = (heap - base.heap) / float64(res.N)
		own, err := b.approverHistogram(ctx, "certready_approver_decision_seconds")
		if err != nil {
			return nil, err
		}
		res.OwnP50, res.OwnP99 = own.quantile(base.own, .5), own.quantile(base.own, .99)
	}
	return samples, nil
}

func isApproved(csr *certv1.CertificateSigningRequest) bool {
	for _, c := range csr.Status.Conditions {
		if c.Type == certv1.CertificateApproved {
			return true
		}
	}
	return false
}

// removeStormNodes deletes the storm CSRs and the nodes named (the storms
// after reuse their addresses).
func (b *bench) removeStormNodes(ctx context.Context, names []string) {
	ctx = context.WithoutCancel(ctx)
	_ = b.c.Client.CertificatesV1().CertificateSigningRequests().DeleteCollection(ctx, metav1.DeleteOptions{},
		metav1.ListOptions{LabelSelector: "certready.io/bench=storm"})
	for _, name := range names {
		if name != "" {
			_ = b.c.Client.CoreV1().Nodes().Delete(ctx, name, metav1.DeleteOptions{})
		}
	}
}

// prepareStormNode creates storm node i (Node object with its address),
// its client identity system:node:<name> and its serving CSR.
func (b *bench) prepareStormNode(ctx context.Context, run int64, i int, nodes stormNodes) error {
	name := fmt.Sprintf("storm%d-%d", run, i)
	ip := fmt.Sprintf("198.18.%d.%d", i/250, 1+i%250)
	if err := b.createNode(ctx, b.c.Client, name, ip, false); err != nil {
		return err
	}
	nodes.names[i] = name
	certPEM, keyPEM, err := b.c.ClientCertPEM(names.NodeUser(name), names.NodesGroup)
	if err != nil {
		return err
	}
	if nodes.clients[i], err = b.nodeClient(certPEM, keyPEM); err != nil {
		return err
	}
	nodes.csrs[i], _, err = localcluster.KubeletServingCSR(metav1.ObjectMeta{Name: fmt.Sprintf("storm%d-csr-%d", run, i),
		Labels: map[string]string{"certready.io/bench": "storm"}}, name, ip)
	return err
}
