// Package evidence holds what one check of a node's serving certificate
// saw: package observe gathers it, package verdict judges it. Data only,
// so that observe (which asks the verdict what to look at next) and the
// verdict both import it and neither owns the other's input.
package evidence

import (
	"crypto/x509"
	"net/netip"
	"time"

	"github.com/certready/certready/reporter/servingcert/apipath"
	"github.com/certready/certready/reporter/servingcert/certfile"
	"github.com/certready/certready/reporter/servingcert/csrmatch"
	"github.com/certready/certready/reporter/servingcert/kubeletconfig"
	"github.com/certready/certready/reporter/servingcert/probe"
)

// Evidence is everything one check saw: what the verdict is computed from.
type Evidence struct {
	Node Node
	// Agent is the version of the agent judging, stated in a Ready
	// message's facts.
	Agent string
	// Now is the node's own clock.
	Now time.Time
	// Clock compares the node's clock with the API server's. When it is
	// known, validity is judged by the API server's clock (a node clock
	// behind real time would call an expired certificate valid), and a
	// skew beyond its Max is a failure of its own (ClockSkew).
	Clock Clock
	// CA verifies kubelet serving certificates; CAErr says why it could not
	// be loaded (then nothing can be verified and the verdict is Unknown).
	CA    *x509.CertPool
	CAErr error
	File  certfile.Observation
	// CSR is nil when the CSRs were not looked at.
	CSR *CSR
	// SkipCSR allows a verdict without CSR evidence (the node-problem-detector
	// plugin without API credentials); the message then says so.
	SkipCSR bool
	// Endpoint is nil when the kubelet port was not probed.
	Endpoint *probe.Result
	// RequireAPIPath: the ready verdict needs APIPath proven as well
	// (--apiserver-proof=required); APIPath is nil when it was not asked.
	RequireAPIPath bool
	APIPath        *apipath.Result
	// Kubelet is what the kubelet's configuration file says about
	// rotation (zero: not read). A kubelet configured without
	// serverTLSBootstrap never requests a serving certificate: a verdict
	// that is not ready names that cause at once
	// (verdict.KubeletServingBootstrapOff).
	Kubelet kubeletconfig.Settings
	// Unverified is what the API server answered when asked for this
	// pod's log while the kubelet presented a certificate the CA does not
	// verify (nil: not asked). Proven means the API server verifies no
	// kubelet: a finding about the cluster (verdict.APIServerVerifiesNoKubelet),
	// never a ready verdict.
	Unverified *apipath.Result
	// Inventory is what a desired-state inventory records for this node
	// (nil: none configured).
	Inventory *Inventory
	// ClientNotAfter is the expiry of the kubelet's client certificate
	// (<pki-dir>/kubelet-client-current.pem), zero when it could not be
	// read. It is stated in a Ready message's facts and judges nothing.
	ClientNotAfter time.Time
}

// Clock is the node's clock against the API server's (the Date of its
// responses).
type Clock struct {
	Known bool
	// Skew is the node's clock minus the API server's (negative: behind).
	Skew time.Duration
	// Max is the largest skew tolerated either way; 0: no bound.
	Max time.Duration
}

// ValidityTime is the time validity is judged by: the API server's when
// known, else the node's.
func (in Evidence) ValidityTime() time.Time {
	if in.Clock.Known {
		return in.Now.Add(-in.Clock.Skew)
	}
	return in.Now
}

// Node is what the verdict needs to know about the node.
type Node struct {
	Name        string
	InternalIPs []netip.Addr
	// Dial is the address the API server dials for logs, exec and
	// port-forward (the first of the node's addresses in its
	// --kubelet-preferred-address-types order): an IP or a DNS name the
	// certificate must cover. Empty: not known.
	Dial string
	// DialType names Dial's address type, for messages.
	DialType string
	// Reported are the IP addresses in the Node's status.addresses, with
	// their types, to compare with an inventory (Drift).
	Reported []ReportedAddress
}

// CSR is what the CSRs say, plus the proofs that survive the
// controller manager's one-hour garbage collection of issued CSRs.
type CSR struct {
	Match csrmatch.Result
	// LookupErr is set when the CSRs could not be read.
	LookupErr error
	// Remembered is the CSR that proved this very fingerprint earlier in this
	// process, if any: it may since have been garbage-collected.
	Remembered *csrmatch.Result
	// Retention is how long issued CSRs are kept (the controller manager's
	// one hour). A certificate older than that that chains to the CA with
	// this node's identity is accepted without a CSR.
	Retention time.Duration
}

// Inventory is what a desired-state inventory (--inventory: a ConfigMap or
// a file the node cannot write) records for the node. The agent dials the
// address it records, and the verdict names the drift of the Node's own
// addresses from it; it decides no status.
type Inventory struct {
	// Source names it in messages ("ConfigMap certready-system/inventory").
	Source string
	// Err: it could not be read (absent, unparsable); the Node's
	// addresses are used, and the message says so.
	Err error
	// Listed: it has an entry for this node (IPs and DNSNames).
	Listed   bool
	IPs      []netip.Addr
	DNSNames []string
}

// ReportedAddress is one IP address in the Node's status.addresses.
type ReportedAddress struct {
	Type string // InternalIP, ExternalIP, ...
	IP   netip.Addr
}

// DialIP is the inventory's address the agent dials: its first IP of the
// family of the Node's first InternalIP (its first IP when the Node reports
// none of that family); ok is false without a listed IP.
func (inv *Inventory) DialIP(n Node) (netip.Addr, bool) {
	if inv == nil || inv.Err != nil || !inv.Listed || len(inv.IPs) == 0 {
		return netip.Addr{}, false
	}
	if len(n.InternalIPs) > 0 {
		for _, ip := range inv.IPs {
			if ip.Unmap().Is4() == n.InternalIPs[0].Unmap().Is4() {
				return ip.Unmap(), true
			}
		}
	}
	return inv.IPs[0].Unmap(), true
}
