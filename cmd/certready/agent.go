package main

import (
	"context"
	"fmt"
	"os"
	"runtime/debug"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"

	"github.com/certready/certready/internal/clientmetrics"
	"github.com/certready/certready/internal/httpserve"
	"github.com/certready/certready/internal/names"
	"github.com/certready/certready/internal/nodeapi"
	"github.com/certready/certready/reporter/agent"
	"github.com/certready/certready/reporter/agent/apiclock"
	"github.com/certready/certready/reporter/servingcert/apipath"
	"github.com/certready/certready/reporter/servingcert/certfile"
	"github.com/certready/certready/reporter/servingcert/kubeletconfig"
	"github.com/certready/certready/reporter/servingcert/observe"
)

const serviceAccountCA = "/var/run/secrets/kubernetes.io/serviceaccount/ca.crt"

func runAgent(ctx context.Context, args []string) int {
	fs := newFlagSet("agent", "Verify this node's kubelet serving certificate (installed file, certificate, approved CSR,\n"+
		"certificate presented on the kubelet port) and publish the node condition\n"+
		"KubeletServingCertNotReady: False only when every check passed, True with a reason otherwise.")
	var cfg agent.Config
	var condType string
	var serving servingFlags
	var kf kubeFlags
	var gcPercent int
	var lf ledgerFlags
	fs.IntVar(&gcPercent, "gc-percent", 50, "Go's GOGC for the agent (its heap is a few MiB: collecting at half its growth keeps its peak on every node lower for little CPU; bench table 4). $GOGC, when set, wins.")
	fs.StringVar(&cfg.NodeName, "node-name", os.Getenv("NODE_NAME"), "This node's name (default: $NODE_NAME, set it from the downward API spec.nodeName).")
	fs.StringVar(&cfg.PKIDir, "kubelet-pki-dir", certfile.DefaultDir, "The kubelet's --cert-dir. Mount it at this same path: the kubelet's symlink target is absolute.")
	fs.StringVar(&cfg.CAFile, "ca-file", serviceAccountCA, "PEM bundle of the CA that signs kubelet serving certificates.")
	fs.IntVar(&cfg.KubeletPort, "kubelet-port", 0, "Kubelet port to probe. 0: the Node's status.daemonEndpoints.kubeletEndpoint.Port, else 10250.")
	var addrTypes string
	fs.StringVar(&addrTypes, "kubelet-preferred-address-types", "InternalIP,ExternalIP,Hostname", "The API server's --kubelet-preferred-address-types: it dials the node's first address of these types, so the certificate must cover that one (kubeadm's order by default).")
	fs.StringVar(&condType, "condition-type", names.ConditionType, "Node condition type to publish.")
	fs.DurationVar(&cfg.Heartbeat, "heartbeat", agent.Config{}.Defaults().Heartbeat, "Rewrite an unchanged condition at least this often (lastHeartbeatTime).")
	fs.DurationVar(&cfg.Resync, "resync", agent.Config{}.Defaults().Resync, "Re-check at least this often, besides file, Node and CSR events.")
	fs.DurationVar(&cfg.Settle, "settle", agent.Config{}.Defaults().Settle, "How long a state a healthy rotation passes through (file briefly absent, old certificate still served) must last before it is published.")
	fs.DurationVar(&cfg.ProbeTimeout, "probe-timeout", agent.Config{}.Defaults().ProbeTimeout, "Timeout of the TLS handshake with the kubelet port.")
	fs.DurationVar(&cfg.CSRRetention, "csr-retention", agent.Config{}.Defaults().CSRRetention, "How long the controller manager keeps issued CSRs; an older certificate from the CA with this node's identity needs no CSR.")
	fs.DurationVar(&cfg.CheckStalledAfter, "check-stalled-after", 0, "Watchdog: when no check has completed for this long (a hung API call, a stuck probe), set the condition to Unknown/CheckStalled. 0: three times --resync.")
	fs.DurationVar(&cfg.ExpiryWarning, "expiry-warning", agent.DefaultExpiryWarning, "The expiry alerts' warning window for the kubelet's serving and client certificates (published as certready_expiry_window_seconds{window=\"warning\"}).")
	fs.DurationVar(&cfg.ExpiryCritical, "expiry-critical", agent.DefaultExpiryCritical, "The same, critical (window=\"critical\"); at most --expiry-warning.")
	fs.DurationVar(&cfg.CAExpiryWarning, "ca-expiry-warning", agent.DefaultCAExpiryWarning, "The cluster CA's expiry alert window (window=\"ca-warning\").")
	fs.DurationVar(&cfg.MaxClockSkew, "max-clock-skew", agent.Config{}.Defaults().MaxClockSkew, "Largest difference tolerated between the node's clock and the API server's (the Date of its responses) before the condition says ClockSkew; validity is judged by the API server's clock either way.")
	var proof string
	fs.StringVar(&proof, "apiserver-proof", string(apipath.Required), "Prove the API server's own connection to this node's kubelet (the path of kubectl logs) by asking it for one byte of this pod's log (needs get on pods/log in the pod's namespace): required (the ready verdict needs it; failures are APIServerCannotVerifyKubelet, APIServerCannotReachKubelet, APIServerProofUnavailable), observe (metrics only), off.")
	fs.StringVar(&cfg.PodName, "pod-name", os.Getenv("POD_NAME"), "This agent's pod (default: $POD_NAME, from the downward API metadata.name), whose log --apiserver-proof asks for.")
	fs.StringVar(&cfg.PodNamespace, "pod-namespace", os.Getenv("POD_NAMESPACE"), "This agent's pod's namespace (default: $POD_NAMESPACE).")
	fs.StringVar(&cfg.Container, "container-name", "agent", "This agent's container in its pod.")
	fs.DurationVar(&cfg.APIProofInterval, "apiserver-proof-interval", 10*time.Minute, "How long a proof of the API server's path stands for the same certificate (plus up to a tenth, random); a new certificate, and a verdict about to become ready, are proven again at once.")
	fs.StringVar(&cfg.KubeletConfig, "kubelet-config", kubeletconfig.DefaultPath, "The kubelet's configuration file (kubeadm's path by default), mounted read-only at this path: serverTLSBootstrap or rotateCertificates not true there is named from the first check. Missing, empty, unreadable or not a KubeletConfiguration: not known, never an error of the verdict. Empty: not read.")
	fs.StringVar(&cfg.Inventory, "inventory", "", "A desired-state inventory, as the approver's --inventory: configmap:<namespace>/<name> (key inventory.yaml; needs get, list and watch on that ConfigMap) or file:<path> (read at each check). The agent dials the address it records for this node and names the Node's addresses that drift from it (condition message, NodeAddressDrift event, certready_node_address_drift). Empty or node: the Node's own addresses.")
	serving.add(fs, ":9721", ":9722", "")
	lf.add(fs)
	kf.add(fs, 5, 10)
	addLogFlags(fs)
	if code := parseOrExit(fs, args); code >= 0 {
		return code
	}
	mode, err := apipath.ParseMode(proof)
	if err != nil {
		fmt.Fprintf(os.Stderr, "certready agent: --apiserver-proof=%s: %v\n", proof, err)
		return 2
	}
	cfg.APIServerProof = mode
	cfg.ConditionType = corev1.NodeConditionType(condType)
	cfg.Version = version
	// Listing, decoding and the first check leave garbage the steady state
	// never needs again: returned to the OS once (docs/benchmarks.md,
	// table 4), not held until the scavenger gets to it.
	cfg.Settled = debug.FreeOSMemory
	if err := settingsFallback(fs, func() error { return cfg.Defaults().ValidateExpiry() }); err != nil {
		fmt.Fprintf(os.Stderr, "certready agent: %v\n", err)
		return 2
	}
	for _, msg := range envSetAside[fs] {
		klog.FromContext(ctx).Error(nil, "A setting from the environment (the ConfigMap certready-agent-settings) is set aside; fix the ConfigMap", "problem", msg)
	}
	types, err := observe.ParseAddressTypes(addrTypes)
	if err != nil {
		fmt.Fprintf(os.Stderr, "certready agent: --kubelet-preferred-address-types: %v\n", err)
		return 2
	}
	cfg.PreferredAddressTypes = types
	logger := klog.FromContext(ctx)
	if _, set := os.LookupEnv("GOGC"); !set {
		debug.SetGCPercent(gcPercent)
	}
	if soft := goMemoryLimit(os.LookupEnv, cgroupRoot); soft > 0 {
		logger.V(1).Info("Go memory limit from the container's", "bytes", soft)
	}

	restCfg, err := kf.config("certready-agent/" + version)
	if err != nil {
		logger.Error(err, "Cannot build the API client")
		return 1
	}
	// The API server's clock, from the Date of the responses the agent
	// gets anyway: no request of its own.
	cfg.Clock = apiclock.New()
	restCfg.Wrap(cfg.Clock.Wrap)
	client, err := nodeapi.New(protobuf(restCfg))
	if err != nil {
		logger.Error(err, "Cannot build the API client")
		return 1
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(goCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	clientmetrics.Register(reg, "agent", version, commit) // before agent.New makes its queue
	if cfg.Ledger, err = lf.build("agent", cfg.NodeName, reg); err != nil {
		fmt.Fprintf(os.Stderr, "certready agent: %v\n", err)
		return 2
	}
	ready := httpserve.NewReadiness("caches not synced, no check completed")
	a, err := agent.New(cfg, client, reg, ready)
	if err != nil {
		fmt.Fprintf(os.Stderr, "certready agent: %v\n", err)
		return 2
	}
	return serving.serveAndRun(ctx, restCfg, reg, ready, a.Run)
}
