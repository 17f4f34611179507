package fleet

import (
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/certready/certready/internal/names"
	"github.com/certready/certready/reporter/servingcert/condition"
	"github.com/certready/certready/reporter/servingcert/verdict"
)

// NodeStatus is one node's line in the fleet view.
type NodeStatus struct {
	Node string `json:"node"`
	// Ready: the condition is False (every check passed), the agent wrote
	// it recently (condition.Fresh), and the readiness taint is gone.
	Ready bool `json:"ready"`
	// Status and Reason of the condition; Status is empty without one.
	Status  corev1.ConditionStatus `json:"status"`
	Reason  string                 `json:"reason,omitempty"`
	Message string                 `json:"message,omitempty"`
	// Since is the last transition, Heartbeat the agent's last write.
	Since     *time.Time `json:"since,omitempty"`
	Heartbeat *time.Time `json:"heartbeat,omitempty"`
	// NotAfter, CSR and Fingerprint are the installed certificate's
	// expiry, the CSR that issued it and its full SHA-256, as the agent
	// reported them (Ready nodes only; verdict.Facts).
	NotAfter *time.Time `json:"notAfter,omitempty"`
	// NotBefore is its start of validity (agents that state it): a
	// baseline taken after it was issued is not a before of it.
	NotBefore   *time.Time `json:"notBefore,omitempty"`
	CSR         string     `json:"csr,omitempty"`
	Fingerprint string     `json:"fingerprint,omitempty"`
	// CAFingerprint and CANotAfter are the root CA the certificate chains
	// to, its full SHA-256 and expiry (agents that state it).
	CAFingerprint string     `json:"caFingerprint,omitempty"`
	CANotAfter    *time.Time `json:"caNotAfter,omitempty"`
	// ClientCertNotAfter is the expiry of the node's kubelet client
	// certificate (agents that state it; none for a static one).
	ClientCertNotAfter *time.Time `json:"clientCertNotAfter,omitempty"`
	// AgentVersion is the version of the agent that stated them.
	AgentVersion string `json:"agentVersion,omitempty"`
	// Tainted: the node carries the readiness taint.
	Tainted bool `json:"tainted"`
	// Completed names who marked the node's bootstrap complete: NRC rules
	// (readiness.k8s.io/bootstrap-completed-<rule UID>, by name once
	// NameRules has run) and certready's own taint fallback ("certready").
	Completed []string `json:"bootstrapCompletedBy,omitempty"`
	// Problem says, for a node that is not Ready, why, in a few words.
	Problem string `json:"problem,omitempty"`
	// NoAgent says why the node runs no agent by design (MarkNoAgent):
	// it is then neither Ready nor a problem, and Problem is empty.
	NoAgent string `json:"noAgent,omitempty"`
}

// NRCMarked says whether any row carries a node-readiness-controller
// completion mark (readiness.k8s.io/bootstrap-completed-<rule UID>).
func NRCMarked(rows []NodeStatus) bool {
	for _, r := range rows {
		for _, c := range r.Completed {
			if c != "certready" {
				return true
			}
		}
	}
	return false
}

// NameRules shows each node-readiness-controller rule in rows' Completed by
// its name: the controller marks a node with the rule's UID, which says
// nothing to an operator. byUID maps UIDs to names; a suffix that is no
// known UID (a deleted rule, or a controller that marks by name) stays as
// it is.
func NameRules(rows []NodeStatus, byUID map[string]string) {
	for i := range rows {
		for j, c := range rows[i].Completed {
			if name, ok := byUID[c]; ok && c != "certready" {
				rows[i].Completed[j] = name
			}
		}
		sort.Strings(rows[i].Completed)
	}
}

// Status gives every node's line, problems first, then by name (see
// MarkNoAgent for the nodes that run no agent by design).
// conditionType is the agent's condition, taintKey the readiness taint;
// a condition that is not condition.Fresh within maxAge no longer stands.
func Status(nodes []corev1.Node, conditionType corev1.NodeConditionType, taintKey string, maxAge time.Duration, now time.Time) []NodeStatus {
	out := make([]NodeStatus, 0, len(nodes))
	for i := range nodes {
		n := &nodes[i]
		s := NodeStatus{Node: n.Name}
		for _, t := range n.Spec.Taints {
			if t.Key == taintKey && t.Effect != corev1.TaintEffectPreferNoSchedule {
				s.Tainted = true
			}
		}
		for k := range n.Annotations {
			if rule, ok := strings.CutPrefix(k, names.NRCCompletedPrefix); ok {
				s.Completed = append(s.Completed, rule)
			}
		}
		if _, ok := n.Annotations[names.CompletedAnnotation]; ok {
			s.Completed = append(s.Completed, "certready")
		}
		sort.Strings(s.Completed)
		c := condition.Find(n, conditionType)
		if c != nil {
			since, beat := c.LastTransitionTime.Time, c.LastHeartbeatTime.Time
			s.Status, s.Reason, s.Message, s.Since, s.Heartbeat = c.Status, c.Reason, c.Message, &since, &beat
			if f, ok := verdict.NodeFacts(n, c); ok {
				s.NotAfter, s.CSR, s.Fingerprint = &f.NotAfter, f.CSR, f.Fingerprint.String()
				s.AgentVersion = f.Agent
				if !f.NotBefore.IsZero() {
					s.NotBefore = &f.NotBefore
				}
				if !f.CA.IsZero() {
					s.CAFingerprint, s.CANotAfter = f.CA.String(), &f.CANotAfter
				}
				if !f.ClientNotAfter.IsZero() {
					s.ClientCertNotAfter = &f.ClientNotAfter
				}
			}
		}
		switch {
		case c == nil:
			s.Problem = "no " + string(conditionType) + " condition: no certready agent reports on this node"
		case c.Status != corev1.ConditionFalse:
			s.Problem = c.Reason
		case !condition.Fresh(c, maxAge, now):
			s.Problem = stale(c, now)
		case s.Tainted:
			s.Problem = "ready, but still carries " + taintKey + ": is a NodeReadinessRule or the approver's taint fallback installed?"
		default:
			s.Ready = true
		}
		out = append(out, s)
	}
	sortRows(out)
	return out
}

// sortRows orders the fleet view: problems, ready nodes, nodes without an
// agent by design; by name within each.
func sortRows(rows []NodeStatus) {
	rank := func(r NodeStatus) int {
		switch {
		case r.NoAgent != "":
			return 2
		case r.Ready:
			return 1
		}
		return 0
	}
	sort.SliceStable(rows, func(i, j int) bool {
		if a, b := rank(rows[i]), rank(rows[j]); a != b {
			return a < b
		}
		return rows[i].Node < rows[j].Node
	})
}

// stale says why a condition that is not fresh no longer stands.
func stale(c *corev1.NodeCondition, now time.Time) string {
	hb := c.LastHeartbeatTime.Time
	switch {
	case hb.IsZero():
		return "condition never written (no heartbeat): is the agent running?"
	case hb.After(now):
		return "condition written " + hb.Sub(now).Round(time.Second).String() + " in the future: is the node's clock right?"
	}
	return "condition not written for " + now.Sub(hb).Round(time.Second).String() + ": is the agent running?"
}

// Problems keeps the nodes that are not Ready, but for those that run no
// agent by design.
func Problems(rows []NodeStatus) []NodeStatus {
	var out []NodeStatus
	for _, r := range rows {
		if !r.Ready && r.NoAgent == "" {
			out = append(out, r)
		}
	}
	return out
}
