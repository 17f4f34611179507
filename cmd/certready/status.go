//go:build !nodeonly

package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/duration"
	"k8s.io/cli-runtime/pkg/printers"
	"k8s.io/klog/v2"
	"sigs.k8s.io/yaml"

	"github.com/certready/certready/internal/redact"
	"github.com/certready/certready/reporter/fleet"
	"github.com/certready/certready/reporter/fleet/maintenance"
)

// statusOptions are the fleet view's: one line per node. Exit 0: every
// (listed) node is ready or runs no agent by design; 1: some are not; 2:
// could not read the cluster.
type statusOptions struct {
	view                *fleetView
	output, sortExpr    string
	problems, noHeaders bool
	printer             func(io.Writer, maintenance.StatusDocument) error
	redact              redactFlags
	red                 *redact.Redactor
	clusterAPI          clusterAPIFlags
	// document: the output is the json document (json, yaml, jsonpath,
	// custom-columns...), which names the cluster and when it was read:
	// a baseline for verify.
	document bool
}

func newStatusCommand() *cobra.Command {
	o := &statusOptions{}
	cmd := &cobra.Command{
		Use:     "status",
		GroupID: "fleet",
		Short:   "Which nodes are not ready and why: condition, reason, certificate expiry, CSR and taint per node.",
		Long: "One line per node: the KubeletServingCertNotReady condition, its reason and age, the serving\n" +
			"certificate's expiry and the CSR that issued it, the readiness taint, and who marked the bootstrap\n" +
			"complete. Read-only. Also the kubectl plugin 'kubectl certready' (the binary on your PATH as\n" +
			"kubectl-certready). Nodes that run no agent by design (outside every agent DaemonSet's placement; where\n" +
			"the DaemonSets cannot be read: opted out, not Linux, virtual kubelets) show READY '-' and reason\n" +
			"NoAgentByDesign; they fail nothing.\n" +
			"Exit 0: every node listed is ready or runs no agent by design; 1: some are not; 2: error.",
		Example: "  kubectl certready\n  kubectl certready --problems -o wide\n  certready status -l node-role.kubernetes.io/worker --problems -o name\n  certready status -o jsonpath='{range .nodes[*]}{.node} {.notAfter}{\"\\n\"}{end}'",
		Args:    cobra.NoArgs,
		RunE:    runOperator(o),
	}
	o.view = newFleetView(cmd)
	fs := cmd.Flags()
	fs.StringVarP(&o.output, "output", "o", "", "Output format: wide (with problems and messages), json, yaml, name, over the json: jsonpath=<template>, jsonpath-file=<file>, "+goTemplateOutputs+"or over each node's: custom-columns=<spec>, custom-columns-file=<file>. Empty: a table.")
	fs.BoolVar(&o.noHeaders, "no-headers", false, "Table output: no header line and no summary.")
	fs.BoolVar(&o.problems, "problems", false, "Only the nodes that are not ready.")
	o.redact.add(cmd)
	o.clusterAPI.add(cmd)
	fs.StringVar(&o.sortExpr, "sort-by", "", "Sort the nodes by a JSONPath over each node's json, as kubectl's --sort-by (e.g. .notAfter, .reason). Empty: problems first, then by name.")
	return cmd
}

func (o *statusOptions) Complete(cmd *cobra.Command, _ []string) error {
	return refuseNamespace(cmd)
}

// Validate refuses a bad output or sort expression before the cluster is
// read.
func (o *statusOptions) Validate() error {
	var err error
	if o.red, err = o.redact.redactor(false); err != nil {
		return err
	}
	if err := o.clusterAPI.validate(); err != nil {
		return err
	}
	if o.clusterAPI.on {
		switch o.output {
		case "", "wide", "json", "yaml":
		default:
			return fmt.Errorf("--output=%s with --cluster-api: want wide, json or yaml (empty: a table per cluster)", o.output)
		}
	}
	if o.printer, o.document, err = statusPrinter(o.output, o.noHeaders); err != nil {
		return err
	}
	return sortBy([]fleet.NodeStatus{}, o.sortExpr)
}

func (o *statusOptions) Run(ctx context.Context, out io.Writer) error {
	if o.clusterAPI.on {
		return o.runClusterAPI(ctx, out)
	}
	now := time.Now()
	text := (o.output == "" || o.output == "wide") && !o.noHeaders
	// The agents' findings are free text about nodes: not shown redacted.
	nodes, rows, findings, err := o.view.readWithFindings(ctx, "certready-status/"+version, now, text && o.red == nil)
	if err != nil {
		return err
	}
	fleet.Redact(rows, o.red)
	notReady, noAgent := len(fleet.Problems(rows)), 0
	for _, r := range rows {
		if r.NoAgent != "" {
			noAgent++
		}
	}
	if o.problems {
		rows = fleet.Problems(rows)
	}
	if err := sortBy(rows, o.sortExpr); err != nil {
		return err
	}
	doc := maintenance.StatusDocument{Taken: &now, Nodes: rows}
	if o.document {
		// Best effort: a baseline without its cluster is refused by
		// verify, which says so; status itself needs none.
		if doc.Cluster, err = o.view.clusterUID(ctx); err != nil {
			klog.FromContext(ctx).Info("The cluster's identity is not in the output: verify will refuse it as a baseline", "err", err)
		}
	}
	if err := o.printer(out, doc); err != nil {
		return err
	}
	if text {
		fmt.Fprint(out, summary(len(nodes), notReady, noAgent))
		if o.red == nil {
			printFindings(out, findings.list, findings.err)
		}
	}
	if notReady > 0 {
		return exitWith(1, nil)
	}
	return nil
}

