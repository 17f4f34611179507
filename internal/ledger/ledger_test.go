package ledger

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/certready/certready/internal/redact"
)

func TestParseSinks(t *testing.T) {
	for _, tc := range []struct {
		in      string
		want    []string
		wantErr string
	}{
		{in: "", want: nil},
		{in: "none", want: nil},
		{in: "stdout", want: []string{"stdout"}},
		{in: "stdout, file:/var/log/certready/ledger.jsonl,stdout", want: []string{"stdout", "file:/var/log/certready/ledger.jsonl"}},
		{in: "file:ledger.jsonl", wantErr: "absolute path"},
		{in: "stderr", wantErr: `"stderr" is no sink`},
	} {
		got, err := ParseSinks(tc.in)
		if tc.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("ParseSinks(%q) error %v, want one with %q", tc.in, err, tc.wantErr)
			}
			continue
		}
		if err != nil || !slices.Equal(got, tc.want) {
			t.Errorf("ParseSinks(%q) = %v, %v; want %v", tc.in, got, err, tc.want)
		}
	}
}

// The event_id names the event, not its delivery: the same decision
// written at another time, by another replica or another version has the
// same ID; any identifying field changed gives another.
func TestEventIDIsStableForTheSameEventOnly(t *testing.T) {
	base := Record{Cluster: "c1", Component: "approver", Action: LeftPending, Rule: "IPSANNotInInventory",
		Node: "worker-1", CSR: "csr-a", CSRUID: "uid-a"}
	id := base.ID()
	// Records without a workload cluster keep the IDs they had before
	// the field was added (a digest computed as then).
	if id != "f900166471b248364f1f6bf902027700" {
		t.Errorf("event_id %s, want %s as before workload_cluster was added", id, "f900166471b248364f1f6bf902027700")
	}
	same := base
	same.Time, same.Actor, same.Version, same.Message, same.SANs = time.Now(), "replica-2", "v9", "other words", []string{"x"}
	if same.ID() != id {
		t.Errorf("re-delivery of the same decision changed event_id: %s -> %s", id, same.ID())
	}
	for name, mutate := range map[string]func(*Record){
		"cluster":     func(r *Record) { r.Cluster = "c2" },
		"action":      func(r *Record) { r.Action = Approved },
		"rule":        func(r *Record) { r.Rule = "NoSAN" },
		"csr uid":     func(r *Record) { r.CSRUID = "uid-b" },
		"node":        func(r *Record) { r.Node = "worker-2" },
		"fingerprint": func(r *Record) { r.CertificateSHA256 = "ab" },
		"key":         func(r *Record) { r.Key = "2026-12-02T10:00:00Z" },
		// The same CSR name and node in two workload clusters.
		"workload cluster": func(r *Record) { r.WorkloadCluster = "tenant-a/prod" },
		// Length-prefixed fields: moving a character between two
		// neighbours is another event.
		"boundary": func(r *Record) { r.Node, r.CSR = "worker-1c", "sr-a" },
	} {
		r := base
		mutate(&r)
		if r.ID() == id {
			t.Errorf("changing the %s kept event_id %s", name, id)
		}
	}
}

type failingWriter struct{}

func (failingWriter) Write([]byte) (int, error) { return 0, errors.New("disk full") }

