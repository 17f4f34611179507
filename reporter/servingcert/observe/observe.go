// Package observe gathers one check's evidence for the verdict, in one
// order: the CA, the installed certificate (certfile), the CSRs that
// explain it (csrmatch), and, when the verdict needs it, the certificate
// the kubelet port presents (probe). The agent (on every event) and check
// (once, for node-problem-detector) both observe through it, so they
// cannot disagree about what they saw or how they looked it up.
package observe

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"time"

	"github.com/certready/certready/reporter/servingcert/evidence"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"

	"github.com/certready/certready/internal/fingerprint"
	"github.com/certready/certready/reporter/servingcert/apipath"
	"github.com/certready/certready/reporter/servingcert/certfile"
	"github.com/certready/certready/reporter/servingcert/csrmatch"
	"github.com/certready/certready/reporter/servingcert/kubeletconfig"
	"github.com/certready/certready/reporter/servingcert/probe"
	"github.com/certready/certready/reporter/servingcert/verdict"
)

// defaultKubeletPort is used when neither the flag nor the Node says otherwise.
const defaultKubeletPort = 10250

// CSRSource gives the CSR evidence for one node's installed certificate;
// proven says the certificate was already matched to an issued CSR (which
// may since have been deleted).
type CSRSource interface {
	Evidence(ctx context.Context, now time.Time, installed fingerprint.SHA256, proven bool) (csrmatch.Result, error)
}

// Check is how one node's evidence is gathered.
type Check struct {
	PKIDir       string
	CAFile       string
	KubeletPort  int // 0: the Node's daemon endpoint, else defaultKubeletPort
	ProbeTimeout time.Duration
	CSRRetention time.Duration
	// CSRs is nil when the CSRs cannot be read (check without API
	// credentials): the verdict then says it did not check them.
	CSRs CSRSource
	// Remembered, when set, returns the issued CSR that an earlier check
	// matched to the certificate with this fingerprint, or nil.
	Remembered func(fingerprint.SHA256) *csrmatch.Result
	// Stage and Done, when set, hear each step start and end (the agent's
	// watchdog and its per-step duration histogram).
	Stage func(string)
	Done  func(verdict.Step, time.Duration)
	// APIPath, when set, proves the API server's path to the kubelet
	// (package apipath) for the installed certificate, once every
	// node-local check passed.
	APIPath func(ctx context.Context, installed fingerprint.SHA256) apipath.Result
	// Unverified, when set, asks the same of the API server while the
	// kubelet presents a certificate the CA does not verify (the
	// node-local checks failed): an answer means the API server verifies
	// no kubelet (verdict.APIServerVerifiesNoKubelet).
	Unverified func(ctx context.Context, presented fingerprint.SHA256) apipath.Result
	// KubeletConfig is the kubelet's configuration file ("": not read).
	KubeletConfig string
}

// Run fills in the evidence of in (whose Node, Now and Clock the caller
// has set) and returns it. node is the Node object when read (nil
// without API credentials). A cancelled ctx cuts the probe short: the
// caller must not publish a verdict from it.
func (c Check) Run(ctx context.Context, in evidence.Evidence, node *corev1.Node) evidence.Evidence {
	stage := func(s string) {
		if c.Stage != nil {
			c.Stage(s)
		}
	}
	done := func(step verdict.Step, start time.Time) {
		if c.Done != nil {
			c.Done(step, time.Since(start))
		}
	}
	in.CA, in.CAErr = certfile.LoadCA(c.CAFile)

	if c.KubeletConfig != "" {
		stage("reading the kubelet's configuration")
		in.Kubelet = kubeletconfig.Read(c.KubeletConfig)
	}
	stage("reading the installed certificate")
	start := time.Now()
	in.File = certfile.Read(c.PKIDir)
	done(verdict.StepFile, start)
	// The client certificate is stated, never judged: a kubelet whose
	// client certificate is static (no rotation) has no such file.
	if cl := certfile.ReadFile(certfile.ClientPath(c.PKIDir)); cl.State == certfile.Present {
		in.ClientNotAfter = cl.Leaf.NotAfter
	}

	if c.CSRs == nil {
		in.SkipCSR = true
	} else {
		stage("looking up CSRs")
		start = time.Now()
		var remembered *csrmatch.Result
		if c.Remembered != nil && !in.File.Fingerprint.IsZero() {
			remembered = c.Remembered(in.File.Fingerprint)
		}
		ev := &evidence.CSR{Retention: c.CSRRetention, Remembered: remembered}
		ev.Match, ev.LookupErr = c.CSRs.Evidence(ctx, in.Now, in.File.Fingerprint, remembered != nil)
		in.CSR = ev
		done(verdict.StepCSR, start)
	}

	if verdict.NeedsEndpoint(in) {
		stage("probing the kubelet port")
		start = time.Now()
		res := probe.Probe(ctx, EndpointTarget(in, KubeletPort(c.KubeletPort, node), c.ProbeTimeout))
		done(verdict.StepEndpoint, start)
		in.Endpoint = &res
	}
	if c.APIPath != nil && verdict.NeedsAPIPath(in) {
		stage("asking the API server for this pod's log (its path to the kubelet)")
		start = time.Now()
		res := c.APIPath(ctx, in.File.Fingerprint)
		done(verdict.StepAPIServerPath, start)
		in.APIPath = &res
	}
	if c.Unverified != nil && !verdict.NeedsAPIPath(in) {
		if in.Endpoint == nil && in.CA != nil && in.CAErr == nil {
			// What does the kubelet present, though an earlier check
			// failed? (A kubelet without serverTLSBootstrap serves a
			// self-signed certificate.)
			stage("probing the kubelet port")
			start = time.Now()
			res := probe.Probe(ctx, EndpointTarget(in, KubeletPort(c.KubeletPort, node), c.ProbeTimeout))
			done(verdict.StepEndpoint, start)
			in.Endpoint = &res
		}
		if verdict.Unverifiable(in) {
			stage("asking the API server for this pod's log over an unverifiable kubelet certificate")
			res := c.Unverified(ctx, in.Endpoint.Fingerprint)
			in.Unverified = &res
		}
	}
	return in
}

