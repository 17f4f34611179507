// Command bench measures certready on the local cluster of real Kubernetes
// binaries and prints a table (raw results as JSON):
//
//  1. readiness latency: symlink swap -> condition False, and -> startup
//     taint removed, side by side with a 10-second file-existence poller;
//  2. approval storm: N real CSRs from N distinct node identities;
//  3. API load of one agent with 1, 100 and 1000 simulated nodes: its
//     requests from the API server's flow-control metrics (a FlowSchema of
//     its own; apiserver_request_total has no client label), the bytes it
//     receives from a counting relay in front of the API server;
//  4. footprint: agent and approver RSS and CPU at idle and in the storm.
//
// What is real: etcd, kube-apiserver, kube-controller-manager (the real
// kubelet-serving signer), the certready agent and approver processes, the
// CSRs and their signatures, TLS handshakes, the agent's RBAC (the shipped
// ClusterRole, bound to its user). What is simulated: the
// kubelets (Node objects, a TLS listener per node address inside the
// namespace, and the pki folder laid out as the kubelet does).
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/spf13/pflag"

	"github.com/certready/certready/e2e/localcluster"
)

type results struct {
	When            time.Time         `json:"when"`
	Readiness       *readinessResult  `json:"readiness,omitempty"`
	Storms          []stormResult     `json:"storms,omitempty"`
	Load            []loadResult      `json:"apiLoad,omitempty"`
	Footprint       []footprintSample `json:"footprint,omitempty"`
	Flood           *floodResult      `json:"flood,omitempty"`
	Drains          []drainResult     `json:"drains,omitempty"`
	BinaryBytes     int64             `json:"binaryBytes"`
	NodeBinaryBytes int64             `json:"nodeBinaryBytes"`
	Notes           map[string]string `json:"notes"`
}

// plan is what one run measures, from the flags.
type plan struct {
	storms, naive, fleet, drains []int
	transitions                  int
	window, idle                 time.Duration
	flood                        floodSpec
	out, manifests               string
}

