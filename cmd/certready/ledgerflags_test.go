package main

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/pflag"
)

// The file sink keeps a bounded number of backups, at least one, and
// rotates at all: a bound of 0 is refused, naming the flag.
func TestLedgerFlagsBoundTheFileSink(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--ledger-max-backups=0"}, "--ledger-max-backups=0: want at least 1"},
		{[]string{"--ledger-max-backups=-1"}, "--ledger-max-backups=-1: want at least 1"},
		{[]string{"--ledger-max-size=0"}, "--ledger-max-size=0: want at least 1"},
		{[]string{"--ledger-redact-key-file=/etc/key"}, "without --ledger-redact"},
		{[]string{"--ledger-redact", "--ledger-redact-key-file=/nonexistent/key"}, "--ledger-redact-key-file: redaction key"},
		{[]string{"--ledger-redact"}, ""},
		{nil, ""},
	} {
		fs := pflag.NewFlagSet("test", pflag.ContinueOnError)
		var l ledgerFlags
		l.add(fs)
		if err := fs.Parse(append(tc.args, "--ledger=none")); err != nil {
			t.Fatal(err)
		}
		_, err := l.build("agent", "w1", prometheus.NewRegistry())
		if tc.want == "" {
			if err != nil || l.maxBackups != 5 || l.maxSize != 100 {
				t.Errorf("defaults: %v, %d backups of %d MiB", err, l.maxBackups, l.maxSize)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: error %v, want one with %q", tc.args, err, tc.want)
		}
	}
}
