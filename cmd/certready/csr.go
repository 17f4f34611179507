//go:build !nodeonly

package main

import (
	"context"
	"crypto/x509"
	"fmt"
	"io"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	certv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/pager"

	"github.com/certready/certready/internal/names"
	"github.com/certready/certready/internal/stamp"
	"github.com/certready/certready/reporter/approver"
	"github.com/certready/certready/reporter/approver/capi"
	"github.com/certready/certready/reporter/approver/policy"
	"github.com/certready/certready/reporter/fleet"
)

// csrOptions list kubelet-serving CSRs where they stand ('csr explain'
// explains one): the runbook's 'kubectl get csr' and 'openssl req'.
type csrOptions struct {
	flags        *fleetFlags
	output, node string
	noHeaders    bool
}

func newCSRCommand() *cobra.Command {
	o := &csrOptions{}
	cmd := &cobra.Command{
		Use:     "csr",
		GroupID: "fleet",
		Short:   "List kubelet-serving CSRs: node, age, stage and the approver's recorded rule.",
		Long: "Lists the kubelet-serving CSRs, by node, newest first: the stage each stands at (pending,\n" +
			"approved-not-issued, issued, denied, failed), the rule of its decision (the Approved, Denied or\n" +
			"Failed condition's reason; for a pending one, the refusal the approver keeps on it), and for an\n" +
			"issued one its certificate's expiry (full fingerprint: -o json). Read-only.\n" +
			"'certready csr explain NAME' decodes one and evaluates the approval policy on it.",
		Example: "  certready csr\n  certready csr --node worker-1\n  certready csr explain csr-8k2mf",
		Args:    cobra.NoArgs,
		RunE:    runOperator(o),
	}
	o.flags = newFleetFlags(cmd)
	fs := cmd.Flags()
	fs.StringVar(&o.node, "node", "", "Only the CSRs this node filed (spec.username system:node:<node>).")
	fs.StringVarP(&o.output, "output", "o", "", outputHelp("csrs", "CSR"))
	fs.BoolVar(&o.noHeaders, "no-headers", false, "Table and custom-columns output: no header line.")
	cmd.AddCommand(newCSRExplainCommand())
	return cmd
}

func (o *csrOptions) Complete(cmd *cobra.Command, _ []string) error { return refuseNamespace(cmd) }

func (o *csrOptions) Validate() error { return checkListOutput(o.output) }

func (o *csrOptions) Run(ctx context.Context, out io.Writer) error {
	client, err := o.flags.client("certready-csr/" + version)
	if err != nil {
		return err
	}
	list, err := listKubeletServingCSRs(ctx, client)
	if err != nil {
		return err
	}
	rows := fleet.CSRs(list)
	if o.node != "" {
		kept := rows[:0]
		for _, r := range rows {
			if r.Node == o.node {
				kept = append(kept, r)
			}
		}
		rows = kept
	}
	return printCSRs(out, o.output, o.noHeaders, rows, time.Now())
}

// checkOutput refuses an output other than json or yaml, for the commands
// that print one document (csr explain, ledger verify).
func checkOutput(output string) error {
	if output != "" && output != "json" && output != "yaml" {
		return fmt.Errorf("--output=%s: want json or yaml (empty: text)", output)
	}
	return nil
}

// checkListOutput refuses an output no list command has, or a template
// that does not parse, before the cluster is read.
func checkListOutput(output string) error {
	if output == "" {
		return nil
	}
	_, ok, err := newDocPrinter(output, false, "")
	if !ok {
		return fmt.Errorf("--output=%s: want %s (empty: a table)", output, docOutputs)
	}
	return err
}

// printDoc writes doc in output, one of kubectl's printers (checkOutput
// has accepted it), the rows for custom-columns under rowsKey.
func printDoc(w io.Writer, output string, noHeaders bool, rowsKey string, doc any) error {
	p, _, err := newDocPrinter(output, noHeaders, rowsKey)
	if err != nil {
		return err
	}
	return p(w, doc)
}

