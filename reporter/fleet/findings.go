package fleet

import (
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/certready/certready/internal/names"
	"github.com/certready/certready/reporter/servingcert/verdict"
)

// FindingWindow is how far back the fleet view reads the agents' finding
// events: an agent records its finding again each proof interval (10m by
// default) while it holds, and the API server keeps events an hour.
const FindingWindow = time.Hour

// FindingEventSelector selects the agents' finding events (in namespace
// default, where Node events live).
const FindingEventSelector = "involvedObject.kind=Node,type=Warning,source=" + names.AgentEventSource + ",reason=" + verdict.FindingAPIServerVerifiesNoKubelet

// maxFindingNodes bounds the nodes a finding names (the rest are counted).
const maxFindingNodes = 10

// Finding is a finding about the cluster, not about one node: the API
// server verifies no kubelet certificate.
type Finding struct {
	Name string `json:"name"`
	// Nodes are where agents made it, LastSeen the newest such event.
	Nodes []string `json:"nodes"`
	// MoreNodes counts the nodes beyond the first ten, not named.
	MoreNodes int       `json:"moreNodes,omitempty"`
	LastSeen  time.Time `json:"lastSeen"`
	// What it means and what to do.
	Message string `json:"message"`
}

// Findings reads the cluster findings from the Node events an agent
// recorded within FindingWindow of now, about the Nodes in nodes (by name
// and UID; nil: any). Events are evidence that whoever can record events
// in namespace default could fake, or delete: a finding raises a
// question and never changes a verdict; the agents' metric
// (certready_apiserver_verifies_no_kubelet) is the authority.
func Findings(events []corev1.Event, nodes []corev1.Node, now time.Time) []Finding {
	known := map[string]string{}
	for _, n := range nodes {
		known[n.Name] = string(n.UID)
	}
	var seenOn []string
	var last time.Time
	for _, e := range events {
		if e.Reason != verdict.FindingAPIServerVerifiesNoKubelet || e.InvolvedObject.Kind != "Node" || e.Type != corev1.EventTypeWarning ||
			e.Source.Component != names.AgentEventSource {
			continue
		}
		if uid, ok := known[e.InvolvedObject.Name]; nodes != nil && (!ok || uid != string(e.InvolvedObject.UID)) {
			continue
		}
		seen := eventTime(&e)
		if now.Sub(seen) > FindingWindow {
			continue
		}
		if !slices.Contains(seenOn, e.InvolvedObject.Name) {
			seenOn = append(seenOn, e.InvolvedObject.Name)
		}
		if seen.After(last) {
			last = seen
		}
	}
	if len(seenOn) == 0 {
		return nil
	}
	slices.Sort(seenOn)
	more := 0
	if len(seenOn) > maxFindingNodes {
		seenOn, more = seenOn[:maxFindingNodes], len(seenOn)-maxFindingNodes
	}
	return []Finding{{
		Name: verdict.FindingAPIServerVerifiesNoKubelet, Nodes: seenOn, MoreNodes: more, LastSeen: last,
		Message: "the API server read pod logs over kubelet certificates the cluster CA does not verify: it verifies no kubelet (kube-bench 1.2.6), so whoever answers on a node's address gets its logs, exec sessions and port-forwards; set kube-apiserver --kubelet-certificate-authority to the kubelet-serving signer's CA (docs/operations.md: The API server's path to the kubelet)",
	}}
}

// eventTime is when an event was last seen: its series' last observation,
// its last timestamp, or its creation time (events.k8s.io writers set only
// that).
func eventTime(e *corev1.Event) time.Time {
	seen := e.LastTimestamp.Time
	if e.Series != nil && e.Series.LastObservedTime.After(seen) {
		seen = e.Series.LastObservedTime.Time
	}
	if seen.IsZero() {
		seen = e.EventTime.Time
	}
	return seen
}
