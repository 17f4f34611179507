package fleet

import (
	"fmt"
	"sort"

	"github.com/certready/certready/internal/names"
	"github.com/certready/certready/internal/stamp"
)

// Verification is one node's before/after acceptance of a renewal.
type Verification struct {
	Node string `json:"node"`
	// Passed: ready now, with a certificate other than the baseline's
	// that expires later.
	Passed bool   `json:"passed"`
	Before *Cert  `json:"before,omitempty"`
	After  *Cert  `json:"after,omitempty"`
	Reason string `json:"reason,omitempty"`
}

// Cert is a serving certificate as the fleet view reports it.
type Cert struct {
	Fingerprint string `json:"fingerprint"`
	NotAfter    string `json:"notAfter,omitempty"`
	CSR         string `json:"csr,omitempty"`
	// CA is the full SHA-256 of the root CA it chains to, when stated.
	CA string `json:"ca,omitempty"`
}

func certOf(s NodeStatus) *Cert {
	if s.Fingerprint == "" {
		return nil
	}
	c := &Cert{Fingerprint: s.Fingerprint, CSR: s.CSR, CA: s.CAFingerprint}
	if s.NotAfter != nil {
		c.NotAfter = stamp.Format(*s.NotAfter)
	}
	return c
}

// Verify is the runbook's acceptance after a renewal: for every node of
// now (the selected nodes) and of before (a baseline taken with status -o
// json), it passes only when the node was ready with a certificate in the
// baseline, is ready now, serves another certificate (full SHA-256) that
// expires later, and chains to the same CA as before; with caChange (a CA
// rotation's re-issue), to another CA. Sorted by node, failures first.
func Verify(before, now []NodeStatus, caChange bool) []Verification {
	was := map[string]NodeStatus{}
	for _, b := range before {
		was[b.Node] = b
	}
	seen := map[string]bool{}
	var out []Verification
	for _, n := range now {
		seen[n.Node] = true
		b, ok := was[n.Node]
		if n.NoAgent != "" && (!ok || certOf(b) == nil) {
			continue // no agent by design, then and now: nothing to renew
		}
		v := Verification{Node: n.Node, After: certOf(n)}
		if ok {
			v.Before = certOf(b)
		}
		switch {
		case !ok:
			v.Reason = "not in the baseline (a node that joined since; take a new baseline to include it)"
		case v.Before == nil:
			v.Reason = "no certificate in the baseline (the node was not ready when it was taken)"
		case !n.Ready:
			v.Reason = fmt.Sprintf("not ready now: %s", problemOf(n))
		case v.After == nil:
			v.Reason = "ready, but no facts state its certificate (annotation " + names.FactsAnnotation + " absent: node-problem-detector mode states none)"
		case v.After.Fingerprint == v.Before.Fingerprint:
			v.Reason = "the serving certificate did not change (sha256 " + v.After.Short() + ")"
		case b.NotAfter == nil || n.NotAfter == nil || !n.NotAfter.After(*b.NotAfter):
			v.Reason = fmt.Sprintf("the new certificate does not expire later (%s, was %s)", v.After.NotAfter, v.Before.NotAfter)
		case caChange && (v.Before.CA == "" || v.After.CA == ""):
			v.Reason = "the CA is not stated in the baseline or now (its facts name none): a CA change cannot be verified"
		case caChange && v.Before.CA == v.After.CA:
			v.Reason = "the CA did not change (sha256 " + short(v.After.CA) + "), and --expect-ca-change says it should have"
		case !caChange && v.Before.CA != "" && v.After.CA != "" && v.Before.CA != v.After.CA:
			v.Reason = "the CA changed (sha256 " + short(v.Before.CA) + " -> " + short(v.After.CA) + "): if this renewal is a CA rotation, verify with --expect-ca-change"
		default:
			v.Passed = true
		}
		out = append(out, v)
	}
	for _, b := range before {
		if !seen[b.Node] && (b.NoAgent == "" || certOf(b) != nil) {
			out = append(out, Verification{Node: b.Node, Before: certOf(b), Reason: "in the baseline but not selected now (gone, or left out by -l)"})
		}
	}
	sort.SliceStable(out, func(i, j int) bool {
		if out[i].Passed != out[j].Passed {
			return !out[i].Passed
		}
		return out[i].Node < out[j].Node
	})
	return out
}

func problemOf(n NodeStatus) string {
	switch {
	case n.Problem != "":
		return n.Problem
	case n.NoAgent != "":
		return "no agent by design: " + n.NoAgent
	}
	return n.Reason
}

// Short is the fingerprint's first 16 hex digits, as fingerprint.Short
// writes them in condition messages.
func (c *Cert) Short() string { return short(c.Fingerprint) }

func short(fp string) string { return fp[:min(16, len(fp))] }
