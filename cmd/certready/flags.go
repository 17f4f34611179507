package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"regexp"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/spf13/pflag"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"
)

// EnvPrefix: every flag --foo-bar can also be set as CERTREADY_FOO_BAR.
const EnvPrefix = "CERTREADY_"

// commandLineOnly are the flags whose environment variable is refused:
// each chooses what a process trusts, whom it sends its credentials to, or
// how far its policy reaches, and the environment of a pod is writable by
// more hands than its arguments (a ConfigMap under envFrom, an admission
// webhook that injects variables). The value says why, for the error.
var commandLineOnly = map[string]string{
	"kubeconfig":                      "chooses the API server and the credentials sent to it",
	"ca-file":                         "chooses the CA the kubelet's certificate is verified with",
	"kubelet-ca-file":                 "chooses the CA the kubelet's certificate is verified with",
	"kubelet-pki-dir":                 "chooses where the kubelet's certificate is read",
	"kubelet-config":                  "chooses the kubelet configuration the verdict names as a cause",
	"metrics-secure":                  "switches off the authentication of /metrics",
	"metrics-cert-dir":                "chooses the metrics server's certificate",
	"metrics-ca-secret":               "chooses the CA Prometheus verifies the metrics servers with",
	"metrics-tls-secret":              "chooses the metrics servers' certificate",
	"metrics-server-name":             "chooses the name Prometheus verifies the metrics servers by",
	"metrics-auth-cache-ttl":          "extends how long a revoked token keeps reading /metrics",
	"max-connections":                 "raises the connection cap of the host-network ports",
	"max-connections-per-source":      "raises the connection cap of the host-network ports",
	"metrics-handshake-rate":          "raises the connection cap of the host-network ports",
	"profiling":                       "exposes Go's profiles on the metrics port",
	"inventory":                       "chooses what the approver believes a node owns and where the agent dials",
	"cluster-api":                     "chooses whose credentials the approver uses",
	"capi-cluster-selector":           "chooses whose credentials the approver uses",
	"allow-shared-addresses":          "approves addresses two nodes report",
	"allowed-cidrs":                   "chooses which self-reported addresses the approver trusts",
	"cloud-controller-managers":       "chooses whose word on a node's addresses the approver takes",
	"max-self-reported-ips":           "widens what a request may ask for",
	"allowed-dns-suffixes":            "chooses which names the approver signs",
	"apiserver-host-label":            "chooses which nodes may have the API server's names and addresses",
	"max-sans":                        "widens what a request may ask for",
	"max-request-bytes":               "widens what a request may ask for",
	"max-pending":                     "loosens the flood guard",
	"max-expiration":                  "widens what a request may ask for",
	"lift-readiness-taint":            "chooses which taint the approver lifts",
	"soft-taint":                      "chooses which taint the approver writes",
	"condition-max-age":               "loosens when a condition counts as fresh",
	"condition-type":                  "chooses which condition proves a node ready",
	"csr-retention":                   "loosens the proof a served certificate needs",
	"kubelet-port":                    "chooses where the kubelet's certificate is looked for",
	"kubelet-preferred-address-types": "chooses where the kubelet's certificate is looked for",
	"settle":                          "delays what the agent publishes",
	"apiserver-proof":                 "chooses whether the API server's path to the kubelet is proven",
	"pod-name":                        "chooses whose log proves the API server's path",
	"pod-namespace":                   "chooses whose log proves the API server's path",
	"heartbeat":                       "delays what the agent publishes",
	"check-stalled-after":             "delays the watchdog that withdraws a stale verdict",
	"max-clock-skew":                  "loosens the check of the node's clock",
	"ledger":                          "chooses where the audit records go, or switches them off",
	"leader-elect":                    "lets several approvers write at once",
}

// fromSettings are the flags whose variable the shipped manifests fill from
// a ConfigMap (certready-agent-settings, by configMapKeyRef): whoever
// writes ConfigMaps in the namespace sets them, and must not be able to
// stop every agent that restarts. A value of theirs that does not parse,
// or contradicts another (settingsProblem), is set aside: the default is
// kept and the variable named in the log. On the command line the same
// mistake stops the process, as every other flag's does.
var fromSettings = map[string]bool{"expiry-warning": true, "expiry-critical": true, "ca-expiry-warning": true}

// envFill is what the environment did to a command's flags: the
// fromSettings flags it set (settingsFallback may still set them aside),
// and what it set aside, each with why.
type envFill struct {
	fs       *pflag.FlagSet
	settings []string
	setAside []string
}

// settingsFallback sets aside every fromSettings value that came from the
// environment when problem (the checks of the values together) fails, and
// says why; it returns problem's error when the values still fail without
// them (the command line's own mistake).
func (e *envFill) settingsFallback(problem func() error) error {
	err := problem()
	if err == nil || len(e.settings) == 0 {
		return err
	}
	for _, name := range e.settings {
		f := e.fs.Lookup(name)
		_ = f.Value.Set(f.DefValue)
		f.Changed = false
		e.setAside = append(e.setAside, fmt.Sprintf("environment variable %s (for --%s) set aside, the default %s kept: %v", EnvName(name), name, f.DefValue, err))
	}
	e.settings = nil
	return problem()
}

// EnvName is the environment variable that backs a flag.
func EnvName(flag string) string {
	return EnvPrefix + strings.ToUpper(strings.ReplaceAll(flag, "-", "_"))
}

