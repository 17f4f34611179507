package maintenance_test

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/certready/certready/reporter/fleet"
	"github.com/certready/certready/reporter/fleet/maintenance"
)

var opened = time.Date(2026, 12, 6, 8, 0, 0, 0, time.UTC)

func ready(node, fp string, notBefore time.Time) fleet.NodeStatus {
	notAfter := notBefore.AddDate(1, 0, 0)
	return fleet.NodeStatus{Node: node, Ready: true, Status: "False", Fingerprint: fp, NotBefore: &notBefore, NotAfter: &notAfter}
}

// aRun is a closed run: baseline, two steps, the final verification.
func aRun(t *testing.T) *maintenance.Run {
	t.Helper()
	run, err := maintenance.Open("cluster-a", "alice", "nonce-1", opened, "", "quarterly renewal",
		[]fleet.NodeStatus{ready("w1", "aa", opened.AddDate(0, -6, 0))}, "")
	if err != nil {
		t.Fatal(err)
	}
	if err := run.Step("renew-kubelets", "alice", "", opened.Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	if err := run.Step("wait-rotation", "bob", "", opened.Add(2*time.Minute)); err != nil {
		t.Fatal(err)
	}
	v, err := maintenance.Verify(run.Baseline().Nodes, []fleet.NodeStatus{ready("w1", "bb", opened.Add(time.Minute))}, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := run.Close("alice", "", opened.Add(3*time.Minute), v); err != nil {
		t.Fatal(err)
	}
	return run
}

// roundTrip is the run as a file holds it.
func roundTrip(t *testing.T, run *maintenance.Run) *maintenance.Run {
	t.Helper()
	data, err := maintenance.Encode(run)
	if err != nil {
		t.Fatal(err)
	}
	back, err := maintenance.Parse(data)
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	return back
}

func TestARunIsBoundAndWhole(t *testing.T) {
	run := roundTrip(t, aRun(t))
	if err := maintenance.Check(run); err != nil {
		t.Fatalf("Check of a whole run: %v", err)
	}
	if !run.Closed() || len(run.Entries) != 4 {
		t.Fatalf("closed=%v entries=%d, want a closed run of 4", run.Closed(), len(run.Entries))
	}
	ids := map[string]bool{}
	for _, e := range run.Entries {
		if ids[e.ID] || !strings.HasPrefix(e.ID, run.ID+".") {
			t.Errorf("entry ID %q repeated or not of run %s", e.ID, run.ID)
		}
		ids[e.ID] = true
	}
	other, _ := maintenance.Open("cluster-b", "alice", "nonce-1", opened, "", "", nil, "")
	if other.ID == run.ID {
		t.Errorf("runs of two clusters share the ID %s", run.ID)
	}
	if err := run.Step("late", "alice", "", opened.Add(time.Hour)); err == nil || !strings.Contains(err.Error(), "was closed") {
		t.Errorf("a step in a closed run: %v, want refused", err)
	}
}

func TestCheckNamesWhatWasDone(t *testing.T) {
	for _, tc := range []struct {
		name, want string
		change     func(r *maintenance.Run)
	}{
		{"the baseline's node edited", "entry 1 (baseline \"baseline\") does not match its hash", func(r *maintenance.Run) {
			r.Entries[0].Nodes[0].Fingerprint = "cc"
		}},
		{"the baseline replaced by a later one, rehashed", "entry 1 (baseline \"baseline\") does not follow", func(r *maintenance.Run) {
			later, _ := maintenance.Open(r.Cluster, r.Operator, "nonce-2", opened.Add(time.Hour), "", "", nil, "")
			b := later.Entries[0]
			b.ID = r.Entries[0].ID
			r.Entries[0] = b
		}},
		{"the opening time moved", "the header was edited", func(r *maintenance.Run) { r.Opened = r.Opened.Add(-time.Hour) }},
		{"the cluster changed", "the header was edited", func(r *maintenance.Run) { r.Cluster = "cluster-b" }},
		{"a step removed", "entry 2 (step \"wait-rotation\") has ID", func(r *maintenance.Run) {
			r.Entries = append(r.Entries[:1], r.Entries[2:]...)
		}},
		{"two steps swapped", "entry 2 (step \"wait-rotation\") has ID", func(r *maintenance.Run) {
			r.Entries[1], r.Entries[2] = r.Entries[2], r.Entries[1]
		}},
		{"the verification flipped", "entry 4 (verification \"final-verification\") does not match", func(r *maintenance.Run) {
			r.Entries[3].Verification.Passed = false
		}},
		{"the schema changed", "schema", func(r *maintenance.Run) { r.Schema = "x" }},
		// Re-sealed, so only the shape tells: a step that claims a
		// verification would read as a passed run.
		{"a step given a verification, re-sealed", "holds a verification", func(r *maintenance.Run) {
			r.Entries = r.Entries[:3]
			r.Entries[2].Verification = &maintenance.Verification{Passed: true}
			reseal(r)
		}},
		{"a step given nodes, re-sealed", "holds nodes", func(r *maintenance.Run) {
			r.Entries[1].Nodes = r.Entries[0].Nodes
			reseal(r)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			run := roundTrip(t, aRun(t))
			tc.change(run)
			err := maintenance.Check(run)
			var refusal *maintenance.Refusal
			if !errors.As(err, &refusal) || refusal.Reason != maintenance.RunBroken || refusal.Exit != maintenance.ExitRunBroken || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Check = %v, want RunBroken naming %q", err, tc.want)
			}
		})
	}
}

func TestParseRefusesFieldsTheHashesDoNotCover(t *testing.T) {
	data, _ := maintenance.Encode(aRun(t))
	added := []byte(strings.Replace(string(data), `"operator":`, `"approvedBy": "mallory", "operator":`, 1))
	if _, err := maintenance.Parse(added); err == nil || !strings.Contains(err.Error(), "approvedBy") {
		t.Fatalf("Parse with an added field = %v, want refused naming it", err)
	}
	// Readers that disagree on JSON: Go keeps a repeated key's last value
	// and matches keys in any case; other readers keep the first.
	for name, doc := range map[string]string{
		"a key repeated":      strings.Replace(string(data), `"passed": true,`, `"passed": false, "passed": true,`, 1),
		"a key in other case": strings.Replace(string(data), `"operator":`, `"Operator":`, 1),
		"compacted":           string(mustCompact(t, data)),
	} {
		if _, err := maintenance.Parse([]byte(doc)); err == nil || !strings.Contains(err.Error(), "not in the form certready writes") {
			t.Errorf("%s: Parse = %v, want refused", name, err)
		}
	}
	if _, err := maintenance.Parse(data); err != nil {
		t.Fatalf("Parse of what Encode wrote: %v", err)
	}
}

// reseal recomputes every hash after an edit, as a forger with the
// document alone would.
func reseal(r *maintenance.Run) {
	h := *r
	h.Entries = nil
	prev := digestOf(h)
	for i := range r.Entries {
		r.Entries[i].Prev, r.Entries[i].Hash = prev, ""
		r.Entries[i].Hash = digestOf(r.Entries[i])
		prev = r.Entries[i].Hash
	}
}

func digestOf(v any) string {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(v)
	sum := sha256.Sum256(buf.Bytes())
	return hex.EncodeToString(sum[:])
}

func mustCompact(t *testing.T, data []byte) []byte {
	t.Helper()
	var b bytes.Buffer
	if err := json.Compact(&b, data); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

func TestStepsAreNamedOnce(t *testing.T) {
	run, _ := maintenance.Open("c", "alice", "n", opened, "", "", nil, "")
	if err := run.Step("", "alice", "", opened); err == nil {
		t.Error("a step without a name was recorded")
	}
	if err := run.Step("drain", "alice", "", opened); err != nil {
		t.Fatal(err)
	}
	if err := run.Step("drain", "alice", "", opened); err == nil || !strings.Contains(err.Error(), "already recorded") {
		t.Errorf("the same step twice: %v", err)
	}
	// A clock that stepped back still leaves the entries in order.
	if err := run.Step("back", "alice", "", opened.Add(-time.Hour)); err != nil {
		t.Fatal(err)
	}
	if err := maintenance.Check(run); err != nil {
		t.Errorf("Check after a clock stepped back: %v", err)
	}
}

func TestAcceptRefusesABaselineThatDoesNotBindTheRenewal(t *testing.T) {
	now := opened.Add(2 * time.Hour)
	bounds := maintenance.Bounds{Cluster: "cluster-a", Now: now, MaxAge: 24 * time.Hour, IssueSlack: 10 * time.Minute}
	old := ready("w1", "aa", opened.AddDate(0, -6, 0))
	renewed := ready("w1", "bb", opened.Add(time.Hour))
	for _, tc := range []struct {
		name     string
		baseline maintenance.Baseline
		now      []fleet.NodeStatus
		reason   string
		exit     int
	}{
		{"taken before the renewal", maintenance.Baseline{Cluster: "cluster-a", Taken: opened, Nodes: []fleet.NodeStatus{old}}, []fleet.NodeStatus{renewed}, "", 0},
		{"no cluster or time (an old status output)", maintenance.Baseline{Nodes: []fleet.NodeStatus{old}}, []fleet.NodeStatus{renewed}, maintenance.BaselineUnbound, 3},
		{"from another cluster", maintenance.Baseline{Cluster: "cluster-b", Taken: opened, Nodes: []fleet.NodeStatus{old}}, []fleet.NodeStatus{renewed}, maintenance.BaselineFromAnotherCluster, 3},
		{"older than the bound", maintenance.Baseline{Cluster: "cluster-a", Taken: now.Add(-25 * time.Hour), Nodes: []fleet.NodeStatus{old}}, []fleet.NodeStatus{renewed}, maintenance.BaselineTooOld, 4},
		{"dated in the future", maintenance.Baseline{Cluster: "cluster-a", Taken: now.Add(time.Hour), Nodes: []fleet.NodeStatus{old}}, []fleet.NodeStatus{renewed}, maintenance.BaselineFromTheFuture, 4},
		{"taken after the renewal, showing the old certificate", maintenance.Baseline{Cluster: "cluster-a", Taken: opened.Add(90 * time.Minute), Nodes: []fleet.NodeStatus{old}}, []fleet.NodeStatus{renewed}, maintenance.BaselineAfterRenewal, 5},
		{"taken within the signer's backdating", maintenance.Baseline{Cluster: "cluster-a", Taken: opened.Add(time.Hour + 5*time.Minute), Nodes: []fleet.NodeStatus{old}}, []fleet.NodeStatus{renewed}, "", 0},
		{"no certificate in the baseline: verify fails the node, not the baseline", maintenance.Baseline{Cluster: "cluster-a", Taken: opened.Add(90 * time.Minute), Nodes: []fleet.NodeStatus{{Node: "w1", Status: "True"}}}, []fleet.NodeStatus{ready("w1", "aa", opened.AddDate(0, -6, 0))}, "", 0},
		{"dated within the clock skew", maintenance.Baseline{Cluster: "cluster-a", Taken: now.Add(4 * time.Minute), Nodes: []fleet.NodeStatus{old}}, []fleet.NodeStatus{old}, "", 0},
		{"a certificate that did not change is no renewal", maintenance.Baseline{Cluster: "cluster-a", Taken: opened.Add(90 * time.Minute), Nodes: []fleet.NodeStatus{old}}, []fleet.NodeStatus{old}, "", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := maintenance.Accept(tc.baseline, tc.now, bounds)
			switch {
			case tc.reason == "" && r != nil:
				t.Fatalf("Accept = %v, want accepted", r)
			case tc.reason != "" && (r == nil || r.Reason != tc.reason || r.Exit != tc.exit):
				t.Fatalf("Accept = %v, want %s (exit %d)", r, tc.reason, tc.exit)
			}
		})
	}
	unbounded := bounds
	unbounded.MaxAge = 0
	if r := maintenance.Accept(maintenance.Baseline{Cluster: "cluster-a", Taken: now.AddDate(-1, 0, 0)}, nil, unbounded); r != nil {
		t.Errorf("--max-baseline-age=0 refused an old baseline: %v", r)
	}
}

func TestVerifyCoversEveryNodeAndDeclaredGaps(t *testing.T) {
	before := []fleet.NodeStatus{ready("w1", "a1", opened), ready("w2", "a2", opened), ready("w3", "a3", opened)}
	now := []fleet.NodeStatus{ready("w1", "b1", opened.Add(time.Hour)), ready("w2", "a2", opened), ready("w4", "b4", opened)}
	for _, tc := range []struct {
		name       string
		gaps       []maintenance.Gap
		passed     bool
		cover      maintenance.Coverage
		wantErrFor string
	}{
		{"no gaps: w2 did not renew, w3 is gone, w4 joined", nil, false, maintenance.Coverage{Baseline: 3, Now: 3, Judged: 4, Passed: 1, Failed: 3}, ""},
		{"every failure declared", []maintenance.Gap{{"w2", "cordoned for hardware"}, {"w3", "decommissioned"}, {"w4", "joined during the run"}}, true,
			maintenance.Coverage{Baseline: 3, Now: 3, Judged: 4, Passed: 1, Gaps: 3}, ""},
		{"a gap naming no node", []maintenance.Gap{{"w9", "typo"}}, false, maintenance.Coverage{}, "w9"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v, err := maintenance.Verify(before, now, false, tc.gaps)
			if tc.wantErrFor != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErrFor) {
					t.Fatalf("Verify = %v, want an error naming %s", err, tc.wantErrFor)
				}
				return
			}
			if err != nil || v.Passed != tc.passed || v.Coverage != tc.cover {
				t.Fatalf("Verify = passed %v coverage %+v, %v; want %v %+v", v.Passed, v.Coverage, err, tc.passed, tc.cover)
			}
		})
	}
}