func main() {
	storms := pflag.String("storm", "100,1000,5000", "approval storm sizes (empty: skip)")
	naive := pflag.String("naive-storm", "1000,5000", "storm sizes for the naive approach too (label, approve, event on one client at QPS 100), for comparison (empty: skip)")
	fleet := pflag.String("fleet", "1,100,1000", "simulated cluster sizes for the API load (empty: skip)")
	drains := pflag.String("drain", "1000,5000", "backlog drain sizes: CSRs pending before the approver starts (empty: skip)")
	var p plan
	pflag.IntVar(&p.transitions, "transitions", 50, "readiness transitions to measure (0: skip)")
	pflag.DurationVar(&p.window, "load-window", time.Minute, "steady-state window per fleet size")
	pflag.DurationVar(&p.idle, "idle-window", 90*time.Second, "idle window for the footprint: longer than the agent's one-minute resync, so that the pages its periodic check touches are counted")
	pflag.DurationVar(&proofInterval, "proof-interval", proofInterval, "the agent's --apiserver-proof-interval here (the API load reports its rate and projects it to the shipped 10m)")
	pflag.StringVar(&p.out, "out", "../bench-results", "folder for the JSON results")
	pflag.StringVar(&p.manifests, "manifests", "../manifests", "the repository's manifests folder (the agent's ClusterRole is taken from it)")
	pflag.IntVar(&p.flood.n, "flood", 200, "large-request flood: this many pending CSRs of --flood-bytes (0: skip)")
	pflag.IntVar(&p.flood.bytes, "flood-bytes", 1<<20, "size of each flood CSR")
	pflag.IntVar(&p.flood.identities, "flood-identities", 8, "node identities (no Node of theirs) filing the flood")
	pflag.IntVar(&p.flood.valid, "flood-valid", 20, "real nodes asking for their certificates during the flood")
	smoke := pflag.Bool("smoke", false, "tiny run for CI: storm 10, 3 transitions, fleet 1,10, a flood of 10, short windows")
	pflag.Parse()
	if *smoke {
		*storms, *naive, *fleet, *drains = "10", "10", "1,10", "10"
		p.transitions, p.window, p.idle = 3, 10*time.Second, 5*time.Second
		p.flood = floodSpec{n: 10, bytes: 256 << 10, identities: 2, valid: 3}
	}
	for _, f := range []struct {
		flag, spec string
		to         *[]int
	}{{"storm", *storms, &p.storms}, {"naive-storm", *naive, &p.naive}, {"fleet", *fleet, &p.fleet}, {"drain", *drains, &p.drains}} {
		sizes, err := ints(f.spec)
		if err != nil {
			fmt.Fprintf(os.Stderr, "bench: --%s: %v\n", f.flag, err)
			os.Exit(2)
		}
		*f.to = sizes
	}
	if err := run(p); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

func ints(s string) ([]int, error) {
	var out []int
	if strings.TrimSpace(s) == "" {
		return nil, nil // this part is skipped
	}
	for _, f := range strings.Split(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n <= 0 {
			return nil, fmt.Errorf("%q is not a positive number", f)
		}
		out = append(out, n)
	}
	return out, nil
}

const auditPolicy = `apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: ["RequestReceived"]
rules:
- level: Metadata
  users: ["certready-bench-agent"]
- level: None
`

// floodSpec sizes the large-request flood (flood.go).
type floodSpec struct{ n, bytes, identities, valid int }

// run starts a control plane, measures what p asks for and writes the
// results.
func run(p plan) error {
	bins, err := localcluster.BinariesFromEnv()
	if err != nil {
		return err
	}
	// A storm of N node identities holds N client connections, and the API
	// server (which inherits this limit) as many: lift the open-files limit.
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err == nil && lim.Cur < lim.Max {
		lim.Cur = lim.Max
		_ = syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim)
	}
	// An interrupt cancels the run; the deferred Stop then leaves nothing behind.
	ctx, cancel := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer cancel()
	state, err := os.MkdirTemp("", "crbench-")
	if err != nil {
		return err
	}
	logf := func(format string, args ...any) {
		fmt.Printf("%s  %s\n", time.Now().Format("15:04:05"), fmt.Sprintf(format, args...))
	}
	c, err := localcluster.Start(ctx, localcluster.Config{
		Binaries: bins, StateDir: state, Netns: "certready-bench", ControlPlaneOnly: true, AuditPolicy: auditPolicy, Logf: logf,
	})
	if err != nil {
		return err
	}
	defer c.Stop()

	b, err := newBench(ctx, c, bins, state, p.manifests, logf)
	if err != nil {
		return err
	}
	res := results{When: time.Now().UTC(), Notes: map[string]string{
		"real":      "etcd, kube-apiserver, kube-controller-manager (kubelet-serving signer), certready agent and approver processes, CSRs, TLS handshakes",
		"simulated": "kubelets: Node objects, one TLS listener per node address in the namespace, the pki folder laid out as the kubelet does",
	}}
	if info, err := os.Stat(bins.Certready); err == nil {
		res.BinaryBytes = info.Size()
	}
	if info, err := os.Stat(bins.CertreadyNode); err == nil {
		res.NodeBinaryBytes = info.Size()
	}
	if err := b.measure(ctx, p, &res); err != nil {
		return err
	}
	print(res)
	for k, v := range res.Notes {
		if strings.HasPrefix(v, "failed") {
			fmt.Printf("%s: %s\n", k, v)
		}
	}
	return writeResults(res, p.out)
}