func TestRecordsReachEverySinkAndFailuresAreCounted(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "sub", "ledger.jsonl")
	var stdout bytes.Buffer
	reg := prometheus.NewPedanticRegistry()
	l, err := New(Config{Sinks: []string{"stdout", "file:" + path}, Component: "approver", Actor: "pod-a", Version: "v1.2.3", Stdout: &stdout}, reg)
	if err != nil {
		t.Fatal(err)
	}
	l.SetCluster("kube-system-uid")
	na := time.Date(2027, 1, 2, 3, 4, 5, 0, time.UTC)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { l.Run(ctx); close(done) }()
	l.Record(Record{Action: Approved, Rule: "CertReadyValidatedNodeIdentity", Node: "worker-1", CSR: "csr-a", CSRUID: "uid-a",
		Requester: "system:node:worker-1", SANs: []string{"worker-1", "10.0.0.1"}, KeyType: "ECDSA P-256",
		Time: time.Date(2026, 12, 2, 10, 0, 0, 0, time.FixedZone("CET", 3600))})
	l.Record(Record{Action: Rotated, Node: "worker-1", CertificateSHA256: "new", NotAfter: &na, PreviousSHA256: "old"})
	cancel()
	<-done // Run writes what was queued before it returns

	fileBytes, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(fileBytes, stdout.Bytes()) {
		t.Errorf("the sinks differ:\nstdout %s\nfile   %s", stdout.Bytes(), fileBytes)
	}
	if fi, err := os.Stat(path); err != nil || fi.Mode().Perm()&0o077 != 0 {
		t.Errorf("ledger file mode %v (%v): want no access for group and others", fi.Mode(), err)
	}
	recs := decodeLines(t, fileBytes)
	if len(recs) != 2 {
		t.Fatalf("%d records, want 2", len(recs))
	}
	first := recs[0]
	for k, want := range map[string]any{"schema": Schema, "cluster": "kube-system-uid", "component": "approver", "actor": "pod-a",
		"version": "v1.2.3", "action": "approved", "time": "2026-12-02T09:00:00Z", "key_type": "ECDSA P-256"} {
		if first[k] != want {
			t.Errorf("record field %s = %v, want %v", k, first[k], want)
		}
	}
	if id, _ := first["event_id"].(string); !regexp.MustCompile(`^[0-9a-f]{32}$`).MatchString(id) {
		t.Errorf("event_id %q is not 32 hex digits", id)
	}
	if recs[1]["not_after"] != "2027-01-02T03:04:05Z" || recs[1]["previous_certificate_sha256"] != "old" {
		t.Errorf("rotation record %v", recs[1])
	}
	if got := testutil.ToFloat64(l.written.WithLabelValues("file")); got != 2 {
		t.Errorf("records written to file = %v, want 2", got)
	}

	// A sink that fails counts every record it lost, and the others
	// still get theirs.
	var good bytes.Buffer
	l2, err := New(Config{Sinks: []string{"stdout"}, Stdout: &good}, prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	l2.sinks = append(l2.sinks, sink{name: SinkFile, w: failingWriter{}})
	l2.write(Record{Action: Denied})
	if got := testutil.ToFloat64(l2.failed.WithLabelValues(SinkFile)); got != 1 {
		t.Errorf("file write failures = %v, want 1", got)
	}
	if good.Len() == 0 {
		t.Error("a failing sink kept the record from the healthy one")
	}
}

