// Package policy decides, as a pure function, whether a kubelet-serving CSR
// proves the identity of the node that sent it. The policy is an ordered
// list of named rules (rules); a decision is Approve, or a refusal naming
// the first rule that failed, marked Transient when waiting may fix it (the
// node is not in the inventory yet, the backlog is too long).
package policy

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rsa"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"net/netip"
	"slices"
	"sort"
	"strings"
	"time"

	certv1 "k8s.io/api/certificates/v1"

	"github.com/certready/certready/internal/names"
	"github.com/certready/certready/reporter/approver/inventory"
)

// Rule names a check; refusals carry it as their reason.
type Rule string

const (
	RuleApproved             Rule = "CertReadyValidatedNodeIdentity"
	RuleWrongSigner          Rule = "SignerNotKubeletServing"
	RuleUsernameNotNode      Rule = "UsernameNotNode"
	RuleGroupsMissingNodes   Rule = "GroupsMissingSystemNodes"
	RuleRequestNotOnePEM     Rule = "RequestNotOnePEMBlock"
	RuleRequestUnparseable   Rule = "RequestUnparseable"
	RuleRequestSignature     Rule = "RequestSignatureInvalid"
	RuleSubjectCN            Rule = "SubjectCNMismatch"
	RuleSubjectOrg           Rule = "SubjectOrganizationMismatch"
	RuleUsages               Rule = "UsagesNotAllowed"
	RuleNoSAN                Rule = "NoSAN"
	RuleEmailOrURISAN        Rule = "EmailOrURISAN"
	RuleSANDenied            Rule = "SANDenied"
	RuleDNSSANNotInInventory Rule = "DNSSANNotInInventory"
	RuleIPSANNotInInventory  Rule = "IPSANNotInInventory"
	RuleIPSANNotAllowed      Rule = "IPSANOutsideAllowedCIDRs"
	RuleExpirationTooLong    Rule = "ExpirationTooLong"
	RuleNodeNotInInventory   Rule = "NodeNotInInventory"
	RuleAddressClaimed       Rule = "AddressClaimedByOtherNode"
	RuleFloodGuard           Rule = "FloodGuard"
	RuleSuperseded           Rule = "SupersededByNewerRequest"
	RuleRequestTooLarge      Rule = "RequestTooLarge"
	RuleTooManySANs          Rule = "TooManySANs"
	RuleKeyNotAllowed        Rule = "KeyNotAllowed"
	// DNS SANs no node may have, whatever it reports: not a host name,
	// a Service's or a Pod's name, outside --allowed-dns-suffixes.
	RuleDNSSANNotHostname      Rule = "DNSSANNotHostname"
	RuleDNSSANClusterName      Rule = "DNSSANServiceOrPodName"
	RuleDNSSANNotAllowedSuffix Rule = "DNSSANOutsideAllowedSuffixes"
	// IP SANs a Node reported about itself (node inventory): at most
	// MaxSelfReportedIPs, each inside a node network the cluster knows.
	RuleTooManySelfReportedIPs Rule = "TooManySelfReportedIPSANs"
	RuleIPSANSelfReported      Rule = "IPSANSelfReportedOutsideNodeNetworks"
)

// Bounds on what a request may carry, whatever the node reports: a real
// kubelet asks for its host name and the addresses in its Node status (a
// multi-NIC, dual-stack node with secondary addresses stays well inside
// DefaultMaxSANs), with an ECDSA P-256 key in a request of about 500 bytes.
const (
	DefaultMaxSANs         = 100
	DefaultMaxRequestBytes = 32 << 10
	minRSABits             = 2048
	maxRSABits             = 8192
	// DefaultMaxSelfReportedIPs bounds the IP SANs a request takes from
	// what its node wrote about itself: a kubelet reports one address per
	// family and type (InternalIP and ExternalIP, IPv4 and IPv6).
	DefaultMaxSelfReportedIPs = 4
)