// outputHelp is -o's help for a list command whose document holds its
// rows under rowsKey.
func outputHelp(rowsKey, what string) string {
	return "Output format: json or yaml of {\"" + rowsKey + "\": [...]}, over it: jsonpath=<template>, jsonpath-file=<file>, " + goTemplateOutputs + "or over each " + what + "'s json: custom-columns=<spec>, custom-columns-file=<file>. Empty: a table."
}

// listKubeletServingCSRs lists the kubelet-serving CSRs, in pages.
func listKubeletServingCSRs(ctx context.Context, client kubernetes.Interface) ([]certv1.CertificateSigningRequest, error) {
	var out []certv1.CertificateSigningRequest
	err := pager.New(func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
		return client.CertificatesV1().CertificateSigningRequests().List(ctx, o)
	}).EachListItem(ctx, metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("spec.signerName", names.SignerName).String()},
		func(obj runtime.Object) error {
			out = append(out, *obj.(*certv1.CertificateSigningRequest))
			return nil
		})
	if err != nil {
		return nil, fmt.Errorf("listing kubelet-serving CSRs: %w", err)
	}
	return out, nil
}

func printCSRs(w io.Writer, output string, noHeaders bool, rows []fleet.CSRRow, now time.Time) error {
	if rows == nil {
		rows = []fleet.CSRRow{}
	}
	if output != "" {
		return printDoc(w, output, noHeaders, "csrs", map[string]any{"csrs": rows})
	}
	tw := newTable(w)
	if !noHeaders {
		fmt.Fprintln(tw, "NAME\tNODE\tAGE\tSTAGE\tRULE\tCERT NOT AFTER")
	}
	for _, r := range rows {
		notAfter := "-"
		if r.Certificate != nil {
			notAfter = stamp.Format(r.Certificate.NotAfter)
		}
		row(tw, r.Name, dash(r.Node), shortDuration(now.Sub(r.Created)), r.Stage, dash(r.Rule), notAfter)
	}
	return tw.Flush()
}

// Explanation is 'csr explain' in -o json|yaml.
type Explanation struct {
	CSR     fleet.CSRRow `json:"csr"`
	Request *RequestView `json:"request,omitempty"`
	// Decision is what the approver's policy decides on it now.
	Decision DecisionView `json:"decision"`
	// ApproverConfig says whose flags configured the policy.
	ApproverConfig string `json:"approverConfig"`
	// WorkloadCluster is, with --cluster-api, the Cluster whose CSR it is.
	WorkloadCluster string `json:"workloadCluster,omitempty"`
}

// RequestView is the decoded request: what 'openssl req -text' showed.
type RequestView struct {
	Subject           string   `json:"subject"`
	DNSNames          []string `json:"dnsNames,omitempty"`
	IPAddresses       []string `json:"ipAddresses,omitempty"`
	EmailAddresses    []string `json:"emailAddresses,omitempty"`
	URIs              []string `json:"uris,omitempty"`
	Key               string   `json:"key"`
	Usages            []string `json:"usages"`
	ExpirationSeconds *int32   `json:"expirationSeconds,omitempty"`
	Groups            []string `json:"groups"`
}

// DecisionView is a policy decision.
type DecisionView struct {
	Approve   bool   `json:"approve"`
	Rule      string `json:"rule"`
	Message   string `json:"message"`
	Transient bool   `json:"transient,omitempty"`
}

// explainOptions decode one kubelet-serving CSR and evaluate the
// approval policy on it. Exit 0: approved; 1: refused; 2: error.
type explainOptions struct {
	flags                                    *fleetFlags
	name, output, approverRef, inventory, ns string
	timeout                                  time.Duration
	clusterAPI                               bool
	workload                                 string
}

