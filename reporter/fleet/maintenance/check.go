package maintenance

import (
	"bytes"
	"encoding/json"
	"fmt"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/certready/certready/reporter/fleet"
)

// Refusal is why a baseline (or a run) cannot be used: a reason an
// operator can search for, the command's exit status, and what to do.
type Refusal struct {
	Reason  string
	Exit    int
	Message string
}

func (r *Refusal) Error() string { return r.Reason + ": " + r.Message }

// The refusals and their exit statuses (0, 1 and 2 are a verification's
// pass, failure and error).
const (
	BaselineUnbound            = "BaselineUnbound"
	BaselineFromAnotherCluster = "BaselineFromAnotherCluster"
	BaselineTooOld             = "BaselineTooOld"
	BaselineFromTheFuture      = "BaselineFromTheFuture"
	BaselineAfterRenewal       = "BaselineAfterRenewal"
	RunBroken                  = "RunBroken"
)

// Exit statuses of the refusals.
const (
	ExitOtherCluster = 3
	ExitAge          = 4
	ExitAfterRenewal = 5
	ExitRunBroken    = 6
)

func refuse(reason string, exit int, format string, args ...any) *Refusal {
	return &Refusal{Reason: reason, Exit: exit, Message: fmt.Sprintf(format, args...)}
}

// Check says whether run is whole: its schema, an ID that its header
// gives, a baseline first, steps, at most one verification and that last,
// entries in time order, and every entry sealed and chained to the one
// before. It names the first entry that is not.
func Check(run *Run) error {
	broken := func(format string, args ...any) error {
		return refuse(RunBroken, ExitRunBroken, "run %s: %s", run.ID, fmt.Sprintf(format, args...))
	}
	switch {
	case run.Schema != Schema:
		return broken("schema %q, want %q", run.Schema, Schema)
	case run.ID != NewID(run.Cluster, run.Operator, run.Opened, run.Nonce):
		return broken("the ID is not the digest of its cluster, operator, opening time and nonce: the header was edited")
	case len(run.Entries) == 0 || run.Entries[0].Kind != KindBaseline:
		return broken("the first entry is not the baseline")
	}
	prev := run.headerHash()
	for i, e := range run.Entries {
		where := fmt.Sprintf("entry %d (%s %q)", i+1, e.Kind, e.Name)
		switch {
		case e.ID != run.ID+"."+fmt.Sprint(i+1):
			return broken("%s has ID %q, want %s.%d: an entry was removed, added or moved", where, e.ID, run.ID, i+1)
		case e.Prev != prev:
			return broken("%s does not follow the entry before it (prev %.16s…, want %.16s…): an entry was removed, replaced or moved", where, e.Prev, prev)
		case e.Hash != entryHash(e):
			return broken("%s does not match its hash: it was edited", where)
		case i > 0 && e.Kind == KindBaseline:
			return broken("%s is a second baseline", where)
		case e.Kind == KindVerification && i != len(run.Entries)-1:
			return broken("%s closes the run, yet entries follow it", where)
		case e.Kind != KindBaseline && e.Kind != KindStep && e.Kind != KindVerification:
			return broken("%s is of no kind a run records", where)
		case i > 0 && e.Time.Before(run.Entries[i-1].Time):
			return broken("%s is dated %s, before the entry before it", where, e.Time.Format(time.RFC3339))
		case e.Kind == KindVerification && e.Verification == nil:
			return broken("%s holds no verification", where)
		case e.Kind != KindVerification && e.Verification != nil:
			return broken("%s holds a verification, which only the last entry may", where)
		case e.Kind != KindBaseline && (e.Nodes != nil || e.Selector != ""):
			return broken("%s holds nodes or a selector, which only the baseline may", where)
		}
		prev = e.Hash
	}
	return nil
}

// Encode is the run's document as it is written: indented JSON and a
// newline, the one form Parse accepts.
func Encode(run *Run) ([]byte, error) {
	data, err := json.MarshalIndent(run, "", "  ")
	if err != nil {
		return nil, err
	}
	return append(data, '\n'), nil
}