// Config is the operator's policy: what the flags say, nothing learned
// from the cluster (that is Evidence).
type Config struct {
	// AllowedCIDRs, when set, must contain every IP SAN (in every inventory mode).
	AllowedCIDRs []netip.Prefix
	// DenyCIDRs never appear in a SAN (for example the service range).
	DenyCIDRs []netip.Prefix
	// DenyIPs never appear in a SAN (the API server's addresses that are
	// no node's own: --apiserver-ips and the Service IP).
	DenyIPs []netip.Addr
	// DenyDNSNames never appear in a SAN (the API server's external names),
	// compared case-insensitively, trailing dot ignored; "*.<domain>" is a
	// pattern that refuses every name one label under domain, as a TLS
	// client matches it (ParseDenyName validates them).
	DenyDNSNames []string
	// AllowedDNSSuffixes, when set, must end every DNS SAN but the node's
	// own name (domains, normalized, no leading dot: ParseDNSSuffix).
	AllowedDNSSuffixes []string
	// MaxSelfReportedIPs bounds the IP SANs of a request that its node
	// reported about itself (inventory.Entry.SelfReported);
	// DefaultMaxSelfReportedIPs when 0.
	MaxSelfReportedIPs int
	// MaxExpiration bounds spec.expirationSeconds when it is set.
	MaxExpiration time.Duration
	// MaxSANs bounds the number of SANs (DefaultMaxSANs when 0).
	MaxSANs int
	// MaxRequestBytes bounds spec.request (DefaultMaxRequestBytes when 0).
	MaxRequestBytes int
}

// Evidence is what the cluster tells the policy besides the request: the
// inventory and the views the approver keeps of Nodes, Machines, the API
// server and the cluster's networks. Every field reads memory only; a nil
// function is a view with nothing in it.
type Evidence struct {
	// Inventory records each node's names and addresses (required).
	Inventory inventory.Source
	// APIServer returns what is learned now of the API server's own names
	// and addresses (its certificate, its clients' configuration, its
	// Service and EndpointSlice): only a node for which APIServerHost holds
	// may have one of those, and only its own (HostOwn).
	APIServer func() APIServer
	// APIServerHost reports whether node hosts an API server, from
	// evidence the node cannot forge (a label its kubelet may not set, a
	// Machine); APIServerHostRule says which, for messages. nil: no node
	// does. On kubeadm and kind an API server listens on its control-plane
	// node's own address and presents that node's name, and that node's
	// kubelet asks for a serving certificate for them.
	APIServerHost     func(node string) bool
	APIServerHostRule string
	// HostOwn returns, for a node that hosts an API server, the addresses
	// and names that are its own: recorded by a source the node cannot
	// write (a static inventory, a Machine), or reported before it was
	// labelled as an API server host. ok is false when nothing is known:
	// then only an address an API server advertises as its endpoint and the
	// node's own name count as its own.
	HostOwn func(node string) (own inventory.Entry, ok bool)
	// NodeNetwork says whether ip lies in a node network the cluster
	// knows besides AllowedCIDRs (learned from the InternalIPs a cloud
	// controller wrote for Nodes), and which.
	NodeNetwork func(ip netip.Addr) (netip.Prefix, bool)
	// NotNodeAddress says why ip is never a node's own (inside a Service
	// CIDR or a Node's Pod CIDR), or "".
	NotNodeAddress func(ip netip.Addr) string
}

// APIServer holds the API server's own addresses and names, each with
// where it was learned (for messages).
type APIServer struct {
	// Addresses (unmapped) it listens on, answers on or presents.
	Addresses map[netip.Addr]string
	// Endpoints: those of Addresses an API server advertises as its own
	// endpoint (default/kubernetes): on kubeadm and kind, a control-plane
	// node's InternalIP.
	Endpoints map[netip.Addr]bool
	// Names (normalized: lower case, no trailing dot) it answers on.
	Names map[string]string
	// Wildcards are the domains under which it answers on every name one
	// label down: "api.example.com" for a certificate that carries
	// "*.api.example.com" (normalized). A name a wildcard covers is the
	// API server's as much as one in Names.
	Wildcards map[string]string
}

// NormalizeDNS is how DNS compares names: case-insensitively, with or
// without the root's trailing dot.
func NormalizeDNS(s string) string { return strings.ToLower(strings.TrimSuffix(s, ".")) }

// Decision is the policy's answer.
type Decision struct {
	Approve   bool
	Node      string // from spec.username, when it is a node's
	Rule      Rule
	Message   string
	Transient bool // retry later instead of recording a final refusal
	// Request is the parsed request, once a rule parsed it (nil for one
	// refused before: a wrong signer, a request too large or not PEM):
	// for the ledger and for diagnosis.
	Request *x509.CertificateRequest
}

