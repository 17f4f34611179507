//go:build !nodeonly

package main

// buildFlavour says, in version output, which build this is.
const buildFlavour = ""

func clusterCommands() []command {
	return []command{
		{"approver", "Run the kubelet-serving CSR approver (Deployment, leader-elected): approve only CSRs that prove their node's identity.", runApprover},
		{"preflight", "Before installing the NodeReadinessRule: list the nodes it would taint and keep tainted, and why (read-only).", runPreflight},
		{"status", "Which nodes are not ready and why: one line per node with its condition, certificate expiry, CSR and taint (read-only).", runStatus},
	}
}
