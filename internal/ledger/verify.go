package ledger

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"time"
)

// Kinds of Finding.
const (
	// FindingEdited: the line's hash is not the hash of its content.
	FindingEdited = "edited"
	// FindingDeleted: lines between two records of a writer are gone (its
	// chain skips them: Prev is not the hash of the record before).
	FindingDeleted = "deleted"
	// FindingLost: numbers the writer gave to records it never wrote (its
	// queue was full, or the record could not be encoded; the writer's
	// certready_ledger_write_failures_total counted them). The chain is
	// whole around them: no line was removed.
	FindingLost = "lost"
	// FindingConflict: two different lines carry the same writer and
	// number (one was forged or edited along with its hash).
	FindingConflict = "conflict"
	// FindingReordered: a writer's records out of order within a file.
	FindingReordered = "reordered"
	// FindingUnchained: a record without the chain's fields.
	FindingUnchained = "unchained"
)

// Finding is one thing wrong in the ledger, where it was read.
type Finding struct {
	Kind   string `json:"kind"`
	Writer string `json:"writer,omitempty"`
	Seq    uint64 `json:"seq,omitempty"`
	File   string `json:"file"`
	Line   int    `json:"line"`
	Detail string `json:"detail"`
}

// writerSummary is what was read of one writer (one process's chain).
type writerSummary struct {
	Writer    string    `json:"writer"`
	Component string    `json:"component"`
	Actor     string    `json:"actor"`
	Records   int       `json:"records"`
	FirstSeq  uint64    `json:"firstSeq"`
	LastSeq   uint64    `json:"lastSeq"`
	First     time.Time `json:"first"`
	Last      time.Time `json:"last"`
	// HeadMissing: the chain's first records (from 1) were not among the
	// files read: rotated away, or files not given. No finding.
	HeadMissing bool `json:"headMissing,omitempty"`
}

// Interval is a period without an approver leader: from a leader's
// leader-lost record (or, when it has none, its last record) to the next
// leader-acquired.
type Interval struct {
	From        time.Time     `json:"from"`
	To          time.Time     `json:"to"`
	Duration    time.Duration `json:"duration"`
	Before      string        `json:"before"`
	After       string        `json:"after"`
	LostUnknown bool          `json:"lostUnrecorded,omitempty"`
}

// Report is Verify's answer.
type Report struct {
	Files      int             `json:"files"`
	Records    int             `json:"records"`
	OtherLines int             `json:"otherLines"`
	Writers    []writerSummary `json:"writers"`
	Findings   []Finding       `json:"findings"`
	NoLeader   []Interval      `json:"noLeader"`
}

// Clean says whether nothing was found wrong (periods without a leader are
// no fault of the ledger's).
func (r Report) Clean() bool { return len(r.Findings) == 0 }

// Input is one file (or log stream) to verify.
type Input struct {
	Name string
	R    io.Reader
}

// recordPrefix starts every ledger line: other lines (a pod's log around
// stdout records) are counted and skipped.
var recordPrefix = []byte(`{"schema":"certready.io/ledger/`)

type read struct {
	Record
	file string
	line int
}

// Verify reads ledger lines from inputs (rotated files in any order, logs
// with other lines between) and checks every writer's chain: each line's
// hash, the numbers without gaps, each record linked to the one written
// before it; and names the periods the approver had no leader.
func Verify(inputs []Input) (Report, error) {
	rep := Report{Files: len(inputs), Findings: []Finding{}, NoLeader: []Interval{}, Writers: []writerSummary{}}
	bySeq := map[string]map[uint64]read{}
	for _, in := range inputs {
		last := map[string]uint64{}
		sc := bufio.NewScanner(in.R)
		sc.Buffer(make([]byte, 64<<10), 4*MaxLineBytes)
		n := 0
		for sc.Scan() {
			n++
			raw := sc.Bytes()
			if !bytes.HasPrefix(raw, recordPrefix) {
				rep.OtherLines++
				continue
			}
			var r Record
			if err := json.Unmarshal(raw, &r); err != nil {
				rep.Findings = append(rep.Findings, Finding{Kind: FindingEdited, File: in.Name, Line: n, Detail: "not a JSON record: " + err.Error()})
				continue
			}
			rep.Records++
			at := Finding{Writer: r.Writer, Seq: r.Seq, File: in.Name, Line: n}
			if r.Writer == "" || r.Seq == 0 || r.Hash == "" {
				at.Kind, at.Detail = FindingUnchained, "a record without writer, seq and hash"
				rep.Findings = append(rep.Findings, at)
				continue
			}
			if h, _, err := LineHash(raw); err != nil || h != r.Hash {
				at.Kind, at.Detail = FindingEdited, "the line's content does not match its hash"
				rep.Findings = append(rep.Findings, at)
				continue
			}
			if prev, ok := last[r.Writer]; ok && r.Seq < prev {
				at.Kind, at.Detail = FindingReordered, fmt.Sprintf("seq %d after seq %d", r.Seq, prev)
				rep.Findings = append(rep.Findings, at)
			}
			last[r.Writer] = r.Seq
			seqs := bySeq[r.Writer]
			if seqs == nil {
				seqs = map[uint64]read{}
				bySeq[r.Writer] = seqs
			}
			if seen, ok := seqs[r.Seq]; ok {
				if seen.Hash != r.Hash {
					at.Kind, at.Detail = FindingConflict, fmt.Sprintf("another line with this writer and seq at %s:%d", seen.file, seen.line)
					rep.Findings = append(rep.Findings, at)
				}
				continue // the same line read twice (overlapping files): one record
			}
			seqs[r.Seq] = read{Record: r, file: in.Name, line: n}
		}
		if err := sc.Err(); err != nil {
			return rep, fmt.Errorf("%s: %w", in.Name, err)
		}
	}
	writers := make([]string, 0, len(bySeq))
	for w := range bySeq {
		writers = append(writers, w)
	}
	sort.Strings(writers)
	for _, w := range writers {
		rep.Writers = append(rep.Writers, checkChain(w, bySeq[w], &rep.Findings))
	}
	rep.NoLeader = noLeader(bySeq)
	return rep, nil
}