func TestParseBaselineReadsARunAndAStatusOutput(t *testing.T) {
	run := aRun(t)
	data, _ := maintenance.Encode(run)
	b, err := maintenance.ParseBaseline(data)
	if err != nil || b.Run == nil || b.Cluster != "cluster-a" || !b.Taken.Equal(opened) || len(b.Nodes) != 1 {
		t.Fatalf("ParseBaseline(run) = %+v, %v", b, err)
	}
	edited := strings.Replace(string(data), `"fingerprint": "aa"`, `"fingerprint": "zz"`, 1)
	if _, err := maintenance.ParseBaseline([]byte(edited)); err == nil || !strings.Contains(err.Error(), maintenance.RunBroken) {
		t.Fatalf("ParseBaseline(edited run) = %v, want RunBroken", err)
	}
	status := `{"cluster":"cluster-a","taken":"2026-12-06T08:00:00Z","nodes":[{"node":"w1","ready":true,"status":"False","tainted":false}]}`
	if b, err := maintenance.ParseBaseline([]byte(status)); err != nil || b.Run != nil || b.Cluster != "cluster-a" || !b.Taken.Equal(opened) {
		t.Fatalf("ParseBaseline(status) = %+v, %v", b, err)
	}
	for _, bad := range []string{`{"items":[]}`, `nodes: 3`, `{}`} {
		if _, err := maintenance.ParseBaseline([]byte(bad)); err == nil {
			t.Errorf("ParseBaseline(%s) accepted", bad)
		}
	}
}
