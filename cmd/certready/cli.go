//go:build !nodeonly

package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/spf13/cobra"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"

	"github.com/certready/certready/internal/names"
	"github.com/certready/certready/reporter/fleet"
	"github.com/certready/certready/reporter/servingcert/condition"
)

// execute runs the command tree on args and returns the exit status; the
// command that ran reports how it ended (reportError), cobra's own errors
// (an unknown command or flag) included.
func execute(ctx context.Context, args []string) int {
	root := newRootCommand(ctx)
	root.SetArgs(args)
	cmd, err := root.ExecuteContextC(ctx)
	if err != nil && !isExitError(err) {
		err = usageError(err) // cobra's: the command line is wrong
	}
	return reportError(os.Stderr, cmd.CommandPath(), err)
}

// operator is an operator command's options, run as kubectl runs its
// commands: the flags (each also from its CERTREADY_ variable) completed
// into options, validated before the cluster is read, then run. Run's
// errors exit 2 unless they say otherwise (exitWith).
type operator interface {
	Complete(cmd *cobra.Command, args []string) error
	Validate() error
	Run(ctx context.Context, out io.Writer) error
}

// runOperator is every operator command's RunE.
func runOperator(o operator) func(*cobra.Command, []string) error {
	return func(cmd *cobra.Command, args []string) error {
		if _, err := fillFromEnv(cmd.Flags(), os.LookupEnv); err != nil {
			return usageError(err)
		}
		if err := o.Complete(cmd, args); err != nil {
			if isExitError(err) {
				return err // Complete chose the status (a refused baseline)
			}
			return usageError(err)
		}
		if err := o.Validate(); err != nil {
			return usageError(err)
		}
		return runFailed(o.Run(cmd.Context(), cmd.OutOrStdout()))
	}
}