// checkChain checks one writer's records, in seq order, against each
// other.
func checkChain(w string, seqs map[uint64]read, findings *[]Finding) writerSummary {
	nums := make([]uint64, 0, len(seqs))
	for s := range seqs {
		nums = append(nums, s)
	}
	sort.Slice(nums, func(i, j int) bool { return nums[i] < nums[j] })
	first, last := seqs[nums[0]], seqs[nums[len(nums)-1]]
	sum := writerSummary{Writer: w, Component: first.Component, Actor: first.Actor, Records: len(nums), FirstSeq: nums[0], LastSeq: nums[len(nums)-1],
		First: first.Time, Last: last.Time, HeadMissing: nums[0] > 1}
	for i := 1; i < len(nums); i++ {
		p, r := seqs[nums[i-1]], seqs[nums[i]]
		at := Finding{Writer: w, Seq: r.Seq, File: r.file, Line: r.line}
		switch {
		case r.Prev != p.Hash:
			at.Kind = FindingDeleted
			at.Detail = fmt.Sprintf("the record written before seq %d is not seq %d (%s:%d): lines between were removed or replaced", r.Seq, p.Seq, p.file, p.line)
			if missing := r.Seq - p.Seq - 1; missing > 0 {
				at.Detail = fmt.Sprintf("seq %d-%d missing and the chain broken there: removed", p.Seq+1, r.Seq-1)
			}
		case r.Seq-p.Seq > 1:
			at.Kind = FindingLost
			at.Detail = fmt.Sprintf("seq %d-%d never written by the writer (counted in certready_ledger_write_failures_total); the chain is whole around them", p.Seq+1, r.Seq-1)
		default:
			continue
		}
		*findings = append(*findings, at)
	}
	return sum
}

// noLeader walks the approvers' leadership records in time order.
func noLeader(bySeq map[string]map[uint64]read) []Interval {
	type event struct {
		t      time.Time
		action Action
		actor  string
		writer string
	}
	var evs []event
	lastSeen := map[string]time.Time{} // writer: its last record
	for w, seqs := range bySeq {
		for _, r := range seqs {
			if r.Time.After(lastSeen[w]) {
				lastSeen[w] = r.Time
			}
			if r.Action == LeaderAcquired || r.Action == LeaderLost {
				evs = append(evs, event{r.Time, r.Action, r.Actor, w})
			}
		}
	}
	sort.Slice(evs, func(i, j int) bool { return evs[i].t.Before(evs[j].t) })
	out := []Interval{}
	var leader, leaderWriter string
	var lostAt time.Time
	for _, e := range evs {
		switch e.action {
		case LeaderLost:
			if e.writer == leaderWriter {
				lostAt, leader, leaderWriter = e.t, e.actor, ""
			}
		case LeaderAcquired:
			switch {
			case leaderWriter != "" && leaderWriter != e.writer:
				// The previous leader recorded no loss (it crashed, or
				// the line is gone): without a leader since its last
				// record at the latest.
				if from := lastSeen[leaderWriter]; from.Before(e.t) {
					out = append(out, Interval{From: from, To: e.t, Duration: e.t.Sub(from), Before: leader, After: e.actor, LostUnknown: true})
				}
			case leaderWriter == "" && !lostAt.IsZero():
				out = append(out, Interval{From: lostAt, To: e.t, Duration: e.t.Sub(lostAt), Before: leader, After: e.actor})
			}
			leader, leaderWriter, lostAt = e.actor, e.writer, time.Time{}
		}
	}
	return out
}