// A redacting ledger's records leave the cluster: no node name, SAN or
// address in any field, yet the same node has the same pseudonym and the
// event_id is the unredacted record's.
func TestRedactedRecordsLeaveOutNamesAndSANs(t *testing.T) {
	red := redact.New([]byte("0123456789abcdef0123456789abcdef"))
	for _, component := range []string{"approver", "agent"} {
		var plain, out bytes.Buffer
		rec := Record{Action: LeftPending, Rule: "IPSANNotInInventory", Node: "worker-1", CSR: "csr-a", CSRUID: "uid-a",
			Requester: "system:node:worker-1", SANs: []string{"worker-1.example.com", "10.9.9.9"},
			Message: "IPSANNotInInventory: 10.9.9.9 not recorded for worker-1 (worker-1.example.com asked for)", Time: time.Unix(0, 0)}
		for _, tc := range []struct {
			w   *bytes.Buffer
			red *redact.Redactor
		}{{&plain, nil}, {&out, red}} {
			actor := "certready-approver-7c9d-x2"
			if component == "agent" {
				actor = "worker-1" // the agent's actor is its node
			}
			l, err := New(Config{Sinks: []string{"stdout"}, Component: component, Actor: actor, Stdout: tc.w, Redactor: tc.red}, prometheus.NewRegistry())
			if err != nil {
				t.Fatal(err)
			}
			l.SetCluster("c")
			l.Record(rec)
			l.write(<-l.queue)
		}
		line := out.String()
		for _, leak := range []string{"worker-1", "10.9.9.9", "example.com"} {
			if strings.Contains(line, leak) {
				t.Errorf("%s: the redacted record names %q: %s", component, leak, line)
			}
		}
		got, want := decodeLines(t, out.Bytes())[0], decodeLines(t, plain.Bytes())[0]
		if got["event_id"] != red.Tag(want["event_id"].(string)) || got["node"] != red.Node("worker-1") || got["redacted"] != true || got["sans"] != nil {
			t.Errorf("%s: redacted record %v; want the plain one's event_id keyed (%v) and node %s", component, got, red.Tag(want["event_id"].(string)), red.Node("worker-1"))
		}
		if component == "agent" && got["actor"] != red.Node("worker-1") {
			t.Errorf("agent's actor %v, want the node's pseudonym", got["actor"])
		}
		if got["message"] != "IPSANNotInInventory: <ip> not recorded for "+red.Node("worker-1")+" (<san> asked for)" {
			t.Errorf("%s: message %q", component, got["message"])
		}
	}
	// A node's record without the request (a verdict, an approval by
	// another actor quoting the CSR's condition) may quote SANs it does
	// not carry: its message is left out.
	var out bytes.Buffer
	l, err := New(Config{Sinks: []string{"stdout"}, Component: "agent", Actor: "worker-1", Stdout: &out, Redactor: red}, prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	l.Record(Record{Action: VerdictChanged, Rule: "EndpointCertificateMismatch", Status: "True", Node: "worker-1",
		Message: "worker-1.corp.example:10250 presents another certificate"})
	l.Record(Record{Action: LeaderLost, Message: "released the Lease on shutdown"})
	l.write(<-l.queue)
	l.write(<-l.queue)
	recs := decodeLines(t, out.Bytes())
	if strings.Contains(out.String(), "corp.example") || recs[0]["message"] != nil || recs[0]["rule"] != "EndpointCertificateMismatch" {
		t.Errorf("a verdict's redacted record: %v", recs[0])
	}
	if recs[1]["message"] != "released the Lease on shutdown" {
		t.Errorf("a leadership record lost its message: %v", recs[1])
	}
}

// Record never blocks its caller (an approval): with the writer stuck and
// the queue full, further records are counted as lost, not waited for.
func TestAFullQueueCountsLossesAndNeverBlocks(t *testing.T) {
	l, err := New(Config{Sinks: []string{"stdout"}, QueueSize: 2, Stdout: &bytes.Buffer{}}, prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 5; i++ { // no Run: nothing drains the queue
		l.Record(Record{Action: Deferred})
	}
	if got := testutil.ToFloat64(l.failed.WithLabelValues(sinkQueue)); got != 3 {
		t.Errorf("records lost to the full queue = %v, want 3", got)
	}
}

func TestTheFileSinkRotatesBySize(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "ledger.jsonl")
	l, err := New(Config{Sinks: []string{"file:" + path}, MaxSizeMB: 1, MaxBackups: 2}, prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	msg := strings.Repeat("m", 4096)
	for i := 0; i < 600; i++ { // about 2.5 MB
		l.write(Record{Action: LeftPending, Message: msg})
	}
	for _, c := range l.closers {
		_ = c.Close()
	}
	files, _ := filepath.Glob(filepath.Join(dir, "ledger*.jsonl"))
	if len(files) != 3 {
		t.Fatalf("files %v: want the current one and 2 rotated", files)
	}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if len(b) > 1<<20 {
			t.Errorf("%s is %d bytes, over the 1 MB rotation size", f, len(b))
		}
		decodeLines(t, b) // every line whole: rotation never splits a record
	}
}

// docs/ledger.md documents the schema: every field a record can carry is
// there, and nothing that is not a field.
func TestTheDocumentedSchemaIsTheRecord(t *testing.T) {
	doc, err := os.ReadFile("../../docs/ledger.md")
	if err != nil {
		t.Fatal(err)
	}
	_, fieldsSection, _ := bytes.Cut(doc, []byte("\n## Fields\n"))
	fieldsSection, _, _ = bytes.Cut(fieldsSection, []byte("\n## "))
	var documented []string
	for _, m := range regexp.MustCompile("(?m)^\\| `([a-z_0-9]+)` \\|").FindAllSubmatch(fieldsSection, -1) {
		documented = append(documented, string(m[1]))
	}
	na := time.Now()
	full := Record{Schema: Schema, EventID: "x", Time: na, Cluster: "x", Component: "x", Actor: "x", Version: "x", Action: "x",
		Rule: "x", Message: "x", Status: "x", Node: "x", CSR: "x", CSRUID: "x", Requester: "x", SANs: []string{"x"}, KeyType: "x",
		CertificateSHA256: "x", NotAfter: &na, PreviousSHA256: "x", PreviousNotAfter: &na, Key: "x", Truncated: map[string]int{"x": 1}, Redacted: true, WorkloadCluster: "x",
		Writer: "x", Seq: 1, Prev: "x", Hash: "x"}
	b, err := json.Marshal(full)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	var fields []string
	for k := range m {
		fields = append(fields, k)
	}
	slices.Sort(fields)
	slices.Sort(documented)
	if !slices.Equal(fields, documented) {
		t.Errorf("record fields %v\ndocumented    %v", fields, documented)
	}
	if !strings.Contains(string(doc), Schema) {
		t.Errorf("docs/ledger.md does not name the schema %s", Schema)
	}
	_, actionsSection, _ := bytes.Cut(doc, []byte("\n## Actions\n"))
	actionsSection, _, _ = bytes.Cut(actionsSection, []byte("\n## "))
	for _, a := range []Action{Approved, LeftPending, Denied, Superseded, Deferred, DecidedElsewhere, VerdictChanged, Rotated, RenewalStuck, TaintLifted, ApprovedElsewhere} {
		if !bytes.Contains(actionsSection, []byte("| `"+a+"` |")) {
			t.Errorf("docs/ledger.md's Actions do not document %q", a)
		}
	}
}

func decodeLines(t *testing.T, b []byte) []map[string]any {
	t.Helper()
	var out []map[string]any
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var m map[string]any
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			t.Fatalf("line %q: %v", sc.Text(), err)
		}
		out = append(out, m)
	}
	return out
}
