//go:build !nodeonly

package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/spf13/pflag"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/dynamic"

	"github.com/certready/certready/internal/clientmetrics"
	"github.com/certready/certready/internal/httpserve"
	"github.com/certready/certready/internal/names"
	"github.com/certready/certready/reporter/approver"
	"github.com/certready/certready/reporter/approver/metricscert"
	"github.com/certready/certready/reporter/approver/policy"
	"github.com/certready/certready/reporter/approver/taint"
	"github.com/certready/certready/reporter/servingcert/certfile"
	"github.com/certready/certready/reporter/servingcert/condition"
	"github.com/certready/certready/reporter/servingcert/observe"
)

const approverLong = "Approve kubelet-serving CSRs that prove their node's identity; leave every other one\n" +
	"pending with a Warning event naming the failed rule (or deny it with --deny-on-mismatch).\n" +
	"Runs leader-elected: only the replica holding the Lease writes."

// approverFlags are the approver's command line: the options it sets
// directly and the values that need parsing first. csr explain parses a
// Deployment's arguments with them too.
type approverFlags struct {
	o                                       approver.Options
	allowed, denied, apiIPs                 []string
	apiNames, dnsSuffixes                   []string
	condType                                string
	capiSelector, readinessTaint, softTaint string
	kubeletCA, addrTypes                    string
	metricsCert                             metricscert.Keeper
	serving                                 servingFlags
	prover                                  taint.Prover
	ledger                                  ledgerFlags
	kf                                      kubeFlags
}