// Parse reads a run document strictly: a field it does not know is not
// covered by the hashes, so it is refused, as is anything after it. And
// the document must be byte for byte what Encode writes of what was read:
// JSON a reader takes otherwise (a key repeated, where Go keeps the last
// and another reader the first; a key in other case, which Go matches) is
// refused, so that every reader of an accepted run sees what Check saw.
func Parse(data []byte) (*Run, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var run Run
	if err := dec.Decode(&run); err != nil {
		return nil, refuse(RunBroken, ExitRunBroken, "not a maintenance run document (%s): %v", Schema, err)
	}
	if dec.More() {
		return nil, refuse(RunBroken, ExitRunBroken, "not a maintenance run document (%s): data after it", Schema)
	}
	canonical, err := Encode(&run)
	if err != nil {
		return nil, err
	}
	if !bytes.Equal(bytes.TrimRight(data, "\n"), bytes.TrimRight(canonical, "\n")) {
		return nil, refuse(RunBroken, ExitRunBroken,
			"run %s is not in the form certready writes (reformatted, a key repeated or in other case, a value written otherwise): take the file certready wrote", run.ID)
	}
	return &run, nil
}

// Baseline is the fleet before a renewal: a run's baseline, or the
// output of 'certready status -o json'.
type Baseline struct {
	// Cluster and Taken bind it ("" and zero: a status output from
	// before they were written, which no verification accepts).
	Cluster string
	Taken   time.Time
	Nodes   []fleet.NodeStatus
	// Run is the run it belongs to, if any.
	Run *Run
}

// BaselineOf is a run's baseline; the run must be whole (Check).
func BaselineOf(run *Run) (Baseline, error) {
	if err := Check(run); err != nil {
		return Baseline{}, err
	}
	b := run.Baseline()
	return Baseline{Cluster: run.Cluster, Taken: b.Time, Nodes: b.Nodes, Run: run}, nil
}

// Bounds are what a verification accepts of a baseline.
type Bounds struct {
	// Cluster is the cluster verified now.
	Cluster string
	Now     time.Time
	// MaxAge: a baseline taken longer ago is refused (0: no bound).
	MaxAge time.Duration
	// IssueSlack is how much earlier than a baseline a certificate it
	// does not show may start: the signer's backdating
	// (kube-controller-manager: 5 minutes) and the kubelet's and agent's
	// lag in installing and reporting it.
	IssueSlack time.Duration
}

// ClockSkew is how far ahead of this clock a baseline's time may be:
// the clocks of two operators' machines.
const ClockSkew = 5 * time.Minute

// Accept refuses a baseline that does not bind the renewal verified now:
// one without a cluster or time, one from another cluster, one older than
// the bound or dated in the future, or one taken after the renewal: a
// certificate served now in place of the baseline's was issued before the
// baseline was taken, so the baseline is no "before" of it. A node whose
// certificate did not change, that had none in the baseline, or whose
// agent states no start of validity, does not take part in the last test.
func Accept(b Baseline, now []fleet.NodeStatus, bounds Bounds) *Refusal {
	switch {
	case b.Cluster == "" || b.Taken.IsZero():
		return refuse(BaselineUnbound, ExitOtherCluster,
			"the baseline names no cluster or time: take it again with this version's 'certready status -o json' or 'certready evidence open'")
	case b.Cluster != bounds.Cluster:
		return refuse(BaselineFromAnotherCluster, ExitOtherCluster,
			"the baseline was taken on cluster %s; this is cluster %s (the UID of its kube-system Namespace): check the kubeconfig's context", b.Cluster, bounds.Cluster)
	case b.Taken.After(bounds.Now.Add(ClockSkew)):
		return refuse(BaselineFromTheFuture, ExitAge,
			"the baseline is dated %s, after now (%s): the clock that took it, or this one, is wrong", b.Taken.Format(time.RFC3339), bounds.Now.UTC().Format(time.RFC3339))
	case bounds.MaxAge > 0 && bounds.Now.Sub(b.Taken) > bounds.MaxAge:
		return refuse(BaselineTooOld, ExitAge,
			"the baseline was taken at %s, %s ago, more than --max-baseline-age=%s: take a new one before the renewal",
			b.Taken.Format(time.RFC3339), bounds.Now.Sub(b.Taken).Round(time.Second), bounds.MaxAge)
	}
	was := map[string]fleet.NodeStatus{}
	for _, n := range b.Nodes {
		was[n.Node] = n
	}
	for _, n := range now {
		before, ok := was[n.Node]
		if !ok || before.Fingerprint == "" || n.Fingerprint == "" || n.NotBefore == nil || n.Fingerprint == before.Fingerprint {
			// No certificate in the baseline (the node was not ready
			// then): verify fails the node itself; its certificate
			// now says nothing of when the baseline was taken.
			continue
		}
		if issued := n.NotBefore.Add(bounds.IssueSlack); issued.Before(b.Taken) {
			return refuse(BaselineAfterRenewal, ExitAfterRenewal,
				"node %s serves a certificate valid from %s, %s before the baseline was taken (%s), yet the baseline shows another one: the baseline was taken after the renewal it is asked to accept (or edited); take the baseline before renewing",
				n.Node, n.NotBefore.UTC().Format(time.RFC3339), b.Taken.Sub(*n.NotBefore).Round(time.Second), b.Taken.Format(time.RFC3339))
		}
	}
	return nil
}