func newCSRExplainCommand() *cobra.Command {
	o := &explainOptions{}
	cmd := &cobra.Command{
		Use:   "explain NAME",
		Short: "Decode a kubelet-serving CSR and evaluate the approval policy on it, as the approver would now.",
		Long: "Decodes the request (subject, SANs, key, usages) and evaluates the approval policy on it\n" +
			"against the live cluster, read-only: the same code as the approver, configured with the flags\n" +
			"and CERTREADY_ variables of the approver's Deployment (--approver), so the same answer.\n" +
			"It reads what the approver reads (CSRs, Nodes, Service CIDRs, the API server's Service,\n" +
			"EndpointSlice and certificate): run it with a kubeconfig that may. For an issued request it\n" +
			"also shows the certificate's full fingerprint and validity.\n" +
			"Exit 0: the policy approves it; 1: it refuses it (the rule is named); 2: error.",
		Example: "  certready csr explain csr-8k2mf\n  certready csr explain csr-8k2mf -o json\n" +
			"  certready csr explain csr-8k2mf --approver=kube-system/my-approver\n" +
			"  certready csr explain csr-8k2mf --inventory=file:./inventory.yaml   # the approver reads a file in its pod",
		Args: cobra.ExactArgs(1),
		RunE: runOperator(o),
	}
	o.flags = newFleetFlags(cmd)
	fs := cmd.Flags()
	fs.StringVar(&o.approverRef, "approver", "", "The approver's Deployment, <namespace>/<name>: its container's arguments and literal CERTREADY_ variables configure the policy. Empty: the one Deployment labelled as certready's approver, in -n's namespace or any; 'defaults': the approver's defaults, no Deployment.")
	fs.StringVar(&o.inventory, "inventory", "", "Replace the approver's --inventory (for example with a local copy of the file its pod reads: explain never opens a file the Deployment names).")
	fs.DurationVar(&o.timeout, "timeout", time.Minute, "Bounds the whole command: every API request (the CSR, the approver's Deployment, discovery, the caches of CSRs and Nodes, the inventory) ends by then.")
	fs.StringVarP(&o.output, "output", "o", "", "Output format: json or yaml. Empty: text.")
	fs.BoolVar(&o.clusterAPI, "cluster-api", false, "The kubeconfig is a Cluster API management cluster's, where the approver runs with --cluster-api: explain a CSR of the workload cluster --workload-cluster names, against its Machines, reached through its Cluster's kubeconfig Secret as the approver reaches it.")
	fs.StringVar(&o.workload, "workload-cluster", "", "--cluster-api: the workload cluster, <namespace>/<name> of its Cluster in the management cluster.")
	return cmd
}

func (o *explainOptions) Complete(cmd *cobra.Command, args []string) error {
	o.name, o.ns = args[0], explicitNamespace(cmd)
	return nil
}

func (o *explainOptions) Validate() error {
	switch ns, name, ok := strings.Cut(o.workload, "/"); {
	case o.clusterAPI && o.workload == "":
		return fmt.Errorf("--cluster-api: name the workload cluster whose CSR %s is, --workload-cluster=<namespace>/<name> of its Cluster ('certready status --cluster-api' lists them)", o.name)
	case o.workload != "" && !o.clusterAPI:
		return fmt.Errorf("--workload-cluster=%s without --cluster-api: set both, or neither", o.workload)
	case o.workload != "" && (!ok || ns == "" || name == "" || strings.Contains(name, "/")):
		return fmt.Errorf("--workload-cluster=%s: want <namespace>/<name> of a Cluster", o.workload)
	}
	return checkOutput(o.output)
}

func (o *explainOptions) Run(ctx context.Context, out io.Writer) error {
	ex, d, err := explain(ctx, o.flags, o.name, o.approverRef, o.ns, o.inventory, o.timeout, o.workload)
	if err != nil {
		return err
	}
	if o.output != "" {
		err = printDocument(out, o.output, ex)
	} else {
		err = printExplanation(out, ex, time.Now())
	}
	if err != nil {
		return err
	}
	if !d.Approve {
		return exitWith(1, nil)
	}
	return nil
}

