// Package ledger keeps certready's decision ledger: one JSON line per
// approver decision, agent verdict change and certificate rotation, in a
// versioned schema (Schema), written to standard output (the cluster's log
// pipeline) and/or a size-rotated file. Writing happens on a goroutine of
// its own behind a bounded queue: a slow or broken sink never holds up an
// approval, and every record it could not write is counted
// (certready_ledger_write_failures_total), never dropped silently.
package ledger

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/klog/v2"

	"github.com/certready/certready/internal/redact"
)

// Schema names the record layout; a change that is not an added optional
// field gets a new version.
const Schema = "certready.io/ledger/v1"

// Action is what a record says happened.
type Action string

// Approver decisions, then the agent's records.
const (
	Approved         Action = "approved"
	LeftPending      Action = "left-pending"
	Denied           Action = "denied"
	Superseded       Action = "superseded"
	Deferred         Action = "deferred"
	DecidedElsewhere Action = "decided-elsewhere"
	// ApprovedElsewhere: another actor approved a CSR (rule: the one
	// certready's policy had refused it by, if any).
	ApprovedElsewhere Action = "approved-elsewhere"
	VerdictChanged    Action = "verdict-changed"
	Rotated           Action = "certificate-rotated"
	RenewalStuck      Action = "renewal-stuck"
	// TaintLifted: the readiness taint left a node (rule: who removed it).
	TaintLifted Action = "readiness-taint-lifted"
	// The approver's leadership: a period between one leader's
	// LeaderLost (or its last record) and the next LeaderAcquired had no
	// leader, and no decisions (Verify names it).
	LeaderAcquired Action = "leader-acquired"
	LeaderLost     Action = "leader-lost"
)

// Record is one ledger line. Fields a record does not know are left out.
// No key material: SANs, the key's type and certificate fingerprints only.
type Record struct {
	Schema  string    `json:"schema"`
	EventID string    `json:"event_id"`
	Time    time.Time `json:"time"`
	// Cluster is the kube-system Namespace's UID.
	Cluster   string `json:"cluster,omitempty"`
	Component string `json:"component"`
	// Actor is who acted: the approver's leader identity, the agent's node.
	Actor   string `json:"actor"`
	Version string `json:"version"`

	Action Action `json:"action"`
	// Rule is the approval policy's rule, or the agent's verdict reason.
	Rule    string `json:"rule,omitempty"`
	Message string `json:"message,omitempty"`
	// Status is the condition status a verdict published (True, False,
	// Unknown).
	Status string `json:"status,omitempty"`

	// WorkloadCluster is, in Cluster API mode, the workload cluster the
	// record is about: namespace/name of its Cluster in the management
	// cluster (which Cluster names).
	WorkloadCluster string `json:"workload_cluster,omitempty"`

	Node      string   `json:"node,omitempty"`
	CSR       string   `json:"csr,omitempty"`
	CSRUID    string   `json:"csr_uid,omitempty"`
	Requester string   `json:"requester,omitempty"`
	SANs      []string `json:"sans,omitempty"`
	KeyType   string   `json:"key_type,omitempty"`
	// CertificateSHA256 is the full fingerprint of the certificate the
	// record is about (the one served, or rotated to).
	CertificateSHA256 string     `json:"certificate_sha256,omitempty"`
	NotAfter          *time.Time `json:"not_after,omitempty"`
	// The certificate a rotation replaced.
	PreviousSHA256   string     `json:"previous_certificate_sha256,omitempty"`
	PreviousNotAfter *time.Time `json:"previous_not_after,omitempty"`

	// Truncated names the fields shortened to keep the line under
	// MaxLineBytes, each with how much was left out: bytes of a text (which
	// then ends in "…"), entries of a list (its first ones are kept).
	Truncated map[string]int `json:"truncated,omitempty"`
	// Redacted: node names are pseudonyms, SANs and addresses are left
	// out (Config.Redactor).
	Redacted bool `json:"redacted,omitempty"`

	// Writer, Seq, Prev and Hash chain a writer's records: Writer is
	// random per process (a restart starts a new chain), Seq counts its
	// records from 1 (given when a record is made, so one lost before it
	// was written leaves a gap), Prev is the Hash of the writer's record
	// written before this one, and Hash the SHA-256 of the record's line
	// with Hash's own value as zeros (LineHash). Deleting, editing,
	// inserting or reordering a line breaks the chain where it happened.
	Writer string `json:"writer,omitempty"`
	Seq    uint64 `json:"seq,omitempty"`
	Prev   string `json:"prev,omitempty"`
	Hash   string `json:"hash,omitempty"`

	// Key tells apart records that share every identifying field but are
	// distinct events (two verdict changes to the same state): the caller
	// sets it to something fixed for the event, such as its transition
	// time. Part of event_id only.
	Key string `json:"-"`
}

