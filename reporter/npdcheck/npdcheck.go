// Package npdcheck runs the agent's checks once, for node-problem-detector's
// custom plugin monitor: one line of output of at most 80 bytes and the
// plugin protocol's exit status (OK: certificate ready; NonOK: not ready;
// Unknown: could not check). With API credentials it also checks the CSR;
// without, it says so in its output.
package npdcheck

import (
	"context"
	"fmt"
	"net/netip"
	"strings"
	"time"
	"unicode/utf8"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	cpmtypes "k8s.io/node-problem-detector/pkg/custompluginmonitor/types"

	"github.com/certready/certready/reporter/observe"
	"github.com/certready/certready/reporter/verdict"
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
	Client kubernetes.Interface
	Now    time.Time
}

// Run performs the check and returns the plugin status and output line.
func Run(ctx context.Context, o Options) (cpmtypes.Status, string) {
	v, err := evaluate(ctx, o)
	if err != nil {
		return cpmtypes.Unknown, Line("CheckFailed: " + err.Error())
	}
	switch v.Status {
	case corev1.ConditionFalse:
		return cpmtypes.OK, Line(string(v.Reason) + ": " + v.Message)
	case corev1.ConditionTrue:
		return cpmtypes.NonOK, Line(string(v.Reason) + ": " + v.Message)
	}
	return cpmtypes.Unknown, Line(string(v.Reason) + ": " + v.Message)
}

func evaluate(ctx context.Context, o Options) (verdict.Verdict, error) {
	if o.NodeName == "" {
		return verdict.Verdict{}, fmt.Errorf("--node-name is empty")
	}
	if o.Now.IsZero() {
		o.Now = time.Now()
	}
	if o.CSRRetention == 0 {
		o.CSRRetention = time.Hour
	}
	check := observe.Check{PKIDir: o.PKIDir, CAFile: o.CAFile, KubeletPort: o.KubeletPort, ProbeTimeout: o.Timeout, CSRRetention: o.CSRRetention}
	in := verdict.Input{Node: verdict.Node{Name: o.NodeName, InternalIPs: o.NodeIPs}, Now: o.Now}
	var node *corev1.Node
	if o.Client != nil {
		var err error
		if node, err = o.Client.CoreV1().Nodes().Get(ctx, o.NodeName, metav1.GetOptions{}); err != nil {
			return verdict.Verdict{}, fmt.Errorf("reading node %s: %w", o.NodeName, err)
		}
		info := observe.NodeInfo(node, nil)
		if len(in.Node.InternalIPs) == 0 {
			in.Node.InternalIPs = info.InternalIPs
		}
		in.Node.Dial, in.Node.DialType = info.Dial, info.DialType
		check.CSRs = observe.APICSRs{Client: o.Client, Node: o.NodeName}
	}
	if len(in.Node.InternalIPs) == 0 {
		return verdict.Verdict{}, fmt.Errorf("no node IP: pass --node-ip or API credentials")
	}
	if in.Node.Dial == "" {
		// Without the Node object: the API server dials the InternalIP first
		// (kubeadm's --kubelet-preferred-address-types).
		in.Node.Dial, in.Node.DialType = in.Node.InternalIPs[0].String(), string(corev1.NodeInternalIP)
	}
	in = check.Run(ctx, in, node)
	if err := ctx.Err(); err != nil {
		return verdict.Verdict{}, err
	}
	return verdict.Evaluate(in), nil
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