// explain reads CSR name and evaluates the approver's policy on it, as
// configured by the Deployment approverRef (inventory, when set, replaces
// its --inventory). Every request of it ends within timeout: the context's
// deadline bounds what takes one, and the client's own timeout what does
// not (discovery), so a hung API server costs at most timeout.
func explain(ctx context.Context, flags *fleetFlags, name, approverRef, namespace, inventory string, timeout time.Duration, workload string) (Explanation, policy.Decision, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	// The deadline is named in whatever error it caused.
	timedOut := func(err error) error {
		if ctx.Err() != nil {
			return fmt.Errorf("%w (not done within --timeout=%s: raise it, or see why the API server is slow)", err, timeout)
		}
		return err
	}
	cfg, err := flags.restConfig("certready-csr/" + version)
	if err != nil {
		return Explanation{}, policy.Decision{}, err
	}
	cfg.Timeout = timeout
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return Explanation{}, policy.Decision{}, err
	}
	// The CSR's cluster: this one, or the workload cluster's.
	csrClient, wc := client, workloadCluster{}
	if workload != "" {
		if wc, err = connectWorkload(ctx, cfg, workload); err != nil {
			return Explanation{}, policy.Decision{}, timedOut(err)
		}
		wc.config.Timeout = timeout
		if csrClient, err = kubernetes.NewForConfig(wc.config); err != nil {
			return Explanation{}, policy.Decision{}, err
		}
	}
	csr, err := csrClient.CertificatesV1().CertificateSigningRequests().Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return Explanation{}, policy.Decision{}, timedOut(fmt.Errorf("reading CSR %s%s: %w", name, inWorkload(workload), err))
	}
	if csr.Spec.SignerName != names.SignerName {
		return Explanation{}, policy.Decision{}, fmt.Errorf("CSR %s is for signer %s: certready decides only %s requests", csr.Name, csr.Spec.SignerName, names.SignerName)
	}
	named := approverRef != ""
	approverRef, err = findApprover(ctx, client, approverRef, namespace)
	if err != nil {
		return Explanation{}, policy.Decision{}, timedOut(err)
	}
	o, err := deploymentApproverOptions(ctx, client, approverRef, inventory)
	if err != nil {
		return Explanation{}, policy.Decision{}, timedOut(err)
	}
	o.RESTConfig = cfg
	var d policy.Decision
	if workload != "" {
		dyn, derr := dynamic.NewForConfig(cfg)
		if derr != nil {
			return Explanation{}, policy.Decision{}, derr
		}
		d, err = capi.Explain(ctx, o.Controller, dyn, wc.cluster, csrClient, wc.config, csr)
	} else {
		d, err = approver.Explain(ctx, client, o, csr)
	}
	if err != nil {
		return Explanation{}, policy.Decision{}, timedOut(err)
	}
	ex := Explanation{CSR: fleet.CSRRowOf(csr), Request: requestView(csr, d.Request),
		Decision:       DecisionView{Approve: d.Approve, Rule: string(d.Rule), Message: d.Message, Transient: d.Transient},
		ApproverConfig: approverRef, WorkloadCluster: workload}
	switch {
	case ex.ApproverConfig == "":
		ex.ApproverConfig = "defaults"
	case !named:
		// Found by labels, which anyone who may create a Deployment can
		// set: the answer says whose flags it took.
		ex.ApproverConfig += " (found by its labels; --approver names it)"
	}
	return ex, d, nil
}

// findApprover resolves --approver: "defaults" is the approver's defaults
// (""), <namespace>/<name> itself (refused when -n names another
// namespace), and empty the one Deployment labelled fleet.ApproverSelector in
// namespace (every namespace when empty). None or several is an error that
// says how to choose.
func findApprover(ctx context.Context, client kubernetes.Interface, ref, namespace string) (string, error) {
	switch {
	case ref == "defaults":
		return "", nil
	case ref != "":
		if ns, _, _ := strings.Cut(ref, "/"); namespace != "" && ns != namespace {
			return "", fmt.Errorf("--approver=%s and -n %s name two namespaces: give one", ref, namespace)
		}
		return ref, nil
	}
	where := "any namespace"
	if namespace != "" {
		where = "namespace " + namespace
	}
	list, err := client.AppsV1().Deployments(namespace).List(ctx, metav1.ListOptions{LabelSelector: fleet.ApproverSelector})
	if err != nil {
		return "", fmt.Errorf("finding the approver's Deployment (%s) in %s: %w; name it with --approver=<namespace>/<name> or -n, or use --approver=defaults", fleet.ApproverSelector, where, err)
	}
	var found []string
	for _, d := range list.Items {
		if _, ok := approverContainer(d.Spec.Template.Spec.Containers); ok {
			found = append(found, d.Namespace+"/"+d.Name)
		}
	}
	sort.Strings(found)
	switch len(found) {
	case 0:
		return "", fmt.Errorf("no approver Deployment (%s) in %s: name it with --approver=<namespace>/<name>, or evaluate the approver's defaults with --approver=defaults", fleet.ApproverSelector, where)
	case 1:
		return found[0], nil
	}
	return "", fmt.Errorf("%d approver Deployments in %s (%s): choose one with --approver=<namespace>/<name> or -n", len(found), where, strings.Join(found, ", "))
}

