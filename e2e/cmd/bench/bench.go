package main

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"fmt"
	mrand "math/rand/v2"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	certv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/certready/certready/e2e/localcluster"
)

const (
	simNode   = "sim-0"
	simIP     = "192.0.2.50"
	condType  = "KubeletServingCertNotReady"
	taintKey  = localcluster.StartupTaint
	agentUser = "certready-bench-agent"
)

type bench struct {
	c        *localcluster.Cluster
	logf     func(string, ...any)
	agent    *localcluster.Process
	approver *localcluster.Process
	pki      string
	serving  atomic.Pointer[tls.Certificate]
	pairs    [2]string // pair files laid out as the kubelet writes them
	certs    [2]*tls.Certificate
	roots    *x509.CertPool // the cluster CA, for clients made in memory
	relay    relay          // between the agent and the API server
}

func newBench(ctx context.Context, c *localcluster.Cluster, bins localcluster.Binaries, state, manifests string, logf func(string, ...any)) (*bench, error) {
	b := &bench{c: c, logf: logf}
	ca, _ := c.CAKeyPair()
	caPEM, err := os.ReadFile(ca)
	if err != nil {
		return nil, err
	}
	b.roots = x509.NewCertPool()
	if !b.roots.AppendCertsFromPEM(caPEM) {
		return nil, fmt.Errorf("no certificate in %s", ca)
	}
	agentKC, _, err := c.ClientCert("bench-agent", agentUser, agentGroup)
	if err != nil {
		return nil, err
	}
	if err := grantAgentRole(ctx, c, manifests); err != nil {
		return nil, err
	}
	if err := createAgentFlowSchema(ctx, c); err != nil {
		return nil, err
	}
	// The agent reaches the API server through a relay that counts what it
	// receives.
	if err := b.relay.start(c); err != nil {
		return nil, err
	}
	if err := pointAt(agentKC, agentRelayAddr); err != nil {
		return nil, err
	}
	approverKC, _, err := c.ClientCert("bench-approver", "certready-bench-approver", "system:masters")
	if err != nil {
		return nil, err
	}
	if err := b.createNode(ctx, c.Client, simNode, simIP, true); err != nil {
		return nil, err
	}
	if err := c.AddAddress(simIP); err != nil {
		return nil, err
	}
	ln, err := c.ListenInNS(net.JoinHostPort(simIP, "10250"))
	if err != nil {
		return nil, err
	}
	// The simulated kubelet: serves whatever certificate it holds, or
	// fails the handshake with internal_error when it holds none.
	go func() {
		cfg := &tls.Config{GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) {
			if c := b.serving.Load(); c != nil {
				return c, nil
			}
			return nil, fmt.Errorf("no serving certificate available for the kubelet")
		}}
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer conn.Close()
				_ = tls.Server(conn, cfg).Handshake()
			}()
		}
	}()
	// Inside the cluster's state folder, so that Stop removes it too.
	b.pki = filepath.Join(state, "sim-pki")
	if err := os.MkdirAll(b.pki, 0o700); err != nil {
		return nil, err
	}
	b.approver, err = c.StartInNS("bench-approver", bins.Certready, "approver", "--kubeconfig="+approverKC,
		"--leader-elect-namespace=default", "--remove-startup-taint="+taintKey+"=pending:NoSchedule",
		"--metrics-addr=127.0.0.1:9731", "--health-addr=127.0.0.1:9732")
	if err != nil {
		return nil, err
	}
	// Two real certificates for the simulated node, issued through the
	// approver and the real signer.
	_, nodeCfg, err := c.ClientCert("node-"+simNode, "system:node:"+simNode, "system:nodes")
	if err != nil {
		return nil, err
	}
	nodeClient, err := kubernetes.NewForConfig(nodeCfg)
	if err != nil {
		return nil, err
	}
	for i := range b.pairs {
		cert, keyPEM, err := requestCert(ctx, c.Client, nodeClient, simNode, simIP)
		if err != nil {
			return nil, err
		}
		b.pairs[i] = filepath.Join(b.pki, fmt.Sprintf("kubelet-server-2026-bench-%d.pem", i))
		if err := os.WriteFile(b.pairs[i], append(cert, keyPEM...), 0o600); err != nil {
			return nil, err
		}
		pair, err := tls.X509KeyPair(cert, keyPEM)
		if err != nil {
			return nil, err
		}
		b.certs[i] = &pair
	}
	b.agent, err = c.StartInNS("bench-agent", bins.Certready, "agent", "--kubeconfig="+agentKC, "--node-name="+simNode,
		"--kubelet-pki-dir="+b.pki, "--ca-file="+ca, "--metrics-addr=127.0.0.1:9721", "--health-addr=127.0.0.1:9722")
	if err != nil {
		return nil, err
	}
	// Settle into the starting state: installed, served, ready.
	b.serving.Store(b.certs[0])
	if err := b.swap(b.pairs[0]); err != nil {
		return nil, err
	}
	if err := b.waitNode(ctx, 2*time.Minute, "sim-0 ready", func(n *corev1.Node) bool { return ready(n) && !tainted(n) }); err != nil {
		return nil, err
	}
	// The agent has listed, watched and patched by now: a flow schema that
	// counted none of it would report an idle agent whatever it did.
	if k, err := dispatched(ctx, c); err != nil || k == 0 {
		return nil, fmt.Errorf("flow schema %s counted %v of the agent's requests (%v): the API load figures would be wrong", agentFlow, k, err)
	}
	return b, nil
}