// Allowed usage sets: the ones the kubelet-serving signer accepts, so that
// an approval never ends Approved,Failed.
var allowedUsages = [][]certv1.KeyUsage{
	{certv1.UsageDigitalSignature, certv1.UsageServerAuth},
	{certv1.UsageDigitalSignature, certv1.UsageKeyEncipherment, certv1.UsageServerAuth},
}

// Backlog is what the approver's queue knows beyond the CSR itself, for the
// rules that need it: only a node's newest request is a candidate, and the
// flood guard stops approving while too many nodes wait at once.
type Backlog struct {
	// Newer names a CSR of the same node that supersedes this one, or "".
	Newer string
	// PendingNodes counts the distinct nodes of the inventory with a
	// pending request (up to MaxPending); MaxPending 0: no flood guard.
	PendingNodes, MaxPending int
}

// evaluation carries one CSR through the rules; a rule reads what the
// rules before it established (the node, the parsed request, its IPs, the
// node's inventory entry).
type evaluation struct {
	csr     *certv1.CertificateSigningRequest
	cfg     Config
	ev      Evidence
	api     APIServer // ev.APIServer's answer, once per evaluation
	backlog Backlog

	node  string
	block *pem.Block
	req   *x509.CertificateRequest
	ips   []netip.Addr
	entry inventory.Entry
}

// rule is one named check of the policy: check says why the request fails
// it, or "" when it passes. A transient refusal is one that waiting may
// fix; the controller retries it instead of recording a final refusal.
type rule struct {
	name      Rule
	transient bool
	check     func(e *evaluation) string
}

// rules is the policy, in order: the first rule a request fails decides.
// A new rule is one function and one row here.
var rules = []rule{
	{name: RuleSuperseded, check: superseded},
	{name: RuleFloodGuard, transient: true, check: floodGuard},
	{name: RuleWrongSigner, check: wrongSigner},
	{name: RuleUsernameNotNode, check: usernameNotNode},
	{name: RuleGroupsMissingNodes, check: groupsMissingNodes},
	{name: RuleRequestTooLarge, check: requestTooLarge},
	{name: RuleRequestNotOnePEM, check: requestNotOnePEM},
	{name: RuleRequestUnparseable, check: requestUnparseable},
	{name: RuleRequestSignature, check: requestSignature},
	{name: RuleSubjectCN, check: subjectCN},
	{name: RuleSubjectOrg, check: subjectOrg},
	{name: RuleKeyNotAllowed, check: keyNotAllowed},
	{name: RuleUsages, check: usagesNotAllowed},
	{name: RuleEmailOrURISAN, check: emailOrURISAN},
	{name: RuleNoSAN, check: noSAN},
	{name: RuleTooManySANs, check: tooManySANs},
	{name: RuleExpirationTooLong, check: expirationTooLong},
	{name: RuleSANDenied, check: sanDenied},
	{name: RuleDNSSANNotHostname, check: dnsSANNotHostname},
	{name: RuleDNSSANClusterName, check: dnsSANClusterName},
	{name: RuleDNSSANNotAllowedSuffix, check: dnsSANNotAllowedSuffix},
	{name: RuleNodeNotInInventory, transient: true, check: nodeNotInInventory},
	{name: RuleDNSSANNotInInventory, check: dnsSANNotInInventory},
	{name: RuleIPSANNotInInventory, check: ipSANNotInInventory},
	{name: RuleIPSANNotAllowed, check: ipSANNotAllowed},
	{name: RuleTooManySelfReportedIPs, check: tooManySelfReportedIPs},
	{name: RuleIPSANSelfReported, check: ipSANSelfReported},
	{name: RuleAddressClaimed, check: addressClaimed},
}

// Rules lists every refusal rule in the order they apply, for metrics and
// documentation.
var Rules = func() []Rule {
	out := make([]Rule, len(rules))
	for i, r := range rules {
		out[i] = r.name
	}
	return out
}()

// Evaluate decides on csr: the first rule it fails refuses it, naming the
// rule; a request that passes every rule is approved.
func Evaluate(csr *certv1.CertificateSigningRequest, cfg Config, ev Evidence, backlog Backlog) Decision {
	e := &evaluation{csr: csr, cfg: cfg, ev: ev, backlog: backlog}
	if ev.APIServer != nil {
		e.api = ev.APIServer()
	}
	for _, r := range rules {
		if why := r.check(e); why != "" {
			return Decision{Node: e.node, Rule: r.name, Message: string(r.name) + ": " + why, Transient: r.transient, Request: e.req}
		}
	}
	return Decision{
		Approve: true, Node: e.node, Rule: RuleApproved, Request: e.req,
		Message: fmt.Sprintf("certready: %s proved node identity: CN/O match, IP SANs %v and DNS SANs %v recorded for %s in %s",
			csr.Spec.Username, e.ips, e.req.DNSNames, e.node, ev.Inventory.Describe()),
	}
}

