//go:build !nodeonly

package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"text/tabwriter"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/certready/certready/internal/names"
	"github.com/certready/certready/reporter/fleet"
)

// runPreflight lists, read-only, what creating the NodeReadinessRule would
// do to each node now. Exit 0: no node would stay tainted; 1: some would
// (listed first); 2: could not check.
func runPreflight(ctx context.Context, args []string) int {
	fs := newFlagSet("preflight", "Before applying the nrc overlay (a NodeReadinessRule cannot be edited once created): list the nodes\n"+
		"the rule would taint now and keep tainted, and why. Read-only; uses your kubeconfig.\n"+
		"Exit 0: none would stay tainted; 1: some would (fix them or label them "+fleet.OptOutLabel+"=true); 2: error.")
	var kf kubeFlags
	var ruleFile, output, condType string
	fs.StringVar(&ruleFile, "rule", "", "A file holding the NodeReadinessRule to check (- for stdin, e.g. kubectl kustomize <overlay> | certready preflight --rule -). Empty: the rule of manifests/overlays/nrc.")
	fs.StringVar(&condType, "condition-type", names.ConditionType, "The agent's node condition.")
	fs.StringVarP(&output, "output", "o", "table", "table or json.")
	kf.add(fs, 20, 40)
	if code := parseOrExit(fs, args); code >= 0 {
		return code
	}
	fail := func(err error) int { fmt.Fprintf(os.Stderr, "certready preflight: %v\n", err); return 2 }
	if output != "table" && output != "json" {
		return fail(fmt.Errorf("--output=%s: want table or json", output))
	}
	rule := fleet.ShippedRule()
	if ruleFile != "" {
		var in io.Reader = os.Stdin
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
	nodes, err := listNodes(ctx, client)
	if err != nil {
		return fail(err)
	}
	rows := fleet.Preflight(nodes, rule, time.Now())
	blocking := fleet.Blocking(rows)
	if output == "json" {
		enc := json.NewEncoder(os.Stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(map[string]any{"rule": rule.Name, "taint": rule.Taint.ToString(), "blocking": blocking, "nodes": rows}); err != nil {
			return fail(err)
		}
	} else {
		w := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(w, "NODE\tIF THE RULE IS CREATED NOW\tWHY")
		for _, r := range rows {
			fmt.Fprintf(w, "%s\t%s\t%s\n", r.Node, r.Outcome, r.Why)
		}
		w.Flush()
		if blocking > 0 {
			fmt.Printf("\n%d of %d nodes would stay tainted %s (no new pods) once NodeReadinessRule %s exists.\n"+
				"Fix them, or exclude them first: kubectl label node <name> %s=true\n", blocking, len(rows), rule.Taint.ToString(), rule.Name, fleet.OptOutLabel)
		} else {
			fmt.Printf("\nNo node would stay tainted: NodeReadinessRule %s is safe to create now.\n", rule.Name)
		}
	}
	if blocking > 0 {
		return 1
	}
	return 0
}