// NodeSelector selects node's own Node and nothing else: the agent reads
// no other.
func NodeSelector(node string) func(*metav1.ListOptions) {
	return func(o *metav1.ListOptions) {
		o.FieldSelector = fields.OneTermEqualSelector("metadata.name", node).String()
	}
}

// KubeletPort is flag when set, else the Node's daemon endpoint port (node
// may be nil), else defaultKubeletPort.
func KubeletPort(flag int, node *corev1.Node) int {
	if flag == 0 && node != nil {
		flag = int(node.Status.DaemonEndpoints.KubeletEndpoint.Port)
	}
	if flag == 0 {
		flag = defaultKubeletPort
	}
	return flag
}

// EndpointTarget says where the kubelet port of in.Node is dialled and which
// name its certificate must carry: the address the inventory records for
// the node (in.Inventory.DialIP), else the first InternalIP (else the API
// server's address, else the node name), and the certificate is verified
// for the address the API server dials (in.Node.Dial). Without one: the
// dialled IP, or the node name for a DNS-only certificate.
func EndpointTarget(in evidence.Evidence, port int, timeout time.Duration) probe.Target {
	host, name := in.Node.Name, in.Node.Name
	if in.Node.Dial != "" {
		host = in.Node.Dial
	}
	dialIP, ok := in.Inventory.DialIP(in.Node)
	if !ok && len(in.Node.InternalIPs) > 0 {
		dialIP, ok = in.Node.InternalIPs[0], true
	}
	if ok {
		host = dialIP.String()
		if in.File.Leaf != nil && len(in.File.Leaf.IPAddresses) > 0 {
			name = host
		}
	}
	if in.Node.Dial != "" {
		name = in.Node.Dial
	}
	return probe.Target{Addr: net.JoinHostPort(host, strconv.Itoa(port)), ServerName: name, Roots: in.CA, Timeout: timeout, Now: in.ValidityTime()}
}

// DefaultPreferredAddressTypes is kubeadm's --kubelet-preferred-address-types
// for the API server: the order in which it picks a node's address to dial.
var DefaultPreferredAddressTypes = []corev1.NodeAddressType{corev1.NodeInternalIP, corev1.NodeExternalIP, corev1.NodeHostName}

// ParseAddressTypes reads a --kubelet-preferred-address-types value.
func ParseAddressTypes(s string) ([]corev1.NodeAddressType, error) {
	var out []corev1.NodeAddressType
	for _, part := range strings.Split(s, ",") {
		t := corev1.NodeAddressType(strings.TrimSpace(part))
		switch t {
		case corev1.NodeHostName, corev1.NodeInternalIP, corev1.NodeExternalIP, corev1.NodeInternalDNS, corev1.NodeExternalDNS:
			out = append(out, t)
		default:
			return nil, fmt.Errorf("%q is not an address type (Hostname, InternalIP, ExternalIP, InternalDNS, ExternalDNS)", part)
		}
	}
	return out, nil
}

// NodeInfo is what the verdict needs of a Node: its name, InternalIPs and
// the address the API server dials, the first one found in preferred
// (DefaultPreferredAddressTypes when empty), as the API server picks it.
func NodeInfo(n *corev1.Node, preferred []corev1.NodeAddressType) evidence.Node {
	info := evidence.Node{Name: n.Name}
	for _, addr := range n.Status.Addresses {
		ip, err := netip.ParseAddr(addr.Address)
		if err != nil || ip.Zone() != "" {
			continue
		}
		info.Reported = append(info.Reported, evidence.ReportedAddress{Type: string(addr.Type), IP: ip.Unmap()})
		if addr.Type == corev1.NodeInternalIP {
			info.InternalIPs = append(info.InternalIPs, ip.Unmap())
		}
	}
	if len(preferred) == 0 {
		preferred = DefaultPreferredAddressTypes
	}
	for _, t := range preferred {
		for _, addr := range n.Status.Addresses {
			if addr.Type == t && addr.Address != "" {
				info.Dial, info.DialType = addr.Address, string(t)
				if ip, err := netip.ParseAddr(addr.Address); err == nil {
					info.Dial = ip.Unmap().String()
				}
				return info
			}
		}
	}
	return info
}