func superseded(e *evaluation) string {
	if e.backlog.Newer == "" {
		return ""
	}
	return fmt.Sprintf("%s is pending too and newer; only a node's newest request is a candidate", e.backlog.Newer)
}

func floodGuard(e *evaluation) string {
	if max := e.backlog.MaxPending; max <= 0 || e.backlog.PendingNodes < max {
		return ""
	}
	return fmt.Sprintf("%d or more distinct nodes of the inventory have kubelet-serving CSRs pending, the limit is %d (--max-pending); approving nothing", e.backlog.MaxPending, e.backlog.MaxPending)
}

func wrongSigner(e *evaluation) string {
	if s := e.csr.Spec.SignerName; s != certv1.KubeletServingSignerName {
		return fmt.Sprintf("signer %q is not %s", s, certv1.KubeletServingSignerName)
	}
	return ""
}

func usernameNotNode(e *evaluation) string {
	node, ok := names.NodeOf(e.csr.Spec.Username)
	if !ok {
		return fmt.Sprintf("username %q is not system:node:<name>", e.csr.Spec.Username)
	}
	e.node = node
	return ""
}

func groupsMissingNodes(e *evaluation) string {
	if g := e.csr.Spec.Groups; !slices.Contains(g, names.NodesGroup) {
		return fmt.Sprintf("groups %v lack %s", g, names.NodesGroup)
	}
	return ""
}

// requestTooLarge refuses a request over the bound, and one the informer
// already dropped for that (names.DroppedRequestKey): the bytes are never
// parsed.
func requestTooLarge(e *evaluation) string {
	spec, limit := e.csr.Spec, e.cfg.RequestBound()
	if dropped := spec.Extra[names.DroppedRequestKey]; len(dropped) > 0 {
		return fmt.Sprintf("spec.request of %s bytes, at most %d (--max-request-bytes); dropped unread (and left as it is, labels included)", dropped[0], limit)
	}
	if len(spec.Request) > limit {
		return fmt.Sprintf("spec.request of %d bytes, at most %d (--max-request-bytes)", len(spec.Request), limit)
	}
	return ""
}

func requestNotOnePEM(e *evaluation) string {
	block, rest := pem.Decode(e.csr.Spec.Request)
	switch {
	case block == nil || block.Type != "CERTIFICATE REQUEST":
		return "spec.request is not a PEM CERTIFICATE REQUEST"
	case len(bytes.TrimSpace(rest)) != 0:
		return "spec.request holds more than one PEM block or trailing data"
	case len(block.Headers) != 0:
		return "the PEM block carries headers"
	}
	e.block = block
	return ""
}

func requestUnparseable(e *evaluation) string {
	req, err := x509.ParseCertificateRequest(e.block.Bytes)
	if err != nil {
		return err.Error()
	}
	ips := make([]netip.Addr, 0, len(req.IPAddresses))
	for _, raw := range req.IPAddresses {
		ip, ok := netip.AddrFromSlice(raw)
		if !ok {
			return fmt.Sprintf("IP SAN of %d bytes", len(raw))
		}
		ips = append(ips, ip)
	}
	e.req, e.ips = req, ips
	return ""
}

func requestSignature(e *evaluation) string {
	if err := e.req.CheckSignature(); err != nil {
		return err.Error()
	}
	return ""
}

func subjectCN(e *evaluation) string {
	if cn, user := e.req.Subject.CommonName, e.csr.Spec.Username; cn != user {
		return fmt.Sprintf("subject CN %q differs from username %q", cn, user)
	}
	return ""
}

func subjectOrg(e *evaluation) string {
	if o := e.req.Subject.Organization; !slices.Equal(o, []string{names.NodesGroup}) {
		return fmt.Sprintf("subject O %q, want exactly [%s]", o, names.NodesGroup)
	}
	return ""
}

func keyNotAllowed(e *evaluation) string {
	if why := keyRefused(e.req.PublicKey); why != "" {
		return fmt.Sprintf("%s; want ECDSA P-256 or P-384, or RSA of %d to %d bits", why, minRSABits, maxRSABits)
	}
	return ""
}

