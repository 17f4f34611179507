//go:build nodeonly

package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"
	"unicode"
	"unicode/utf8"
)

// buildFlavour says, in version output, which build this is.
const buildFlavour = ", node build"

// clusterCommands: none in the node build (the agent, check and
// copy-binary only).
func clusterCommands() []command { return nil }

// escapeError replaces what could move a terminal's cursor or reorder
// text in an error (control, format and line or paragraph separator
// characters, invalid UTF-8) with '?': the node build's errors quote flag
// values, variables and files.
func escapeError(s string) string {
	return strings.Map(func(r rune) rune {
		if r == utf8.RuneError || unicode.In(r, unicode.Cc, unicode.Cf, unicode.Zl, unicode.Zp) {
			return '?'
		}
		return r
	}, s)
}

func usage(w io.Writer) {
	fmt.Fprintf(w, "certready keeps nodes from taking workloads until their kubelet can really serve TLS.\n\nUsage: certready <command> [flags]\n\nCommands:\n")
	for _, c := range commands() {
		fmt.Fprintf(w, "  %-11s %s\n", c.name, c.summary)
	}
	fmt.Fprintf(w, "\nRun 'certready <command> --help' for a command's flags.\n")
}

// execute runs the command named by args[0] from the command table, as the
// cluster build's command tree does, with no cobra: every byte the node
// build links runs on every node.
func execute(ctx context.Context, args []string) int {
	if len(args) == 0 {
		usage(os.Stderr)
		return 2
	}
	name := args[0]
	if name == "-h" || name == "--help" || name == "help" {
		usage(os.Stdout)
		return 0
	}
	for _, c := range commands() {
		if c.name == name {
			return reportError(os.Stderr, "certready "+name, runProcess(ctx, c, args[1:]))
		}
	}
	return reportError(os.Stderr, "certready", usageError(fmt.Errorf("unknown command %q (the node build runs agent, check, copy-binary and version)", name)))
}
