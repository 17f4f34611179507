//go:build !nodeonly

package main

import (
	"fmt"
	"io"
	"os"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"

	"github.com/certready/certready/internal/names"
	"github.com/certready/certready/reporter/fleet"
)

// newPreflightCommand lists, read-only, what creating the NodeReadinessRule
// would do to each node now. Exit 0: no node would stay tainted; 1: some
// would (listed first); 2: could not check.
func newPreflightCommand() *cobra.Command {
	var ruleFile, output, condType, selector string
	var noHeaders bool
	cmd := &cobra.Command{
		Use:     "preflight",
		GroupID: "fleet",
		Short:   "Before creating the NodeReadinessRule: which nodes it would taint and keep tainted, and why.",
		Long: "Before applying the nrc overlay (a NodeReadinessRule's conditions and node selector cannot be edited\n" +
			"once created): list the nodes the rule would taint now and keep tainted, and why. Read-only.\n" +
			"Exit 0: none would stay tainted; 1: some would (fix them or label them " + fleet.OptOutLabel + "=true); 2: error.",
		Example: "  kubectl certready preflight\n  kubectl kustomize <overlay> | certready preflight --rule -",
		Args:    cobra.NoArgs,
	}
	kf := newFleetFlags(cmd)
	fs := cmd.Flags()
	fs.StringVar(&ruleFile, "rule", "", "A file holding the NodeReadinessRule to check (- for stdin). Empty: the rule of manifests/overlays/nrc.")
	fs.StringVar(&condType, "condition-type", names.ConditionType, "The agent's node condition.")
	fs.StringVarP(&output, "output", "o", "", "Output format: json or yaml. Empty: a table.")
	fs.BoolVar(&noHeaders, "no-headers", false, "Table output: no header line and no summary.")
	fs.StringVarP(&selector, "selector", "l", "", "Only the nodes matching this label selector.")
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		fail := func(err error) error { fmt.Fprintf(os.Stderr, "certready preflight: %v\n", err); return exitCode(2) }
		if err := fillFromEnv(cmd.Flags(), os.LookupEnv); err != nil {
			return fail(err)
		}
		if err := refuseNamespace(cmd); err != nil {
			return fail(err)
		}
		switch output {
		case "", "table", "json", "yaml":
		default:
			return fail(fmt.Errorf("--output=%s: want json or yaml (empty: a table)", output))
		}
		rule := fleet.ShippedRule()
		if ruleFile != "" {
			in := cmd.InOrStdin()
			if ruleFile != "-" {
				f, err := os.Open(ruleFile)
				if err != nil {
					return fail(fmt.Errorf("--rule: %w", err))
				}
				defer f.Close()
				in = f
			}
			var err error
			if rule, err = fleet.ReadRule(in, ruleFile, corev1.NodeConditionType(condType)); err != nil {
				return fail(fmt.Errorf("--rule: %w", err))
			}
		}
		client, err := kf.client("certready-preflight/" + version)
		if err != nil {
			return fail(err)
		}
		nodes, err := listNodes(cmd.Context(), client, selector)
		if err != nil {
			return fail(err)
		}
		now := time.Now()
		rows := fleet.Preflight(nodes, rule, now)
		blocking := fleet.Blocking(rows)
		findings, findingsErr := readFindings(cmd.Context(), client, nodes, now)
		if err := printPreflight(cmd.OutOrStdout(), output, noHeaders, rule, rows, blocking, findings, findingsErr); err != nil {
			return fail(err)
		}
		if blocking > 0 {
			return exitCode(1)
		}
		return nil
	}
	return cmd
}

func printPreflight(out io.Writer, output string, noHeaders bool, rule fleet.Rule, rows []fleet.Row, blocking int, findings []fleet.Finding, findingsErr error) error {
	doc := map[string]any{"rule": rule.Name, "taint": rule.Taint.ToString(), "blocking": blocking, "nodes": rows}
	if findingsErr != nil {
		// null, not [], with the reason: not read is not none found.
		doc["findings"], doc["findingsError"] = nil, findingsErr.Error()
	} else {
		if findings == nil {
			findings = []fleet.Finding{}
		}
		doc["findings"] = findings
	}
	if output == "json" || output == "yaml" {
		return printDocument(out, output, doc)
	}
	w := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
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
	} else {
		fmt.Fprintf(out, "\nNo node would stay tainted: NodeReadinessRule %s is safe to create now.\n", fleet.Escape(rule.Name))
	}
	printFindings(out, findings, findingsErr)
	return nil
}
