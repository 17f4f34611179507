package main

import (
	"context"
	"fmt"
	"os"
	"runtime/debug"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/spf13/pflag"
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

const agentLong = "Verify this node's kubelet serving certificate (installed file, certificate, approved CSR,\n" +
	"certificate presented on the kubelet port) and publish the node condition\n" +
	"KubeletServingCertNotReady: False only when every check passed, True with a reason otherwise."

// agentOptions are the agent's command line.
type agentOptions struct {
	cfg                        agent.Config
	condType, addrTypes, proof string
	serving                    servingFlags
	kf                         kubeFlags
	gcPercent                  int
	lf                         ledgerFlags
	setAside                   []string // settings from the environment set aside, logged at start
}

func (o *agentOptions) AddFlags(fs *pflag.FlagSet) {
	cfg := &o.cfg
	fs.IntVar(&o.gcPercent, "gc-percent", 50, "Go's GOGC for the agent (its heap is a few MiB: collecting at half its growth keeps its peak on every node lower for little CPU; bench table 4). $GOGC, when set, wins.")
	fs.StringVar(&cfg.NodeName, "node-name", downwardAPI("NODE_NAME", ""), "This node's name (default: $NODE_NAME, set it from the downward API spec.nodeName).")
	fs.StringVar(&cfg.PKIDir, "kubelet-pki-dir", certfile.DefaultDir, "The kubelet's --cert-dir. Mount it at this same path: the kubelet's symlink target is absolute.")
	fs.StringVar(&cfg.CAFile, "ca-file", serviceAccountCA, "PEM bundle of the CA that signs kubelet serving certificates.")
	fs.IntVar(&cfg.KubeletPort, "kubelet-port", 0, "Kubelet port to probe. 0: the Node's status.daemonEndpoints.kubeletEndpoint.Port, else 10250.")
	fs.StringVar(&o.addrTypes, "kubelet-preferred-address-types", "InternalIP,ExternalIP,Hostname", "The API server's --kubelet-preferred-address-types: it dials the node's first address of these types, so the certificate must cover that one (kubeadm's order by default).")
	fs.StringVar(&o.condType, "condition-type", names.ConditionType, "Node condition type to publish.")
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
	fs.StringVar(&o.proof, "apiserver-proof", string(apipath.Required), "Prove the API server's own connection to this node's kubelet (the path of kubectl logs) by asking it for one byte of this pod's log (needs get on pods/log in the pod's namespace): required (the ready verdict needs it; failures are APIServerCannotVerifyKubelet, APIServerCannotReachKubelet, APIServerProofUnavailable), observe (metrics only), off.")
	fs.StringVar(&cfg.PodName, "pod-name", downwardAPI("POD_NAME", ""), "This agent's pod (default: $POD_NAME, from the downward API metadata.name), whose log --apiserver-proof asks for.")
	fs.StringVar(&cfg.PodNamespace, "pod-namespace", downwardAPI("POD_NAMESPACE", ""), "This agent's pod's namespace (default: $POD_NAMESPACE).")
	fs.StringVar(&cfg.Container, "container-name", "agent", "This agent's container in its pod.")
	fs.DurationVar(&cfg.APIProofInterval, "apiserver-proof-interval", 10*time.Minute, "How long a proof of the API server's path stands for the same certificate (plus up to a tenth, random); a new certificate, and a verdict about to become ready, are proven again at once.")
	fs.StringVar(&cfg.KubeletConfig, "kubelet-config", kubeletconfig.DefaultPath, "The kubelet's configuration file (kubeadm's path by default), mounted read-only at this path: serverTLSBootstrap or rotateCertificates not true there is named from the first check. Missing, empty, unreadable or not a KubeletConfiguration: not known, never an error of the verdict. Empty: not read.")
	fs.StringVar(&cfg.Inventory, "inventory", "", "A desired-state inventory, as the approver's --inventory: configmap:<namespace>/<name> (key inventory.yaml; needs get, list and watch on that ConfigMap) or file:<path> (read at each check). The agent dials the address it records for this node and names the Node's addresses that drift from it (condition message, NodeAddressDrift event, certready_node_address_drift). Empty or node: the Node's own addresses.")
	o.serving.add(fs, ":9721", ":9722", "")
	o.lf.add(fs)
	o.kf.add(fs, 5, 10)
	addLogFlags(fs)
}

func (o *agentOptions) Complete(set *envFill) error {
	mode, err := apipath.ParseMode(o.proof)
	if err != nil {
		return fmt.Errorf("--apiserver-proof=%s: %w", o.proof, err)
	}
	o.cfg.APIServerProof = mode
	o.cfg.ConditionType = corev1.NodeConditionType(o.condType)
	o.cfg.Version = version
	// Listing, decoding and the first check leave garbage the steady state
	// never needs again, and pages of the binary it never runs or reads
	// again: both returned once (docs/benchmarks.md, table 4), so that
	// the agent's resident set on every node is what its steady state
	// touches.
	o.cfg.Settled = func() {
		debug.FreeOSMemory()
		advised, err := dropStartPages()
		klog.Background().V(2).Info("Start-up garbage and pages of the binary returned", "binaryBytesAdvised", advised, "err", err)
	}
	if err := set.settingsFallback(func() error { return o.cfg.Defaults().ValidateExpiry() }); err != nil {
		return err
	}
	o.setAside = set.setAside
	if o.cfg.PreferredAddressTypes, err = observe.ParseAddressTypes(o.addrTypes); err != nil {
		return fmt.Errorf("--kubelet-preferred-address-types: %w", err)
	}
	return nil
}

// Validate: the agent's Config is validated by agent.New, with its
// defaults applied.
func (o *agentOptions) Validate() error { return nil }

func (o *agentOptions) Run(ctx context.Context) error {
	logger := klog.FromContext(ctx)
	for _, msg := range o.setAside {
		logger.Error(nil, "A setting from the environment (the ConfigMap certready-agent-settings) is set aside; fix the ConfigMap", "problem", msg)
	}
	if _, set := os.LookupEnv("GOGC"); !set {
		debug.SetGCPercent(o.gcPercent)
	}
	if soft := goMemoryLimit(os.LookupEnv, cgroupRoot); soft > 0 {
		logger.V(1).Info("Go memory limit from the container's", "bytes", soft)
	}
	cfg := o.cfg
	restCfg, err := o.kf.config("certready-agent/" + version)
	if err != nil {
		return exitWith(1, fmt.Errorf("cannot build the API client: %w", err))
	}
	// The API server's clock, from the Date of the responses the agent
	// gets anyway: no request of its own.
	cfg.Clock = apiclock.New()
	restCfg.Wrap(cfg.Clock.Wrap)
	client, err := nodeapi.New(protobuf(restCfg))
	if err != nil {
		return exitWith(1, fmt.Errorf("cannot build the API client: %w", err))
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(goCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	clientmetrics.Register(reg, "agent", version, commit) // before agent.New makes its queue
	if cfg.Ledger, err = o.lf.build("agent", cfg.NodeName, reg); err != nil {
		return err
	}
	ready := httpserve.NewReadiness("caches not synced, no check completed")
	a, err := agent.New(cfg, client, reg, ready)
	if err != nil {
		return err
	}
	return o.serving.serveAndRun(ctx, restCfg, reg, ready, a.Run)
}
