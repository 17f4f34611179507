//go:build !nodeonly

package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"

	"github.com/certready/certready/internal/names"
	"github.com/certready/certready/reporter/fleet"
)

// runStatus prints the fleet view: one line per node. Exit 0: every
// (listed) node is ready; 1: some are not; 2: could not read the cluster.
func runStatus(ctx context.Context, args []string) int {
	fs := newFlagSet("status", "One line per node: the KubeletServingCertNotReady condition, its reason and age, the serving\n"+
		"certificate's expiry and the CSR that issued it, the readiness taint, and who marked the bootstrap\n"+
		"complete. Read-only; uses your kubeconfig. Also the kubectl plugin 'kubectl certready status'\n"+
		"(install the binary as kubectl-certready on your PATH).\n"+
		"Exit 0: every node listed is ready; 1: some are not; 2: error.")
	var kf kubeFlags
	var output, condType, taintKey string
	var problems bool
	var staleAfter time.Duration
	fs.StringVarP(&output, "output", "o", "table", "table, wide (with messages), json or yaml.")
	fs.BoolVar(&problems, "problems", false, "Only the nodes that are not ready.")
	fs.StringVar(&condType, "condition-type", names.ConditionType, "The agent's node condition.")
	fs.StringVar(&taintKey, "taint-key", names.TaintKey, "The readiness taint's key.")
	fs.DurationVar(&staleAfter, "stale-after", fleet.DefaultStaleAfter, "A condition not written for this long no longer counts as ready (0: never stale).")
	kf.add(fs, 20, 40)
	if code := parseOrExit(fs, args); code >= 0 {
		return code
	}
	fail := func(err error) int { fmt.Fprintf(os.Stderr, "certready status: %v\n", err); return 2 }
	switch output {
	case "table", "wide", "json", "yaml":
	default:
		return fail(fmt.Errorf("--output=%s: want table, wide, json or yaml", output))
	}
	client, err := kf.client("certready-status/" + version)
	if err != nil {
		return fail(err)
	}
	nodes, err := listNodes(ctx, client)
	if err != nil {
		return fail(err)
	}
	now := time.Now()
	rows := fleet.Status(nodes, corev1.NodeConditionType(condType), taintKey, staleAfter, now)
	notReady := len(fleet.Problems(rows))
	if problems {
		rows = fleet.Problems(rows)
	}
	if err := printStatus(os.Stdout, output, rows, now); err != nil {
		return fail(err)
	}
	if output == "table" || output == "wide" {
		fmt.Printf("\n%d of %d nodes ready.\n", len(nodes)-notReady, len(nodes))
	}
	if notReady > 0 {
		return 1
	}
	return 0
}

func printStatus(w io.Writer, output string, rows []fleet.NodeStatus, now time.Time) error {
	if rows == nil {
		rows = []fleet.NodeStatus{}
	}
	switch output {
	case "json":
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(map[string]any{"nodes": rows})
	case "yaml":
		out, err := yaml.Marshal(map[string]any{"nodes": rows})
		if err != nil {
			return err
		}
		_, err = w.Write(out)
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	header := "NODE\tREADY\tCONDITION\tREASON\tAGE\tCERT EXPIRES\tCSR\tTAINTED\tBOOTSTRAP COMPLETED BY"
	if output == "wide" {
		header += "\tPROBLEM\tMESSAGE"
	}
	fmt.Fprintln(tw, header)
	for _, r := range rows {
		status, age, expires := string(r.Status), "-", "-"
		if status == "" {
			status = "none"
		}
		if r.Since != nil {
			age = shortDuration(now.Sub(*r.Since))
		}
		if r.NotAfter != nil {
			expires = "in " + shortDuration(r.NotAfter.Sub(now))
			if r.NotAfter.Before(now) {
				expires = "expired"
			}
		}
		line := fmt.Sprintf("%s\t%v\t%s\t%s\t%s\t%s\t%s\t%v\t%s", r.Node, r.Ready, status, dash(r.Reason), age, expires, dash(r.CSR), r.Tainted, dash(strings.Join(r.Completed, ",")))
		if output == "wide" {
			line += "\t" + dash(r.Problem) + "\t" + dash(r.Message)
		}
		fmt.Fprintln(tw, line)
	}
	return tw.Flush()
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// shortDuration writes d as kubectl writes ages: 45s, 12m, 5h, 3d.
func shortDuration(d time.Duration) string {
	switch {
	case d < 0:
		return "-" + shortDuration(-d)
	case d < 2*time.Minute:
		return fmt.Sprintf("%ds", int(d.Seconds()))
	case d < 2*time.Hour:
		return fmt.Sprintf("%dm", int(d.Minutes()))
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh", int(d.Hours()))
	}
	return fmt.Sprintf("%dd", int(d.Hours()/24))
}
