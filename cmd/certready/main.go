// Command certready proves that a node's kubelet can serve TLS before the
// node takes workloads. One binary, several roles:
//
//	certready agent     per-node DaemonSet: publishes KubeletServingCertNotReady
//	certready approver  leader-elected approver of kubelet-serving CSRs
//	certready check     the agent's checks once, as a node-problem-detector plugin
//	certready copy-binary  copy this binary into a volume (node-problem-detector's init container)
//	certready preflight which nodes a NodeReadinessRule would keep tainted (read-only)
//	certready status    the fleet view: every node's condition, certificate and taint (read-only)
//	certready version   build information
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"

	"github.com/spf13/pflag"
)

// Stamped at build time with -ldflags "-X main.version=... -X main.commit=...".
var (
	version = "dev"
	commit  = "unknown"
)

// commands are the node's (every build) and the cluster's (not in the
// node build, -tags nodeonly: the agent's binary links neither the
// approver nor client-go's clientset, whose start-up touches every API
// group's code on every node).
func commands() []command {
	out := []command{
		{"agent", "Run the per-node agent (DaemonSet): verify this node's kubelet serving certificate and publish the KubeletServingCertNotReady condition.", agentLong, func() process { return &agentOptions{} }},
		{"check", "Run the agent's checks once and exit with the node-problem-detector plugin codes (0 ready, 1 not ready, 2 unknown).", checkLong, func() process { return &checkOptions{} }},
		{"copy-binary", "Copy this static binary to --to (an init container's way of giving node-problem-detector the check plugin).", copyBinaryLong, func() process { return &copyBinaryOptions{} }},
	}
	out = append(out, clusterCommands()...)
	return append(out, command{"version", "Print version information.", "Print version information.", func() process { return versionOptions{} }})
}

// versionOptions print the build information.
type versionOptions struct{}

func (versionOptions) AddFlags(*pflag.FlagSet) {}
func (versionOptions) Complete(*envFill) error { return nil }
func (versionOptions) Validate() error         { return nil }
func (versionOptions) Run(context.Context) error {
	fmt.Printf("certready %s (commit %s, %s, %s/%s%s)\n", version, commit, runtime.Version(), runtime.GOOS, runtime.GOARCH, buildFlavour)
	return nil
}

func main() {
	args := pluginArgs(os.Args[0], os.Args[1:])
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	code := execute(ctx, args)
	stop()
	os.Exit(code)
}

// pluginArgs maps a kubectl plugin invocation onto the commands:
// 'kubectl certready' and 'kubectl certready -o wide' (flags, no command)
// are the fleet view, status.
func pluginArgs(argv0 string, args []string) []string {
	if !strings.HasPrefix(filepath.Base(argv0), "kubectl-certready") {
		return args
	}
	if len(args) == 0 || (strings.HasPrefix(args[0], "-") && args[0] != "-h" && args[0] != "--help") {
		return append([]string{"status"}, args...)
	}
	return args
}