func usagesNotAllowed(e *evaluation) string {
	if u := e.csr.Spec.Usages; !usagesAllowed(u) {
		return fmt.Sprintf("usages %v, want {digital signature, server auth} or {digital signature, key encipherment, server auth}", u)
	}
	return ""
}

func emailOrURISAN(e *evaluation) string {
	if len(e.req.EmailAddresses) > 0 || len(e.req.URIs) > 0 {
		return fmt.Sprintf("email SANs %v, URI SANs %v are not allowed", e.req.EmailAddresses, e.req.URIs)
	}
	return ""
}

func noSAN(e *evaluation) string {
	if len(e.req.DNSNames) == 0 && len(e.ips) == 0 {
		return "the request has no DNS or IP SAN"
	}
	return ""
}

func tooManySANs(e *evaluation) string {
	if n, limit := len(e.req.DNSNames)+len(e.ips), orDefault(e.cfg.MaxSANs, DefaultMaxSANs); n > limit {
		return fmt.Sprintf("%d SANs, at most %d (--max-sans)", n, limit)
	}
	return ""
}

func expirationTooLong(e *evaluation) string {
	exp, max := e.csr.Spec.ExpirationSeconds, e.cfg.MaxExpiration
	if exp != nil && max > 0 && time.Duration(*exp)*time.Second > max {
		return fmt.Sprintf("expirationSeconds %d exceeds the maximum %s", *exp, max)
	}
	return ""
}

// sanDenied refuses names and addresses no node may have: the deny lists,
// the API server's own (but to a node that hosts an API server, its own),
// and addresses that are never a node's.
func sanDenied(e *evaluation) string {
	host := apiServerHost{node: e.node, ev: e.ev, api: e.api}
	for _, dns := range e.req.DNSNames {
		if why := deniedDNS(dns, e.cfg); why != "" {
			return fmt.Sprintf("DNS SAN %q is %s", dns, why)
		}
		if why := host.refusesName(dns); why != "" {
			return fmt.Sprintf("DNS SAN %q is %s", dns, why)
		}
	}
	for _, ip := range e.ips {
		if why := deniedIP(ip, e.cfg, e.ev.NotNodeAddress); why != "" {
			return fmt.Sprintf("IP SAN %s is %s", ip, why)
		}
		if why := host.refusesAddress(ip); why != "" {
			return fmt.Sprintf("IP SAN %s is %s", ip, why)
		}
	}
	return ""
}

// dnsSANNotHostname refuses a DNS SAN that is no host name (an
// underscore, a control character, an empty or overlong label): no
// kubelet has one, and a client's name matching may read it otherwise
// than the policy. The node's own name passes: the API server validated
// it as a Node's name.
func dnsSANNotHostname(e *evaluation) string {
	for _, dns := range e.req.DNSNames {
		if isNodeName(dns, e.node) {
			continue
		}
		if why := HostnameProblem(dns); why != "" {
			return fmt.Sprintf("DNS SAN %q of %s is not a host name: %s", dns, e.node, why)
		}
	}
	return ""
}

// dnsSANClusterName refuses the names the cluster's DNS gives Services and
// Pods, in their long and short forms (clusterName), the node's own name
// included: a certificate for one, signed by the cluster CA, passes for
// that Service or Pod with every in-cluster client that trusts the CA.
func dnsSANClusterName(e *evaluation) string {
	for _, dns := range e.req.DNSNames {
		if why := clusterName(NormalizeDNS(dns), e.cfg.AllowedDNSSuffixes); why != "" {
			return fmt.Sprintf("DNS SAN %q of %s is %s", dns, e.node, why)
		}
	}
	return ""
}

// dnsSANNotAllowedSuffix refuses, when --allowed-dns-suffixes is set, a
// DNS SAN under none of them; the node's own name is proven by its
// credentials.
func dnsSANNotAllowedSuffix(e *evaluation) string {
	allowed := e.cfg.AllowedDNSSuffixes
	if len(allowed) == 0 {
		return ""
	}
	for _, dns := range e.req.DNSNames {
		if isNodeName(dns, e.node) {
			continue
		}
		if _, ok := underSuffix(NormalizeDNS(dns), allowed); !ok {
			return fmt.Sprintf("DNS SAN %q of %s is under none of --allowed-dns-suffixes %v; add its domain there if it is a host domain of yours", dns, e.node, allowed)
		}
	}
	return ""
}