func (f *approverFlags) add(fs *pflag.FlagSet) {
	host, _ := os.Hostname()
	fs.StringVar(&f.o.InventorySpec, "inventory", "node", "Where node addresses come from: node (the Node objects; self-reported by the kubelet), configmap:<namespace>/<name> (key inventory.yaml) or file:<path>. The latter two are desired state the node cannot write. (Cluster API Machines: --cluster-api.)")
	fs.BoolVar(&f.o.ClusterAPI, "cluster-api", false, "Run in a Cluster API management cluster and serve every workload cluster selected by --capi-cluster-selector, approving against each node's Machine.status.addresses instead of an --inventory (docs/reference.md: Cluster API).")
	fs.StringVar(&f.capiSelector, "capi-cluster-selector", "", "--cluster-api: label selector of the Cluster objects to serve (empty: every Cluster).")
	fs.StringSliceVar(&f.allowed, "allowed-cidrs", nil, "If set, every IP SAN must also lie in one of these CIDRs.")
	fs.StringSliceVar(&f.denied, "deny-cidrs", nil, "IP SANs in these CIDRs are never approved (for example the service range).")
	fs.StringSliceVar(&f.apiIPs, "apiserver-ips", nil, "API server addresses that are no node's own, never approved as SANs, not even to an API server host. Nothing is needed here for what the approver learns itself: the default/kubernetes Service and EndpointSlice, its own kubeconfig's host, kube-public/cluster-info and the SANs of the certificate the API server presents (approved only to a node labelled --apiserver-host-label, and only its own).")
	fs.StringVar(&f.o.APIServerHostLabel, "apiserver-host-label", approver.DefaultAPIServerHostLabel, "Label (key) of the Nodes that host an API server: on kubeadm and kind the API server listens on its control-plane node's address, and only such a node may have that address in its serving certificate. Must be one kubelets cannot set on themselves (node-role.kubernetes.io/ or node-restriction.kubernetes.io/). Empty: no node may.")
	fs.StringSliceVar(&f.apiNames, "apiserver-names", nil, "DNS names that are no node's own, never approved as SANs, not even to an API server host: host names, or patterns *.<domain> (a domain of at least two labels) that refuse every name one label under it, as TLS clients match a wildcard. The API server's names and wildcards that it presents or that its clients use are learned without this; kubernetes, kubernetes.default* and *.svc* are always refused.")
	fs.StringSliceVar(&f.dnsSuffixes, "allowed-dns-suffixes", nil, "If set, every DNS SAN but the node's own name must be a name under one of these domains (e.g. nodes.example.com; DNSSANOutsideAllowedSuffixes otherwise). A host name of two labels (<host>.<domain>, which pods would resolve as the Service <host> in namespace <domain>) is approved only when its domain is listed here.")
	fs.StringSliceVar(&f.o.CloudControllers, "cloud-controller-managers", nil, "Node inventory: field managers (managedFields) whose writes of a Node's status.addresses are the infrastructure's word, e.g. "+strings.Join(approver.CommonCloudControllers, ",")+"; every other address (the kubelet's) is self-reported: it must lie in --allowed-cidrs, in the /24 (IPv6: /64) of an InternalIP one of these managers wrote for a Node, or among the addresses the node first reported, and at most --max-self-reported-ips of them. None by default: a field manager's name is its writer's user agent, which a node's credentials can forge; list only the cloud controllers your cluster runs, knowing that.")
	fs.IntVar(&f.o.Controller.Policy.MaxSelfReportedIPs, "max-self-reported-ips", policy.DefaultMaxSelfReportedIPs, "Node inventory: most IP SANs in one request that the node reported about itself (TooManySelfReportedIPSANs above it): a kubelet reports one address per family and type.")
	fs.BoolVar(&f.o.SharedAddressesOK, "allow-shared-addresses", false, "Node inventory: approve an address that several Nodes report (nodes behind one NAT address). Off: such an address is refused (AddressClaimedByOtherNode), since a node can report any address.")
	fs.DurationVar(&f.o.Controller.Policy.MaxExpiration, "max-expiration", 365*24*time.Hour, "Largest spec.expirationSeconds approved.")
	fs.IntVar(&f.o.Controller.Policy.MaxSANs, "max-sans", policy.DefaultMaxSANs, "Most DNS and IP SANs in one request (TooManySANs above it). A kubelet asks for its host name and the addresses in its Node status.")
	fs.IntVar(&f.o.Controller.Policy.MaxRequestBytes, "max-request-bytes", policy.DefaultMaxRequestBytes, "Largest spec.request in bytes; a larger one is dropped before it is cached and refused unread (RequestTooLarge). A kubelet's request is about 500 bytes.")
	fs.IntVar(&f.o.Controller.MaxPending, "max-pending", 0, "Flood guard: approve nothing while this many distinct nodes have a kubelet-serving CSR pending (a node's older requests are superseded by its newest and count once). 0: number of inventory nodes + 100.")
	fs.BoolVar(&f.o.Controller.DenyOnMismatch, "deny-on-mismatch", false, "Deny CSRs that fail the policy instead of leaving them pending.")
	fs.IntVar(&f.o.Controller.Workers, "workers", 64, "Concurrent CSR workers: each waits on one API write at a time, so throughput is about workers / write latency (64 keeps pace with a 5000-node scale-up on a loaded API server; idle workers cost nothing).")
	fs.BoolVar(&f.o.LeaderElect, "leader-elect", true, "Elect a leader through a Lease; only the leader writes.")
	fs.StringVar(&f.o.LeaseNamespace, "leader-elect-namespace", downwardAPI("POD_NAMESPACE", "certready-system"), "Namespace of the Lease (default: $POD_NAMESPACE).")
	fs.StringVar(&f.o.LeaseName, "leader-elect-lease-name", "certready-approver", "Name of the Lease.")
	fs.StringVar(&f.o.Identity, "leader-elect-identity", downwardAPI("POD_NAME", host), "This replica's identity in the Lease (default: $POD_NAME, else the host name). A random suffix is added per process, so a restarted container never mistakes the Lease of its crashed predecessor for its own.")
	fs.DurationVar(&f.o.LeaseDuration, "leader-elect-lease-duration", 15*time.Second, "How long a standby waits before taking over an unrenewed Lease.")
	fs.DurationVar(&f.o.RenewDeadline, "leader-elect-renew-deadline", 10*time.Second, "How long the leader retries renewing before it gives up leading.")
	fs.DurationVar(&f.o.RetryPeriod, "leader-elect-retry-period", 2*time.Second, "How often candidates try to acquire or renew.")
	fs.StringVar(&f.readinessTaint, "lift-readiness-taint", "", "Taint fallback (off when empty): remove this taint, key=value:effect, once the node's condition is False and fresh, e.g. readiness.k8s.io/KubeletServingCertNotReady=pending:NoSchedule. A taint with that key but another value or effect is left alone.")
	fs.StringVar(&f.softTaint, "soft-taint", "", "Taint fallback: keep this PreferNoSchedule taint (key=value:PreferNoSchedule) on every node whose condition is not False and fresh, so that the approver (which does not tolerate it) and other pods prefer nodes that proved their serving certificate. Off when empty.")
	fs.DurationVar(&f.o.MaxConditionAge, "condition-max-age", condition.DefaultMaxAge, "Taint fallback: a False condition whose lastHeartbeatTime is older than this does not lift the taint (twice the agent's --heartbeat).")
	fs.StringVar(&f.kubeletCA, "kubelet-ca-file", serviceAccountCA, "Taint fallback: PEM bundle of the CA that signs kubelet serving certificates (the API server's --kubelet-certificate-authority). Before lifting a taint the approver dials the node's kubelet and verifies what it serves against it.")
	fs.StringVar(&f.addrTypes, "kubelet-preferred-address-types", "InternalIP,ExternalIP,Hostname", "Taint fallback: the API server's --kubelet-preferred-address-types; the node's first address of these types is dialled and must be in the certificate.")
	fs.IntVar(&f.prover.Port, "kubelet-port", 0, "Taint fallback: the kubelet port to dial. 0: the Node's status.daemonEndpoints.kubeletEndpoint.Port, else 10250.")
	fs.DurationVar(&f.prover.Retention, "csr-retention", time.Hour, "Taint fallback: how long the controller manager keeps issued CSRs; a served certificate at least this old needs no CSR to be proven.")
	fs.StringVar(&f.condType, "condition-type", names.ConditionType, "The agent's node condition, for the taint fallback.")
	f.serving.add(fs, ":9731", ":9732", " (the bench reads the heap through it)")
	fs.StringVar(&f.metricsCert.CASecret, "metrics-ca-secret", "certready-metrics-ca", "Secret in --leader-elect-namespace holding the metrics endpoints' CA and its key, read only by the approver; the manifests create it empty and the leader fills it (and renews it with a third of its life left). Empty, with --metrics-tls-secret empty: the approver keeps no metrics certificate (bring your own, e.g. cert-manager's, through --metrics-cert-dir).")
	fs.StringVar(&f.metricsCert.ServingSecret, "metrics-tls-secret", "certready-metrics-tls", "Secret in --leader-elect-namespace that the leader fills with the metrics serving certificate for --metrics-server-name, signed by the CA in --metrics-ca-secret (tls.crt, tls.key, and the CA bundle ca.crt that the ServiceMonitor verifies with); the agents and the approver mount it at --metrics-cert-dir. The manifests create it empty.")
	fs.StringVar(&f.metricsCert.ServerName, "metrics-server-name", "certready-metrics", "The name in the metrics serving certificate, the ServiceMonitor's tlsConfig.serverName. It need not resolve: Prometheus dials each endpoint's address and checks the certificate for this name, signed by this installation's own CA.")
	f.ledger.add(fs)
	// Sized so that the approver keeps pace with a fleet scale-up (one write
	// per approved CSR: 500/s is above the creation rate a 2-core API server
	// sustains); API Priority and Fairness (the shipped FlowSchema) is the
	// server-side bound.
	f.kf.add(fs, 500, 1000)
}

