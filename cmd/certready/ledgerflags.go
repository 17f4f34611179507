package main

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/pflag"

	"github.com/certready/certready/internal/ledger"
	"github.com/certready/certready/internal/redact"
)

// ledgerFlags configure the decision ledger (docs/ledger.md), the same for
// the agent and the approver.
type ledgerFlags struct {
	sinks               string
	maxSize, maxBackups int
	redact              bool
	redactKeyFile       string
}

func (l *ledgerFlags) add(fs *pflag.FlagSet) {
	fs.StringVar(&l.sinks, "ledger", ledger.SinkStdout, "Decision ledger sinks, comma-separated: stdout (JSON lines on standard output; logs go to standard error), file:<absolute path> (rotated by size), or none (docs/ledger.md).")
	fs.IntVar(&l.maxSize, "ledger-max-size", ledger.DefaultMaxSizeMB, "Ledger file sink: rotate the file at this size in MiB (at least 1).")
	fs.IntVar(&l.maxBackups, "ledger-max-backups", ledger.DefaultMaxBackups, "Ledger file sink: rotated files to keep beside it, at most (at least 1; the oldest beyond are removed).")
	fs.BoolVar(&l.redact, "ledger-redact", false, "Ledger records leave the cluster: node names as pseudonyms, no SANs or IP addresses (docs/ledger.md).")
	fs.StringVar(&l.redactKeyFile, "ledger-redact-key-file", "", "With --ledger-redact: a file holding the pseudonyms' key (at least 16 bytes, hex or raw; e.g. a mounted Secret), so that they hold across restarts and replicas. Empty: a key random per process.")
}

// build returns the ledger (nil for none); reg receives its metrics.
func (l *ledgerFlags) build(component, actor string, reg prometheus.Registerer) (*ledger.Ledger, error) {
	sinks, err := ledger.ParseSinks(l.sinks)
	if err != nil {
		return nil, err
	}
	// Bounded: a rotated file is kept only up to the bound, and the file
	// is rotated at all.
	if l.maxSize < 1 {
		return nil, fmt.Errorf("--ledger-max-size=%d: want at least 1 (MiB)", l.maxSize)
	}
	if l.maxBackups < 1 {
		return nil, fmt.Errorf("--ledger-max-backups=%d: want at least 1 rotated file kept (the oldest beyond it are removed)", l.maxBackups)
	}
	var red *redact.Redactor
	switch {
	case l.redactKeyFile != "" && !l.redact:
		return nil, fmt.Errorf("--ledger-redact-key-file=%s without --ledger-redact: set both, or neither", l.redactKeyFile)
	case l.redact:
		var key []byte
		if l.redactKeyFile != "" {
			if key, err = redact.LoadKey(l.redactKeyFile, false); err != nil {
				return nil, fmt.Errorf("--ledger-redact-key-file: %w", err)
			}
		}
		red = redact.New(key)
	}
	return ledger.New(ledger.Config{Sinks: sinks, MaxSizeMB: l.maxSize, MaxBackups: l.maxBackups,
		Component: component, Actor: actor, Version: version, Redactor: red}, reg)
}