func isNodeName(dns, node string) bool { return NormalizeDNS(dns) == NormalizeDNS(node) }

func nodeNotInInventory(e *evaluation) string {
	entry, found := e.ev.Inventory.Lookup(e.node)
	if !found {
		return fmt.Sprintf("%s not recorded in the inventory (%s)", e.node, e.ev.Inventory.Describe())
	}
	e.entry = entry
	return ""
}

func dnsSANNotInInventory(e *evaluation) string {
	for _, dns := range e.req.DNSNames {
		if !dnsRecorded(dns, e.node, e.entry.DNSNames) {
			return fmt.Sprintf("%s not recorded for %s", dns, e.node)
		}
	}
	return ""
}

func ipSANNotInInventory(e *evaluation) string {
	for _, ip := range e.ips {
		if !slices.Contains(e.entry.IPs, ip) {
			return fmt.Sprintf("%s not recorded for %s", ip, e.node)
		}
	}
	return ""
}

func ipSANNotAllowed(e *evaluation) string {
	allowed := e.cfg.AllowedCIDRs
	if len(allowed) == 0 {
		return ""
	}
	for _, ip := range e.ips {
		if !slices.ContainsFunc(allowed, func(p netip.Prefix) bool { return p.Contains(ip) }) {
			return fmt.Sprintf("%s is outside --allowed-cidrs %v", ip, allowed)
		}
	}
	return ""
}

// tooManySelfReportedIPs bounds the IP SANs taken from what the node wrote
// about itself (node inventory): a node reporting many addresses it does
// not own asks for a certificate for each of them.
func tooManySelfReportedIPs(e *evaluation) string {
	self := e.entry.SelfReported
	if len(self) == 0 {
		return ""
	}
	n := 0
	for _, ip := range e.ips {
		if slices.Contains(self, ip) {
			n++
		}
	}
	if limit := orDefault(e.cfg.MaxSelfReportedIPs, DefaultMaxSelfReportedIPs); n > limit {
		return fmt.Sprintf("%d IP SANs that %s reported about itself (its status addresses written by no cloud controller of --cloud-controller-managers), at most %d (--max-self-reported-ips)", n, e.node, limit)
	}
	return ""
}

// ipSANSelfReported refuses an IP SAN that the node reported about itself
// (node inventory) outside every node network the cluster knows:
// --allowed-cidrs, a network in which a cloud controller wrote a Node's
// InternalIP, or the addresses the node first reported (its registration,
// as the approver saw it). A node may report any address; an address in
// none of those is as likely a load balancer's or an outside service's.
func ipSANSelfReported(e *evaluation) string {
	self := e.entry.SelfReported
	for _, ip := range e.ips {
		if !slices.Contains(self, ip) || slices.Contains(e.entry.Registered, ip) {
			continue
		}
		if slices.ContainsFunc(e.cfg.AllowedCIDRs, func(p netip.Prefix) bool { return p.Contains(ip) }) {
			continue
		}
		if e.ev.NodeNetwork != nil {
			if _, ok := e.ev.NodeNetwork(ip); ok {
				continue
			}
		}
		return fmt.Sprintf("%s was reported by %s about itself (written by no cloud controller of --cloud-controller-managers) and lies in no node network the cluster knows: not in --allowed-cidrs, not in %s (no cloud controller wrote a Node's InternalIP in it), not among the addresses %s first reported %v; list the nodes' network in --allowed-cidrs",
			ip, e.node, inventory.LearnedNetwork(ip), e.node, e.entry.Registered)
	}
	return ""
}

// addressClaimed refuses a name or an address that another node has or
// reports too: it proves neither. A node's own name is proven by its
// credentials, whoever else reports it.
func addressClaimed(e *evaluation) string {
	claims, ok := e.ev.Inventory.(inventory.Claims)
	if !ok {
		return ""
	}
	for _, dns := range e.req.DNSNames {
		if NormalizeDNS(dns) == NormalizeDNS(e.node) {
			continue
		}
		if others := others(claims.NameClaimants(NormalizeDNS(dns)), e.node); len(others) > 0 {
			return fmt.Sprintf("%s is also the name of, or reported by, %s: a name two nodes claim proves neither", dns, strings.Join(others, ", "))
		}
	}
	for _, ip := range e.ips {
		if others := others(claims.Claimants(ip), e.node); len(others) > 0 {
			return fmt.Sprintf("%s is also claimed by %s: an address two nodes report proves neither", ip, strings.Join(others, ", "))
		}
	}
	return ""
}