// measure runs each part of the plan in turn. A storm or a drain that
// fails is noted beside the figures that were measured; the rest stop the
// run.
func (b *bench) measure(ctx context.Context, p plan, res *results) error {
	var err error
	res.Footprint = append(res.Footprint, b.footprint(ctx, "idle", p.idle)...)
	if p.transitions > 0 {
		if res.Readiness, err = b.readiness(ctx, p.transitions); err != nil {
			return err
		}
	}
	type planned struct {
		n        int
		approach string
	}
	var runs []planned
	for _, n := range p.storms {
		runs = append(runs, planned{n, "certready"})
	}
	for _, n := range p.naive {
		runs = append(runs, planned{n, "naive"})
	}
	for _, r := range runs {
		s, samples, err := b.storm(ctx, r.n, r.approach)
		if err != nil {
			res.Notes[fmt.Sprintf("storm %d (%s)", r.n, r.approach)] = "failed: " + err.Error()
			b.logf("storm %d (%s) failed: %v", r.n, r.approach, err)
			continue
		}
		res.Storms = append(res.Storms, s)
		res.Footprint = append(res.Footprint, samples...)
	}
	for _, n := range p.drains {
		d, err := b.drain(ctx, n)
		if err != nil {
			res.Notes[fmt.Sprintf("drain %d", n)] = "failed: " + err.Error()
			b.logf("drain %d failed: %v", n, err)
			if err := b.startApprover(ctx); err != nil {
				return err
			}
			continue
		}
		res.Drains = append(res.Drains, d)
	}
	for _, n := range p.fleet {
		l, err := b.load(ctx, n, p.window)
		if err != nil {
			return err
		}
		res.Load = append(res.Load, l)
	}
	// Last: what a flood leaves in memory (Go returns it to the system
	// lazily) would be in every figure after it. Its peak RSS is measured
	// from its own start; run it alone (--storm= --naive-storm= --fleet=
	// --transitions=0) for a baseline without the storms before it.
	if p.flood.n > 0 {
		f, err := b.flood(ctx, p.flood.n, p.flood.bytes, p.flood.identities, p.flood.valid)
		if err != nil {
			return err
		}
		res.Flood = &f
	}
	return nil
}

// writeResults keeps the raw figures as JSON in outDir.
func writeResults(res results, outDir string) error {
	if err := os.MkdirAll(outDir, 0o755); err != nil {
		return err
	}
	path := filepath.Join(outDir, "bench-"+res.When.Format("20060102-150405")+".json")
	data, _ := json.MarshalIndent(res, "", "  ")
	if err := os.WriteFile(path, data, 0o644); err != nil {
		return err
	}
	fmt.Println("raw results:", path)
	return nil
}

