package main

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

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
	// LogReadsPerMin are the API server's log requests to the kubelet
	// (the agent's proof of its path, at --proof-interval): each one
	// connection from the API server to the kubelet. ProofsPerHour is
	// that rate at the shipped 10-minute interval, per node.
	LogReadsPerMin float64       `json:"kubeletLogReadsPerMin"`
	ProofInterval  time.Duration `json:"proofInterval"`
	ProofsPerHour  float64       `json:"proofsPerNodePerHourAtTheShippedInterval"`
}

// shippedProofInterval is the agent's --apiserver-proof-interval default.
const shippedProofInterval = 10 * time.Minute

// proofInterval is the bench agent's --apiserver-proof-interval: shorter
// than the shipped one, so that a window sees several proofs.
var proofInterval = time.Minute

// load grows the simulated fleet to n nodes (each with its own labelled,
// issued-looking CSR and a heartbeat every 10 s, as kubelets write) and
// counts, over window, the requests the API server's audit log records
// for the agent's user and the watch events the agent received.
func (b *bench) load(ctx context.Context, n int, window time.Duration) (loadResult, error) {
	b.logf("API load: one agent in a cluster of %d nodes, %s window", n, window)
	for len(b.fleetNodes)+1 < n {
		i := len(b.fleetNodes)
		name := fmt.Sprintf("fleet-%d", i)
		if err := b.createNode(ctx, b.c.Client, name, fmt.Sprintf("198.19.%d.%d", i/250, 1+i%250), false); err != nil {
			return loadResult{}, err
		}
		b.fleetNodes = append(b.fleetNodes, name)
	}
	hctx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	var writes atomic.Int64
	// Every node, the agent's own included, writes a status heartbeat
	// every 10 s, as kubelets do.
	all := append([]string{simNode}, b.fleetNodes...)
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
	writes0, bytes0, logs0 := writes.Load(), b.relay.received.Load(), b.logReads.Load()
	select {
	case <-time.After(window):
	case <-ctx.Done():
		stop()
		wg.Wait()
		return loadResult{}, ctx.Err()
	}
	to := time.Now()
	fleetWrites, received, logs := writes.Load()-writes0, b.relay.received.Load()-bytes0, b.logReads.Load()-logs0
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
		ByVerb: byVerb, BytesPerMin: float64(received) / perMin, ClusterNodeWritesPerMin: float64(fleetWrites) / perMin,
		LogReadsPerMin: float64(logs) / perMin, ProofInterval: proofInterval}
	res.ProofsPerHour = res.LogReadsPerMin * 60 * proofInterval.Seconds() / shippedProofInterval.Seconds()
	b.logf("API load at %d nodes: %.1f requests/min, %.1f watch events/min, %.0f bytes/min, %.1f kubelet log reads/min", n, res.RequestsPerMin, res.WatchEventsPerMin, res.BytesPerMin, res.LogReadsPerMin)
	return res, nil
}
