package verdict

import (
	"encoding/json"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/certready/certready/internal/fingerprint"
	"github.com/certready/certready/internal/names"
	"github.com/certready/certready/internal/stamp"
)

// Facts are what a ready verdict states about the serving certificate for
// readers that see only the Node (the fleet view, `certready status`, the
// taint lifts' evidence): its expiry, the CSR that issued it, its full
// fingerprint, the CA it chains to. The agent writes them as JSON in the
// Node annotation names.FactsAnnotation, in the same request as the
// condition, so that the condition's message stays a sentence for
// `kubectl describe node`:
//
//	certready.io/serving-cert: {"notAfter":"2027-12-01T12:00:00Z","csr":"csr-1","sha256":"<64 hex digits>",...}
//
// Agents of the release candidates ended the message with them as a
// trailer, which ParseFacts reads for one release, until every agent
// writes the annotation (then it goes):
//
//	... presented on 192.0.2.11:10250 [notAfter=2027-12-01T12:00:00Z csr=csr-1 sha256=<64 hex digits> ca=<64 hex digits> caNotAfter=2035-11-29T12:00:00Z clientNotAfter=2027-11-20T08:00:00Z agent=v1.2.3]
//
// The node-problem-detector plugin states none: node-problem-detector
// cuts its message at 80 bytes. A reader ignores keys it does not know: a
// newer agent may state more.
type Facts struct {
	// NotBefore is the certificate's start of validity (zero: not stated,
	// agents before it was added): a signer sets it at issue, backdated
	// (kube-controller-manager: 5 minutes).
	NotBefore   time.Time
	NotAfter    time.Time
	CSR         string // "" when no CSR proved the certificate (retention)
	Fingerprint fingerprint.SHA256
	// CA is the root the certificate chains to (zero: not stated),
	// CANotAfter its expiry.
	CA         fingerprint.SHA256
	CANotAfter time.Time
	// ClientNotAfter is the expiry of the kubelet's client certificate
	// (zero: not stated, or no rotated client certificate).
	ClientNotAfter time.Time
	// Agent is the version of the agent that stated them ("" unknown).
	Agent string
}

// factsOpen begins the trailer.
const factsOpen = " [notAfter="

// ParseFacts reads the facts trailer at the end of message; ok is false
// when message carries none (a condition that is not ready, or one an
// agent wrote with the annotation).
func ParseFacts(message string) (f Facts, ok bool) {
	i := strings.LastIndex(message, factsOpen)
	if i < 0 || !strings.HasSuffix(message, "]") {
		return Facts{}, false
	}
	fields := strings.Fields(message[i+len(" [") : len(message)-1])
	for _, kv := range fields {
		k, v, _ := strings.Cut(kv, "=")
		var err error
		switch k {
		case "notAfter":
			f.NotAfter, err = time.Parse(time.RFC3339, v)
		case "caNotAfter":
			f.CANotAfter, err = time.Parse(time.RFC3339, v)
		case "clientNotAfter":
			f.ClientNotAfter, err = time.Parse(time.RFC3339, v)
		case "sha256":
			f.Fingerprint, err = fingerprint.Parse(v)
		case "ca":
			f.CA, err = fingerprint.Parse(v)
		case "csr":
			f.CSR = v
		case "agent":
			f.Agent = v
		}
		if err != nil {
			return Facts{}, false
		}
	}
	return f, !f.NotAfter.IsZero() && !f.Fingerprint.IsZero()
}

// factsJSON is the annotation's form of Facts.
type factsJSON struct {
	NotBefore      string `json:"notBefore,omitempty"`
	NotAfter       string `json:"notAfter"`
	CSR            string `json:"csr,omitempty"`
	SHA256         string `json:"sha256"`
	CA             string `json:"ca,omitempty"`
	CANotAfter     string `json:"caNotAfter,omitempty"`
	ClientNotAfter string `json:"clientNotAfter,omitempty"`
	Agent          string `json:"agent,omitempty"`
}

// Annotation is the value of names.FactsAnnotation that states f.
func (f Facts) Annotation() string {
	j := factsJSON{NotAfter: stamp.Format(f.NotAfter), CSR: f.CSR, SHA256: f.Fingerprint.String(), Agent: f.Agent}
	if !f.CA.IsZero() {
		j.CA, j.CANotAfter = f.CA.String(), stamp.Format(f.CANotAfter)
	}
	if !f.ClientNotAfter.IsZero() {
		j.ClientNotAfter = stamp.Format(f.ClientNotAfter)
	}
	if !f.NotBefore.IsZero() {
		j.NotBefore = stamp.Format(f.NotBefore)
	}
	b, err := json.Marshal(j)
	if err != nil { // strings only: cannot happen
		panic(err)
	}
	return string(b)
}

// ParseAnnotation reads what Facts.Annotation wrote; ok is false for
// anything else (a value that is not that JSON, a time or fingerprint
// that does not parse, no expiry or fingerprint).
func ParseAnnotation(value string) (f Facts, ok bool) {
	var j factsJSON
	if err := json.Unmarshal([]byte(value), &j); err != nil {
		return Facts{}, false
	}
	var err error
	parseTime := func(s string) time.Time {
		if s == "" || err != nil {
			return time.Time{}
		}
		var t time.Time
		t, err = time.Parse(time.RFC3339, s)
		return t
	}
	parseFP := func(s string) fingerprint.SHA256 {
		if s == "" || err != nil {
			return fingerprint.SHA256{}
		}
		var fp fingerprint.SHA256
		fp, err = fingerprint.Parse(s)
		return fp
	}
	f = Facts{NotBefore: parseTime(j.NotBefore), NotAfter: parseTime(j.NotAfter), CSR: j.CSR, Fingerprint: parseFP(j.SHA256), CA: parseFP(j.CA),
		CANotAfter: parseTime(j.CANotAfter), ClientNotAfter: parseTime(j.ClientNotAfter), Agent: j.Agent}
	if err != nil || f.NotAfter.IsZero() || f.Fingerprint.IsZero() {
		return Facts{}, false
	}
	return f, true
}

// NodeFacts returns the facts behind node's condition c, when c is ready
// (status False) and states them: a message's trailer, which is as current
// as the message it ends (an annotation beside it may be left from another
// writer), else the node's names.FactsAnnotation.
func NodeFacts(node *corev1.Node, c *corev1.NodeCondition) (Facts, bool) {
	if node == nil || c == nil || c.Status != corev1.ConditionFalse {
		return Facts{}, false
	}
	if f, ok := ParseFacts(c.Message); ok {
		return f, true
	}
	if v, ok := node.Annotations[names.FactsAnnotation]; ok {
		return ParseAnnotation(v)
	}
	return Facts{}, false
}