// newRootCommand is certready's command tree: the fleet commands an
// operator runs (status, preflight, verify; status also as 'kubectl
// certready'), the
// processes the manifests run (agent, approver, check, copy-binary), and
// version and shell completion.
func newRootCommand(ctx context.Context) *cobra.Command {
	root := &cobra.Command{
		Use:   "certready",
		Short: "Keeps nodes from taking workloads until their kubelet can really serve TLS.",
		Long: "certready keeps a Kubernetes node from taking workloads until its kubelet can really serve TLS.\n\n" +
			"Operators: 'certready status' (or 'kubectl certready') shows which nodes are not ready and why;\n" +
			"'certready preflight' what a NodeReadinessRule would do; 'certready verify' whether a renewal\n" +
			"happened; 'certready csr' where each kubelet-serving CSR stands and why ('csr explain NAME');\n" +
			"'certready evidence' records a maintenance run an auditor accepts.\n" +
			"The other commands are what the manifests run.",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.AddGroup(&cobra.Group{ID: "fleet", Title: "Operator commands (read-only, your kubeconfig):"},
		&cobra.Group{ID: "process", Title: "What the manifests run:"})
	root.AddCommand(newStatusCommand(), newPreflightCommand(), newVerifyCommand(), newCSRCommand(), newLedgerCommand(), newEvidenceCommand())
	for _, c := range commands() {
		if c.name == "version" {
			root.AddCommand(processCommand(ctx, c, ""))
			continue
		}
		root.AddCommand(processCommand(ctx, c, "process"))
	}
	return root
}

// processCommand runs a process of the command table (runProcess parses
// its flags, each also from its CERTREADY_ variable, and prints its help).
func processCommand(ctx context.Context, c command, group string) *cobra.Command {
	return &cobra.Command{
		Use:                c.name + " [flags]",
		Short:              c.summary,
		GroupID:            group,
		DisableFlagParsing: true,
		RunE: func(_ *cobra.Command, args []string) error {
			return runProcess(ctx, c, args)
		},
	}
}

// fleetFlags are the read-only commands' connection flags: kubectl's own
// (cli-runtime: --kubeconfig, --context, --cluster, --user, -n,
// --request-timeout..., and kubectl's loading rules: every path of a
// colon-separated $KUBECONFIG, else ~/.kube/config, else in-cluster), plus
// the client-side rate limit.
type fleetFlags struct {
	config *genericclioptions.ConfigFlags
	qps    float32
	burst  int
}

func newFleetFlags(cmd *cobra.Command) *fleetFlags {
	f := &fleetFlags{config: genericclioptions.NewConfigFlags(true)}
	f.config.AddFlags(cmd.Flags())
	cmd.Flags().Float32Var(&f.qps, "kube-api-qps", 20, "Client-side rate limit for API requests per second.")
	cmd.Flags().IntVar(&f.burst, "kube-api-burst", 40, "Client-side burst for API requests.")
	return f
}

// refuseNamespace refuses an explicit -n/--namespace on a command that
// reads only objects without a namespace (Nodes, CSRs): kubectl's flag is
// there, and ignoring it would let an operator believe the output is
// scoped to a namespace.
func refuseNamespace(cmd *cobra.Command) error {
	if f := cmd.Flags().Lookup("namespace"); f != nil && f.Changed {
		return fmt.Errorf("-n/--namespace=%s: %s reads Nodes and CSRs, which have no namespace; leave it out", f.Value, cmd.CommandPath())
	}
	return nil
}

// explicitNamespace is -n/--namespace when given on the command line, else
// "" (a kubeconfig context's namespace does not narrow a search).
func explicitNamespace(cmd *cobra.Command) string {
	if f := cmd.Flags().Lookup("namespace"); f != nil && f.Changed {
		return f.Value.String()
	}
	return ""
}

func (f *fleetFlags) client(userAgent string) (kubernetes.Interface, error) {
	cfg, err := f.restConfig(userAgent)
	if err != nil {
		return nil, err
	}
	return kubernetes.NewForConfig(cfg)
}

func (f *fleetFlags) restConfig(userAgent string) (*rest.Config, error) {
	cfg, err := f.config.ToRESTConfig()
	if err != nil {
		return nil, fmt.Errorf("kubeconfig: %w", err)
	}
	cfg = rest.CopyConfig(cfg)
	cfg.QPS, cfg.Burst, cfg.UserAgent = f.qps, f.burst, userAgent
	return cfg, nil
}

// fleetView is status's and verify's reading of the fleet: the connection
// flags, -l, and how a node's condition and taint are read.
type fleetView struct {
	*fleetFlags
	selector, condType, taintKey string
	agentNamespace               string
	maxAge                       time.Duration
	clientset                    kubernetes.Interface // made by the first read
	// workload, when set, is the cluster read instead of the
	// kubeconfig's: a Cluster API workload cluster (status --cluster-api).
	workload *rest.Config
}

func newFleetView(cmd *cobra.Command) *fleetView {
	v := &fleetView{fleetFlags: newFleetFlags(cmd)}
	fs := cmd.Flags()
	fs.StringVarP(&v.selector, "selector", "l", "", "Only the nodes matching this label selector (e.g. -l node-role.kubernetes.io/worker).")
	fs.StringVar(&v.condType, "condition-type", names.ConditionType, "The agent's node condition.")
	fs.StringVar(&v.taintKey, "taint-key", names.TaintKey, "The readiness taint's key.")
	fs.StringVar(&v.agentNamespace, "agent-namespace", "", "The namespace of certready's agent DaemonSets, whose placement says which nodes run no agent by design. Empty: every namespace (-o wide names the DaemonSets judged); name it where others may create labelled DaemonSets.")
	fs.DurationVar(&v.maxAge, "condition-max-age", condition.DefaultMaxAge, "A condition not written for this long no longer counts as ready (0: never stale); as the approver's --condition-max-age.")
	return v
}

// read lists the selected nodes and gives each one's line.
func (v *fleetView) read(ctx context.Context, userAgent string, now time.Time) ([]corev1.Node, []fleet.NodeStatus, error) {
	nodes, rows, _, err := v.readWithFindings(ctx, userAgent, now, false)
	return nodes, rows, err
}

// readWithFindings is read, and with findings the agents' cluster
// findings too.
func (v *fleetView) readWithFindings(ctx context.Context, userAgent string, now time.Time, findings bool) ([]corev1.Node, []fleet.NodeStatus, *foundFindings, error) {
	client, err := v.connect(userAgent)
	if err != nil {
		return nil, nil, nil, err
	}
	nodes, err := listNodes(ctx, client, v.selector)
	if err != nil {
		return nil, nil, nil, err
	}
	var found *foundFindings
	if findings {
		found = &foundFindings{}
		found.list, found.err = readFindings(ctx, client, nodes, now)
	}
	rows := fleet.Status(nodes, corev1.NodeConditionType(v.condType), v.taintKey, v.maxAge, now)
	agents, err := listAgentSets(ctx, client, v.agentNamespace)
	if err != nil {
		klog.FromContext(ctx).V(2).Info("Placement of agents not judged: only opted-out, non-Linux and virtual nodes count as running no agent by design", "err", err)
	}
	fleet.MarkNoAgent(rows, nodes, agents, v.taintKey)
	if fleet.NRCMarked(rows) {
		if cfg, err := v.config(userAgent); err == nil {
			if dyn, err := dynamic.NewForConfig(cfg); err == nil {
				fleet.NameRules(rows, ruleNames(ctx, dyn))
			}
		}
	}
	return nodes, rows, found, nil
}

// connect makes the view's client once.
func (v *fleetView) connect(userAgent string) (kubernetes.Interface, error) {
	if v.clientset == nil {
		cfg, err := v.config(userAgent)
		if err != nil {
			return nil, err
		}
		if v.clientset, err = kubernetes.NewForConfig(cfg); err != nil {
			return nil, err
		}
	}
	return v.clientset, nil
}

// config is the connection to the cluster the view reads.
func (v *fleetView) config(userAgent string) (*rest.Config, error) {
	if v.workload != nil {
		return v.workload, nil
	}
	return v.restConfig(userAgent)
}

// allNodeNames are every node's name, whatever -l selects: what a
// redacted text must not name.
func (v *fleetView) allNodeNames(ctx context.Context) ([]string, error) {
	client, err := v.connect("certready/" + version)
	if err != nil {
		return nil, err
	}
	nodes, err := listNodes(ctx, client, "")
	if err != nil {
		return nil, err
	}
	names := make([]string, len(nodes))
	for i, n := range nodes {
		names[i] = n.Name
	}
	return names, nil
}

// forWorkload is the view of a workload cluster: the same selector and
// readings, through cfg.
func (v *fleetView) forWorkload(cfg *rest.Config) *fleetView {
	w := *v
	w.clientset, w.workload = nil, cfg
	return &w
}

// clusterUID is the cluster's identity, as the ledger records it: the UID
// of the kube-system Namespace, which names a cluster for as long as it
// exists.
func (v *fleetView) clusterUID(ctx context.Context) (string, error) {
	client, err := v.connect("certready/" + version)
	if err != nil {
		return "", err
	}
	ns, err := client.CoreV1().Namespaces().Get(ctx, metav1.NamespaceSystem, metav1.GetOptions{})
	if err != nil {
		return "", fmt.Errorf("reading Namespace %s, whose UID names the cluster: %w", metav1.NamespaceSystem, err)
	}
	return string(ns.UID), nil
}

// whoAmI is the operator as the API server authenticates them (a
// SelfSubjectReview, which every authenticated user may create).
func (v *fleetView) whoAmI(ctx context.Context) (string, error) {
	client, err := v.connect("certready/" + version)
	if err != nil {
		return "", err
	}
	r, err := client.AuthenticationV1().SelfSubjectReviews().Create(ctx, &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
	if err != nil {
		return "", fmt.Errorf("asking the API server who you are (SelfSubjectReview): %w", err)
	}
	if r.Status.UserInfo.Username == "" {
		return "", fmt.Errorf("the API server authenticated no user name (SelfSubjectReview): a run must name its operator")
	}
	return r.Status.UserInfo.Username, nil
}

// foundFindings are the agents' cluster findings, or why they were not read.
type foundFindings struct {
	list []fleet.Finding
	err  error
}

// nodeReadinessRules are the node-readiness-controller's rules.
var nodeReadinessRules = schema.GroupVersionResource{Group: "readiness.node.x-k8s.io", Version: "v1alpha1", Resource: "nodereadinessrules"}

// ruleNames maps each NodeReadinessRule's UID to its name; empty when the
// rules cannot be read (no CRD, no right to list them): the marks then
// show the UIDs they carry.
func ruleNames(ctx context.Context, dyn dynamic.Interface) map[string]string {
	list, err := dyn.Resource(nodeReadinessRules).List(ctx, metav1.ListOptions{})
	if err != nil {
		klog.FromContext(ctx).V(2).Info("NodeReadinessRules not read: completion marks show rule UIDs", "err", err)
		return nil
	}
	m := make(map[string]string, len(list.Items))
	for _, r := range list.Items {
		m[string(r.GetUID())] = r.GetName()
	}
	return m
}