func (b *bench) createNode(ctx context.Context, cs kubernetes.Interface, name, ip string, taint bool) error {
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"certready.io/bench": "true"}}}
	if taint {
		n.Spec.Taints = []corev1.Taint{{Key: taintKey, Value: "pending", Effect: corev1.TaintEffectNoSchedule}}
	}
	if _, err := cs.CoreV1().Nodes().Create(ctx, n, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("creating node %s: %w", name, err)
	}
	// A patch, not an update: the node lifecycle controller writes to new
	// nodes too, and the addresses must not lose that race.
	patch := fmt.Sprintf(`{"status":{"addresses":[{"type":"InternalIP","address":%q},{"type":"Hostname","address":%q}],"daemonEndpoints":{"kubeletEndpoint":{"Port":10250}}}}`, ip, name)
	_, err := cs.CoreV1().Nodes().PatchStatus(ctx, name, []byte(patch))
	return err
}

// requestCert makes a real kubelet-serving CSR as the node and waits for
// the approver and the signer.
func requestCert(ctx context.Context, admin, node kubernetes.Interface, name, ip string) (certPEM, keyPEM []byte, err error) {
	req, key, err := localcluster.KubeletServingCSR(metav1.ObjectMeta{GenerateName: "bench-" + name + "-"}, name, ip)
	if err != nil {
		return nil, nil, err
	}
	csr, err := node.CertificatesV1().CertificateSigningRequests().Create(ctx, req, metav1.CreateOptions{})
	if err != nil {
		return nil, nil, err
	}
	err = localcluster.Poll(ctx, 2*time.Minute, "CSR "+csr.Name+" issued", func() (bool, error) {
		got, err := admin.CertificatesV1().CertificateSigningRequests().Get(ctx, csr.Name, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		certPEM = got.Status.Certificate
		return len(certPEM) > 0, nil
	})
	if err != nil {
		return nil, nil, err
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, nil, err
	}
	return certPEM, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}), nil
}

// swap points kubelet-server-current.pem at target as the kubelet does.
func (b *bench) swap(target string) error {
	return localcluster.SwapSymlink(filepath.Join(b.pki, "kubelet-server-current.pem"), target)
}

func cond(n *corev1.Node) *corev1.NodeCondition { return localcluster.NodeCondition(n, condType) }

func ready(n *corev1.Node) bool {
	c := cond(n)
	return c != nil && c.Status == corev1.ConditionFalse
}

func tainted(n *corev1.Node) bool {
	for _, t := range n.Spec.Taints {
		if t.Key == taintKey {
			return true
		}
	}
	return false
}