func pct(ds []time.Duration, p float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := append([]time.Duration(nil), ds...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	i := int(p*float64(len(s))+0.5) - 1
	return s[min(max(i, 0), len(s)-1)]
}

func ms(d time.Duration) string { return fmt.Sprintf("%.1f ms", float64(d.Microseconds())/1000) }

func print(r results) {
	w := tabwriter.NewWriter(os.Stdout, 2, 4, 2, ' ', 0)
	fmt.Fprintln(w, "\n== 1. Readiness latency (symlink swap ->)\tn\tp50\tp99\tmax")
	if rd := r.Readiness; rd != nil {
		fmt.Fprintf(w, "agent: condition False\t%d\t%s\t%s\t%s\n", len(rd.ToFalse), ms(pct(rd.ToFalse, .5)), ms(pct(rd.ToFalse, .99)), ms(pct(rd.ToFalse, 1)))
		fmt.Fprintf(w, "agent + approver fallback: taint removed\t%d\t%s\t%s\t%s\n", len(rd.ToUntainted), ms(pct(rd.ToUntainted, .5)), ms(pct(rd.ToUntainted, .99)), ms(pct(rd.ToUntainted, 1)))
		fmt.Fprintf(w, "reference: 10 s file poller detects\t%d\t%s\t%s\t%s\n", len(rd.Poller), ms(pct(rd.Poller, .5)), ms(pct(rd.Poller, .99)), ms(pct(rd.Poller, 1)))
	}
	fmt.Fprintln(w, "\n== 2. Approval storm, creation -> Approved=True\tCSRs\tp50\tp99\tseen -> Approved p50/p99\tcreation -> seen p50/p99\tapprover's own p50/p99\tcreated/s\tapproved/s\twrites/approval\tapprover per node (peak RSS, live heap)\tCPU ms/approval\tAPF wait\tfailed creations")
	for _, s := range r.Storms {
		mem, cpu := "-", "-"
		if s.Approach == "certready" {
			mem = fmt.Sprintf("%.1f KiB, %.1f KiB", s.RSSPerNode/1024, s.HeapPerNode/1024)
			cpu = fmt.Sprintf("%.2f", s.CPUPerApproval)
		}
		own := "-"
		if s.Approach == "certready" {
			own = ms(s.OwnP50) + " / " + ms(s.OwnP99)
		}
		fmt.Fprintf(w, "%s\t%d\t%s\t%s\t%s / %s\t%s / %s\t%s\t%.1f\t%.1f\t%.2f\t%s\t%s\t%.2f ms\t%d\n", s.Approach, s.N, ms(pct(s.Latencies, .5)), ms(pct(s.Latencies, .99)),
			ms(pct(s.SinceSeen, .5)), ms(pct(s.SinceSeen, .99)), ms(pct(s.SeenLag, .5)), ms(pct(s.SeenLag, .99)), own,
			s.CreatedPerSecond, s.PerSecond, s.WritesPerApproval, mem, cpu, s.APFWaitMillis, s.Failed)
	}
	for _, s := range r.Storms {
		fmt.Fprintf(w, "  %s %d: requests on CSRs by verb and subresource\t%v\n", s.Approach, s.N, s.Requests)
	}
	fmt.Fprintln(w, "\n== 3. API load of one agent\tnodes\trequests/min\twatch events/min\tKiB received/min\tcluster node writes/min\tAPI server -> kubelet log reads/min (proof interval)\tproofs/node/hour at 10m\trequests by verb (audit)")
	for _, l := range r.Load {
		fmt.Fprintf(w, "steady state, %s window\t%d\t%.1f\t%.1f\t%.1f\t%.0f\t%.2f (%s)\t%.1f\t%v\n", l.Window, l.Nodes, l.RequestsPerMin, l.WatchEventsPerMin, l.BytesPerMin/1024, l.ClusterNodeWritesPerMin,
			l.LogReadsPerMin, l.ProofInterval, l.ProofsPerHour, l.ByVerb)
	}
	if n := len(r.Load); n > 0 {
		l := r.Load[n-1]
		fmt.Fprintf(w, "projected, 5000 nodes\t5000\t\t\t\t\t\t%.1f/s API server -> kubelet log reads and pods/log requests\t\n", 5000*l.ProofsPerHour/3600)
	}
	fmt.Fprintln(w, "\n== 4. Footprint\tprocess\tRSS\tCPU")
	for _, f := range r.Footprint {
		fmt.Fprintf(w, "%s\t%s\t%.1f MiB\t%.2f millicores\n", f.Phase, f.Process, float64(f.RSSBytes)/(1<<20), f.Millicores)
	}
	fmt.Fprintf(w, "binary\tcertready\t%.1f MiB\t\n", float64(r.BinaryBytes)/(1<<20))
	fmt.Fprintf(w, "binary\tcertready-node (the agent's)\t%.1f MiB\t\n", float64(r.NodeBinaryBytes)/(1<<20))
	if len(r.Drains) > 0 {
		fmt.Fprintln(w, "\n== 6. Backlog drain (CSRs pending when the approver starts), from its start ->\tCSRs\tcaches synced\tleader\tacting\tfirst approval\tlast approval\tapproved/s\tapprover's own p50 / p99\tapproval write (API server)\tAPF wait")
		for _, d := range r.Drains {
			fmt.Fprintf(w, "drain\t%d\t%s\t%s\t%s\t%s\t%s\t%.0f\t%s / %s\t%.1f ms\t%.2f ms\n", d.N, ms(d.ToSynced), ms(d.ToLeader), ms(d.ToActing), ms(d.ToFirst), ms(d.ToLast),
				d.PerSecond, ms(d.OwnP50), ms(d.OwnP99), d.WriteMeanMillis, d.APFWaitMillis)
		}
	}
	if f := r.Flood; f != nil {
		fmt.Fprintln(w, "\n== 5. Large-request flood (pending CSRs, spoofing the agent's node label)\tCSRs x size\tidentities\tdecisions: refused unread / superseded\tapprover peak RSS (before)\tagent peak RSS (before)\tvalid approved meanwhile\tp50 / p99\trestarts")
		fmt.Fprintf(w, "flood\t%d x %d KiB\t%d\t%.0f / %.0f\t%.1f MiB (%.1f)\t%.1f MiB (%.1f)\t%d of %d\t%s / %s\t%d\n", f.N, f.Bytes>>10, f.Identities, f.Refused, f.Superseded,
			float64(f.ApproverPeakRSS)/(1<<20), float64(f.ApproverRSSBefore)/(1<<20), float64(f.AgentPeakRSS)/(1<<20), float64(f.AgentRSSBefore)/(1<<20),
			len(f.ValidLatencies), f.Valid, ms(pct(f.ValidLatencies, .5)), ms(pct(f.ValidLatencies, .99)), len(f.Restarted))
	}
	w.Flush()
}