func others(claimants []string, node string) []string {
	return slices.DeleteFunc(claimants, func(n string) bool { return n == node })
}

// RequestBound is the largest spec.request approved (MaxRequestBytes, or
// its default): the CSR cache drops larger ones unread.
func (c Config) RequestBound() int { return orDefault(c.MaxRequestBytes, DefaultMaxRequestBytes) }

func orDefault(v, def int) int {
	if v > 0 {
		return v
	}
	return def
}

// RequestDropped says whether the CSR cache dropped csr's request for its
// size (names.DroppedRequestKey).
func RequestDropped(csr *certv1.CertificateSigningRequest) bool {
	return len(csr.Spec.Extra[names.DroppedRequestKey]) > 0
}

// ParseRequest parses spec.request as the policy does (one PEM
// CERTIFICATE REQUEST, nothing around it), or returns nil.
func ParseRequest(data []byte) *x509.CertificateRequest {
	e := &evaluation{csr: &certv1.CertificateSigningRequest{Spec: certv1.CertificateSigningRequestSpec{Request: data}}}
	if requestNotOnePEM(e) != "" || requestUnparseable(e) != "" {
		return nil
	}
	return e.req
}

// KeyType names a request's public key as records show it: "ECDSA
// P-256", "RSA 2048", or the Go type of anything else.
func KeyType(pub any) string {
	switch k := pub.(type) {
	case *ecdsa.PublicKey:
		return "ECDSA " + k.Curve.Params().Name
	case *rsa.PublicKey:
		return fmt.Sprintf("RSA %d", k.N.BitLen())
	case nil:
		return ""
	}
	return fmt.Sprintf("%T", pub)
}

// SANs lists what req asks for, DNS names first, then IP addresses, then
// the email and URI SANs no kubelet asks for.
func SANs(req *x509.CertificateRequest) []string {
	if req == nil {
		return nil
	}
	out := slices.Clone(req.DNSNames)
	for _, ip := range req.IPAddresses {
		out = append(out, ip.String())
	}
	out = append(out, req.EmailAddresses...)
	for _, u := range req.URIs {
		out = append(out, u.String())
	}
	return out
}

// keyRefused says why a requested public key is not allowed, or "".
func keyRefused(pub any) string {
	switch k := pub.(type) {
	case *ecdsa.PublicKey:
		if k.Curve != elliptic.P256() && k.Curve != elliptic.P384() {
			return fmt.Sprintf("ECDSA key on curve %s", k.Curve.Params().Name)
		}
	case *rsa.PublicKey:
		if bits := k.N.BitLen(); bits < minRSABits || bits > maxRSABits {
			return fmt.Sprintf("RSA key of %d bits", bits)
		}
	default:
		return fmt.Sprintf("%T key", pub)
	}
	return ""
}

// apiServerHost applies the rule for the API server's own names and
// addresses: refused to every node but one that hosts an API server, and
// to that one unless they are its own.
type apiServerHost struct {
	node string
	ev   Evidence
	api  APIServer
}

func (h apiServerHost) hosts() (bool, string) {
	if h.ev.APIServerHost == nil {
		return false, "none is configured"
	}
	return h.ev.APIServerHost(h.node), h.ev.APIServerHostRule
}

// refusesName applies the rule to the API server's names and to every
// name its certificate's wildcards cover ("prod.api.example.com" under
// "*.api.example.com"): clients reaching the API server by such a name
// take a certificate for it, signed by the cluster CA, for the API
// server's.
func (h apiServerHost) refusesName(dns string) string {
	n := NormalizeDNS(dns)
	what := "an API server name"
	source, ok := h.api.Names[n]
	if !ok && len(h.api.Wildcards) > 0 {
		parent := parentDomain(n)
		if source, ok = h.api.Wildcards[parent]; ok {
			what = "an API server name under its wildcard *." + parent
		}
	}
	if !ok {
		return ""
	}
	hosts, rule := h.hosts()
	if !hosts {
		return fmt.Sprintf("%s (%s); only a node that hosts an API server may have its own (%s), and %s does not", what, source, rule, h.node)
	}
	if n == NormalizeDNS(h.node) {
		return ""
	}
	if own, known := h.own(); known && slices.ContainsFunc(own.DNSNames, func(o string) bool { return NormalizeDNS(o) == n }) {
		return ""
	}
	return fmt.Sprintf("%s (%s) and not %s's own: neither its node name nor recorded for it before it was labelled as an API server host", what, source, h.node)
}