// options parses and validates the flags into the approver's Options.
func (f *approverFlags) options() (approver.Options, error) {
	var err error
	if f.readinessTaint != "" {
		if f.o.LiftReadinessTaint, err = taint.ParseTaint(f.readinessTaint); err != nil {
			return approver.Options{}, fmt.Errorf("--lift-readiness-taint: %w", err)
		}
	}
	if f.o.LiftReadinessTaint.Key != "" {
		if f.prover.Roots, err = certfile.LoadCA(f.kubeletCA); err != nil {
			return approver.Options{}, fmt.Errorf("--kubelet-ca-file (the taint fallback proves each node's serving certificate before lifting its taint): %w", err)
		}
		if f.prover.AddressTypes, err = observe.ParseAddressTypes(f.addrTypes); err != nil {
			return approver.Options{}, fmt.Errorf("--kubelet-preferred-address-types: %w", err)
		}
		f.o.Prover = &f.prover
	}
	if f.softTaint != "" {
		if f.o.SoftTaint, err = taint.ParseTaint(f.softTaint); err != nil {
			return approver.Options{}, fmt.Errorf("--soft-taint: %w", err)
		}
	}
	if f.o.Controller.Policy.AllowedCIDRs, err = prefixes("allowed-cidrs", f.allowed); err != nil {
		return approver.Options{}, err
	}
	if f.o.Controller.Policy.DenyCIDRs, err = prefixes("deny-cidrs", f.denied); err != nil {
		return approver.Options{}, err
	}
	pol := &f.o.Controller.Policy
	for _, s := range f.apiNames {
		n, err := policy.ParseDenyName(s)
		if err != nil {
			return approver.Options{}, fmt.Errorf("--apiserver-names: %w", err)
		}
		pol.DenyDNSNames = append(pol.DenyDNSNames, n)
	}
	for _, s := range f.dnsSuffixes {
		d, err := policy.ParseDNSSuffix(s)
		if err != nil {
			return approver.Options{}, fmt.Errorf("--allowed-dns-suffixes: %w", err)
		}
		pol.AllowedDNSSuffixes = append(pol.AllowedDNSSuffixes, d)
	}
	if pol.MaxSelfReportedIPs < 1 {
		return approver.Options{}, fmt.Errorf("--max-self-reported-ips=%d: want at least 1 (a kubelet asks for the addresses it reports)", pol.MaxSelfReportedIPs)
	}
	if err := approver.ValidateCloudControllers(f.o.CloudControllers); err != nil {
		return approver.Options{}, fmt.Errorf("--cloud-controller-managers: %w", err)
	}
	for _, s := range f.apiIPs {
		ip, err := netip.ParseAddr(strings.TrimSpace(s))
		if err != nil {
			return approver.Options{}, fmt.Errorf("--apiserver-ips: %q is not an IP address", s)
		}
		f.o.Controller.Policy.DenyIPs = append(f.o.Controller.Policy.DenyIPs, ip)
	}
	if f.o.CAPI.Selector, err = labels.Parse(f.capiSelector); err != nil {
		return approver.Options{}, fmt.Errorf("--capi-cluster-selector %q: %w", f.capiSelector, err)
	}
	if err := f.o.Validate(); err != nil {
		return approver.Options{}, err
	}
	switch mc := &f.metricsCert; {
	case mc.CASecret == "" && mc.ServingSecret == "":
	case !f.serving.secure || f.serving.metricsAddr == "":
		// No TLS metrics endpoint: no certificate to keep.
	case mc.CASecret == "" || mc.ServingSecret == "":
		return approver.Options{}, errors.New("--metrics-ca-secret and --metrics-tls-secret are set together (the approver keeps both) or both empty (it keeps neither)")
	case mc.CASecret == mc.ServingSecret:
		return approver.Options{}, fmt.Errorf("--metrics-ca-secret and --metrics-tls-secret are both %q: the CA's key must stay out of the Secret every pod mounts", mc.CASecret)
	default:
		mc.Namespace = f.o.LeaseNamespace
		if errs := validation.IsDNS1123Subdomain(mc.ServerName); len(errs) > 0 {
			return approver.Options{}, fmt.Errorf("--metrics-server-name=%q: %s", mc.ServerName, strings.Join(errs, "; "))
		}
		mc.Interval = 10 * time.Minute
		f.o.MetricsCert = mc
	}
	f.o.ConditionType = corev1.NodeConditionType(f.condType)
	return f.o, nil
}