// downwardAPI is the pod's variable name (set by the manifests from the
// downward API: NODE_NAME, POD_NAME, POD_NAMESPACE), else def: the
// default of the flag that names the same thing.
func downwardAPI(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

// newFlagSet returns a process's flag set. Help and errors are printed by
// runProcess and reportError, each once.
func newFlagSet(name string) *pflag.FlagSet {
	fs := pflag.NewFlagSet(name, pflag.ContinueOnError)
	fs.SortFlags = false
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	return fs
}

// addLogFlags adds klog's -v and --vmodule.
func addLogFlags(fs *pflag.FlagSet) {
	gofs := flag.NewFlagSet("klog", flag.ContinueOnError)
	klog.InitFlags(gofs)
	for _, name := range []string{"v", "vmodule"} {
		fs.AddGoFlag(gofs.Lookup(name))
	}
}

// parse parses args, then fills every flag not given on the command line
// from its environment variable. An error names the flag or variable.
func parse(fs *pflag.FlagSet, args []string, getenv func(string) (string, bool)) (*envFill, error) {
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected argument %q (flags only; see --help)", fs.Arg(0))
	}
	return fillFromEnv(fs, getenv)
}

// commandLineOnlyNote ends the help of every flag in commandLineOnly.
const commandLineOnlyNote = " (command line only)"

// fillFromEnv sets every flag of fs not given on the command line from its
// environment variable (EnvName): the one place any command reads
// CERTREADY_ variables. An error names the flag and variable; a variable
// set for a commandLineOnly flag is an error, never ignored, so that
// whoever set it learns where the setting belongs.
func fillFromEnv(fs *pflag.FlagSet, getenv func(string) (string, bool)) (*envFill, error) {
	set := &envFill{fs: fs}
	var err error
	fs.VisitAll(func(f *pflag.Flag) {
		if err != nil {
			return
		}
		env := EnvName(f.Name)
		v, ok := getenv(env)
		if !ok || v == "" {
			return
		}
		if why, only := commandLineOnly[f.Name]; only {
			err = fmt.Errorf("environment variable %s is set, but --%s %s and is read only from the command line: remove the variable and pass the flag as an argument", env, f.Name, why)
			return
		}
		if !f.Changed {
			serr := fs.Set(f.Name, v)
			switch {
			case serr != nil && fromSettings[f.Name]:
				_ = f.Value.Set(f.DefValue)
				f.Changed = false
				set.setAside = append(set.setAside, fmt.Sprintf("environment variable %s=%q (for --%s) set aside, the default %s kept: %v", env, v, f.Name, f.DefValue, serr))
			case serr != nil:
				err = fmt.Errorf("environment variable %s=%q (for --%s): %w", env, v, f.Name, serr)
			case fromSettings[f.Name]:
				set.settings = append(set.settings, f.Name)
			}
		}
	})
	if err != nil {
		return nil, err
	}
	return set, nil
}

// kubeFlags are the API connection flags shared by the subcommands.
type kubeFlags struct {
	kubeconfig string
	qps        float32
	burst      int
}

func (k *kubeFlags) add(fs *pflag.FlagSet, qps float32, burst int) {
	fs.StringVar(&k.kubeconfig, "kubeconfig", "", "Path to a kubeconfig. Empty: the in-cluster service account (or $KUBECONFIG when set).")
	fs.Float32Var(&k.qps, "kube-api-qps", qps, "Client-side rate limit for API requests per second.")
	fs.IntVar(&k.burst, "kube-api-burst", burst, "Client-side burst for API requests.")
}

func (k *kubeFlags) config(userAgent string) (*rest.Config, error) {
	path := k.kubeconfig
	if path == "" {
		path = os.Getenv("KUBECONFIG")
	}
	var cfg *rest.Config
	var err error
	if path == "" {
		cfg, err = rest.InClusterConfig()
		if err != nil {
			return nil, fmt.Errorf("no --kubeconfig given and not running in a pod: %w", err)
		}
	} else {
		cfg, err = clientcmd.BuildConfigFromFlags("", path)
		if err != nil {
			return nil, fmt.Errorf("--kubeconfig=%s: %w", path, err)
		}
	}
	cfg.QPS, cfg.Burst = k.qps, k.burst
	cfg.UserAgent = userAgent
	return cfg, nil
}

// protobuf makes cfg talk protobuf, as Kubernetes' own controllers do: far
// cheaper than JSON to encode and decode, for the API server (which then
// serves the same cached encoding of each watch event to them and to us)
// and for us. Built-in types only: CRDs speak JSON.
func protobuf(cfg *rest.Config) *rest.Config {
	cfg.ContentType = runtime.ContentTypeProtobuf
	cfg.AcceptContentTypes = runtime.ContentTypeProtobuf + "," + runtime.ContentTypeJSON
	return cfg
}

// goCollector is the Go runtime's collector plus go_gc_heap_live_bytes:
// the heap the last GC found reachable, the figure for what the caches
// keep (heap in use also holds garbage not yet collected, up to GOGC).
func goCollector() prometheus.Collector {
	return collectors.NewGoCollector(collectors.WithGoCollectorRuntimeMetrics(
		collectors.GoRuntimeMetricsRule{Matcher: regexp.MustCompile(`^/gc/heap/live:bytes$`)}))
}