// deploymentApproverOptions reads the approver's configuration from its Deployment
// (ref "<namespace>/<name>"; empty: the defaults) through the approver's own
// flag parsing; inventory, when set, replaces its --inventory. The taint
// fallback's settings are left out: explaining a CSR does not lift taints.
//
// A Deployment is cluster data and this runs on an operator's machine: no
// path it names is ever opened here. The paths that configure only the
// approver's process (--kubeconfig, --kubelet-ca-file, the serving and
// ledger files) are parsed and dropped; a file inventory, which the policy
// needs, is refused unless --inventory replaces it.
func deploymentApproverOptions(ctx context.Context, client kubernetes.Interface, ref, inventory string) (approver.Options, error) {
	var args []string
	env := map[string]string{}
	if ref != "" {
		ns, name, ok := strings.Cut(ref, "/")
		if !ok || ns == "" || name == "" {
			return approver.Options{}, fmt.Errorf("--approver=%s: want <namespace>/<name> of the approver's Deployment, or empty for its defaults", ref)
		}
		dep, err := client.AppsV1().Deployments(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return approver.Options{}, fmt.Errorf("--approver=%s: reading the approver's Deployment for its flags: %w (--approver=defaults uses the approver's defaults)", ref, err)
		}
		c, ok := approverContainer(dep.Spec.Template.Spec.Containers)
		if !ok {
			return approver.Options{}, fmt.Errorf("--approver=%s: no container runs 'approver' (args[0])", ref)
		}
		args = c.Args[1:]
		for _, e := range c.Env {
			if e.ValueFrom == nil && strings.HasPrefix(e.Name, EnvPrefix) {
				env[e.Name] = e.Value
			}
		}
	}
	fs := newFlagSet("approver")
	var f approverFlags
	f.add(fs)
	// The approver's log flags are accepted and dropped: through klog they
	// would set this process's own verbosity (the CLI's -v).
	fs.StringP("v", "v", "", "")
	fs.String("vmodule", "", "")
	if _, err := parse(fs, args, func(k string) (string, bool) { v, ok := env[k]; return v, ok }); err != nil {
		return approver.Options{}, fmt.Errorf("the approver's flags (%s): %w", ref, err)
	}
	f.readinessTaint, f.softTaint, f.kubeletCA = "", "", ""
	switch spec := f.o.InventorySpec; {
	case inventory != "":
		f.o.InventorySpec = inventory
	case strings.HasPrefix(spec, "file:"):
		return approver.Options{}, fmt.Errorf("--approver=%s: its Deployment sets --inventory=%s, a file in the approver's pod: "+
			"explain never opens a local file that a cluster object names, so it cannot evaluate a file inventory from outside the pod; "+
			"pass --inventory on the command line, in the approver's pod (kubectl exec -n %s deploy/%s -- certready csr explain NAME --inventory=%s) "+
			"or here with your own copy (--inventory=file:./inventory.yaml)", ref, spec, namespaceOf(ref), nameOf(ref), spec)
	}
	return f.options()
}

func namespaceOf(ref string) string { ns, _, _ := strings.Cut(ref, "/"); return ns }
func nameOf(ref string) string      { _, n, _ := strings.Cut(ref, "/"); return n }

func approverContainer(cs []corev1.Container) (corev1.Container, bool) {
	for _, c := range cs {
		if len(c.Args) > 0 && c.Args[0] == "approver" {
			return c, true
		}
	}
	return corev1.Container{}, false
}

