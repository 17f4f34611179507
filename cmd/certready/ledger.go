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

	"github.com/spf13/cobra"
	"sigs.k8s.io/yaml"

	"github.com/certready/certready/internal/ledger"
	"github.com/certready/certready/reporter/fleet"
)

func newLedgerCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:     "ledger",
		GroupID: "fleet",
		Short:   "Work with the decision ledger's records (docs/ledger.md).",
		Args:    cobra.NoArgs,
	}
	cmd.AddCommand(newLedgerVerifyCommand())
	return cmd
}

// ledgerVerifyOptions check ledger files an auditor was given. Exit 0:
// every chain whole; 1: something missing or changed; 2: error.
type ledgerVerifyOptions struct {
	output string
	files  []string
	stdin  io.Reader
}

func newLedgerVerifyCommand() *cobra.Command {
	o := &ledgerVerifyOptions{}
	cmd := &cobra.Command{
		Use:   "verify FILE...",
		Short: "Check ledger files for removed, edited, reordered or lost records, and name the periods without an approver leader.",
		Long: "Reads ledger lines from the files ('-' is standard input): the file sink's files and their rotated\n" +
			"backups in any order, or a component's log ('kubectl logs'), whose other lines are skipped. Every\n" +
			"record carries its writer (one per process), a number, the hash of its own line and the hash of\n" +
			"the record its writer wrote before it, so that a removed, edited, inserted or reordered line breaks\n" +
			"the chain where it happened. Numbers a writer gave to records it could not write (lost) are told\n" +
			"apart from removed lines. The approver's leader-acquired and leader-lost records show the periods\n" +
			"no replica led. Offline: no cluster access.\n" +
			"Exit 0: every chain whole; 1: findings; 2: error.",
		Example: "  certready ledger verify /var/log/certready/ledger*.jsonl\n  kubectl -n certready-system logs deploy/certready-approver | certready ledger verify -\n  certready ledger verify -o json ledger.jsonl",
		Args:    cobra.MinimumNArgs(1),
		RunE:    runOperator(o),
	}
	cmd.Flags().StringVarP(&o.output, "output", "o", "", "Output format: json or yaml. Empty: a summary and the findings.")
	return cmd
}

func (o *ledgerVerifyOptions) Complete(cmd *cobra.Command, args []string) error {
	o.files, o.stdin = args, cmd.InOrStdin()
	return nil
}

func (o *ledgerVerifyOptions) Validate() error { return checkOutput(o.output) }

func (o *ledgerVerifyOptions) Run(_ context.Context, out io.Writer) error {
	var inputs []ledger.Input
	for _, name := range o.files {
		if name == "-" {
			inputs = append(inputs, ledger.Input{Name: "(stdin)", R: o.stdin})
			continue
		}
		f, err := os.Open(name)
		if err != nil {
			return err
		}
		defer f.Close()
		inputs = append(inputs, ledger.Input{Name: name, R: f})
	}
	rep, err := ledger.Verify(inputs)
	if err != nil {
		return err
	}
	if err := printLedgerReport(out, o.output, rep); err != nil {
		return err
	}
	if !rep.Clean() {
		return exitWith(1, nil)
	}
	return nil
}

func printLedgerReport(out io.Writer, output string, rep ledger.Report) error {
	switch output {
	case "json":
		enc := json.NewEncoder(out)
		enc.SetIndent("", "  ")
		return enc.Encode(rep)
	case "yaml":
		b, err := yaml.Marshal(rep)
		if err != nil {
			return err
		}
		_, err = out.Write(b)
		return err
	}
	tw := tabwriter.NewWriter(out, 0, 8, 2, ' ', 0)
	fmt.Fprintln(tw, "WRITER\tCOMPONENT\tACTOR\tRECORDS\tSEQ\tFIRST\tLAST")
	for _, w := range rep.Writers {
		seq := fmt.Sprintf("%d-%d", w.FirstSeq, w.LastSeq)
		if w.HeadMissing {
			seq += " (earlier not read)"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\t%s\t%s\n", fleet.Escape(w.Writer), fleet.Escape(w.Component), fleet.Escape(w.Actor), w.Records, seq, w.First.Format(time.RFC3339), w.Last.Format(time.RFC3339))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintf(out, "\n%d records from %d files (%d other lines skipped), %d writers.\n", rep.Records, rep.Files, rep.OtherLines, len(rep.Writers))
	for _, p := range rep.NoLeader {
		how := "lost the lead"
		if p.LostUnknown {
			how = "last recorded (no loss recorded)"
		}
		fmt.Fprintf(out, "No approver leader for %s: from %s (%s %s) to %s (%s acquired).\n", p.Duration, p.From.Format(time.RFC3339), fleet.Escape(p.Before), how, p.To.Format(time.RFC3339), fleet.Escape(p.After))
	}
	if rep.Clean() {
		fmt.Fprintln(out, "Every chain is whole.")
		return nil
	}
	fmt.Fprintf(out, "%d findings:\n", len(rep.Findings))
	for _, f := range rep.Findings {
		fmt.Fprintf(out, "  %s:%d: %s: writer %s seq %d: %s\n", fleet.Escape(f.File), f.Line, f.Kind, fleet.Escape(f.Writer), f.Seq, fleet.Escape(f.Detail))
	}
	return nil
}
