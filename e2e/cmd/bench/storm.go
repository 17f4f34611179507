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
// naive one (naive.go) approves instead.
func (b *bench) storm(ctx context.Context, n int, approach string) (stormResult, []footprintSample, error) {
	run := b.stormRuns.Add(1)
	b.logf("approval storm (%s): %d CSRs from %d node identities", approach, n, n)
	if approach == "naive" {
		b.approver.Stop()
		naive, err := startNaive(ctx, b.approverCfg)
		if err != nil {
			return stormResult{}, nil, err
		}
		defer func() {
			naive.stop()
			if err := b.startApprover(ctx); err != nil {
				b.logf("restarting the approver after the naive storm: %v", err)
			}
		}()
	}
	names := make([]string, n)
	clients := make([]kubernetes.Interface, n)
	csrs := make([]*certv1.CertificateSigningRequest, n)
	// Clean up so the next size starts from the same state.
	defer b.removeStormNodes(ctx, names)
	// Memory per node counts the storm's Nodes too: the base is taken
	// before they exist.
	var rssBefore int64
	var heapBefore float64
	var ownBefore histogram
	if approach == "certready" {
		rssBefore = rssBytes(b.approver.PID())
		var err error
		if heapBefore, err = b.approverLiveHeap(ctx); err != nil {
			return stormResult{}, nil, err
		}
		if ownBefore, err = b.approverHistogram(ctx, "certready_approver_decision_seconds"); err != nil {
			return stormResult{}, nil, err
		}
	}
	// Nodes, identities and requests are made before the clock starts;
	// only creation -> approval is timed.
	var prepErrs errorSet
	prep := make(chan int)
	var wg sync.WaitGroup
	for w := 0; w < 8; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range prep {
				if err := b.prepareStormNode(ctx, run, i, names, clients, csrs); err != nil {
					prepErrs.add(err)
				}
			}
		}()
	}
	for i := 0; i < n; i++ {
		prep <- i
	}
	close(prep)
	wg.Wait()
	if err := prepErrs.err(); err != nil {
		return stormResult{}, nil, fmt.Errorf("preparing the storm's nodes: %w", err)
	}
	// The controllers' reactions to the new Nodes (pod CIDRs, taints) are
	// the preparation's, not the storm's: let them finish first.
	if err := b.quiesce(ctx, "nodes"); err != nil {
		return stormResult{}, nil, err
	}
	// The measuring watch decodes protobuf: the instrument should cost the
	// 2-core machine as little as it can.
	pcfg := rest.CopyConfig(b.c.RESTConfig)
	pcfg.ContentType, pcfg.AcceptContentTypes = runtime.ContentTypeProtobuf, runtime.ContentTypeProtobuf
	watcher, err := kubernetes.NewForConfig(pcfg)
	if err != nil {
		return stormResult{}, nil, err
	}
	watchOpts := metav1.ListOptions{LabelSelector: "certready.io/bench=storm"}
	w, err := watcher.CertificatesV1().CertificateSigningRequests().Watch(ctx, watchOpts)
	if err != nil {
		return stormResult{}, nil, err
	}
	defer func() { w.Stop() }()
	rewatches := 0
	created := make([]time.Time, n)
	var mu sync.Mutex
	accepted := map[string]int{} // CSR name -> index, for creations the API server accepted
	var lastCreated time.Time
	var createErrs errorSet
	before, err := b.apiCounts(ctx)
	if err != nil {
		return stormResult{}, nil, err
	}
	start := time.Now()
	jobs := make(chan int)
	for k := 0; k < 32; k++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range jobs {
				name := csrs[i].Name
				t := time.Now()
				_, err := clients[i].CertificatesV1().CertificateSigningRequests().Create(ctx, csrs[i], metav1.CreateOptions{})
				if err != nil {
					createErrs.add(fmt.Errorf("creating %s: %w", name, err))
					continue
				}
				done := time.Now()
				mu.Lock()
				accepted[name] = i
				created[i] = t
				if done.After(lastCreated) {
					lastCreated = done
				}
				mu.Unlock()
			}
		}()
	}
	go func() {
		for i := 0; i < n; i++ {
			jobs <- i
		}
		close(jobs)
	}()
	allCreated := make(chan struct{})
	go func() { wg.Wait(); close(allCreated) }()

	sampleTick := time.NewTicker(time.Second)
	defer sampleTick.Stop()
	phase := fmt.Sprintf("storm %d (peak RSS, mean CPU)", n)
	procs := map[string]*localcluster.Process{"agent": b.agent, "approver": b.approver}
	if approach == "naive" {
		procs = map[string]*localcluster.Process{"agent": b.agent}
	}
	peak := map[string]footprintSample{}
	cpu0 := map[string]float64{}
	for name, p := range procs {
		peak[name] = footprintSample{Phase: phase, Process: name, RSSBytes: rssBytes(p.PID())}
		cpu0[name] = cpuSeconds(p.PID())
	}
	approvedAt := map[string]time.Time{}
	seenAt := map[string]time.Time{}
	timeout := time.After(time.Duration(n)*200*time.Millisecond + 2*time.Minute)
	// Done when every creation has returned and every accepted CSR is
	// approved (the watch may report an approval before Create returns, so
	// approvals are matched to accepted CSRs once creation is over; from
	// then on, accepted is no longer written).
	creating := allCreated
	approvedAccepted := 0
	for creating != nil || approvedAccepted < len(accepted) {
		select {
		case <-creating:
			creating = nil
			for name := range approvedAt {
				if _, ok := accepted[name]; ok {
					approvedAccepted++
				}
			}
		case ev, ok := <-w.ResultChan():
			if !ok {
				// A saturated API server drops watchers that fall behind:
				// resume from the last event seen, so none is missed (an
				// approval is then seen late, never not at all).
				if rewatches++; rewatches > 20 {
					return stormResult{}, nil, fmt.Errorf("the CSR watch closed %d times", rewatches)
				}
				if w, err = watcher.CertificatesV1().CertificateSigningRequests().Watch(ctx, watchOpts); err != nil {
					return stormResult{}, nil, fmt.Errorf("watching CSRs again: %w", err)
				}
				continue
			}
			csr, isCSR := ev.Object.(*certv1.CertificateSigningRequest)
			if isCSR {
				watchOpts.ResourceVersion = csr.ResourceVersion
			}
			if !isCSR || !strings.HasPrefix(csr.Name, fmt.Sprintf("storm%d-csr-", run)) {
				continue
			}
			now := time.Now()
			if _, seen := seenAt[csr.Name]; !seen {
				seenAt[csr.Name] = now
			}
			if _, seen := approvedAt[csr.Name]; seen || !isApproved(csr) {
				continue
			}
			approvedAt[csr.Name] = now
			if creating == nil { // accepted is final: no creator writes it any more
				if _, ok := accepted[csr.Name]; ok {
					approvedAccepted++
				}
			}
		case <-sampleTick.C:
			for name, p := range procs {
				if rss := rssBytes(p.PID()); rss > peak[name].RSSBytes {
					s := peak[name]
					s.RSSBytes = rss
					peak[name] = s
				}
			}
		case <-timeout:
			mu.Lock()
			defer mu.Unlock()
			return stormResult{}, nil, fmt.Errorf("storm %d: %d CSRs approved, %d accepted, in time (creations: %v)",
				n, len(approvedAt), len(accepted), createErrs.err())
		}
	}
	elapsed := time.Since(start)
	res := stormResult{Approach: approach, N: n, Duration: elapsed}
	mu.Lock()
	for name, i := range accepted {
		res.Latencies = append(res.Latencies, approvedAt[name].Sub(created[i]))
		res.SinceSeen = append(res.SinceSeen, approvedAt[name].Sub(seenAt[name]))
		res.SeenLag = append(res.SeenLag, seenAt[name].Sub(created[i]))
	}
	if d := lastCreated.Sub(start); d > 0 {
		res.CreatedPerSecond = float64(len(accepted)) / d.Seconds()
	}
	mu.Unlock()
	res.PerSecond = float64(len(res.Latencies)) / elapsed.Seconds()
	res.Failed, res.Errors = createErrs.count, createErrs.list
	after, err := b.apiCounts(ctx)
	if err != nil {
		return stormResult{}, nil, err
	}
	if ops := after.apfWaitOps - before.apfWaitOps; ops > 0 {
		res.APFWaitMillis = (after.apfWait - before.apfWait) / ops * 1000
	}
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
	var samples []footprintSample
	for _, name := range []string{"agent", "approver"} {
		p, ok := procs[name]
		if !ok {
			continue
		}
		s := peak[name]
		cpu := cpuSeconds(p.PID()) - cpu0[name]
		s.Millicores = cpu / elapsed.Seconds() * 1000
		samples = append(samples, s)
		if name == "approver" && len(res.Latencies) > 0 {
			res.CPUPerApproval = cpu * 1000 / float64(len(res.Latencies))
			res.RSSPerNode = float64(s.RSSBytes-rssBefore) / float64(n)
			heap, err := b.approverLiveHeap(ctx)
			if err != nil {
				return stormResult{}, nil, err
			}
			res.HeapPerNode = (heap - heapBefore) / float64(n)
			own, err := b.approverHistogram(ctx, "certready_approver_decision_seconds")
			if err != nil {
				return stormResult{}, nil, err
			}
			res.OwnP50, res.OwnP99 = own.quantile(ownBefore, .5), own.quantile(ownBefore, .99)
		}
	}
	b.logf("storm %d (%s): seen on the watch -> Approved p50 %s p99 %s; creation -> seen p50 %s p99 %s; approver's own p50 %s p99 %s", n, approach,
		ms(pct(res.SinceSeen, .5)), ms(pct(res.SinceSeen, .99)), ms(pct(res.SeenLag, .5)), ms(pct(res.SeenLag, .99)), ms(res.OwnP50), ms(res.OwnP99))
	b.logf("storm %d (%s): %d accepted, %d failed; p50 %s p99 %s, %.1f created/s, %.1f approved/s, %.2f writes per approval", n, approach, len(res.Latencies), res.Failed,
		ms(pct(res.Latencies, .5)), ms(pct(res.Latencies, .99)), res.CreatedPerSecond, res.PerSecond, res.WritesPerApproval)
	if res.Failed > 0 {
		b.logf("storm %d: creations failed: %v", n, createErrs.err())
	}
	return res, samples, nil
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
func (b *bench) prepareStormNode(ctx context.Context, run int64, i int, nodeNames []string, clients []kubernetes.Interface, csrs []*certv1.CertificateSigningRequest) error {
	name := fmt.Sprintf("storm%d-%d", run, i)
	ip := fmt.Sprintf("198.18.%d.%d", i/250, 1+i%250)
	if err := b.createNode(ctx, b.c.Client, name, ip, false); err != nil {
		return err
	}
	nodeNames[i] = name
	certPEM, keyPEM, err := b.c.ClientCertPEM(names.NodeUser(name), "system:nodes")
	if err != nil {
		return err
	}
	if clients[i], err = b.nodeClient(certPEM, keyPEM); err != nil {
		return err
	}
	csrs[i], _, err = localcluster.KubeletServingCSR(metav1.ObjectMeta{Name: fmt.Sprintf("storm%d-csr-%d", run, i),
		Labels: map[string]string{"certready.io/bench": "storm"}}, name, ip)
	return err
}