func (b *bench) waitNode(ctx context.Context, timeout time.Duration, what string, ok func(*corev1.Node) bool) error {
	return localcluster.Poll(ctx, timeout, what, func() (bool, error) {
		n, err := b.c.Client.CoreV1().Nodes().Get(ctx, simNode, metav1.GetOptions{})
		return err == nil && ok(n), nil
	})
}

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
		// Back to not ready: no certificate, then the startup taint
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

type stormResult struct {
	N         int             `json:"n"`
	Latencies []time.Duration `json:"latencies"`
	PerSecond float64         `json:"approvedPerSecond"`
	Duration  time.Duration   `json:"duration"`
	// Failed counts creations the API server did not accept; Errors holds
	// their distinct messages. Only accepted CSRs are waited for and timed.
	Failed int      `json:"failedCreations"`
	Errors []string `json:"creationErrors,omitempty"`
}

var stormRun atomic.Int64

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
	return kubernetes.NewForConfig(&rest.Config{Host: "https://" + net.JoinHostPort(localcluster.APIServerIP, "6443"),
		Transport: tr, QPS: 5, Burst: 10})
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
// parallel, and times creation -> Approved=True as seen by a watch.
func (b *bench) storm(ctx context.Context, n int) (stormResult, []footprintSample, error) {
	run := stormRun.Add(1)
	b.logf("approval storm: %d CSRs from %d node identities", n, n)
	names := make([]string, n)
	clients := make([]kubernetes.Interface, n)
	csrs := make([]*certv1.CertificateSigningRequest, n)
	defer func() {
		// Clean up so the next size starts from the same state.
		_ = b.c.Client.CertificatesV1().CertificateSigningRequests().DeleteCollection(context.WithoutCancel(ctx), metav1.DeleteOptions{},
			metav1.ListOptions{LabelSelector: "certready.io/bench=storm"})
		for _, name := range names {
			if name != "" {
				_ = b.c.Client.CoreV1().Nodes().Delete(context.WithoutCancel(ctx), name, metav1.DeleteOptions{})
			}
		}
	}()
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
	w, err := b.c.Client.CertificatesV1().CertificateSigningRequests().Watch(ctx, metav1.ListOptions{LabelSelector: "certready.io/bench=storm"})
	if err != nil {
		return stormResult{}, nil, err
	}
	defer w.Stop()
	created := make([]time.Time, n)
	var mu sync.Mutex
	accepted := map[string]int{} // CSR name -> index, for creations the API server accepted
	var createErrs errorSet
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
				mu.Lock()
				accepted[name] = i
				created[i] = t
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
	peak := map[string]footprintSample{}
	cpu0 := map[string]float64{}
	for name, p := range procs {
		peak[name] = footprintSample{Phase: phase, Process: name, RSSBytes: rssBytes(p.PID())}
		cpu0[name] = cpuSeconds(p.PID())
	}
	approvedAt := map[string]time.Time{}
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
				return stormResult{}, nil, fmt.Errorf("the CSR watch closed")
			}
			csr, isCSR := ev.Object.(*certv1.CertificateSigningRequest)
			if !isCSR || !strings.HasPrefix(csr.Name, fmt.Sprintf("storm%d-csr-", run)) {
				continue
			}
			if _, seen := approvedAt[csr.Name]; seen || !isApproved(csr) {
				continue
			}
			approvedAt[csr.Name] = time.Now()
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
	res := stormResult{N: n, Duration: elapsed}
	mu.Lock()
	for name, i := range accepted {
		res.Latencies = append(res.Latencies, approvedAt[name].Sub(created[i]))
	}
	mu.Unlock()
	res.PerSecond = float64(len(res.Latencies)) / elapsed.Seconds()
	res.Failed, res.Errors = createErrs.count, createErrs.list
	var samples []footprintSample
	for _, name := range []string{"agent", "approver"} {
		s := peak[name]
		s.Millicores = (cpuSeconds(procs[name].PID()) - cpu0[name]) / elapsed.Seconds() * 1000
		samples = append(samples, s)
	}
	b.logf("storm %d: %d accepted, %d failed; p50 %s p99 %s, %.1f approved/s", n, len(res.Latencies), res.Failed,
		ms(pct(res.Latencies, .5)), ms(pct(res.Latencies, .99)), res.PerSecond)
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

