package names_test

import (
	"testing"

	"github.com/certready/certready/internal/names"
)

func TestNodeOfReadsOnlyANodesUsername(t *testing.T) {
	for _, tc := range []struct {
		user   string
		want   string
		wantOK bool
	}{
		{user: "system:node:worker-1", want: "worker-1", wantOK: true},
		{user: "system:node:ip-10-0-0-1.ec2.internal", want: "ip-10-0-0-1.ec2.internal", wantOK: true},
		{user: "system:node:", wantOK: false},
		{user: "system:node:worker-1:extra", wantOK: false},
		{user: "system:node::worker-1", wantOK: false},
		{user: "system:nodes:worker-1", wantOK: false},
		{user: "System:Node:worker-1", wantOK: false},
		{user: "worker-1", wantOK: false},
		{user: "system:serviceaccount:kube-system:node-controller", wantOK: false},
		{user: "", wantOK: false},
	} {
		got, ok := names.NodeOf(tc.user)
		if got != tc.want || ok != tc.wantOK {
			t.Errorf("NodeOf(%q) = %q, %v; want %q, %v", tc.user, got, ok, tc.want, tc.wantOK)
		}
	}
	if got := names.NodeUser("worker-1"); got != "system:node:worker-1" {
		t.Errorf("NodeUser = %q", got)
	}
}
