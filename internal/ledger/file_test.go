//go:build unix

package ledger

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// A symlink planted where the ledger writes (the file, or a folder on its
// path) would have it append to, truncate or rotate away a file of the
// planter's choice, as root in the agent: refused, naming the path, and
// the symlink's target is left as it was. So are a FIFO (it would block
// the writer) and a hard link to another file.
func TestTheFileSinkRefusesSymlinksAndOtherFiles(t *testing.T) {
	dir := t.TempDir()
	victim := filepath.Join(dir, "victim")
	if err := os.WriteFile(victim, []byte("precious\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	victimDir := filepath.Join(dir, "victim-dir")
	if err := os.Mkdir(victimDir, 0o700); err != nil {
		t.Fatal(err)
	}

	fileLink := filepath.Join(dir, "a", "ledger.jsonl")
	mustMkdir(t, filepath.Dir(fileLink))
	if err := os.Symlink(victim, fileLink); err != nil {
		t.Fatal(err)
	}
	folderLink := filepath.Join(dir, "b")
	if err := os.Symlink(victimDir, folderLink); err != nil {
		t.Fatal(err)
	}
	deeper := filepath.Join(dir, "c")
	if err := os.Symlink(victimDir, deeper); err != nil {
		t.Fatal(err)
	}
	fifo := filepath.Join(dir, "d", "ledger.jsonl")
	mustMkdir(t, filepath.Dir(fifo))
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	hard := filepath.Join(dir, "e", "ledger.jsonl")
	mustMkdir(t, filepath.Dir(hard))
	if err := os.Link(victim, hard); err != nil {
		t.Fatal(err)
	}

	for _, tc := range []struct{ path, want string }{
		{fileLink, fileLink + " is a symlink"},
		{filepath.Join(folderLink, "ledger.jsonl"), folderLink + " is a symlink or no folder"},
		{filepath.Join(deeper, "sub", "ledger.jsonl"), deeper + " is a symlink or no folder"},
		{fifo, fifo + " is not a regular file"},
		{hard, hard + " has 2 hard links"},
	} {
		done := make(chan error, 1)
		go func() {
			_, err := New(Config{Sinks: []string{"file:" + tc.path}}, prometheus.NewRegistry())
			done <- err
		}()
		select {
		case err := <-done:
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("file sink %s: error %v, want one with %q", tc.path, err, tc.want)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("file sink %s: New still blocked after 5s", tc.path)
		}
	}
	if b, _ := os.ReadFile(victim); string(b) != "precious\n" {
		t.Errorf("the symlink's target changed: %q", b)
	}
	if entries, _ := os.ReadDir(victimDir); len(entries) != 0 {
		t.Errorf("the linked folder got %v", entries)
	}
}

// Rotation happens in the folder the sink opened, whatever is at its
// path later: a folder swapped for a symlink after the start gets nothing.
func TestRotationStaysInTheFolderItOpened(t *testing.T) {
	dir := t.TempDir()
	folder := filepath.Join(dir, "ledger")
	path := filepath.Join(folder, "ledger.jsonl")
	l, err := New(Config{Sinks: []string{"file:" + path}, MaxSizeMB: 1, MaxBackups: 1}, prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	defer closeSinks(l)
	moved := filepath.Join(dir, "moved")
	if err := os.Rename(folder, moved); err != nil {
		t.Fatal(err)
	}
	elsewhere := filepath.Join(dir, "elsewhere")
	mustMkdir(t, elsewhere)
	if err := os.Symlink(elsewhere, folder); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 600; i++ { // about 2.5 MB: rotations
		l.write(Record{Action: LeftPending, Message: strings.Repeat("m", 3800)}) // about 4 KB a line with its chain fields
	}
	if entries, _ := os.ReadDir(elsewhere); len(entries) != 0 {
		t.Errorf("rotation followed the symlink now at the folder's path: %v", entries)
	}
	if entries, _ := os.ReadDir(moved); len(entries) != 2 {
		t.Errorf("the folder the sink opened holds %d files, want the ledger and 1 backup", len(entries))
	}
}

// Folders the sink creates are 0700, the file 0600; a file it finds open
// to others is made 0600.
func TestTheFileSinkCreatesItsFolders0700(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "a", "b", "ledger.jsonl")
	l, err := New(Config{Sinks: []string{"file:" + path}}, prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	l.write(Record{Action: Approved})
	closeSinks(l)
	for p, want := range map[string]os.FileMode{filepath.Join(dir, "a"): 0o700, filepath.Join(dir, "a", "b"): 0o700, path: 0o600} {
		if fi, err := os.Stat(p); err != nil || fi.Mode().Perm() != want {
			t.Errorf("%s: mode %v (%v), want %v", p, fi.Mode().Perm(), err, want)
		}
	}

	open := filepath.Join(dir, "open.jsonl")
	if err := os.WriteFile(open, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	l, err = New(Config{Sinks: []string{"file:" + open}}, prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	closeSinks(l)
	if fi, err := os.Stat(open); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("%s: mode %v (%v), want 0600", open, fi.Mode().Perm(), err)
	}
}

// At most MaxBackups rotated files are kept, after any rotation and from
// the start (backups a run with a higher bound left, in lumberjack's
// names, count); rotations within one millisecond keep each other.
func TestBackupsNeverExceedTheBound(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "ledger.jsonl")
	for i := 0; i < 5; i++ {
		old := filepath.Join(dir, fmt.Sprintf("ledger-2026-01-0%dT10-00-00.000.jsonl", i+1))
		if err := os.WriteFile(old, []byte("{}\n"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	unrelated := filepath.Join(dir, "ledger-notes.jsonl")
	if err := os.WriteFile(unrelated, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	// A file of the folder that looks like a backup but for the name
	// is never counted or pruned as one of this ledger's.
	foreign := filepath.Join(dir, "2026-01-01T10-00-00.000.jsonl")
	if err := os.WriteFile(foreign, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	l, err := New(Config{Sinks: []string{"file:" + path}, MaxSizeMB: 1, MaxBackups: 2}, prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	defer closeSinks(l)
	backups := func() []string {
		t.Helper()
		files, _ := filepath.Glob(filepath.Join(dir, "ledger-*.jsonl"))
		var out []string
		for _, f := range files {
			if f != unrelated {
				out = append(out, f)
			}
		}
		return out
	}
	if b := backups(); len(b) != 2 || !strings.HasSuffix(b[1], "ledger-2026-01-05T10-00-00.000.jsonl") {
		t.Errorf("at the start, backups %v: want the 2 newest", b)
	}
	fs := l.sinks[0].w.(*fileSink)
	fs.now = func() time.Time { return time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC) } // every rotation in one millisecond
	for i := 0; i < 1500; i++ {                                                        // about 6 MB: 5 rotations, the last two kept
		l.write(Record{Action: LeftPending, Message: strings.Repeat("m", 3800)}) // about 4 KB a line with its chain fields
		if b := backups(); len(b) > 2 {
			t.Fatalf("after record %d: %d backups %v, over the bound of 2", i, len(b), b)
		}
	}
	b := backups()
	if len(b) != 2 || !strings.HasSuffix(b[0], "ledger-2026-12-02T10-00-00.000.3.jsonl") || !strings.HasSuffix(b[1], "ledger-2026-12-02T10-00-00.000.4.jsonl") {
		t.Errorf("backups %v: want the 2 newest rotations", b)
	}
	if _, err := os.Stat(foreign); err != nil {
		t.Errorf("a backup of another name was removed: %v", err)
	}
	if _, err := os.Stat(unrelated); err != nil {
		t.Errorf("a file that is no backup was removed: %v", err)
	}
}

// A record over the 16 KiB at which container runtimes split log lines
// comes out as one whole JSON line under MaxLineBytes on every sink, its
// long fields shortened and named in "truncated", and counted.
func TestAnOversizedRecordStaysOneLine(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "ledger.jsonl")
	var stdout bytes.Buffer
	l, err := New(Config{Sinks: []string{"stdout", "file:" + path}, Stdout: &stdout}, prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	sans := make([]string, 500)
	for i := range sans {
		sans[i] = fmt.Sprintf("%03d-", i) + strings.Repeat("s", 56)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { l.Run(ctx); close(done) }()
	l.Record(Record{Action: LeftPending, Rule: "TooManySANs", Node: "worker-1", CSR: "csr-big", SANs: sans,
		Message: strings.Repeat("m", 100<<10)})
	// Control characters take six bytes each once encoded.
	l.Record(Record{Action: LeftPending, Rule: "SANDenied", Node: strings.Repeat("\x01", 4096), SANs: []string{strings.Repeat("<", 4096)},
		Message: strings.Repeat("\x1b", 50<<10)})
	l.Record(Record{Action: Approved, Node: "worker-2", SANs: []string{"worker-2"}, Message: "fine"})
	cancel()
	<-done

	file, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for sink, out := range map[string][]byte{"stdout": stdout.Bytes(), "file": file} {
		lines := strings.SplitAfter(string(out), "\n")
		if lines[len(lines)-1] == "" {
			lines = lines[:len(lines)-1]
		}
		if len(lines) != 3 {
			t.Fatalf("%s: %d lines, want 3", sink, len(lines))
		}
		for i, line := range lines {
			if len(line) >= 16<<10 || len(line) > MaxLineBytes || !strings.HasSuffix(line, "\n") {
				t.Errorf("%s line %d: %d bytes, want one line under 16 KiB", sink, i, len(line))
			}
			var rec Record
			if err := json.Unmarshal([]byte(line), &rec); err != nil {
				t.Fatalf("%s line %d is no JSON: %v", sink, i, err)
			}
			switch i {
			case 0:
				if rec.Truncated["message"] == 0 || rec.Truncated["sans"] == 0 || !strings.HasSuffix(rec.Message, ellipsis) ||
					len(rec.SANs)+rec.Truncated["sans"] != 500 || len(rec.SANs) < 90 || rec.SANs[0] != sans[0] || len(rec.Message) < 4000 {
					t.Errorf("%s: the shortened record kept %d SANs and %d bytes of message, truncated %v", sink, len(rec.SANs), len(rec.Message), rec.Truncated)
				}
				if rec.Rule != "TooManySANs" || rec.CSR != "csr-big" || rec.EventID == "" {
					t.Errorf("%s: the shortened record lost what identifies it: %+v", sink, rec)
				}
			case 1:
				if rec.Truncated["node"] == 0 || rec.Truncated["message"] == 0 || rec.Truncated["sans"] != 0 || len(rec.SANs) != 1 {
					t.Errorf("%s: the escaped record's truncated %v, %d SANs", sink, rec.Truncated, len(rec.SANs))
				}
			case 2:
				if rec.Truncated != nil || strings.Contains(line, "truncated") {
					t.Errorf("%s: a short record was marked truncated: %s", sink, line)
				}
			}
		}
	}
	if got := testutil.ToFloat64(l.truncated); got != 2 {
		t.Errorf("records truncated = %v, want 2", got)
	}
}

func mustMkdir(t *testing.T, dir string) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
}

func closeSinks(l *Ledger) {
	for _, c := range l.closers {
		_ = c.Close()
	}
}
