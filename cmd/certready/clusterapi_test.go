//go:build !nodeonly

package main

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/certready/certready/reporter/fleet"
)

// --cluster-api refuses, before anything is read, what it cannot do.
func TestClusterAPIFlagsRefuseBadInput(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"a Cluster selector without --cluster-api", []string{"status", "--capi-cluster-selector=a=b"}, "without --cluster-api"},
		{"a selector that does not parse", []string{"status", "--cluster-api", "--capi-cluster-selector=a=(b"}, "--capi-cluster-selector=a=(b"},
		{"an output per node", []string{"status", "--cluster-api", "-o", "name"}, "--output=name with --cluster-api"},
		{"explain without the workload cluster", []string{"csr", "explain", "csr-1", "--cluster-api"}, "--workload-cluster=<namespace>/<name>"},
		{"explain of a workload cluster without --cluster-api", []string{"csr", "explain", "csr-1", "--workload-cluster=a/b"}, "without --cluster-api"},
		{"a workload cluster that is no namespace/name", []string{"csr", "explain", "csr-1", "--cluster-api", "--workload-cluster=a/b/c"}, "want <namespace>/<name>"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, out := runRoot(t, append(tc.args, "--kubeconfig=/nonexistent")...)
			if code != 2 || !strings.Contains(out, tc.want) {
				t.Errorf("exit %d, want 2 with %q:\n%s", code, tc.want, out)
			}
		})
	}
}

func TestPrintClustersNamesTheUnobservable(t *testing.T) {
	now := time.Date(2026, 12, 6, 8, 0, 0, 0, time.UTC)
	var out bytes.Buffer
	err := printClusters(&out, "", false, []clusterStatus{
		{Cluster: "tenant-a/evil", Reason: "kubeconfig refused: users[0].tokenFile\x1b[2J", Nodes: []fleet.NodeStatus{}},
		{Cluster: "tenant-b/prod", Observable: true, Nodes: []fleet.NodeStatus{{Node: "w1", Ready: true, Status: "False"}, {Node: "w2", Status: "True", Reason: "CSRPending", Problem: "CSRPending"}}},
	}, now)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"Cluster tenant-a/evil: NOT OBSERVABLE: kubeconfig refused: users[0].tokenFile^[[2J", "Cluster tenant-b/prod:", "w2", "CSRPending", "1 of 2 nodes listed ready."} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
}
