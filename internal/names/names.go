// Package names holds the names that certready's parts share and that no
// one part owns: the CSR signer and label the approver writes and the agent
// selects by, the node identity prefix, the node condition, the readiness
// taint, the annotations and markers certready writes. Times are formatted
// by package stamp. Reasons stay with the verdict that gives them (reporter/servingcert/verdict).
package names

import (
	"strings"

	certv1 "k8s.io/api/certificates/v1"
)

const (
	// SignerName is the only signer certready looks at.
	SignerName = certv1.KubeletServingSignerName
	// NodeLabel is set by the approver on every kubelet-serving CSR (and
	// removed where a requester put it on for another node), so that each
	// agent can watch only its own node's requests.
	NodeLabel = "certready.io/node"
	// userPrefix is the username prefix of node credentials.
	userPrefix = "system:node:"
	// NodesGroup is the group of node credentials.
	NodesGroup = "system:nodes"

	// ConditionType is the agent's node condition (--condition-type).
	ConditionType = "KubeletServingCertNotReady"
	// NRCCompletedPrefix begins the node-readiness-controller's completion
	// mark on a Node, readiness.k8s.io/bootstrap-completed-<rule UID>.
	NRCCompletedPrefix = "readiness.k8s.io/bootstrap-completed-"
	// AgentEventSource is the source component of the agents' Node events.
	AgentEventSource = "certready-agent"

	// TaintKey and TaintValue make the readiness taint nodes join with,
	// readiness.k8s.io/KubeletServingCertNotReady=pending:NoSchedule, which
	// a NodeReadinessRule (or the approver's fallback) removes.
	TaintKey   = "readiness.k8s.io/" + ConditionType
	TaintValue = "pending"

	// FactsAnnotation holds, on a Node whose condition is ready, the facts
	// the agent proved about the serving certificate (verdict.Facts, as
	// JSON), written in the same request as the condition and removed
	// when it stops being ready. Only the agent may write it.
	FactsAnnotation = "certready.io/serving-cert"

	// CompletedAnnotation is set on a Node (to the time) when the
	// approver's taint fallback lifted its readiness taint.
	CompletedAnnotation = "certready.io/bootstrap-completed"

	// DecisionRuleAnnotation and DecisionMessageAnnotation keep the
	// approver's latest refusal on a CSR it left pending (the rule, and the
	// message of its Warning event, which expires after an hour).
	DecisionRuleAnnotation    = "certready.io/decision-rule"
	DecisionMessageAnnotation = "certready.io/decision-message"

	// IssuedKey marks, in spec.extra of a cached CSR (never written back),
	// that the informer dropped the issued certificate of an approved
	// request: it stays Issued, not Approved-but-unsigned, without the
	// bytes. It only matters on an approved request (pending, denied and
	// failed ones are so by their conditions).
	IssuedKey = "certready.io/issued"

	// DroppedRequestKey marks, in spec.extra of a cached CSR (never
	// written back: spec is immutable), that the informer dropped its
	// request for being larger than the bound; the value is its size. The
	// API server overwrites spec.extra with the requester's own on
	// creation, and the marker can only ever refuse a request.
	DroppedRequestKey = "certready.io/dropped-request-bytes"

	// ApprovedByKey marks, in spec.extra of a cached CSR (never written
	// back), the field manager that last wrote its approval subresource,
	// read from managedFields before they are dropped: who approved it, as
	// that client named itself.
	ApprovedByKey = "certready.io/approved-by-manager"
)

// NodeUser is the username of node's credentials.
func NodeUser(node string) string { return userPrefix + node }

// NodeOf returns <name> for a node's username system:node:<name>. It is the
// one reading of a requester's node for every part: a name that is empty or
// holds a colon is no node's (it could not be a Node's name, and a colon
// would let system:node:a:b pass for node a's).
func NodeOf(user string) (string, bool) {
	node, ok := strings.CutPrefix(user, userPrefix)
	if !ok || node == "" || strings.Contains(node, ":") {
		return "", false
	}
	return node, true
}
