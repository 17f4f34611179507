//go:build !nodeonly

package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"

	"github.com/certready/certready/internal/names"
	"github.com/certready/certready/reporter/fleet"
)

// preflightOptions list, read-only, what creating the NodeReadinessRule
// would do to each node now. Exit 0: no node would stay tainted; 1: some
// would (listed first); 2: could not check.
type preflightOptions struct {
	flags                                *fleetFlags
	ruleFile, output, condType, selector string
	noHeaders                            bool
	rule                                 fleet.Rule
}

func newPreflightCommand() *cobra.Command {
	o := &preflightOptions{}
	cmd := &cobra.Command{
		Use:     "preflight",
		GroupID: "fleet",
		Short:   "Before creating the NodeReadinessRule: which nodes it would taint and keep tainted, and why.",
		Long: "Before applying the nrc overlay (a NodeReadinessRule's conditions and node selector cannot be edited\n" +
			"once created): list the nodes the rule would taint now and keep tainted, and why. Read-only.\n" +
			"It also checks certready's own workloads: an approver no node may run, agent pods that are refused.\n" +
			"Exit 0: none would stay tainted; 1: some would (fix them or label them " + fleet.OptOutLabel + "=true),\n" +
			"or certready itself cannot make a new node ready; 2: error.",
		Example: "  kubectl certready preflight\n  kubectl kustomize <overlay> | certready preflight --rule -",
		Args:    cobra.NoArgs,
		RunE:    runOperator(o),
	}
	o.flags = newFleetFlags(cmd)
	fs := cmd.Flags()
	fs.StringVar(&o.ruleFile, "rule", "", "A file holding the NodeReadinessRule to check (- for stdin). Empty: the rule of manifests/overlays/nrc.")
	fs.StringVar(&o.condType, "condition-type", names.ConditionType, "The agent's node condition.")
	fs.StringVarP(&o.output, "output", "o", "", outputHelp("nodes", "node"))
	fs.BoolVar(&o.noHeaders, "no-headers", false, "Table output: no header line and no summary.")
	fs.StringVarP(&o.selector, "selector", "l", "", "Only the nodes matching this label selector.")
	return cmd
}

// Complete reads the rule: --rule's, or the shipped one.
func (o *preflightOptions) Complete(cmd *cobra.Command, _ []string) error {
	if err := refuseNamespace(cmd); err != nil {
		return err
	}
	o.rule = fleet.ShippedRule()
	if o.ruleFile == "" {
		return nil
	}
	in := cmd.InOrStdin()
	if o.ruleFile != "-" {
		f, err := os.Open(o.ruleFile)
		if err != nil {
			return fmt.Errorf("--rule: %w", err)
		}
		defer f.Close()
		in = f
	}
	var err error
	if o.rule, err = fleet.ReadRule(in, o.ruleFile, corev1.NodeConditionType(o.condType)); err != nil {
		return fmt.Errorf("--rule: %w", err)
	}
	return nil
}

func (o *preflightOptions) Validate() error { return checkListOutput(o.output) }

func (o *preflightOptions) Run(ctx context.Context, out io.Writer) error {
	client, err := o.flags.client("certready-preflight/" + version)
	if err != nil {
		return err
	}
	nodes, err := listNodes(ctx, client, o.selector)
	if err != nil {
		return err
	}
	now := time.Now()
	rows := fleet.Preflight(nodes, o.rule, now)
	blocking := fleet.Blocking(rows)
	findings, findingsErr := readFindings(ctx, client, nodes, now)
	install, installErr := readInstallProblems(ctx, client, nodes)
	if err := printPreflight(out, o.output, o.noHeaders, o.rule, rows, blocking, preflightExtras{findings, findingsErr, install, installErr}); err != nil {
		return err
	}
	if blocking > 0 || len(install) > 0 {
		return exitWith(1, nil)
	}
	return nil
}

// preflightExtras are what preflight reads beside the nodes: the agents'
// cluster findings and certready's own install problems, each with the
// error that kept it from being read.
type preflightExtras struct {
	findings    []fleet.Finding
	findingsErr error
	install     []fleet.InstallProblem
	installErr  error
}

func printPreflight(out io.Writer, output string, noHeaders bool, rule fleet.Rule, rows []fleet.Row, blocking int, x preflightExtras) error {
	doc := map[string]any{"rule": rule.Name, "taint": rule.Taint.ToString(), "blocking": blocking, "nodes": rows}
	// null, not [], with the reason: not read is not none found.
	if x.findingsErr != nil {
		doc["findings"], doc["findingsError"] = nil, x.findingsErr.Error()
	} else {
		doc["findings"] = nonNil(x.findings)
	}
	if x.installErr != nil {
		doc["installProblems"], doc["installProblemsError"] = nil, x.installErr.Error()
	} else {
		doc["installProblems"] = nonNil(x.install)
	}
	if output != "" {
		return printDoc(out, output, noHeaders, "nodes", doc)
	}
	w := newTable(out)
	if !noHeaders {
		fmt.Fprintln(w, "NODE\tIF THE RULE IS CREATED NOW\tWHY")
	}
	for _, r := range rows {
		row(w, r.Node, string(r.Outcome), r.Why)
	}
	if err := w.Flush(); err != nil || noHeaders {
		return err
	}
	if blocking > 0 {
		fmt.Fprintf(out, "\n%d of %d nodes would stay tainted %s (no new pods) once NodeReadinessRule %s exists.\n"+
			"Fix them, or exclude them first: kubectl label node <name> %s=true\n", blocking, len(rows), fleet.Escape(rule.Taint.ToString()), fleet.Escape(rule.Name), fleet.OptOutLabel)
	} else if len(x.install) > 0 {
		fmt.Fprintf(out, "\nNo node would stay tainted now, but certready itself cannot make a new node ready (below): fix that before NodeReadinessRule %s exists.\n", fleet.Escape(rule.Name))
	} else {
		fmt.Fprintf(out, "\nNo node would stay tainted: NodeReadinessRule %s is safe to create now.\n", fleet.Escape(rule.Name))
	}
	printFindings(out, x.findings, x.findingsErr)
	printInstallProblems(out, x.install, x.installErr)
	return nil
}

// printInstallProblems writes certready's own install problems, or why
// they were not read, as a footer of text output.
func printInstallProblems(w io.Writer, problems []fleet.InstallProblem, err error) {
	if err != nil {
		fmt.Fprintf(w, "\ncertready's own workloads not checked (%s).\n", fleet.Escape(err.Error()))
		return
	}
	for _, p := range problems {
		fmt.Fprintf(w, "\nInstall problem %s, %s: %s\n", p.Problem, fleet.Escape(p.Object), p.Message)
	}
}

func nonNil[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}
