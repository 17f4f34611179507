package ledger

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

var t0 = time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC)

// written makes a real ledger (its stdout sink), records n decisions of
// actor and drains it: the lines as certready writes them.
func written(t *testing.T, actor string, records ...Record) []string {
	t.Helper()
	var out bytes.Buffer
	l, err := New(Config{Sinks: []string{SinkStdout}, Component: "approver", Actor: actor, Version: "test", Stdout: &out, QueueSize: 64}, prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range records {
		l.Record(r)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	l.Run(ctx)
	return strings.SplitAfter(strings.TrimSuffix(out.String(), "\n"), "\n")
}

func decisions(n int) []Record {
	var rs []Record
	for i := 0; i < n; i++ {
		rs = append(rs, Record{Action: Approved, CSR: fmt.Sprintf("csr-%d", i), Node: "w1", Time: t0.Add(time.Duration(i) * time.Second), Message: `a "quoted" message with "hash":"x"`})
	}
	return rs
}

func verify(t *testing.T, files ...[]string) Report {
	t.Helper()
	var ins []Input
	for i, f := range files {
		ins = append(ins, Input{Name: fmt.Sprintf("f%d", i), R: strings.NewReader(strings.Join(f, "\n") + "\n")})
	}
	rep, err := Verify(ins)
	if err != nil {
		t.Fatal(err)
	}
	return rep
}

func kinds(r Report) string {
	var k []string
	for _, f := range r.Findings {
		k = append(k, fmt.Sprintf("%s@%d", f.Kind, f.Seq))
	}
	return strings.Join(k, ",")
}

// Every line is sealed with its hash and linked to the one before; each
// kind of tampering is named where it happened, and what is no tampering
// (the same lines read twice, other log lines between, rotated-away
// heads) is not.
func TestVerifyNamesEveryGap(t *testing.T) {
	lines := written(t, "approver-a", decisions(6)...)
	for i := range lines {
		lines[i] = strings.TrimSuffix(lines[i], "\n")
	}
	if rep := verify(t, lines); !rep.Clean() || rep.Records != 6 || len(rep.Writers) != 1 || rep.Writers[0].LastSeq != 6 {
		t.Fatalf("a whole ledger: %+v", rep)
	}
	edit := func(line, from, to string) string {
		t.Helper()
		if !strings.Contains(line, from) {
			t.Fatalf("%q not in %s", from, line)
		}
		return strings.Replace(line, from, to, 1)
	}
	// An edit with the hash recomputed, as a careful forger would.
	var forged Record
	if err := json.Unmarshal([]byte(lines[2]), &forged); err != nil {
		t.Fatal(err)
	}
	resealed := edit(lines[2], `"csr":"csr-2"`, `"csr":"csr-X"`)
	resealed = strings.Replace(resealed, forged.Hash, zeroHash, 1)
	b, _, err := seal([]byte(resealed))
	if err != nil {
		t.Fatal(err)
	}
	del := func(i int) []string { return append(append([]string{}, lines[:i]...), lines[i+1:]...) }
	swap := append([]string{}, lines...)
	swap[2], swap[3] = swap[3], swap[2]
	for _, tc := range []struct {
		name  string
		files [][]string
		want  string
	}{
		{"a line deleted", [][]string{del(3)}, "deleted@5"},
		{"the last line deleted", [][]string{del(5)}, ""}, // undetectable by a chain alone: the writer's metrics and the next record tell
		{"a field edited", [][]string{append(append(append([]string{}, lines[:2]...), edit(lines[2], `"node":"w1"`, `"node":"w9"`)), lines[3:]...)}, "edited@3,deleted@4"},
		{"a field edited and the hash recomputed", [][]string{append(append(append([]string{}, lines[:2]...), string(b)), lines[3:]...)}, "deleted@4"},
		{"two lines swapped", [][]string{swap}, "reordered@3"},
		{"the same file twice", [][]string{lines, lines}, ""},
		{"rotated: the head in another file, given in any order", [][]string{lines[3:], lines[:3]}, ""},
		{"the head rotated away", [][]string{lines[2:]}, ""},
		{"other log lines between", [][]string{append([]string{"I1203 a klog line", lines[0], `{"not":"a record"}`}, lines[1:]...)}, ""},
		{"a conflicting copy", [][]string{lines, append(append(append([]string{}, lines[:2]...), string(b)), lines[3:]...)}, "conflict@3"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rep := verify(t, tc.files...)
			if got := kinds(rep); got != tc.want {
				t.Errorf("findings %q, want %q: %+v", got, tc.want, rep.Findings)
			}
			if rep.Clean() != (tc.want == "") {
				t.Errorf("clean %v", rep.Clean())
			}
		})
	}
	if rep := verify(t, lines[2:]); !rep.Writers[0].HeadMissing {
		t.Error("a chain read from seq 3: want its head named missing")
	}
}

// A record lost before it was written (the queue full) leaves a gap the
// chain closes over: named lost, not deleted.
func TestVerifyTellsLostFromDeleted(t *testing.T) {
	var out bytes.Buffer
	l, err := New(Config{Sinks: []string{SinkStdout}, Component: "approver", Actor: "a", Stdout: &out, QueueSize: 2}, prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range decisions(3) { // the third finds the queue full
		l.Record(r)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	l.Run(ctx)
	l.Record(decisions(4)[3])
	l.Run(ctx)
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if rep := verify(t, lines); kinds(rep) != "lost@4" {
		t.Errorf("findings %q, want lost@4: %+v", kinds(rep), rep.Findings)
	}
}

// The approver's leadership records show the periods without a leader:
// between a loss and the next acquisition, or from a crashed leader's last
// record.
func TestVerifyNamesPeriodsWithoutALeader(t *testing.T) {
	a := written(t, "approver-a",
		Record{Action: LeaderAcquired, Time: t0},
		Record{Action: Approved, CSR: "c1", Time: t0.Add(time.Minute)},
		Record{Action: LeaderLost, Time: t0.Add(2 * time.Minute)})
	b := written(t, "approver-b",
		Record{Action: LeaderAcquired, Time: t0.Add(2*time.Minute + 20*time.Second)},
		Record{Action: Approved, CSR: "c2", Time: t0.Add(3 * time.Minute)}) // then crashed: no loss recorded
	c := written(t, "approver-c",
		Record{Action: LeaderAcquired, Time: t0.Add(4 * time.Minute)})
	rep := verify(t, a, b, c)
	if !rep.Clean() || len(rep.NoLeader) != 2 {
		t.Fatalf("findings %v, no-leader %+v: want two periods", rep.Findings, rep.NoLeader)
	}
	if p := rep.NoLeader[0]; p.Duration != 20*time.Second || p.Before != "approver-a" || p.After != "approver-b" || p.LostUnknown {
		t.Errorf("first period %+v, want a's recorded loss to b, 20s", p)
	}
	if p := rep.NoLeader[1]; p.Duration != time.Minute || p.Before != "approver-b" || !p.LostUnknown {
		t.Errorf("second period %+v, want from b's last record to c, a minute, loss unrecorded", p)
	}
}
