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

	certv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/kubernetes"
	cpmtypes "k8s.io/node-problem-detector/pkg/custompluginmonitor/types"

	"github.com/certready/certready/reporter/agent"
	"github.com/certready/certready/reporter/certfile"
	"github.com/certready/certready/reporter/csrmatch"
	"github.com/certready/certready/reporter/probe"
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
	in := verdict.Input{Node: verdict.Node{Name: o.NodeName, InternalIPs: o.NodeIPs}, Now: o.Now, SkipCSR: o.Client == nil}
	var node *corev1.Node
	if o.Client != nil {
		var err error
		if node, err = o.Client.CoreV1().Nodes().Get(ctx, o.NodeName, metav1.GetOptions{}); err != nil {
			return verdict.Verdict{}, fmt.Errorf("reading node %s: %w", o.NodeName, err)
		}
		info := agent.NodeInfo(node, nil)
		if len(in.Node.InternalIPs) == 0 {
			in.Node.InternalIPs = info.InternalIPs
		}
		in.Node.Dial, in.Node.DialType = info.Dial, info.DialType
	}
	port := agent.KubeletPort(o.KubeletPort, node)
	if len(in.Node.InternalIPs) == 0 {
		return verdict.Verdict{}, fmt.Errorf("no node IP: pass --node-ip or API credentials")
	}
	if in.Node.Dial == "" {
		// Without the Node object: the API server dials the InternalIP first
		// (kubeadm's --kubelet-preferred-address-types).
		in.Node.Dial, in.Node.DialType = in.Node.InternalIPs[0].String(), string(corev1.NodeInternalIP)
	}
	in.CA, in.CAErr = agent.LoadCA(o.CAFile)
	in.File = certfile.Read(o.PKIDir)
	if o.Client != nil {
		csrs, err := listNodeCSRs(ctx, o.Client, o.NodeName)
		ev := &verdict.CSREvidence{LookupErr: err, Retention: o.CSRRetention}
		if err == nil {
			ev.Match = csrmatch.Match(csrs, o.NodeName, in.File.Fingerprint)
		}
		in.CSR = ev
	}
	if verdict.NeedsEndpoint(in) {
		res := probe.Probe(ctx, agent.EndpointTarget(in, port, o.Timeout))
		in.Endpoint = &res
	}
	return verdict.Evaluate(in), nil
}

// listNodeCSRs reads the node's kubelet-serving CSRs: the labelled ones
// first, the signer-wide list only when none is labelled.
func listNodeCSRs(ctx context.Context, cs kubernetes.Interface, node string) ([]*certv1.CertificateSigningRequest, error) {
	api := cs.CertificatesV1().CertificateSigningRequests()
	list, err := api.List(ctx, metav1.ListOptions{LabelSelector: csrmatch.NodeLabel + "=" + node})
	if err != nil {
		return nil, fmt.Errorf("listing CSRs: %w", err)
	}
	if len(list.Items) == 0 {
		list, err = api.List(ctx, metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("spec.signerName", csrmatch.SignerName).String(), Limit: 1000})
		if err != nil {
			return nil, fmt.Errorf("listing CSRs: %w", err)
		}
	}
	out := make([]*certv1.CertificateSigningRequest, 0, len(list.Items))
	for i := range list.Items {
		out = append(out, &list.Items[i])
	}
	return out, nil
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