// ID is the record's event_id: a digest of what identifies the event
// (cluster, component, action, rule, status, node, CSR UID, fingerprints,
// Key), not of when it was written or by which replica, so that the same
// decision recorded twice (re-delivered, or again after a restart or a
// change of leader) has the same ID and can be de-duplicated.
func (r Record) ID() string {
	h := sha256.New()
	for _, f := range []string{Schema, r.Cluster, r.Component, string(r.Action), r.Rule, r.Status, r.Node, r.CSR, r.CSRUID,
		r.CertificateSHA256, r.PreviousSHA256, r.Key} {
		// Length-prefixed: no two field lists hash alike.
		fmt.Fprintf(h, "%d:%s;", len(f), f)
	}
	if r.WorkloadCluster != "" { // absent: the IDs records had before it
		fmt.Fprintf(h, "workload_cluster=%d:%s;", len(r.WorkloadCluster), r.WorkloadCluster)
	}
	return hex.EncodeToString(h.Sum(nil))[:32]
}

// Sink names: the flag's values and the metrics' sink label.
const (
	SinkStdout = "stdout"
	SinkFile   = "file"
	// sinkQueue labels the records lost because the queue was full.
	sinkQueue = "queue"
)

// Defaults of the file sink's rotation.
const (
	DefaultMaxSizeMB  = 100
	DefaultMaxBackups = 5
)

// Config configures a Ledger.
type Config struct {
	// Sinks: "stdout" and/or "file:<absolute path>"; none: no ledger.
	Sinks []string
	// File rotation: the file is rotated at MaxSizeMB, and at most
	// MaxBackups rotated files are kept (0: the defaults; below 0 is an
	// error).
	MaxSizeMB, MaxBackups int
	// Component, Actor and Version fill every record.
	Component, Actor, Version string
	// QueueSize bounds the records waiting to be written (1024 when 0).
	QueueSize int
	// Stdout replaces os.Stdout (tests).
	Stdout io.Writer
	// Redactor, when set, writes node names as its pseudonyms and leaves
	// SANs and addresses out (records that leave the cluster). event_id
	// is a digest of the record before: it still de-duplicates, and names
	// the unredacted record to whoever holds it.
	Redactor *redact.Redactor
}

// ParseSinks reads the --ledger flag: a comma-separated list of "stdout"
// and "file:<absolute path>"; "" or "none" is no ledger.
func ParseSinks(s string) ([]string, error) {
	if s == "" || s == "none" {
		return nil, nil
	}
	var out []string
	for _, p := range strings.Split(s, ",") {
		p = strings.TrimSpace(p)
		switch {
		case p == SinkStdout:
		case strings.HasPrefix(p, SinkFile+":"):
			if path := strings.TrimPrefix(p, SinkFile+":"); !filepath.IsAbs(path) {
				return nil, fmt.Errorf("--ledger: %q: the file sink needs an absolute path (file:/var/log/certready/ledger.jsonl)", p)
			}
		default:
			return nil, fmt.Errorf("--ledger: %q is no sink: use stdout, file:<absolute path>, both comma-separated, or none", p)
		}
		if !slices.Contains(out, p) {
			out = append(out, p)
		}
	}
	return out, nil
}

type sink struct {
	name string // metrics label
	w    io.Writer
}

// Ledger writes records. The nil *Ledger records nothing.
type Ledger struct {
	cfg     Config
	queue   chan Record
	sinks   []sink
	closers []io.Closer

	mu      sync.Mutex
	cluster string
	// writer and seq: the chain's identity and last number given; prev
	// the hash of the last line written (the writing goroutine's own).
	writer string
	seq    uint64
	prev   string

	written, failed *prometheus.CounterVec
	truncated       prometheus.Counter
}

