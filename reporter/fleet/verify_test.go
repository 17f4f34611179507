package fleet_test

import (
	"strings"
	"testing"
	"time"

	"github.com/certready/certready/reporter/fleet"
)

func TestVerify(t *testing.T) {
	day := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	at := func(d int) *time.Time { x := day.AddDate(0, 0, d); return &x }
	ready := func(node, fp string, notAfter *time.Time) fleet.NodeStatus {
		return fleet.NodeStatus{Node: node, Ready: true, Status: "False", Fingerprint: fp, NotAfter: notAfter, CSR: "csr-" + fp[:2]}
	}
	fpA, fpB := strings.Repeat("a", 64), strings.Repeat("b", 64)
	before := []fleet.NodeStatus{
		ready("renewed", fpA, at(10)),
		ready("unchanged", fpA, at(10)),
		ready("earlier", fpA, at(10)),
		ready("broken-now", fpA, at(10)),
		{Node: "was-not-ready", Status: "True", Reason: "CSRPending"},
		ready("gone", fpA, at(10)),
	}
	now := []fleet.NodeStatus{
		ready("renewed", fpB, at(40)),
		ready("unchanged", fpA, at(10)),
		ready("earlier", fpB, at(5)),
		{Node: "broken-now", Status: "True", Reason: "EndpointCertificateMismatch", Problem: "kubelet serves another certificate"},
		ready("was-not-ready", fpB, at(40)),
		ready("joined", fpB, at(40)),
	}
	want := map[string]string{ // node -> "" (passed) or a word of its reason
		"renewed":       "",
		"unchanged":     "did not change",
		"earlier":       "does not expire later",
		"broken-now":    "not ready now: kubelet serves another certificate",
		"was-not-ready": "no certificate in the baseline",
		"joined":        "not in the baseline",
		"gone":          "not selected now",
	}
	got := fleet.Verify(before, now, false)
	if len(got) != len(want) {
		t.Fatalf("%d verifications, want %d: %+v", len(got), len(want), got)
	}
	for i, v := range got {
		w, ok := want[v.Node]
		switch {
		case !ok:
			t.Errorf("unexpected node %s", v.Node)
		case w == "" && (!v.Passed || v.Reason != ""):
			t.Errorf("%s: %+v, want passed", v.Node, v)
		case w != "" && (v.Passed || !strings.Contains(v.Reason, w)):
			t.Errorf("%s: passed=%v %q, want failed with %q", v.Node, v.Passed, v.Reason, w)
		}
		if i < len(got)-1 && v.Passed && !got[i+1].Passed {
			t.Errorf("a pass (%s) sorted before a failure (%s)", v.Node, got[i+1].Node)
		}
	}
	if r := got[len(got)-1]; r.Node != "renewed" || r.Before.Fingerprint != fpA || r.After.Fingerprint != fpB || r.After.NotAfter != "2027-01-10T00:00:00Z" {
		t.Errorf("renewed: %+v before %+v after %+v", r, r.Before, r.After)
	}
}

// The CA a node's certificate chains to stays the same in a renewal, and
// changes in a CA rotation's re-issue (--expect-ca-change); a baseline or
// an agent that does not state the CA passes a renewal, and fails a
// rotation, which cannot then be shown.
func TestVerifyTheCA(t *testing.T) {
	day := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	early, late := day.AddDate(0, 0, 10), day.AddDate(0, 0, 40)
	fpA, fpB := strings.Repeat("a", 64), strings.Repeat("b", 64)
	caX, caY := strings.Repeat("c", 64), strings.Repeat("d", 64)
	node := func(fp string, notAfter time.Time, ca string) fleet.NodeStatus {
		return fleet.NodeStatus{Node: "w1", Ready: true, Status: "False", Fingerprint: fp, NotAfter: &notAfter, CAFingerprint: ca}
	}
	for _, tc := range []struct {
		name         string
		caBefore     string
		caNow        string
		expectChange bool
		want         string // "" passes
	}{
		{"renewal, same CA", caX, caX, false, ""},
		{"renewal, CA changed", caX, caY, false, "the CA changed (sha256 cccccccccccccccc -> dddddddddddddddd)"},
		{"renewal, CA not stated", "", caX, false, ""},
		{"rotation, CA changed", caX, caY, true, ""},
		{"rotation, same CA", caX, caX, true, "the CA did not change"},
		{"rotation, CA not stated", caX, "", true, "cannot be verified"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := fleet.Verify([]fleet.NodeStatus{node(fpA, early, tc.caBefore)}, []fleet.NodeStatus{node(fpB, late, tc.caNow)}, tc.expectChange)
			if len(got) != 1 {
				t.Fatalf("%+v", got)
			}
			v := got[0]
			if tc.want == "" && !v.Passed || tc.want != "" && (v.Passed || !strings.Contains(v.Reason, tc.want)) {
				t.Errorf("passed=%v %q, want %q", v.Passed, v.Reason, tc.want)
			}
			if v.After.CA != tc.caNow {
				t.Errorf("after.ca %q, want %q", v.After.CA, tc.caNow)
			}
		})
	}
}

// A node without an agent by design, in the baseline and now, has nothing
// to renew: it is not verified (and fails nothing). One that had a
// certificate and runs no agent now fails, saying so.
func TestVerifySkipsNodesWithoutAnAgentByDesign(t *testing.T) {
	notAfter := time.Date(2027, 1, 1, 0, 0, 0, 0, time.UTC)
	fp := strings.Repeat("a", 64)
	win := fleet.NodeStatus{Node: "win1", NoAgent: "no agent DaemonSet places a pod here"}
	before := []fleet.NodeStatus{win, {Node: "lost", Ready: true, Status: "False", Fingerprint: fp, NotAfter: &notAfter}}
	now := []fleet.NodeStatus{win, {Node: "lost", NoAgent: "no agent DaemonSet places a pod here"}}
	got := fleet.Verify(before, now, false)
	if len(got) != 1 || got[0].Node != "lost" || got[0].Passed || !strings.Contains(got[0].Reason, "no agent by design") {
		t.Errorf("Verify = %+v; want only lost, failed as running no agent now", got)
	}
	if got := fleet.Verify([]fleet.NodeStatus{win}, nil, false); len(got) != 0 {
		t.Errorf("a baseline's no-agent node gone now: %+v, want nothing to verify", got)
	}
}
