//go:build !nodeonly

package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/certready/certready/internal/redact"
	"github.com/certready/certready/reporter/fleet"
	"github.com/certready/certready/reporter/fleet/maintenance"
)

func newEvidenceCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:     "evidence",
		GroupID: "fleet",
		Short:   "Record a maintenance run an auditor accepts: baseline, named steps, final verification (docs/ledger.md).",
		Long: "A maintenance run is one JSON document, bound to the cluster (its kube-system Namespace's UID), the\n" +
			"time it was opened and the operator the API server authenticated. 'open' takes the baseline,\n" +
			"'step' records each thing done, 'close' runs the final verification, with every node's result,\n" +
			"the gaps you declare and the coverage, and closes the run; 'verify' checks a run offline. Every\n" +
			"entry is sealed and names the one before it: an edited, removed, replaced or reordered entry is\n" +
			"named (RunBroken, exit 6).",
		Example: "  certready evidence open --run run.json -m 'quarterly serving-certificate renewal'\n" +
			"  certready evidence step --run run.json restart-kubelets -m 'rotated with a 1h certificate duration'\n" +
			"  certready evidence close --run run.json --gap worker-7='decommissioned, ticket OPS-1234'\n" +
			"  certready evidence verify run.json",
		Args: cobra.NoArgs,
	}
	cmd.AddCommand(newEvidenceOpenCommand(), newEvidenceStepCommand(), newEvidenceCloseCommand(), newEvidenceVerifyCommand())
	return cmd
}

// runFile is where a run is kept: the --run flag.
type runFile struct{ path string }

func (f *runFile) addFlag(cmd *cobra.Command) {
	cmd.Flags().StringVar(&f.path, "run", "", "The run's document (a JSON file). Required.")
}

func (f *runFile) validate() error {
	if f.path == "" {
		return fmt.Errorf("--run is required: the run's document, e.g. --run run.json")
	}
	return nil
}

// read reads the run and checks it is whole.
func (f *runFile) read() (*maintenance.Run, error) {
	data, err := os.ReadFile(f.path)
	if err != nil {
		return nil, fmt.Errorf("--run: %w", err)
	}
	run, err := maintenance.Parse(data)
	if err == nil {
		err = maintenance.Check(run)
	}
	var refusal *maintenance.Refusal
	if errors.As(err, &refusal) {
		return nil, exitWith(refusal.Exit, fmt.Errorf("--run=%s: %w", f.path, err))
	}
	return run, err
}

