// Package maintenance keeps a maintenance run: the one JSON document an
// auditor accepts for a renewal of the fleet's serving certificates. A run
// is bound to a cluster (the kube-system Namespace's UID), a time and the
// operator who opened it; it holds the baseline taken when it was opened,
// each named step the operator took, and the final verification with
// every node's result, the declared gaps and the coverage. Each entry is
// sealed with a hash and names the hash before it, so a baseline cannot be
// replaced, nor an entry edited, removed or reordered, without Check
// naming it.
package maintenance

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	"github.com/certready/certready/reporter/fleet"
)

// Schema names the run document's layout.
const Schema = "certready.io/maintenance-run/v1"

// Entry kinds: the baseline (the first entry), the operator's steps, and
// the final verification (the last, which closes the run).
const (
	KindBaseline     = "baseline"
	KindStep         = "step"
	KindVerification = "verification"
)

// Run is the maintenance run's document.
type Run struct {
	Schema string `json:"schema"`
	// ID is "run-" and 16 hex digits of a digest of Cluster, Opened,
	// Operator and Nonce: none of them can change without the ID.
	ID string `json:"id"`
	// Cluster is the UID of the kube-system Namespace.
	Cluster string `json:"cluster"`
	// Operator is who opened the run, as the API server authenticated
	// them (a SelfSubjectReview).
	Operator string    `json:"operator"`
	Opened   time.Time `json:"opened"`
	// Nonce is random: two runs opened in the same second by the same
	// operator have different IDs.
	Nonce string `json:"nonce"`
	// Redacted: node names are pseudonyms and messages carry no names or
	// addresses (the run may leave the cluster).
	Redacted bool `json:"redacted,omitempty"`
	// KeyCheck is, for a redacted run, a tag of its ID under the
	// redaction key: a wrong key is refused before it could judge every
	// node as gone.
	KeyCheck string  `json:"keyCheck,omitempty"`
	Entries  []Entry `json:"entries"`
}

// Entry is one thing the run recorded.
type Entry struct {
	// ID is the run's ID and the entry's number: distinct for every
	// entry of every run.
	ID   string    `json:"id"`
	Kind string    `json:"kind"`
	Name string    `json:"name"`
	Time time.Time `json:"time"`
	// By is who recorded it, as the API server authenticated them.
	By      string `json:"by"`
	Message string `json:"message,omitempty"`
	// Selector is the -l the baseline was taken with ("": every node).
	Selector string `json:"selector,omitempty"`
	// Nodes is the baseline: the fleet as 'certready status -o json'
	// shows it.
	Nodes        []fleet.NodeStatus `json:"nodes,omitempty"`
	Verification *Verification      `json:"verification,omitempty"`
	// Prev is the hash of the entry before (of the run's header for the
	// first); Hash seals this entry: SHA-256 of its JSON with Hash empty.
	Prev string `json:"prev"`
	Hash string `json:"hash"`
}

// Verification is the final verification: every node of the baseline and
// of the fleet now, with its result.
type Verification struct {
	// Passed: every node passed or is a declared gap.
	Passed         bool `json:"passed"`
	ExpectCAChange bool `json:"expectCAChange,omitempty"`
	// MaxBaselineAge and IssueSlack are the bounds the baseline was
	// accepted under (Bounds): an auditor sees a widened one.
	MaxBaselineAge string               `json:"maxBaselineAge"`
	IssueSlack     string               `json:"issueSlack"`
	Coverage       Coverage             `json:"coverage"`
	Nodes          []fleet.Verification `json:"nodes"`
	// Gaps are the nodes the operator declared out of the run, and why.
	Gaps []Gap `json:"gaps,omitempty"`
}

// Coverage counts the nodes the verification judged.
type Coverage struct {
	// Baseline and Now are the nodes with a certificate to renew in the
	// baseline and the nodes selected now; Judged every node with a
	// result (their union).
	Baseline int `json:"baseline"`
	Now      int `json:"now"`
	Judged   int `json:"judged"`
	Passed   int `json:"passed"`
	Failed   int `json:"failed"`
	Gaps     int `json:"gaps"`
}

// Gap is a node the operator declared out of the run.
type Gap struct {
	Node   string `json:"node"`
	Reason string `json:"reason"`
}