// prepareStormNode creates storm node i (Node object with its address),
// its client identity system:node:<name> and its serving CSR.
func (b *bench) prepareStormNode(ctx context.Context, run int64, i int, names []string, clients []kubernetes.Interface, csrs []*certv1.CertificateSigningRequest) error {
	name := fmt.Sprintf("storm%d-%d", run, i)
	ip := fmt.Sprintf("198.18.%d.%d", i/250, 1+i%250)
	if err := b.createNode(ctx, b.c.Client, name, ip, false); err != nil {
		return err
	}
	names[i] = name
	certPEM, keyPEM, err := b.c.ClientCertPEM("system:node:"+name, "system:nodes")
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

type loadResult struct {
	Nodes  int           `json:"nodes"`
	Window time.Duration `json:"window"`
	// RequestsPerMin is from the API server's flow-control metrics (the
	// agent's own flow schema); ByVerb breaks the same window down from
	// the audit log.
	RequestsPerMin    float64        `json:"requestsPerMin"`
	ByVerb            map[string]int `json:"requestsByVerb"`
	WatchEventsPerMin float64        `json:"watchEventsPerMin"`
	// BytesPerMin is what the agent received from the API server on the
	// wire (TLS records), counted by the relay in front of it.
	BytesPerMin float64 `json:"bytesReceivedPerMin"`
	// ClusterNodeWritesPerMin is what an agent watching every node would
	// receive: the fleet's node status writes.
	ClusterNodeWritesPerMin float64 `json:"clusterNodeWritesPerMin"`
}

var fleetNodes []string

// load grows the simulated fleet to n nodes (each with its own labelled,
// issued-looking CSR and a heartbeat every 10 s, as kubelets write) and
// counts, over window, the requests the API server's audit log records
// for the agent's user and the watch events the agent received.
func (b *bench) load(ctx context.Context, n int, window time.Duration) (loadResult, error) {
	b.logf("API load: one agent in a cluster of %d nodes, %s window", n, window)
	for len(fleetNodes)+1 < n {
		i := len(fleetNodes)
		name := fmt.Sprintf("fleet-%d", i)
		if err := b.createNode(ctx, b.c.Client, name, fmt.Sprintf("198.19.%d.%d", i/250, 1+i%250), false); err != nil {
			return loadResult{}, err
		}
		fleetNodes = append(fleetNodes, name)
	}
	hctx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	var writes atomic.Int64
	// Every node, the agent's own included, writes a status heartbeat
	// every 10 s, as kubelets do.
	all := append([]string{simNode}, fleetNodes...)
	wg.Add(1)
	go func() {
		defer wg.Done()
		tick := time.NewTicker(10 * time.Second / time.Duration(len(all)))
		defer tick.Stop()
		for i := 0; ; i = (i + 1) % len(all) {
			select {
			case <-hctx.Done():
				return
			case <-tick.C:
			}
			patch := fmt.Sprintf(`{"status":{"conditions":[{"type":"Ready","status":"True","reason":"KubeletReady","lastHeartbeatTime":%q}]}}`, time.Now().UTC().Format(time.RFC3339))
			if _, err := b.c.Client.CoreV1().Nodes().PatchStatus(hctx, all[i], []byte(patch)); err == nil {
				writes.Add(1)
			}
		}
	}()
	time.Sleep(3 * time.Second) // let the fleet's heartbeats reach a steady rate before the window opens
	events0, err := b.scrape(ctx, "certready_watch_events_total")
	if err != nil {
		stop()
		return loadResult{}, err
	}
	req0, err := dispatched(ctx, b.c)
	if err != nil {
		stop()
		return loadResult{}, err
	}
	from := time.Now()
	writes0, bytes0 := writes.Load(), b.relay.received.Load()
	select {
	case <-time.After(window):
	case <-ctx.Done():
		stop()
		wg.Wait()
		return loadResult{}, ctx.Err()
	}
	to := time.Now()
	fleetWrites, received := writes.Load()-writes0, b.relay.received.Load()-bytes0
	req1, err := dispatched(ctx, b.c)
	if err != nil {
		stop()
		wg.Wait()
		return loadResult{}, err
	}
	events1, err := b.scrape(ctx, "certready_watch_events_total")
	stop()
	wg.Wait()
	if err != nil {
		return loadResult{}, err
	}
	byVerb, _, err := auditCount(b.c.AuditLog(), agentUser, from, to)
	if err != nil {
		return loadResult{}, err
	}
	perMin := window.Minutes()
	res := loadResult{Nodes: n, Window: window, RequestsPerMin: (req1 - req0) / perMin, WatchEventsPerMin: (events1 - events0) / perMin,
		ByVerb: byVerb, BytesPerMin: float64(received) / perMin, ClusterNodeWritesPerMin: float64(fleetWrites) / perMin}
	b.logf("API load at %d nodes: %.1f requests/min, %.1f watch events/min, %.0f bytes/min", n, res.RequestsPerMin, res.WatchEventsPerMin, res.BytesPerMin)
	return res, nil
}

// scrape sums a counter from the agent's /metrics (inside the namespace).
func (b *bench) scrape(ctx context.Context, name string) (float64, error) {
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://127.0.0.1:9721/metrics", nil)
	resp, err := b.c.HTTPClient().Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	return sumSeries(resp.Body, name, "")
}

// auditCount counts the audit events of user between from and to by verb.
func auditCount(path, user string, from, to time.Time) (map[string]int, int, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, 0, err
	}
	defer f.Close()
	by := map[string]int{}
	total := 0
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<24)
	for sc.Scan() {
		var ev struct {
			Stage                    string                    `json:"stage"`
			Verb                     string                    `json:"verb"`
			User                     struct{ Username string } `json:"user"`
			RequestReceivedTimestamp time.Time                 `json:"requestReceivedTimestamp"`
		}
		if json.Unmarshal(sc.Bytes(), &ev) != nil || ev.User.Username != user {
			continue
		}
		// One event per request: the stage that ends it.
		if ev.Stage != "ResponseComplete" && ev.Stage != "ResponseStarted" {
			continue
		}
		if ev.Stage == "ResponseStarted" && ev.Verb != "watch" {
			continue
		}
		if ev.RequestReceivedTimestamp.Before(from) || ev.RequestReceivedTimestamp.After(to) {
			continue
		}
		by[ev.Verb]++
		total++
	}
	return by, total, sc.Err()
}

