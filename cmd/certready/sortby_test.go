//go:build !nodeonly

package main

import (
	"strings"
	"testing"
	"time"

	"github.com/certready/certready/reporter/fleet"
)

func TestSortBy(t *testing.T) {
	at := func(d time.Duration) *time.Time { v := time.Date(2027, 1, 1, 0, 0, 0, 0, time.UTC).Add(d); return &v }
	rows := []fleet.NodeStatus{
		{Node: "c", NotAfter: at(48 * time.Hour), Reason: "KubeletServingCertReady"},
		{Node: "a", Reason: "CSRPending"},
		{Node: "b", NotAfter: at(time.Hour), Reason: "KubeletServingCertReady"},
		{Node: "d", NotAfter: at(240 * time.Hour), Reason: "AgentStarting"},
	}
	for _, tc := range []struct{ expr, want, wantErr string }{
		{expr: "", want: "c,a,b,d"},
		{expr: ".notAfter", want: "b,c,d,a"}, // no expiry: last
		{expr: "{.notAfter}", want: "b,c,d,a"},
		{expr: ".reason", want: "d,a,c,b"}, // ties keep their order
		{expr: ".node", want: "a,b,c,d"},
		{expr: ".ready", want: "c,a,b,d"},
		{expr: ".nodes[", wantErr: "--sort-by=.nodes[: "},
	} {
		got := append([]fleet.NodeStatus(nil), rows...)
		err := sortBy(got, tc.expr)
		if tc.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("--sort-by=%s: error %v, want %q", tc.expr, err, tc.wantErr)
			}
			continue
		}
		var order []string
		for _, r := range got {
			order = append(order, r.Node)
		}
		if err != nil || strings.Join(order, ",") != tc.want {
			t.Errorf("--sort-by=%s: %v %v, want %s", tc.expr, order, err, tc.want)
		}
	}
	zones := []map[string]any{{"n": "x", "t": "2027-01-01T01:30:00+02:00"}, {"n": "y", "t": "2027-01-01T00:00:00Z"}}
	if err := sortBy(zones, ".t"); err != nil || zones[0]["n"] != "x" {
		t.Errorf("times sort as times (23:30Z before 00:00Z), not as text: %v %v", zones, err)
	}
	nums := []map[string]any{{"n": "x", "v": 10}, {"n": "y", "v": 9}, {"n": "z", "v": 100}}
	if err := sortBy(nums, ".v"); err != nil || nums[0]["n"] != "y" || nums[2]["n"] != "z" {
		t.Errorf("numbers sort by value, not text: %v %v", nums, err)
	}
}
