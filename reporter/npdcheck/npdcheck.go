// Package npdcheck runs the agent's checks once, for node-problem-detector's
// custom plugin monitor: one line of output of at most 80 bytes and the
// plugin protocol's exit status (OK: certificate ready; NonOK: not ready;
// Unknown: could not check). With API credentials it also checks the CSR;
// without, it says so in its output.
//
// node-problem-detector starts believing every condition False and, with
// skip_initial_status (which keeps it from publishing that unchecked False),
// publishes only changes: a node whose certificate was already good when NPD
// started would never be published False, and a stale True would stay. So,
// given the start time of the NPD process (Options.PublisherStart), a good
// certificate is reported Unknown until the Node shows a condition that this
// NPD process wrote (transition at or after its start); the next check then
// turns that into False. One extra interval after each NPD start, and never
// False without a full check.
package npdcheck

import (
	"context"
	"fmt"
	"net/netip"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/certready/certready/reporter/servingcert/evidence"

	corev1 "k8s.io/api/core/v1"
	cpmtypes "k8s.io/node-problem-detector/pkg/custompluginmonitor/types"

	"github.com/certready/certready/internal/names"
	"github.com/certready/certready/internal/nodeapi"
	"github.com/certready/certready/reporter/servingcert/csrlookup"
	"github.com/certready/certready/reporter/servingcert/observe"
	"github.com/certready/certready/reporter/servingcert/verdict"
)

// MaxOutput is node-problem-detector's default max_output_length.
const MaxOutput = 80

// Options configure one check.
type Options struct {
	NodeName    string
	NodeIPs     []netip.Addr // when empty, read from the Node (needs Client)
	PKIDir      string
	CAFile      string
	KubeletPort int // 0: the Node's daemonEndpoints, else 10250
	Timeout     time.Duration
	// CSRRetention as in the agent: an older certificate needs no CSR.
	CSRRetention time.Duration
	// Client is optional: with it the Node and the CSRs are read too.
	Client nodeapi.API
	Now    time.Time
	// PublisherStart is when the node-problem-detector process that runs
	// this check started (zero: no hand-over, see the package comment).
	// Needs Client.
	PublisherStart time.Time
	// ConditionType is the condition NPD publishes from this check
	// (default names.ConditionType).
	ConditionType corev1.NodeConditionType
}

// PublishPending starts the line of a verified certificate that is held
// back as Unknown until node-problem-detector has published once.
const PublishPending = "PublishPending"

// Run performs the check and returns the plugin status and output line.
func Run(ctx context.Context, o Options) (cpmtypes.Status, string) {
	v, node, err := evaluate(ctx, o)
	if err != nil {
		return cpmtypes.Unknown, Line("CheckFailed: " + err.Error())
	}
	switch v.Status {
	case corev1.ConditionFalse:
		if o.heldBack(node) {
			return cpmtypes.Unknown, Line(PublishPending + ": certificate verified; False follows on the next check")
		}
		return cpmtypes.OK, Line(string(v.Reason) + ": " + v.Message)
	case corev1.ConditionTrue:
		return cpmtypes.NonOK, Line(string(v.Reason) + ": " + v.Message)
	}
	return cpmtypes.Unknown, Line(string(v.Reason) + ": " + v.Message)
}

// heldBack says whether a verified certificate must be reported Unknown:
// the NPD process that runs this check has not yet published the condition
// (none on the Node, or one from before it started), so it still believes
// False and an OK would change nothing it publishes. The Node's transition
// times have whole seconds, hence the truncation.
func (o Options) heldBack(node *corev1.Node) bool {
	if o.PublisherStart.IsZero() || node == nil {
		return false
	}
	t := o.ConditionType
	if t == "" {
		t = names.ConditionType
	}
	for _, c := range node.Status.Conditions {
		if c.Type == t {
			return c.LastTransitionTime.Time.Before(o.PublisherStart.Truncate(time.Second))
		}
	}
	return true
}

func evaluate(ctx context.Context, o Options) (verdict.Verdict, *corev1.Node, error) {
	if o.NodeName == "" {
		return verdict.Verdict{}, nil, fmt.Errorf("--node-name is empty")
	}
	if o.Now.IsZero() {
		o.Now = time.Now()
	}
	if o.CSRRetention == 0 {
		o.CSRRetention = time.Hour
	}
	check := observe.Check{PKIDir: o.PKIDir, CAFile: o.CAFile, KubeletPort: o.KubeletPort, ProbeTimeout: o.Timeout, CSRRetention: o.CSRRetention}
	in := evidence.Evidence{Node: evidence.Node{Name: o.NodeName, InternalIPs: o.NodeIPs}, Now: o.Now}
	var node *corev1.Node
	if o.Client != nil {
		var err error
		if node, err = o.Client.GetNode(ctx, o.NodeName); err != nil {
			return verdict.Verdict{}, nil, fmt.Errorf("reading node %s: %w", o.NodeName, err)
		}
		info := observe.NodeInfo(node, nil)
		if len(in.Node.InternalIPs) == 0 {
			in.Node.InternalIPs = info.InternalIPs
		}
		in.Node.Dial, in.Node.DialType = info.Dial, info.DialType
		check.CSRs = csrlookup.API{Client: o.Client, Node: o.NodeName}
	}
	if len(in.Node.InternalIPs) == 0 {
		return verdict.Verdict{}, nil, fmt.Errorf("no node IP: pass --node-ip or API credentials")
	}
	if in.Node.Dial == "" {
		// Without the Node object: the API server dials the InternalIP first
		// (kubeadm's --kubelet-preferred-address-types).
		in.Node.Dial, in.Node.DialType = in.Node.InternalIPs[0].String(), string(corev1.NodeInternalIP)
	}
	in = check.Run(ctx, in, node)
	if err := ctx.Err(); err != nil {
		return verdict.Verdict{}, nil, err
	}
	return verdict.Evaluate(in), node, nil
}

// Line makes s one line of at most MaxOutput bytes, cut on a rune boundary.
func Line(s string) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) <= MaxOutput {
		return s
	}
	cut := MaxOutput - 3
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "..."
}
