//go:build nodeonly

package main

import (
	"context"
	"fmt"
	"io"
	"os"
)

// buildFlavour says, in version output, which build this is.
const buildFlavour = ", node build"

// clusterCommands: none in the node build (the agent, check and
// copy-binary only).
func clusterCommands() []command { return nil }

func usage(w io.Writer) {
	fmt.Fprintf(w, "certready keeps nodes from taking workloads until their kubelet can really serve TLS.\n\nUsage: certready <command> [flags]\n\nCommands:\n")
	for _, c := range commands() {
		fmt.Fprintf(w, "  %-11s %s\n", c.name, c.summary)
	}
	fmt.Fprintf(w, "\nRun 'certready <command> --help' for a command's flags.\n")
}

// execute runs the command named by args[0]: the node build's small
// dispatcher (no cobra: every byte it links runs on every node).
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
			return c.run(ctx, args[1:])
		}
	}
	fmt.Fprintf(os.Stderr, "certready: unknown command %q\n\n", name)
	usage(os.Stderr)
	return 2
}
