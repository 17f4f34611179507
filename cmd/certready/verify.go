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
	"sigs.k8s.io/yaml"

	"github.com/certready/certready/reporter/fleet"
)

// verifyOptions are the runbook's before/after acceptance of a renewal.
// Exit 0: every node passed; 1: some did not; 2: error.
type verifyOptions struct {
	view                *fleetView
	baseline, output    string
	noHeaders, caChange bool
	before              []fleet.NodeStatus
}

func newVerifyCommand() *cobra.Command {
	o := &verifyOptions{}
	cmd := &cobra.Command{
		Use:     "verify --baseline before.json",
		GroupID: "fleet",
		Short:   "Accept a renewal: every node serves a new certificate that expires later than in a baseline.",
		Long: "Compares the fleet now with a baseline taken before a renewal ('certready status -o json >\n" +
			"before.json'): a node passes when it was ready with a certificate then, is ready now, serves\n" +
			"another certificate (full SHA-256) that expires later and chains to the same CA (another one with\n" +
			"--expect-ca-change). Nodes only in the baseline or only now fail. Read-only.\n" +
			"Exit 0: every node passed; 1: some did not; 2: error.",
		Example: "  certready status -o json > before.json\n  # renew (e.g. restart kubelets with a short rotation, or wait for rotation)\n  certready verify --baseline before.json\n  certready verify --baseline before.json -l node-role.kubernetes.io/worker -o json",
		Args:    cobra.NoArgs,
		RunE:    runOperator(o),
	}
	o.view = newFleetView(cmd) // -l selects now and in the baseline
	fs := cmd.Flags()
	fs.StringVar(&o.baseline, "baseline", "", "The fleet before the renewal: the output of 'certready status -o json' (or -o yaml). Required.")
	fs.StringVarP(&o.output, "output", "o", "", outputHelp("nodes", "node"))
	fs.BoolVar(&o.noHeaders, "no-headers", false, "Table and custom-columns output: no header line and no summary.")
	fs.BoolVar(&o.caChange, "expect-ca-change", false, "The renewal is a CA rotation's re-issue: each node must chain to another CA than in the baseline. Without it, a node whose CA changed fails.")
	return cmd
}

// Complete reads the baseline.
func (o *verifyOptions) Complete(cmd *cobra.Command, _ []string) error {
	if err := refuseNamespace(cmd); err != nil {
		return err
	}
	var err error
	o.before, err = readBaseline(o.baseline)
	return err
}

func (o *verifyOptions) Validate() error { return checkListOutput(o.output) }

func (o *verifyOptions) Run(ctx context.Context, out io.Writer) error {
	nodes, now, err := o.view.read(ctx, "certready-verify/"+version, time.Now())
	if err != nil {
		return err
	}
	before := o.before
	if o.view.selector != "" {
		before = selected(before, nodes)
	}
	rows := fleet.Verify(before, now, o.caChange)
	if err := printVerify(out, o.output, o.noHeaders, rows); err != nil {
		return err
	}
	for _, r := range rows {
		if !r.Passed {
			return exitWith(1, nil)
		}
	}
	return nil
}

// readBaseline reads status -o json (or yaml) output.
func readBaseline(path string) ([]fleet.NodeStatus, error) {
	if path == "" {
		return nil, fmt.Errorf("--baseline is required: take one before the renewal with 'certready status -o json > before.json'")
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("--baseline: %w", err)
	}
	var doc struct {
		Nodes *[]fleet.NodeStatus `json:"nodes"`
	}
	const want = "is not the output of 'certready status -o json' ({\"nodes\": [...]})"
	if err := yaml.UnmarshalStrict(data, &doc); err != nil {
		return nil, fmt.Errorf("--baseline=%s %s: %w", path, want, err)
	}
	if doc.Nodes == nil {
		return nil, fmt.Errorf("--baseline=%s %s: no nodes field", path, want)
	}
	return *doc.Nodes, nil
}

// selected keeps the baseline's nodes that -l selects now: a node the
// selector leaves out is not a failure. (A baseline node gone from the
// cluster cannot be told from one the selector leaves out; with -l, it is
// not reported.)
func selected(before []fleet.NodeStatus, nodes []corev1.Node) []fleet.NodeStatus {
	now := map[string]bool{}
	for _, n := range nodes {
		now[n.Name] = true
	}
	var out []fleet.NodeStatus
	for _, b := range before {
		if now[b.Node] {
			out = append(out, b)
		}
	}
	return out
}

func printVerify(w io.Writer, output string, noHeaders bool, rows []fleet.Verification) error {
	if rows == nil {
		rows = []fleet.Verification{}
	}
	if output != "" {
		return printDoc(w, output, noHeaders, "nodes", map[string]any{"nodes": rows})
	}
	tw := newTable(w)
	if !noHeaders {
		fmt.Fprintln(tw, "NODE\tRESULT\tBEFORE\tAFTER\tNOT AFTER\tREASON")
	}
	passed := 0
	for _, r := range rows {
		result, before, after, notAfter := "FAIL", "-", "-", "-"
		if r.Passed {
			result = "PASS"
			passed++
		}
		if r.Before != nil {
			before = r.Before.Short()
		}
		if r.After != nil {
			after, notAfter = r.After.Short(), r.After.NotAfter
		}
		row(tw, r.Node, result, before, after, notAfter, r.Reason)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	_, err := fmt.Fprintf(w, "\n%d of %d nodes renewed (full fingerprints: -o json).\n", passed, len(rows))
	return err
}