// StatusDocument is 'certready status -o json': the fleet, the cluster
// and when it was read.
type StatusDocument struct {
	Cluster string             `json:"cluster,omitempty"`
	Taken   *time.Time         `json:"taken,omitempty"`
	Nodes   []fleet.NodeStatus `json:"nodes"`
}

// ParseBaseline reads a baseline: a maintenance run (its baseline, once
// Check passes) or the output of 'certready status -o json' (or -o yaml).
func ParseBaseline(data []byte) (Baseline, error) {
	var probe struct {
		Schema string `json:"schema"`
	}
	if json.Unmarshal(data, &probe) == nil && probe.Schema != "" {
		run, err := Parse(data)
		if err != nil {
			return Baseline{}, err
		}
		return BaselineOf(run)
	}
	var doc struct {
		Cluster string              `json:"cluster"`
		Taken   *time.Time          `json:"taken"`
		Nodes   *[]fleet.NodeStatus `json:"nodes"`
	}
	const want = "is neither a maintenance run nor the output of 'certready status -o json' ({\"nodes\": [...]})"
	if err := yaml.UnmarshalStrict(data, &doc); err != nil {
		return Baseline{}, fmt.Errorf("%s: %w", want, err)
	}
	if doc.Nodes == nil {
		return Baseline{}, fmt.Errorf("%s: no nodes field", want)
	}
	b := Baseline{Cluster: doc.Cluster, Nodes: *doc.Nodes}
	if doc.Taken != nil {
		b.Taken = *doc.Taken
	}
	return b, nil
}

// Verify is the final verification of a run (or of a baseline): every
// node's result, with the nodes named in gaps declared out of it. A gap
// that names no node of the baseline or of now is an error.
func Verify(before, now []fleet.NodeStatus, caChange bool, gaps []Gap) (Verification, error) {
	rows := fleet.Verify(before, now, caChange)
	declared := map[string]string{}
	for _, g := range gaps {
		declared[g.Node] = g.Reason
	}
	v := Verification{ExpectCAChange: caChange, Nodes: rows, Gaps: gaps}
	known := map[string]bool{}
	for _, b := range before {
		if b.Fingerprint != "" {
			v.Coverage.Baseline++
		}
		known[b.Node] = true
	}
	for _, n := range now {
		known[n.Node] = true
		if n.NoAgent == "" {
			v.Coverage.Now++
		}
	}
	for _, g := range gaps {
		if !known[g.Node] {
			return Verification{}, fmt.Errorf("--gap %s: no such node in the baseline or now", g.Node)
		}
	}
	v.Coverage.Judged = len(rows)
	for _, r := range rows {
		switch _, gap := declared[r.Node]; {
		case r.Passed:
			v.Coverage.Passed++
		case gap:
			v.Coverage.Gaps++
		default:
			v.Coverage.Failed++
		}
	}
	v.Passed = v.Coverage.Failed == 0
	if v.Gaps == nil {
		v.Gaps = []Gap{}
	}
	return v, nil
}