func (h apiServerHost) refusesAddress(ip netip.Addr) string {
	u := ip.Unmap()
	source, ok := h.api.Addresses[u]
	if !ok {
		return ""
	}
	hosts, rule := h.hosts()
	if !hosts {
		return fmt.Sprintf("an API server address (%s); only a node that hosts an API server may have its own (%s), and %s does not", source, rule, h.node)
	}
	if own, known := h.own(); known {
		if slices.ContainsFunc(own.IPs, func(o netip.Addr) bool { return o.Unmap() == u }) {
			return ""
		}
		return fmt.Sprintf("an API server address (%s) and not among the addresses recorded for %s before it was labelled as an API server host", source, h.node)
	}
	if h.api.Endpoints[u] {
		return "" // an API server advertises it; the inventory checks that the node reports it
	}
	return fmt.Sprintf("an API server address (%s) that no API server advertises as its endpoint: no node's own", source)
}

func (h apiServerHost) own() (inventory.Entry, bool) {
	if h.ev.HostOwn == nil {
		return inventory.Entry{}, false
	}
	return h.ev.HostOwn(h.node)
}

func usagesAllowed(got []certv1.KeyUsage) bool {
	set := map[certv1.KeyUsage]bool{}
	for _, u := range got {
		set[u] = true
	}
	keys := make([]certv1.KeyUsage, 0, len(set))
	for u := range set {
		keys = append(keys, u)
	}
	sort.Slice(keys, func(i, j int) bool { return keys[i] < keys[j] })
	for _, allowed := range allowedUsages {
		want := slices.Clone(allowed)
		sort.Slice(want, func(i, j int) bool { return want[i] < want[j] })
		if slices.Equal(keys, want) {
			return true
		}
	}
	return false
}

func dnsRecorded(dns, node string, recorded []string) bool {
	n := NormalizeDNS(dns)
	if n == NormalizeDNS(node) {
		return true
	}
	for _, r := range recorded {
		if n == NormalizeDNS(r) {
			return true
		}
	}
	return false
}

// deniedDNS says why a DNS SAN may never be approved, or "".
func deniedDNS(dns string, cfg Config) string {
	n := NormalizeDNS(dns)
	for _, d := range cfg.DenyDNSNames {
		d = NormalizeDNS(d)
		if n == d {
			return "an API server name (--apiserver-names)"
		}
		if wildcardCovers(d, n) {
			return "an API server name (--apiserver-names " + d + ")"
		}
	}
	if _, err := netip.ParseAddr(n); err == nil {
		return "an IP address written as a name (clients that accept it would take the certificate for that address)"
	}
	switch {
	case strings.Contains(n, "*"):
		return "a wildcard"
	case n == "kubernetes" || strings.HasPrefix(n, "kubernetes.default"):
		return "the API server's service name"
	case strings.Contains(n, ".svc"):
		return "a cluster service name"
	case n == "localhost" || strings.HasSuffix(n, ".localhost"):
		return "localhost"
	case n == "":
		return "empty"
	}
	return ""
}

// deniedIP says why an IP SAN may never be approved, or "" (notNode:
// Evidence.NotNodeAddress). Addresses are classified unmapped, so
// ::ffff:127.0.0.1 is loopback too.
func deniedIP(ip netip.Addr, cfg Config, notNode func(netip.Addr) string) string {
	u := ip.Unmap()
	switch {
	case u.IsLoopback():
		return "loopback"
	case u.IsUnspecified():
		return "unspecified"
	case u.IsLinkLocalUnicast() || u.IsLinkLocalMulticast():
		return "link-local"
	case u.IsMulticast():
		return "multicast"
	}
	for _, d := range cfg.DenyIPs {
		if d.Unmap() == u {
			return "an API server address"
		}
	}
	for _, p := range cfg.DenyCIDRs {
		if p.Contains(u) {
			return "inside --deny-cidrs " + p.String()
		}
	}
	if notNode != nil {
		if why := notNode(u); why != "" {
			return why + ": never a node's own"
		}
	}
	return ""
}