// requestView decodes csr's request: from the policy's own parse when it
// got that far, else on its own when it is a parseable request within the
// policy's size bound.
func requestView(csr *certv1.CertificateSigningRequest, req *x509.CertificateRequest) *RequestView {
	v := &RequestView{Groups: csr.Spec.Groups, ExpirationSeconds: csr.Spec.ExpirationSeconds}
	for _, u := range csr.Spec.Usages {
		v.Usages = append(v.Usages, string(u))
	}
	if req == nil {
		if len(csr.Spec.Request) > policy.DefaultMaxRequestBytes {
			return v
		}
		req = policy.ParseRequest(csr.Spec.Request)
		if req == nil {
			return v
		}
	}
	v.Subject, v.Key = req.Subject.String(), policy.KeyType(req.PublicKey)
	v.DNSNames, v.EmailAddresses = req.DNSNames, req.EmailAddresses
	for _, ip := range req.IPAddresses {
		v.IPAddresses = append(v.IPAddresses, ip.String())
	}
	for _, u := range req.URIs {
		v.URIs = append(v.URIs, u.String())
	}
	return v
}

func printExplanation(w io.Writer, ex Explanation, now time.Time) error {
	tw := tabwriter.NewWriter(w, 0, 8, 2, ' ', 0)
	c := ex.CSR
	row(tw, "Name:", fmt.Sprintf("%s (uid %s)", c.Name, c.UID))
	if ex.WorkloadCluster != "" {
		row(tw, "Workload cluster:", ex.WorkloadCluster+" (Cluster API; judged against its Machines)")
	}
	row(tw, "Requester:", c.Requester)
	row(tw, "Node:", dash(c.Node))
	row(tw, "Created:", fmt.Sprintf("%s (%s ago)", stamp.Format(c.Created), shortDuration(now.Sub(c.Created))))
	row(tw, "Stage:", c.Stage)
	if c.Rule != "" {
		row(tw, "Recorded rule:", c.Rule)
		row(tw, "Recorded message:", c.Message)
	}
	if r := ex.Request; r != nil {
		row(tw, "Request:", "")
		if r.Subject == "" {
			row(tw, "  (not decoded)", "not one PEM certificate request within the size bound")
		} else {
			row(tw, "  Subject:", r.Subject)
			row(tw, "  DNS SANs:", dash(strings.Join(r.DNSNames, ", ")))
			row(tw, "  IP SANs:", dash(strings.Join(r.IPAddresses, ", ")))
			if len(r.EmailAddresses)+len(r.URIs) > 0 {
				row(tw, "  Email/URI SANs:", strings.Join(append(append([]string{}, r.EmailAddresses...), r.URIs...), ", "))
			}
			row(tw, "  Key:", r.Key)
		}
		row(tw, "  Usages:", strings.Join(r.Usages, ", "))
		row(tw, "  Groups:", strings.Join(r.Groups, ", "))
		if r.ExpirationSeconds != nil {
			row(tw, "  Expiration:", fmt.Sprintf("%ds", *r.ExpirationSeconds))
		}
	}
	verdict := "APPROVE"
	if !ex.Decision.Approve {
		verdict = "REFUSE (" + ex.Decision.Rule + ")"
		if ex.Decision.Transient {
			verdict += ", retried: waiting may change it"
		}
	}
	row(tw, "Policy now:", verdict)
	row(tw, "  Why:", ex.Decision.Message)
	row(tw, "  Configured by:", ex.ApproverConfig)
	if c.Stage != fleet.StagePending {
		row(tw, "  Note:", "the approver decides pending requests only; this is what it would decide were this one pending")
	}
	if ic := c.Certificate; ic != nil {
		row(tw, "Certificate:", "")
		row(tw, "  SHA-256:", ic.Fingerprint)
		row(tw, "  Valid:", fmt.Sprintf("%s to %s", stamp.Format(ic.NotBefore), stamp.Format(ic.NotAfter)))
		row(tw, "  Subject:", ic.Subject)
		row(tw, "  SANs:", strings.Join(append(append([]string{}, ic.DNSNames...), ic.IPAddresses...), ", "))
	}
	return tw.Flush()
}