// write replaces the run's document: a file beside it, renamed over it,
// so a crash leaves the old document or the new, never half of one. A new
// run (create) never replaces a file.
func (f *runFile) write(run *maintenance.Run, create bool) error {
	data, err := maintenance.Encode(run)
	if err != nil {
		return err
	}
	if create {
		file, err := os.OpenFile(f.path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
		if err != nil {
			return fmt.Errorf("--run: %w (a run is never overwritten: name a new file)", err)
		}
		if _, err := file.Write(data); err != nil {
			file.Close()
			return fmt.Errorf("--run: %w", err)
		}
		return file.Close()
	}
	tmp, err := os.CreateTemp(filepath.Dir(f.path), "."+filepath.Base(f.path)+".*")
	if err != nil {
		return fmt.Errorf("--run: %w", err)
	}
	defer os.Remove(tmp.Name()) // gone after the rename; else the temporary file
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return fmt.Errorf("--run: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("--run: %w", err)
	}
	return os.Rename(tmp.Name(), f.path)
}

// sameCluster refuses to record into a run of another cluster: the
// kubeconfig's context points elsewhere.
func sameCluster(ctx context.Context, view *fleetView, run *maintenance.Run) error {
	cluster, err := view.clusterUID(ctx)
	if err != nil {
		return err
	}
	if cluster != run.Cluster {
		return exitWith(maintenance.ExitOtherCluster, &maintenance.Refusal{Reason: maintenance.BaselineFromAnotherCluster, Exit: maintenance.ExitOtherCluster,
			Message: fmt.Sprintf("run %s is of cluster %s; the kubeconfig's context is cluster %s", run.ID, run.Cluster, cluster)})
	}
	return nil
}

// evidenceOpenOptions open a run with its baseline.
type evidenceOpenOptions struct {
	view    *fleetView
	file    runFile
	message string
	redact  redactFlags
}

func newEvidenceOpenCommand() *cobra.Command {
	o := &evidenceOpenOptions{}
	cmd := &cobra.Command{
		Use:   "open --run FILE",
		Short: "Open a run: take the baseline, bound to this cluster, now and you.",
		Long: "Writes a new run document (never over an existing file): its ID, a digest of the cluster's\n" +
			"identity, the time and the operator; and the baseline: every selected node as 'certready status'\n" +
			"sees it. Take it before the renewal: a baseline that shows a certificate already replaced when it\n" +
			"was taken is refused at close (BaselineAfterRenewal).",
		Args: cobra.NoArgs,
		RunE: runOperator(o),
	}
	o.view = newFleetView(cmd)
	o.file.addFlag(cmd)
	cmd.Flags().StringVarP(&o.message, "message", "m", "", "What the run is for (a change ticket, the reason).")
	o.redact.add(cmd)
	return cmd
}

func (o *evidenceOpenOptions) Complete(cmd *cobra.Command, _ []string) error {
	return refuseNamespace(cmd)
}
func (o *evidenceOpenOptions) Validate() error {
	if o.redact.on && o.redact.keyFile == "" {
		return fmt.Errorf("--redact: a redacted run needs --redact-key-file (made if missing): close judges the fleet under the same pseudonyms")
	}
	if o.redact.keyFile != "" && !o.redact.on {
		return fmt.Errorf("--redact-key-file=%s without --redact: set both, or neither", o.redact.keyFile)
	}
	return o.file.validate()
}

func (o *evidenceOpenOptions) Run(ctx context.Context, out io.Writer) error {
	if _, err := os.Lstat(o.file.path); err == nil {
		return fmt.Errorf("--run=%s exists: a run is never overwritten; name a new file", o.file.path)
	}
	now := time.Now()
	_, rows, err := o.view.read(ctx, "certready-evidence/"+version, now)
	if err != nil {
		return err
	}
	cluster, err := o.view.clusterUID(ctx)
	if err != nil {
		return err
	}
	operator, err := o.view.whoAmI(ctx)
	if err != nil {
		return err
	}
	red, err := o.redact.redactor(true)
	if err != nil {
		return err
	}
	// A redacted run names no node: not in its baseline, its selector
	// (-l kubernetes.io/hostname=...) or its message.
	selector, message := o.view.selector, o.message
	if red != nil {
		names, err := o.view.allNodeNames(ctx)
		if err != nil {
			return err
		}
		selector, message = red.Text(selector, names, nil), red.Text(message, names, nil)
	}
	fleet.Redact(rows, red)
	nonceBytes := make([]byte, 8)
	if _, err := rand.Read(nonceBytes); err != nil {
		return err
	}
	nonce, keyCheck := hex.EncodeToString(nonceBytes), ""
	if red != nil {
		keyCheck = runKeyCheck(red, maintenance.NewID(cluster, operator, now.UTC().Truncate(time.Second), nonce))
	}
	run, err := maintenance.Open(cluster, operator, nonce, now, selector, message, rows, keyCheck)
	if err != nil {
		return err
	}
	if err := o.file.write(run, true); err != nil {
		return err
	}
	withCert := 0
	for _, r := range rows {
		if r.Fingerprint != "" {
			withCert++
		}
	}
	b := run.Baseline()
	_, err = fmt.Fprintf(out, "Opened run %s on cluster %s as %s.\nBaseline %s: %s, %d ready with a certificate, taken %s.\n",
		run.ID, run.Cluster, fleet.Escape(run.Operator), b.ID, nodeCount(len(rows)), withCert, b.Time.Format(time.RFC3339))
	return err
}

// evidenceStepOptions record a named step.
type evidenceStepOptions struct {
	view          *fleetView
	file          runFile
	name, message string
	redact        redactFlags
}

func newEvidenceStepCommand() *cobra.Command {
	o := &evidenceStepOptions{}
	cmd := &cobra.Command{
		Use:   "step --run FILE NAME",
		Short: "Record a step of the run (each name once), by you, now.",
		Args:  cobra.ExactArgs(1),
		RunE:  runOperator(o),
	}
	o.view = newFleetView(cmd)
	o.file.addFlag(cmd)
	cmd.Flags().StringVarP(&o.message, "message", "m", "", "What the step did.")
	o.redact.add(cmd) // a redacted run's: its key scrubs the step's words
	return cmd
}

func (o *evidenceStepOptions) Complete(cmd *cobra.Command, args []string) error {
	o.name = args[0]
	return refuseNamespace(cmd)
}

func (o *evidenceStepOptions) Validate() error {
	if strings.TrimSpace(o.name) == "" || strings.ContainsFunc(o.name, func(r rune) bool { return r < ' ' || r == 0x7f }) {
		return fmt.Errorf("step name %q: want a name of printable characters (e.g. restart-kubelets)", o.name)
	}
	return o.file.validate()
}

func (o *evidenceStepOptions) Run(ctx context.Context, out io.Writer) error {
	run, err := o.file.read()
	if err != nil {
		return err
	}
	red, err := redactedRun(run, o.redact)
	if err != nil {
		return usageError(err)
	}
	if err := sameCluster(ctx, o.view, run); err != nil {
		return err
	}
	by, err := o.view.whoAmI(ctx)
	if err != nil {
		return err
	}
	name, message := o.name, o.message
	if red != nil {
		names, err := o.view.allNodeNames(ctx)
		if err != nil {
			return err
		}
		name, message = red.Text(name, names, nil), red.Text(message, names, nil)
	}
	if err := run.Step(name, by, message, time.Now()); err != nil {
		return err
	}
	if err := o.file.write(run, false); err != nil {
		return err
	}
	e := run.Entries[len(run.Entries)-1]
	_, err = fmt.Fprintf(out, "Recorded step %s %q at %s by %s.\n", e.ID, fleet.Escape(e.Name), e.Time.Format(time.RFC3339), fleet.Escape(e.By))
	return err
}

// evidenceCloseOptions run the final verification and close the run. Exit
// 0: every node passed or is a declared gap; 1: some did not; 2: error; 3
// to 6: the baseline or the run was refused (verify's).
type evidenceCloseOptions struct {
	view       *fleetView
	file       runFile
	caChange   bool
	gapFlags   []string
	gaps       []maintenance.Gap
	message    string
	output     string
	acceptance acceptanceFlags
	redact     redactFlags
	// selectorGiven: -l on the command line, which only a redacted run
	// whose selector named a node takes.
	selectorGiven bool
}

func newEvidenceCloseCommand() *cobra.Command {
	o := &evidenceCloseOptions{}
	cmd := &cobra.Command{
		Use:   "close --run FILE",
		Short: "Run the final verification against the run's baseline and close the run.",
		Long: "Judges every node of the baseline and of the fleet now as 'certready verify' does, refusing the\n" +
			"baseline as it does (exit 3 to 6), then records the result: each node's, the nodes you declare\n" +
			"out of the run with --gap (they do not fail it, and are listed), and the coverage. A closed run\n" +
			"takes nothing more.\n" +
			"Exit 0: every node passed or is a declared gap; 1: some did not; 2: error; 3 to 6: refused.",
		Args: cobra.NoArgs,
		RunE: runOperator(o),
	}
	o.view = newFleetView(cmd)
	o.file.addFlag(cmd)
	fs := cmd.Flags()
	fs.BoolVar(&o.caChange, "expect-ca-change", false, "The renewal is a CA rotation's re-issue (as verify's).")
	fs.StringArrayVar(&o.gapFlags, "gap", nil, "NODE=REASON: a node declared out of the run and why (repeat for each).")
	fs.StringVarP(&o.message, "message", "m", "", "A closing remark.")
	fs.StringVarP(&o.output, "output", "o", "", "json or yaml: the closed run's document. Empty: the verification's table and the coverage.")
	o.acceptance.addFlags(fs)
	o.redact.add(cmd)
	return cmd
}

func (o *evidenceCloseOptions) Complete(cmd *cobra.Command, _ []string) error {
	if err := refuseNamespace(cmd); err != nil {
		return err
	}
	if f := cmd.Flags().Lookup("selector"); f != nil && f.Changed {
		o.selectorGiven = true // a redacted run's, checked against it in Run
	}
	for _, g := range o.gapFlags {
		node, reason, ok := strings.Cut(g, "=")
		if !ok || node == "" || strings.TrimSpace(reason) == "" {
			return fmt.Errorf("--gap=%s: want NODE=REASON (a declared gap says why)", g)
		}
		o.gaps = append(o.gaps, maintenance.Gap{Node: node, Reason: reason})
	}
	return nil
}

func (o *evidenceCloseOptions) Validate() error {
	if err := o.acceptance.validate(); err != nil {
		return err
	}
	switch o.output {
	case "", "json", "yaml":
	default:
		return fmt.Errorf("--output=%s: want json or yaml (empty: a table)", o.output)
	}
	return o.file.validate()
}

func (o *evidenceCloseOptions) Run(ctx context.Context, out io.Writer) error {
	run, err := o.file.read()
	if err != nil {
		return err
	}
	if run.Closed() {
		return fmt.Errorf("run %s is already closed: 'certready evidence verify %s' shows its result", run.ID, o.file.path)
	}
	red, err := redactedRun(run, o.redact)
	if err != nil {
		return usageError(err)
	}
	baseline, err := maintenance.BaselineOf(run)
	if err != nil {
		return err
	}
	stored := run.Baseline().Selector
	switch {
	case o.selectorGiven && !run.Redacted:
		return usageError(fmt.Errorf("-l/--selector: close judges the nodes the baseline was taken with (-l %q); leave it out", stored))
	case !o.selectorGiven && run.Redacted && redact.HasPseudonym(stored):
		return usageError(fmt.Errorf("run %s was opened with a selector that names a node (recorded redacted: %q): give it again with -l", run.ID, stored))
	case !o.selectorGiven:
		o.view.selector = stored
	}
	at := time.Now()
	_, now, err := o.view.read(ctx, "certready-evidence/"+version, at)
	if err != nil {
		return err
	}
	if o.selectorGiven && red.Text(o.view.selector, nodeNames(now), nil) != stored {
		return usageError(fmt.Errorf("-l %q is not the selector run %s was opened with (recorded redacted: %q)", o.view.selector, run.ID, stored))
	}
	if err := sameCluster(ctx, o.view, run); err != nil {
		return err
	}
	baseline, now = redactedPair(baseline, now, red)
	if err := o.acceptance.accept(ctx, o.view, baseline, now, at); err != nil {
		return err
	}
	by, err := o.view.whoAmI(ctx)
	if err != nil {
		return err
	}
	gaps, message := slices.Clone(o.gaps), o.message
	if red != nil {
		// The run records pseudonyms, and words that name no node or
		// address: every node's name is scrubbed from what you wrote.
		names, err := o.view.allNodeNames(ctx)
		if err != nil {
			return err
		}
		for i := range gaps {
			named := func(n fleet.NodeStatus) bool { return n.Node == gaps[i].Node }
			if !slices.ContainsFunc(baseline.Nodes, named) && !slices.ContainsFunc(now, named) {
				names = append(names, gaps[i].Node) // a name, not its pseudonym
				gaps[i].Node = red.Node(gaps[i].Node)
			}
		}
		for i := range gaps {
			gaps[i].Reason = red.Text(gaps[i].Reason, names, nil)
		}
		message = red.Text(message, names, nil)
	}
	v, err := maintenance.Verify(baseline.Nodes, now, o.caChange, gaps)
	if err != nil {
		return usageError(err)
	}
	v.MaxBaselineAge, v.IssueSlack = o.acceptance.maxAge.String(), o.acceptance.issueSlack.String()
	if err := run.Close(by, message, at, v); err != nil {
		return err
	}
	if err := o.file.write(run, false); err != nil {
		return err
	}
	if o.output != "" {
		err = printDocument(out, o.output, run)
	} else {
		err = printClosed(out, run, v)
	}
	if err != nil {
		return err
	}
	if !v.Passed {
		return exitWith(1, nil)
	}
	return nil
}

func printClosed(out io.Writer, run *maintenance.Run, v maintenance.Verification) error {
	if err := printVerify(out, "", false, v.Nodes); err != nil {
		return err
	}
	for _, g := range v.Gaps {
		fmt.Fprintf(out, "Declared gap: %s: %s\n", fleet.Escape(g.Node), fleet.Escape(g.Reason))
	}
	result := passedWord(v.Passed)
	c := v.Coverage
	_, err := fmt.Fprintf(out, "Closed run %s: %s. Judged %s (%d in the baseline with a certificate, %d now): %d passed, %d failed, %d declared gaps.\n",
		run.ID, result, nodeCount(c.Judged), c.Baseline, c.Now, c.Passed, c.Failed, c.Gaps)
	return err
}

// evidenceVerifyOptions check a run offline. Exit 0: whole, closed and
// passed; 1: whole but open or failed; 2: unreadable; 6: broken.
type evidenceVerifyOptions struct {
	file   runFile
	output string
}

func newEvidenceVerifyCommand() *cobra.Command {
	o := &evidenceVerifyOptions{}
	cmd := &cobra.Command{
		Use:   "verify FILE",
		Short: "Check a run document offline: whole, closed, and its result.",
		Long: "Checks that the run's ID is the digest of its cluster, operator, opening time and nonce, and that\n" +
			"every entry is sealed and follows the one before; then shows its entries and result. No cluster\n" +
			"access.\nExit 0: whole, closed and passed; 1: whole, but open or failed; 2: unreadable; 6: broken (RunBroken).",
		Args: cobra.ExactArgs(1),
		RunE: runOperator(o),
	}
	cmd.Flags().StringVarP(&o.output, "output", "o", "", "json or yaml: the run's document, once whole. Empty: a summary.")
	return cmd
}

func (o *evidenceVerifyOptions) Complete(_ *cobra.Command, args []string) error {
	o.file.path = args[0]
	return nil
}

func (o *evidenceVerifyOptions) Validate() error {
	switch o.output {
	case "", "json", "yaml":
		return nil
	}
	return fmt.Errorf("--output=%s: want json or yaml (empty: a summary)", o.output)
}

func (o *evidenceVerifyOptions) Run(_ context.Context, out io.Writer) error {
	run, err := o.file.read()
	if err != nil {
		return err
	}
	if o.output != "" {
		err = printDocument(out, o.output, run)
	} else {
		err = printRun(out, run)
	}
	if err != nil {
		return err
	}
	if last := run.Entries[len(run.Entries)-1]; last.Verification == nil || !last.Verification.Passed {
		return exitWith(1, nil)
	}
	return nil
}

func printRun(w io.Writer, run *maintenance.Run) error {
	fmt.Fprintf(w, "Run %s of cluster %s, opened %s by %s: whole (%d entries, each sealed and chained).\n",
		fleet.Escape(run.ID), fleet.Escape(run.Cluster), run.Opened.Format(time.RFC3339), fleet.Escape(run.Operator), len(run.Entries))
	if last := run.Entries[len(run.Entries)-1]; last.Verification != nil {
		fmt.Fprintf(w, "Accepted its baseline under --max-baseline-age=%s --issue-slack=%s.\n",
			fleet.Escape(last.Verification.MaxBaselineAge), fleet.Escape(last.Verification.IssueSlack))
	}
	tw := newTable(w)
	fmt.Fprintln(tw, "ENTRY\tKIND\tNAME\tTIME\tBY\tWHAT")
	for _, e := range run.Entries {
		what := e.Message
		switch e.Kind {
		case maintenance.KindBaseline:
			ready := 0
			for _, n := range e.Nodes {
				if n.Fingerprint != "" {
					ready++
				}
			}
			what = fmt.Sprintf("%s, %d with a certificate. %s", nodeCount(len(e.Nodes)), ready, e.Message)
		case maintenance.KindVerification:
			c := e.Verification.Coverage
			what = fmt.Sprintf("%s: %d judged, %d passed, %d failed, %d declared gaps. %s", passedWord(e.Verification.Passed), c.Judged, c.Passed, c.Failed, c.Gaps, e.Message)
		}
		row(tw, e.ID, e.Kind, e.Name, e.Time.Format(time.RFC3339), e.By, strings.TrimSpace(what))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if !run.Closed() {
		_, err := fmt.Fprintln(w, "\nThe run is open: 'certready evidence close' records its final verification.")
		return err
	}
	return nil
}

// runKeyCheck is a redacted run's tag of its ID under the redaction key.
func runKeyCheck(red *redact.Redactor, id string) string { return red.Tag("run-key:" + id) }

// redactedRun is the redactor for run, which must be its key's when the
// run is redacted (nil for a plain run); f are the command's --redact flags.
func redactedRun(run *maintenance.Run, f redactFlags) (*redact.Redactor, error) {
	if err := needsRunKey(run, f); err != nil {
		return nil, err
	}
	if !run.Redacted {
		if f.on {
			return nil, fmt.Errorf("--redact: run %s was opened unredacted; its document keeps the names (redact a copy of the output instead)", run.ID)
		}
		return nil, nil
	}
	red, err := f.redactor(false)
	if err != nil {
		return nil, err
	}
	if runKeyCheck(red, run.ID) != run.KeyCheck {
		return nil, fmt.Errorf("--redact-key-file=%s is not the key run %s was opened with: its pseudonyms would match no node", f.keyFile, run.ID)
	}
	return red, nil
}

// nodeCount is "1 node", "2 nodes".
func nodeCount(n int) string {
	if n == 1 {
		return "1 node"
	}
	return fmt.Sprintf("%d nodes", n)
}

// nodeNames are the rows' node names.
func nodeNames(rows []fleet.NodeStatus) []string {
	out := make([]string, len(rows))
	for i, r := range rows {
		out[i] = r.Node
	}
	return out
}

func passedWord(passed bool) string {
	if passed {
		return "PASSED"
	}
	return "FAILED"
}