// approverOptions are the approver process's: its flags, completed into
// approver.Options.
type approverOptions struct {
	f approverFlags
	o approver.Options
}

func (a *approverOptions) AddFlags(fs *pflag.FlagSet) {
	a.f.add(fs)
	addLogFlags(fs)
}

// Complete parses and validates the flags into approver.Options and makes
// this process's Lease identity unique.
func (a *approverOptions) Complete(*envFill) error {
	var err error
	if a.o, err = a.f.options(); err != nil {
		return err
	}
	suffix := make([]byte, 4)
	if _, err := rand.Read(suffix); err != nil {
		return err
	}
	a.o.Identity += "_" + hex.EncodeToString(suffix)
	return nil
}

// Validate: options() validated the flags together (approver.Options.Validate).
func (a *approverOptions) Validate() error { return nil }

func (a *approverOptions) Run(ctx context.Context) error {
	o, kf := a.o, a.f.kf
	client, err := kf.protobufClient("certready-approver/" + version)
	if err != nil {
		return err
	}
	if o.RESTConfig, err = kf.config("certready-approver/" + version); err != nil {
		return err
	}
	if o.MetricsCert != nil {
		o.MetricsCert.Client = client
	}
	if o.ClusterAPI {
		cfg, err := kf.config("certready-approver/" + version)
		if err != nil {
			return err
		}
		if o.Dynamic, err = dynamic.NewForConfig(cfg); err != nil {
			return err
		}
		o.CAPI.UserAgent, o.CAPI.QPS, o.CAPI.Burst = "certready-approver/"+version, kf.qps, kf.burst
	}
	// Events get a client (and so a client-side rate limit) of their own,
	// a fifth of the approver's (100/s): in a storm, approval events wait (or are dropped
	// by the broadcaster) rather than the approvals they record, which the
	// CSR's own condition carries anyway.
	events := kf
	events.qps, events.burst = 100, 200
	if o.EventClient, err = events.protobufClient("certready-approver/" + version); err != nil {
		return err
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(goCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	clientmetrics.Register(reg, "approver", version, commit) // before approver.Run makes its queues
	if o.Controller.Ledger, err = a.f.ledger.build("approver", o.Identity, reg); err != nil {
		return err
	}
	ready := httpserve.NewReadiness("caches not synced")
	return a.f.serving.serveAndRun(ctx, o.RESTConfig, reg, ready, func(ctx context.Context) error {
		return approver.Run(ctx, client, reg, ready, o)
	})
}

func prefixes(flag string, in []string) ([]netip.Prefix, error) {
	var out []netip.Prefix
	for _, s := range in {
		p, err := netip.ParsePrefix(strings.TrimSpace(s))
		if err != nil {
			return nil, fmt.Errorf("--%s: %q is not a CIDR (e.g. 10.96.0.0/12)", flag, s)
		}
		out = append(out, p.Masked())
	}
	return out, nil
}