// NewID is a run's ID: a digest of what binds it.
func NewID(cluster, operator string, opened time.Time, nonce string) string {
	h := sha256.New()
	for _, s := range []string{Schema, cluster, operator, opened.UTC().Format(time.RFC3339Nano), nonce} {
		h.Write([]byte(strconv.Itoa(len(s))))
		h.Write([]byte{':'})
		h.Write([]byte(s))
	}
	return "run-" + hex.EncodeToString(h.Sum(nil))[:16]
}

// Open begins a run with its baseline: the fleet as read at now.
// keyCheck, for a redacted run, is the redaction key's tag of its ID
// (NewID); "" for a plain run.
func Open(cluster, operator, nonce string, now time.Time, selector, message string, nodes []fleet.NodeStatus, keyCheck string) (*Run, error) {
	if cluster == "" || operator == "" || nonce == "" {
		return nil, fmt.Errorf("a run needs the cluster's identity, the operator's and a nonce")
	}
	if nodes == nil {
		nodes = []fleet.NodeStatus{}
	}
	now = now.UTC().Truncate(time.Second)
	r := &Run{Schema: Schema, Cluster: cluster, Operator: operator, Opened: now, Nonce: nonce, Redacted: keyCheck != "", KeyCheck: keyCheck}
	r.ID = NewID(cluster, operator, now, nonce)
	r.append(Entry{Kind: KindBaseline, Name: KindBaseline, Time: now, By: operator, Message: message, Selector: selector, Nodes: nodes})
	return r, nil
}

// Step records a named step the operator took. A closed run takes none,
// and a name is used once.
func (r *Run) Step(name, by, message string, now time.Time) error {
	if name == "" {
		return fmt.Errorf("a step needs a name (e.g. renew-kubelets)")
	}
	if err := r.open(); err != nil {
		return err
	}
	for _, e := range r.Entries {
		if e.Kind == KindStep && e.Name == name {
			return fmt.Errorf("step %q is already recorded (%s at %s): name each step once", name, e.ID, e.Time.Format(time.RFC3339))
		}
	}
	r.append(Entry{Kind: KindStep, Name: name, Time: r.notBeforeLast(now), By: by, Message: message})
	return nil
}

// Close records the final verification and closes the run.
func (r *Run) Close(by, message string, now time.Time, v Verification) error {
	if err := r.open(); err != nil {
		return err
	}
	r.append(Entry{Kind: KindVerification, Name: "final-verification", Time: r.notBeforeLast(now), By: by, Message: message, Verification: &v})
	return nil
}

// Closed says whether the run holds its final verification.
func (r *Run) Closed() bool {
	return len(r.Entries) > 0 && r.Entries[len(r.Entries)-1].Kind == KindVerification
}

// Baseline is the run's baseline.
func (r *Run) Baseline() *Entry {
	if len(r.Entries) == 0 || r.Entries[0].Kind != KindBaseline {
		return nil
	}
	return &r.Entries[0]
}

// Steps are the run's steps, in order.
func (r *Run) Steps() []Entry {
	var out []Entry
	for _, e := range r.Entries {
		if e.Kind == KindStep {
			out = append(out, e)
		}
	}
	return out
}

func (r *Run) open() error {
	if r.Closed() {
		last := r.Entries[len(r.Entries)-1]
		return fmt.Errorf("run %s was closed at %s by %s: open a new run", r.ID, last.Time.Format(time.RFC3339), last.By)
	}
	return nil
}

// notBeforeLast keeps the entries in time order: a clock that stepped
// back records the entry at the time of the one before.
func (r *Run) notBeforeLast(now time.Time) time.Time {
	now = now.UTC().Truncate(time.Second)
	if last := r.Entries[len(r.Entries)-1].Time; now.Before(last) {
		return last
	}
	return now
}

func (r *Run) append(e Entry) {
	e.ID = r.ID + "." + strconv.Itoa(len(r.Entries)+1)
	e.Prev = r.headerHash()
	if n := len(r.Entries); n > 0 {
		e.Prev = r.Entries[n-1].Hash
	}
	e.Hash = ""
	e.Hash = entryHash(e)
	r.Entries = append(r.Entries, e)
}

// headerHash seals what binds the run; the first entry names it.
func (r *Run) headerHash() string {
	h := *r
	h.Entries = nil
	return digest(h)
}

func entryHash(e Entry) string {
	e.Hash = ""
	return digest(e)
}

func digest(v any) string {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil { // plain data: cannot happen
		panic(err)
	}
	sum := sha256.Sum256(buf.Bytes())
	return hex.EncodeToString(sum[:])
}
