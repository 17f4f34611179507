//go:build !nodeonly

package main

// buildFlavour says, in version output, which build this is.
const buildFlavour = ""

func clusterCommands() []command {
	return []command{
		{"approver", "Run the kubelet-serving CSR approver (Deployment, leader-elected): approve only CSRs that prove their node's identity.", runApprover},
	}
}
