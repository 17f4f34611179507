//go:build nodeonly

package main

// buildFlavour says, in version output, which build this is.
const buildFlavour = ", node build"

// clusterCommands: none in the node build (the agent, check and
// copy-binary only).
func clusterCommands() []command { return nil }