// New builds a ledger over cfg's sinks, or returns nil when there are
// none. reg receives its metrics. Run writes.
func New(cfg Config, reg prometheus.Registerer) (*Ledger, error) {
	if len(cfg.Sinks) == 0 {
		return nil, nil
	}
	if cfg.QueueSize <= 0 {
		cfg.QueueSize = 1024
	}
	if cfg.MaxSizeMB < 0 || cfg.MaxBackups < 0 {
		return nil, fmt.Errorf("--ledger-max-size=%d, --ledger-max-backups=%d: want at least 1 MiB and 1 backup", cfg.MaxSizeMB, cfg.MaxBackups)
	}
	if cfg.MaxSizeMB == 0 {
		cfg.MaxSizeMB = DefaultMaxSizeMB
	}
	if cfg.MaxBackups == 0 {
		cfg.MaxBackups = DefaultMaxBackups
	}
	if cfg.Stdout == nil {
		cfg.Stdout = os.Stdout
	}
	nonce := make([]byte, 8)
	if _, err := rand.Read(nonce); err != nil {
		return nil, err
	}
	l := &Ledger{
		cfg:    cfg,
		writer: hex.EncodeToString(nonce),
		queue:  make(chan Record, cfg.QueueSize),
		written: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "certready_ledger_records_total",
			Help: "Decision ledger records written, by sink (stdout, file).",
		}, []string{"sink"}),
		failed: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "certready_ledger_write_failures_total",
			Help: "Decision ledger records not written, by sink (stdout, file; queue: the writer fell behind and the record was lost before any sink).",
		}, []string{"sink"}),
		truncated: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "certready_ledger_records_truncated_total",
			Help: "Decision ledger records whose long fields were shortened to keep the line under 16 KiB, where container runtimes split log lines (the record's truncated field names them).",
		}),
	}
	for _, s := range cfg.Sinks {
		if s == SinkStdout {
			l.sinks = append(l.sinks, sink{name: SinkStdout, w: cfg.Stdout})
			continue
		}
		f, err := openFileSink(strings.TrimPrefix(s, SinkFile+":"), int64(cfg.MaxSizeMB)<<20, cfg.MaxBackups)
		if err != nil {
			for _, c := range l.closers {
				_ = c.Close()
			}
			return nil, err
		}
		l.sinks = append(l.sinks, sink{name: SinkFile, w: f})
		l.closers = append(l.closers, f)
	}
	for _, name := range []string{SinkStdout, SinkFile, sinkQueue} {
		l.failed.WithLabelValues(name) // alerts see a 0 before the first failure
	}
	for _, s := range l.sinks {
		l.written.WithLabelValues(s.name)
	}
	if reg != nil {
		for _, c := range []prometheus.Collector{l.written, l.failed, l.truncated} {
			if err := reg.Register(c); err != nil {
				return nil, err
			}
		}
	}
	return l, nil
}

// SetCluster sets the cluster identity of the records from now on.
func (l *Ledger) SetCluster(uid string) {
	if l == nil {
		return
	}
	l.mu.Lock()
	l.cluster = uid
	l.mu.Unlock()
}

// Record queues r, filling the schema, time, cluster, component, actor,
// version and event_id. It never blocks: when the queue is full the record
// is counted as lost (sink "queue") and logged.
func (l *Ledger) Record(r Record) {
	if l == nil {
		return
	}
	l.mu.Lock()
	r.Cluster = l.cluster
	l.seq++
	r.Writer, r.Seq = l.writer, l.seq
	l.mu.Unlock()
	r.Schema, r.Component, r.Actor, r.Version = Schema, l.cfg.Component, l.cfg.Actor, l.cfg.Version
	if r.Time.IsZero() {
		r.Time = time.Now()
	}
	r.Time = r.Time.UTC()
	r.EventID = r.ID()
	if l.cfg.Redactor != nil {
		r = redacted(r, l.cfg.Redactor)
	}
	select {
	case l.queue <- r:
	default:
		l.failed.WithLabelValues(sinkQueue).Inc()
		klog.Background().Error(nil, "Decision ledger queue full: record lost", "eventID", r.EventID, "action", r.Action, "csr", r.CSR, "node", r.Node)
	}
}

