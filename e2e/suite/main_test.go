// Package suite is certready's end-to-end suite: one cluster, certready
// installed once (helpers_test.go: deployed) and the scenarios an operator
// would check, by area: bootstrap (first: it sees the cluster without
// certready, then installs it), cli, condition (the agent), leader,
// policy, taint, trust, and the third-party integrations. The cluster is the local cluster of the real Kubernetes
// binaries (default; needs root) or, with CERTREADY_E2E_PROVIDER=kind, the
// kind cluster CERTREADY_KIND_CLUSTER made by kind/kind-up.sh without
// certready deployed (make e2e-kind).
package suite

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"testing"
	"time"

	"github.com/certready/certready/e2e/localcluster"
	"github.com/certready/certready/e2e/provider"
)

var cluster provider.Cluster

const (
	standalone = "../../manifests/overlays/standalone"
	base       = "../../manifests/base"
	chartDir   = "../../charts/certready"
)

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	state, err := os.MkdirTemp("", "cre2e-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(state)
	switch p := os.Getenv("CERTREADY_E2E_PROVIDER"); p {
	case "", "local":
		return runLocal(m, state)
	case "kind":
		name := os.Getenv("CERTREADY_KIND_CLUSTER")
		if name == "" {
			name = "certready-e2e"
		}
		k, err := provider.NewKind(name, state)
		if err != nil {
			fmt.Fprintln(os.Stderr, "e2e:", err)
			return 1
		}
		cluster = k
		return m.Run()
	default:
		fmt.Fprintf(os.Stderr, "e2e: CERTREADY_E2E_PROVIDER=%q: want local or kind\n", p)
		return 1
	}
}

func runLocal(m *testing.M, state string) int {
	if os.Geteuid() != 0 {
		fmt.Fprintln(os.Stderr, "e2e: the local cluster needs root (network namespace, mounts); run 'sudo make e2e'")
		return 1
	}
	bins, err := localcluster.BinariesFromEnv()
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		return 1
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	// Tear down on an interrupt too, also one during start-up (Start then
	// fails on the cancelled context and cleans up after itself): nothing
	// may be left behind.
	var local *localcluster.Cluster
	started := make(chan struct{})
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM)
	go func() {
		<-sig
		cancel()
		<-started
		if local != nil {
			local.Stop()
		}
		os.Exit(1)
	}()
	logf := func(format string, args ...any) { fmt.Printf("    cluster: "+format+"\n", args...) }
	local, err = localcluster.Start(ctx, localcluster.Config{Binaries: bins, StateDir: state, Netns: "certready-e2e", Workers: 2, Logf: logf})
	close(started)
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e: starting the local cluster:", err)
		return 1
	}
	defer local.Stop()
	cluster = provider.Local{C: local}
	return m.Run()
}
