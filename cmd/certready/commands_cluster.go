//go:build !nodeonly

package main

import "github.com/certready/certready/reporter/fleet"

// buildFlavour says, in version output, which build this is.
const buildFlavour = templateFlavour

func clusterCommands() []command {
	return []command{
		{"approver", "Run the kubelet-serving CSR approver (Deployment, leader-elected): approve only CSRs that prove their node's identity.", approverLong, func() process { return &approverOptions{} }},
	}
}

// escapeError escapes an error as the tables escape what they print.
func escapeError(s string) string { return fleet.Escape(s) }