// redacted is r with its node names as pseudonyms (the node, the agent's
// actor, the requester's) and its SANs and addresses left out.
func redacted(r Record, red *redact.Redactor) Record {
	nodes := []string{r.Node}
	if r.Component == "agent" {
		nodes = append(nodes, r.Actor)
		r.Actor = red.Node(r.Actor)
	}
	if n, ok := strings.CutPrefix(r.Requester, "system:node:"); ok {
		nodes = append(nodes, n)
		r.Requester = "system:node:" + red.Node(n)
	} else if r.Requester != "" {
		r.Requester = red.Text(r.Requester, nodes, r.SANs)
	}
	switch {
	case r.SANs != nil || (r.Node == "" && r.Requester == ""):
		// A decision on a request whose SANs are known, or a record
		// about no node (leadership): what it may name is known.
		r.Message = red.Text(r.Message, nodes, r.SANs)
	default:
		// A node's record that may quote what it does not carry (a
		// certificate's SANs in a verdict, a condition's message):
		// left out; rule and status still say what happened.
		r.Message = ""
	}
	r.Node = red.Node(r.Node)
	r.SANs = nil
	// A digest of guessable fields would give them away: the ID is
	// keyed, so only the key's holder finds the unredacted record.
	r.EventID = red.Tag(r.EventID)
	r.Redacted = true
	return r
}

// Run writes queued records until ctx ends, then writes what is still
// queued and closes the file sinks.
func (l *Ledger) Run(ctx context.Context) {
	if l == nil {
		return
	}
	defer func() {
		for _, c := range l.closers {
			_ = c.Close()
		}
	}()
	for {
		select {
		case r := <-l.queue:
			l.write(r)
		case <-ctx.Done():
			for {
				select {
				case r := <-l.queue:
					l.write(r)
				default:
					return
				}
			}
		}
	}
}

func (l *Ledger) write(r Record) {
	r.Prev = l.prev
	r.Hash = zeroHash // its room in the line, for encode's bound
	line, shortened, err := encode(r)
	if err == nil {
		line, r.Hash, err = seal(line)
	}
	if err != nil { // a record that cannot fit: counted, never written in part
		for _, s := range l.sinks {
			l.failed.WithLabelValues(s.name).Inc()
		}
		klog.Background().Error(err, "Decision ledger record not written", "eventID", r.EventID, "action", r.Action)
		return
	}
	if shortened {
		l.truncated.Inc()
	}
	l.prev = r.Hash
	for _, s := range l.sinks {
		if _, err := s.w.Write(line); err != nil {
			l.failed.WithLabelValues(s.name).Inc()
			klog.Background().Error(err, "Decision ledger record not written", "sink", s.name, "eventID", r.EventID, "action", r.Action)
			continue
		}
		l.written.WithLabelValues(s.name).Inc()
	}
}

// zeroHash stands for a record's hash while its line is hashed.
var zeroHash = strings.Repeat("0", 64)

// hashField is how the hash field starts in a line: quotes inside any
// text value are escaped, so only the key itself reads like this.
var hashField = []byte(`"hash":"`)

// seal puts the line's hash (LineHash) in place of its zeros.
func seal(line []byte) ([]byte, string, error) {
	h, at, err := LineHash(line)
	if err != nil {
		return nil, "", err
	}
	copy(line[at:], h)
	return line, h, nil
}

// LineHash is the SHA-256 (hex) of a ledger line (without its newline)
// with the hash field's value as zeros, and where that value starts in
// line: the hash a sealed line must carry.
func LineHash(line []byte) (string, int, error) {
	i := bytes.Index(line, hashField)
	if i < 0 || bytes.Contains(line[i+1:], hashField) || len(line) < i+len(hashField)+64+1 || line[i+len(hashField)+64] != '"' {
		return "", 0, fmt.Errorf("a ledger line without exactly one hash field")
	}
	at := i + len(hashField)
	zeroed := bytes.Clone(bytes.TrimRight(line, "\n"))
	copy(zeroed[at:], zeroHash)
	sum := sha256.Sum256(zeroed)
	return hex.EncodeToString(sum[:]), at, nil
}
