//go:build !nodeonly

package main

import (
	"strings"
	"testing"
)

func TestInventoryModeRefusesFlagsThatWouldDoNothing(t *testing.T) {
	for _, tc := range []struct {
		name, inventory, selector string
		shared                    bool
		want                      string // "" when accepted
	}{
		{"node inventory", "node", "", false, ""},
		{"shared addresses with the node inventory", "node", "", true, ""},
		{"capi with a selector", "capi", "env=prod", false, ""},
		{"capi everything", "capi", "", false, ""},
		{"a selector without capi", "node", "env=prod", false, `--capi-cluster-selector needs --inventory=capi (it selects Cluster API workload clusters; --inventory is "node")`},
		{"a selector with a ConfigMap inventory", "configmap:kube-system/nodes", "env=prod", false, `--inventory is "configmap:kube-system/nodes"`},
		{"shared addresses with capi", "capi", "", true, "--allow-shared-addresses does nothing with --inventory=capi"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := checkInventoryMode(tc.inventory, tc.selector, tc.shared)
			switch {
			case tc.want == "" && err != nil:
				t.Errorf("refused: %v", err)
			case tc.want != "" && err == nil:
				t.Errorf("accepted, want an error containing %q", tc.want)
			case tc.want != "" && !strings.Contains(err.Error(), tc.want):
				t.Errorf("error %q, want it to contain %q", err, tc.want)
			}
		})
	}
}
