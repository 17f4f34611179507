//go:build !nodeonly

package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/certready/certready/internal/redact"
)

// redactFlags are the operator commands' --redact: output that leaves the
// cluster names no node (pseudonyms), SAN or address.
type redactFlags struct {
	on      bool
	keyFile string
}

func (f *redactFlags) add(cmd *cobra.Command) {
	cmd.Flags().BoolVar(&f.on, "redact", false, "Output that leaves the cluster: node names as pseudonyms (node-<12 hex digits>), no SANs or IP addresses.")
	cmd.Flags().StringVar(&f.keyFile, "redact-key-file", "", "With --redact: the pseudonyms' key (at least 16 bytes, hex or raw), so that two outputs name a node alike; keep it with the unredacted data. Empty: a key random per command.")
}

// redactor is the flags' redactor (nil without --redact); with create, a
// missing key file is made with a new key.
func (f *redactFlags) redactor(create bool) (*redact.Redactor, error) {
	switch {
	case f.keyFile != "" && !f.on:
		return nil, fmt.Errorf("--redact-key-file=%s without --redact: set both, or neither", f.keyFile)
	case !f.on:
		return nil, nil
	case f.keyFile == "":
		return redact.New(nil), nil
	}
	key, err := redact.LoadKey(f.keyFile, create)
	if err != nil {
		return nil, fmt.Errorf("--redact-key-file: %w", err)
	}
	return redact.New(key), nil
}
