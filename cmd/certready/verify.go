//go:build !nodeonly

package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	corev1 "k8s.io/api/core/v1"

	"github.com/certready/certready/internal/redact"
	"github.com/certready/certready/reporter/fleet"
	"github.com/certready/certready/reporter/fleet/maintenance"
)

// verifyOptions are the runbook's before/after acceptance of a renewal.
// Exit 0: every node passed; 1: some did not; 2: error.
type verifyOptions struct {
	view                *fleetView
	baseline, output    string
	noHeaders, caChange bool
	acceptance          acceptanceFlags
	redact              redactFlags
	red                 *redact.Redactor
	before              maintenance.Baseline
}

// acceptanceFlags bound what a verification accepts as a baseline (verify
// and evidence close).
type acceptanceFlags struct {
	maxAge, issueSlack time.Duration
}

func (a *acceptanceFlags) addFlags(fs *pflag.FlagSet) {
	fs.DurationVar(&a.maxAge, "max-baseline-age", 7*24*time.Hour, "Refuse a baseline taken longer ago than this (BaselineTooOld, exit 4); 0: no bound.")
	fs.DurationVar(&a.issueSlack, "issue-slack", 10*time.Minute, "How much earlier than the baseline a certificate it does not show may start (its NotBefore) before the baseline counts as taken after the renewal (BaselineAfterRenewal, exit 5): the signer's backdating (kube-controller-manager: 5m) and the kubelet's and agent's lag.")
}

func (a *acceptanceFlags) validate() error {
	if a.maxAge < 0 || a.issueSlack < 0 {
		return fmt.Errorf("--max-baseline-age=%s --issue-slack=%s: durations cannot be negative", a.maxAge, a.issueSlack)
	}
	return nil
}

// accept refuses a baseline that does not bind the renewal seen now
// (maintenance.Accept), ending the command with the refusal's exit status.
func (a *acceptanceFlags) accept(ctx context.Context, view *fleetView, b maintenance.Baseline, now []fleet.NodeStatus, at time.Time) error {
	cluster, err := view.clusterUID(ctx)
	if err != nil {
		return err
	}
	if r := maintenance.Accept(b, now, maintenance.Bounds{Cluster: cluster, Now: at, MaxAge: a.maxAge, IssueSlack: a.issueSlack}); r != nil {
		return exitWith(r.Exit, r)
	}
	return nil
}

func newVerifyCommand() *cobra.Command {
	o := &verifyOptions{}
	cmd := &cobra.Command{
		Use:     "verify --baseline before.json",
		GroupID: "fleet",
		Short:   "Accept a renewal: every node serves a new certificate that expires later than in a baseline.",
		Long: "Compares the fleet now with a baseline taken before a renewal ('certready status -o json >\n" +
			"before.json', or a maintenance run's: 'certready evidence open'): a node passes when it was ready\n" +
			"with a certificate then, is ready now, serves another certificate (full SHA-256) that expires later\n" +
			"and chains to the same CA (another one with --expect-ca-change). Nodes only in the baseline or only\n" +
			"now fail. A baseline is refused, before any node is judged, when it names no cluster or time\n" +
			"(BaselineUnbound) or another cluster (BaselineFromAnotherCluster): exit 3; when older than\n" +
			"--max-baseline-age (BaselineTooOld) or dated in the future (BaselineFromTheFuture): exit 4; when\n" +
			"taken after the renewal, showing a certificate that a node had already replaced\n" +
			"(BaselineAfterRenewal): exit 5; a run whose entries were edited, removed or reordered (RunBroken):\n" +
			"exit 6. Read-only.\n" +
			"Exit 0: every node passed; 1: some did not; 2: error; 3 to 6: the baseline was refused.",
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
	o.acceptance.addFlags(fs)
	o.redact.add(cmd)
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

func (o *verifyOptions) Validate() error {
	if err := o.acceptance.validate(); err != nil {
		return err
	}
	var err error
	if o.red, err = o.redact.redactor(false); err != nil {
		return err
	}
	if run := o.before.Run; run != nil && run.Redacted {
		if _, err := redactedRun(run, o.redact); err != nil {
			return err
		}
	}
	return checkListOutput(o.output)
}

// needsRunKey refuses to judge a redacted run's baseline without its key:
// its nodes are pseudonyms, which only the key gives the fleet now.
func needsRunKey(run *maintenance.Run, f redactFlags) error {
	if run != nil && run.Redacted && (!f.on || f.keyFile == "") {
		return fmt.Errorf("run %s is redacted (its nodes are pseudonyms): give --redact --redact-key-file=<the key it was opened with>", run.ID)
	}
	return nil
}

// redactedPair is the baseline and the fleet now under one naming: both
// as they are, or both as pseudonyms under red (a redacted run's baseline
// already is).
func redactedPair(b maintenance.Baseline, now []fleet.NodeStatus, red *redact.Redactor) (maintenance.Baseline, []fleet.NodeStatus) {
	if red == nil {
		return b, now
	}
	fleet.Redact(now, red)
	if b.Run == nil || !b.Run.Redacted {
		b.Nodes = slices.Clone(b.Nodes)
		fleet.Redact(b.Nodes, red)
	}
	return b, now
}

func (o *verifyOptions) Run(ctx context.Context, out io.Writer) error {
	at := time.Now()
	nodes, now, err := o.view.read(ctx, "certready-verify/"+version, at)
	if err != nil {
		return err
	}
	baseline := o.before
	if o.view.selector != "" {
		baseline.Nodes = selected(baseline.Nodes, nodes, baseline.Run != nil && baseline.Run.Redacted, o.red)
	}
	baseline, now = redactedPair(baseline, now, o.red)
	if err := o.acceptance.accept(ctx, o.view, baseline, now, at); err != nil {
		return err
	}
	before := baseline.Nodes
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

// readBaseline reads status -o json (or yaml) output, or a maintenance
// run's baseline (a run that is not whole is refused: exit 6).
func readBaseline(path string) (maintenance.Baseline, error) {
	if path == "" {
		return maintenance.Baseline{}, fmt.Errorf("--baseline is required: take one before the renewal with 'certready status -o json > before.json' or 'certready evidence open'")
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return maintenance.Baseline{}, fmt.Errorf("--baseline: %w", err)
	}
	b, err := maintenance.ParseBaseline(data)
	var refusal *maintenance.Refusal
	if errors.As(err, &refusal) {
		return b, exitWith(refusal.Exit, fmt.Errorf("--baseline=%s: %w", path, err))
	}
	if err != nil {
		return b, fmt.Errorf("--baseline=%s %w", path, err)
	}
	return b, nil
}

// selected keeps the baseline's nodes that -l selects now: a node the
// selector leaves out is not a failure. (A baseline node gone from the
// cluster cannot be told from one the selector leaves out; with -l, it is
// not reported.)
func selected(before []fleet.NodeStatus, nodes []corev1.Node, pseudonyms bool, red *redact.Redactor) []fleet.NodeStatus {
	now := map[string]bool{}
	for _, n := range nodes {
		if pseudonyms {
			now[red.Node(n.Name)] = true
			continue
		}
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