// summary is the line under the table: ready nodes of those that should
// run an agent, and how many run none by design.
func summary(nodes, notReady, noAgent int) string {
	expected := nodes - noAgent
	line := fmt.Sprintf("\n%d of %d nodes ready.", expected-notReady, expected)
	switch {
	case noAgent == 1:
		line += " 1 more node runs no agent by design (-o wide says why)."
	case noAgent > 1:
		line += fmt.Sprintf(" %d more nodes run no agent by design (-o wide says why).", noAgent)
	}
	return line + "\n"
}

// statusPrinter chooses the output: a table (kubectl's column style), wide,
// the json or yaml document {"nodes": [...]}, or through cli-runtime's
// printers: name (node/<name>), and jsonpath and go-template (inline or
// from a file) over the json document.
func statusPrinter(output string, noHeaders bool) (printer func(io.Writer, maintenance.StatusDocument) error, document bool, err error) {
	switch output {
	case "", "table", "wide":
		if output == "" {
			output = "table"
		}
		return func(w io.Writer, doc maintenance.StatusDocument) error {
			return printStatus(w, output, doc.Nodes, *doc.Taken, noHeaders)
		}, false, nil
	case "name":
		return func(w io.Writer, doc maintenance.StatusDocument) error {
			p := printers.NamePrinter{}
			for _, r := range doc.Nodes {
				node := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "v1", "kind": "Node", "metadata": map[string]any{"name": r.Node}}}
				if err := p.PrintObj(node, w); err != nil {
					return err
				}
			}
			return nil
		}, false, nil
	}
	p, ok, err := newDocPrinter(output, noHeaders, "nodes")
	if !ok {
		return nil, false, fmt.Errorf("--output=%s: want wide, name, %s (empty: a table)", output, docOutputs)
	}
	if err != nil {
		return nil, false, err
	}
	return func(w io.Writer, doc maintenance.StatusDocument) error {
		if doc.Nodes == nil {
			doc.Nodes = []fleet.NodeStatus{}
		}
		return p(w, doc)
	}, true, nil
}

func printStatus(w io.Writer, output string, rows []fleet.NodeStatus, now time.Time, noHeaders bool) error {
	if rows == nil {
		rows = []fleet.NodeStatus{}
	}
	if output == "json" || output == "yaml" {
		return printDocument(w, output, map[string]any{"nodes": rows})
	}
	tw := newTable(w)
	header := "NODE\tREADY\tCONDITION\tREASON\tAGE\tCERT EXPIRES\tCSR\tTAINTED\tBOOTSTRAP COMPLETED BY"
	if output == "wide" {
		header += "\tPROBLEM\tMESSAGE"
	}
	if !noHeaders {
		fmt.Fprintln(tw, header)
	}
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
		ready, reason, problem := strconv.FormatBool(r.Ready), r.Reason, r.Problem
		if r.NoAgent != "" {
			ready, reason, problem = "-", "NoAgentByDesign", r.NoAgent
		}
		cells := []string{r.Node, ready, status, dash(reason), age, expires, dash(r.CSR), strconv.FormatBool(r.Tainted), dash(strings.Join(r.Completed, ","))}
		if output == "wide" {
			cells = append(cells, dash(problem), dash(r.Message))
		}
		row(tw, cells...)
	}
	return tw.Flush()
}

// printDocument writes doc as indented json or as yaml: the fleet
// commands' machine-readable output.
func printDocument(w io.Writer, output string, doc any) error {
	if output == "yaml" {
		data, err := yaml.Marshal(doc)
		if err != nil {
			return err
		}
		_, err = w.Write(data)
		return err
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(doc)
}

// row writes one line of a table (or of text in columns): its cells
// tab-separated, each escaped, for they hold what the cluster says
// (fleet.Escape: no control character reaches the terminal, none fakes a
// cell or a row).
func row(w io.Writer, cells ...string) {
	escaped := make([]string, len(cells))
	for i, c := range cells {
		escaped[i] = fleet.Escape(c)
	}
	fmt.Fprintln(w, strings.Join(escaped, "\t"))
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// shortDuration writes d as kubectl writes ages (duration.HumanDuration:
// 45s, 12m, 5h30m, 3d5h, 2y), with a sign before a negative one (a clock
// behind the cluster's).
func shortDuration(d time.Duration) string {
	if d < 0 {
		return "-" + duration.HumanDuration(-d)
	}
	return duration.HumanDuration(d)
}
