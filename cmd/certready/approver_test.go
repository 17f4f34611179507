//go:build !nodeonly

package main

import (
	"strings"
	"testing"
)

func TestInventoryModeRefusesFlagsThatWouldDoNothing(t *testing.T) {
	for _, tc := range []struct {
		name, inventory string
		clusterAPI      bool
		selector        string
		shared          bool
		want            string // "" when accepted
	}{
		{"node inventory", "node", false, "", false, ""},
		{"shared addresses with the node inventory", "node", false, "", true, ""},
		{"Cluster API with a selector", "node", true, "env=prod", false, ""},
		{"Cluster API, every cluster", "node", true, "", false, ""},
		{"a selector without Cluster API", "node", false, "env=prod", false, "--capi-cluster-selector needs --cluster-api"},
		{"a selector with a ConfigMap inventory", "configmap:kube-system/nodes", false, "env=prod", false, "--capi-cluster-selector needs --cluster-api"},
		{"an inventory beside Cluster API", "file:/etc/inventory.yaml", true, "", false, "--inventory=file:/etc/inventory.yaml does nothing with --cluster-api"},
		{"shared addresses with Cluster API", "node", true, "", true, "--allow-shared-addresses does nothing with --cluster-api"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := checkInventoryMode(tc.inventory, tc.clusterAPI, tc.selector, tc.shared)
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
