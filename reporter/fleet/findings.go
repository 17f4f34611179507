package fleet

import (
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/certready/certready/reporter/agent/verdict"
)

// FindingWindow is how far back the fleet view reads the agents' finding
// events: an agent records its finding again each proof interval (10m by
// default) while it holds, and the API server keeps events an hour.
const FindingWindow = time.Hour

// FindingEventSelector selects the agents' finding events (in namespace
// default, where Node events live).
const FindingEventSelector = "involvedObject.kind=Node,reason=" + verdict.FindingAPIServerVerifiesNoKubelet

// Finding is a finding about the cluster, not about one node: the API
// server verifies no kubelet certificate.
type Finding struct {
	Name string `json:"name"`
	// Nodes are where agents made it, LastSeen the newest such event.
	Nodes    []string  `json:"nodes"`
	LastSeen time.Time `json:"lastSeen"`
	// What it means and what to do.
	Message string `json:"message"`
}

// Findings reads the cluster findings from the Node events an agent
// recorded within FindingWindow of now. A node's events are evidence that
// whoever can record events in namespace default could fake: a finding
// raises a question, it never changes a verdict.
func Findings(events []corev1.Event, now time.Time) []Finding {
	var nodes []string
	var last time.Time
	for _, e := range events {
		if e.Reason != verdict.FindingAPIServerVerifiesNoKubelet || e.InvolvedObject.Kind != "Node" || e.Type != corev1.EventTypeWarning {
			continue
		}
		seen := e.LastTimestamp.Time
		if e.Series != nil && e.Series.LastObservedTime.After(seen) {
			seen = e.Series.LastObservedTime.Time
		}
		if seen.IsZero() {
			seen = e.EventTime.Time
		}
		if now.Sub(seen) > FindingWindow {
			continue
		}
		if !slices.Contains(nodes, e.InvolvedObject.Name) {
			nodes = append(nodes, e.InvolvedObject.Name)
		}
		if seen.After(last) {
			last = seen
		}
	}
	if len(nodes) == 0 {
		return nil
	}
	slices.Sort(nodes)
	return []Finding{{
		Name: verdict.FindingAPIServerVerifiesNoKubelet, Nodes: nodes, LastSeen: last,
		Message: "the API server read pod logs over kubelet certificates the cluster CA does not verify: it verifies no kubelet (kube-bench 1.2.6), so whoever answers on a node's address gets its logs, exec sessions and port-forwards; set kube-apiserver --kubelet-certificate-authority to the kubelet-serving signer's CA (README: The API server's path to the kubelet)",
	}}
}