type footprintSample struct {
	Phase      string  `json:"phase"`
	Process    string  `json:"process"`
	RSSBytes   int64   `json:"rssBytes"`
	Millicores float64 `json:"millicores"`
}

func (b *bench) footprint(ctx context.Context, phase string, window time.Duration) []footprintSample {
	procs := map[string]*localcluster.Process{"agent": b.agent, "approver": b.approver}
	start := map[string]float64{}
	for name, p := range procs {
		start[name] = cpuSeconds(p.PID())
	}
	b.logf("footprint (%s): %s window", phase, window)
	time.Sleep(window)
	var out []footprintSample
	for _, name := range []string{"agent", "approver"} {
		p := procs[name]
		out = append(out, footprintSample{Phase: phase, Process: name, RSSBytes: rssBytes(p.PID()),
			Millicores: (cpuSeconds(p.PID()) - start[name]) / window.Seconds() * 1000})
	}
	return out
}

func rssBytes(pid int) int64 {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for _, l := range strings.Split(string(data), "\n") {
		if strings.HasPrefix(l, "VmRSS:") {
			f := strings.Fields(l)
			kb, _ := strconv.ParseInt(f[1], 10, 64)
			return kb * 1024
		}
	}
	return 0
}

// cpuSeconds is utime+stime of pid, in seconds (USER_HZ = 100 on Linux).
func cpuSeconds(pid int) float64 {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	s := string(data)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
	u, _ := strconv.ParseFloat(f[11], 64)
	st, _ := strconv.ParseFloat(f[12], 64)
	return (u + st) / 100
}
