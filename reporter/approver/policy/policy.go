// Package policy decides, as a pure function, whether a kubelet-serving CSR
// proves the identity of the node that sent it. A decision is Approve, or a
// refusal naming the exact rule that failed, marked Transient when waiting
// may fix it (the node is not in the inventory yet, the backlog is too long).
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
)

// Rules lists every refusal rule, for metrics and documentation.
var Rules = []Rule{
	RuleWrongSigner, RuleUsernameNotNode, RuleGroupsMissingNodes, RuleRequestNotOnePEM, RuleRequestUnparseable,
	RuleRequestSignature, RuleSubjectCN, RuleSubjectOrg, RuleUsages, RuleNoSAN, RuleEmailOrURISAN, RuleSANDenied,
	RuleDNSSANNotInInventory, RuleIPSANNotInInventory, RuleIPSANNotAllowed, RuleExpirationTooLong,
	RuleNodeNotInInventory, RuleAddressClaimed, RuleFloodGuard, RuleSuperseded, RuleRequestTooLarge,
	RuleTooManySANs, RuleKeyNotAllowed,
}

// Bounds on what a request may carry, whatever the node reports: a real
// kubelet asks for its host name and the addresses in its Node status (a
// multi-NIC, dual-stack node with secondary addresses stays well inside
// DefaultMaxSANs), with an ECDSA P-256 key in a request of about 500 bytes.
const (
	DefaultMaxSANs         = 100
	DefaultMaxRequestBytes = 32 << 10
	MinRSABits             = 2048
	MaxRSABits             = 8192
)

// Config is the operator's policy.
type Config struct {
	// AllowedCIDRs, when set, must contain every IP SAN (in every inventory mode).
	AllowedCIDRs []netip.Prefix
	// DenyCIDRs never appear in a SAN (for example the service range).
	DenyCIDRs []netip.Prefix
	// DenyIPs never appear in a SAN (the API server's addresses that are
	// no node's own: --apiserver-ips and the Service IP).
	DenyIPs []netip.Addr
	// APIServerHost reports whether node hosts an API server, from
	// evidence the node cannot forge (a label its kubelet may not set);
	// APIServerHostRule says which, for messages. nil: no node does. On
	// kubeadm and kind an API server listens on its control-plane node's
	// own address and presents that node's name, and that node's kubelet
	// asks for a serving certificate for them.
	APIServerHost     func(node string) bool
	APIServerHostRule string
	// DenyDNSNames never appear in a SAN (the API server's external names),
	// compared case-insensitively, trailing dot ignored.
	DenyDNSNames []string
	// APIServer is what the approver learned of the API server's own names
	// and addresses (its certificate, its clients' configuration, its
	// Service and EndpointSlice): only a node for which APIServerHost holds
	// may have one of those, and only its own (HostOwn).
	APIServer APIServer
	// HostOwn returns, for a node that hosts an API server, the addresses
	// and names that are its own: recorded by a source the node cannot
	// write (a static inventory, a Machine), or reported before it was
	// labelled as an API server host. ok is false when nothing is known:
	// then only an address an API server advertises as its endpoint and the
	// node's own name count as its own.
	HostOwn func(node string) (own inventory.Entry, ok bool)
	// NotNodeAddress says why ip is never a node's own (inside a Service
	// CIDR or a Node's Pod CIDR), or "".
	NotNodeAddress func(ip netip.Addr) string
	// MaxExpiration bounds spec.expirationSeconds when it is set.
	MaxExpiration time.Duration
	// MaxSANs bounds the number of SANs (DefaultMaxSANs when 0).
	MaxSANs int
	// MaxRequestBytes bounds spec.request (DefaultMaxRequestBytes when 0).
	MaxRequestBytes int
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
}

func refuse(node string, r Rule, format string, args ...any) Decision {
	return Decision{Node: node, Rule: r, Message: string(r) + ": " + fmt.Sprintf(format, args...)}
}

// Allowed usage sets: the ones the kubelet-serving signer accepts, so that
// an approval never ends Approved,Failed.
var allowedUsages = [][]certv1.KeyUsage{
	{certv1.UsageDigitalSignature, certv1.UsageServerAuth},
	{certv1.UsageDigitalSignature, certv1.UsageKeyEncipherment, certv1.UsageServerAuth},
}

// Evaluate decides on csr. The flood guard and the newest-request rule are
// the caller's (they need the backlog); everything else is here.
func Evaluate(csr *certv1.CertificateSigningRequest, inv inventory.Source, cfg Config) Decision {
	spec := csr.Spec
	if spec.SignerName != certv1.KubeletServingSignerName {
		return refuse("", RuleWrongSigner, "signer %q is not %s", spec.SignerName, certv1.KubeletServingSignerName)
	}
	node, ok := names.NodeOf(spec.Username)
	if !ok {
		return refuse("", RuleUsernameNotNode, "username %q is not system:node:<name>", spec.Username)
	}
	if !slices.Contains(spec.Groups, names.NodesGroup) {
		return refuse(node, RuleGroupsMissingNodes, "groups %v lack %s", spec.Groups, names.NodesGroup)
	}
	if d, tooLarge := checkSize(node, spec, cfg); tooLarge {
		return d
	}
	req, d := parseRequest(node, spec.Request)
	if req == nil {
		return d
	}
	if req.Subject.CommonName != spec.Username {
		return refuse(node, RuleSubjectCN, "subject CN %q differs from username %q", req.Subject.CommonName, spec.Username)
	}
	if !slices.Equal(req.Subject.Organization, []string{names.NodesGroup}) {
		return refuse(node, RuleSubjectOrg, "subject O %q, want exactly [%s]", req.Subject.Organization, names.NodesGroup)
	}
	if why := keyRefused(req.PublicKey); why != "" {
		return refuse(node, RuleKeyNotAllowed, "%s; want ECDSA P-256 or P-384, or RSA of %d to %d bits", why, MinRSABits, MaxRSABits)
	}
	if !usagesAllowed(spec.Usages) {
		return refuse(node, RuleUsages, "usages %v, want {digital signature, server auth} or {digital signature, key encipherment, server auth}", spec.Usages)
	}
	if len(req.EmailAddresses) > 0 || len(req.URIs) > 0 {
		return refuse(node, RuleEmailOrURISAN, "email SANs %v, URI SANs %v are not allowed", req.EmailAddresses, req.URIs)
	}
	if len(req.DNSNames) == 0 && len(req.IPAddresses) == 0 {
		return refuse(node, RuleNoSAN, "the request has no DNS or IP SAN")
	}
	if n, limit := len(req.DNSNames)+len(req.IPAddresses), orDefault(cfg.MaxSANs, DefaultMaxSANs); n > limit {
		return refuse(node, RuleTooManySANs, "%d SANs, at most %d (--max-sans)", n, limit)
	}
	if spec.ExpirationSeconds != nil && cfg.MaxExpiration > 0 &&
		time.Duration(*spec.ExpirationSeconds)*time.Second > cfg.MaxExpiration {
		return refuse(node, RuleExpirationTooLong, "expirationSeconds %d exceeds the maximum %s", *spec.ExpirationSeconds, cfg.MaxExpiration)
	}
	ips := make([]netip.Addr, 0, len(req.IPAddresses))
	for _, raw := range req.IPAddresses {
		ip, ok := netip.AddrFromSlice(raw)
		if !ok {
			return refuse(node, RuleRequestUnparseable, "IP SAN of %d bytes", len(raw))
		}
		ips = append(ips, ip)
	}
	host := apiServerHost{node: node, cfg: cfg}
	for _, dns := range req.DNSNames {
		if why := deniedDNS(dns, cfg); why != "" {
			return refuse(node, RuleSANDenied, "DNS SAN %q is %s", dns, why)
		}
		if why := host.refusesName(dns); why != "" {
			return refuse(node, RuleSANDenied, "DNS SAN %q is %s", dns, why)
		}
	}
	for _, ip := range ips {
		if why := deniedIP(ip, cfg); why != "" {
			return refuse(node, RuleSANDenied, "IP SAN %s is %s", ip, why)
		}
		if why := host.refusesAddress(ip); why != "" {
			return refuse(node, RuleSANDenied, "IP SAN %s is %s", ip, why)
		}
	}
	entry, found := inv.Lookup(node)
	if !found {
		d := refuse(node, RuleNodeNotInInventory, "%s not recorded in the inventory (%s)", node, inv.Describe())
		d.Transient = true
		return d
	}
	claims, _ := inv.(inventory.Claims)
	for _, dns := range req.DNSNames {
		if !dnsRecorded(dns, node, entry.DNSNames) {
			return refuse(node, RuleDNSSANNotInInventory, "%s not recorded for %s", dns, node)
		}
		// A node's own name is proven by its credentials, whoever else
		// reports it; any other name that another node has or reports
		// proves neither.
		if claims != nil && NormalizeDNS(dns) != NormalizeDNS(node) {
			if others := others(claims.NameClaimants(NormalizeDNS(dns)), node); len(others) > 0 {
				return refuse(node, RuleAddressClaimed, "%s is also the name of, or reported by, %s: a name two nodes claim proves neither", dns, strings.Join(others, ", "))
			}
		}
	}
	for _, ip := range ips {
		if !slices.Contains(entry.IPs, ip) {
			return refuse(node, RuleIPSANNotInInventory, "%s not recorded for %s", ip, node)
		}
		if len(cfg.AllowedCIDRs) > 0 && !slices.ContainsFunc(cfg.AllowedCIDRs, func(p netip.Prefix) bool { return p.Contains(ip) }) {
			return refuse(node, RuleIPSANNotAllowed, "%s is outside --allowed-cidrs %v", ip, cfg.AllowedCIDRs)
		}
		if claims != nil {
			if others := others(claims.Claimants(ip), node); len(others) > 0 {
				return refuse(node, RuleAddressClaimed, "%s is also claimed by %s: an address two nodes report proves neither", ip, strings.Join(others, ", "))
			}
		}
	}
	return Decision{
		Approve: true, Node: node, Rule: RuleApproved,
		Message: fmt.Sprintf("certready: %s proved node identity: CN/O match, IP SANs %v and DNS SANs %v recorded for %s in %s",
			spec.Username, ips, req.DNSNames, node, inv.Describe()),
	}
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

// checkSize refuses a request over the bound, and one the informer already
// dropped for that (names.DroppedRequestKey): the bytes are never parsed.
func checkSize(node string, spec certv1.CertificateSigningRequestSpec, cfg Config) (Decision, bool) {
	limit := cfg.RequestBound()
	if dropped := spec.Extra[names.DroppedRequestKey]; len(dropped) > 0 {
		return refuse(node, RuleRequestTooLarge, "spec.request of %s bytes, at most %d (--max-request-bytes); dropped unread (and left as it is, labels included)", dropped[0], limit), true
	}
	if len(spec.Request) > limit {
		return refuse(node, RuleRequestTooLarge, "spec.request of %d bytes, at most %d (--max-request-bytes)", len(spec.Request), limit), true
	}
	return Decision{}, false
}

// keyRefused says why a requested public key is not allowed, or "".
func keyRefused(pub any) string {
	switch k := pub.(type) {
	case *ecdsa.PublicKey:
		if k.Curve != elliptic.P256() && k.Curve != elliptic.P384() {
			return fmt.Sprintf("ECDSA key on curve %s", k.Curve.Params().Name)
		}
	case *rsa.PublicKey:
		if bits := k.N.BitLen(); bits < MinRSABits || bits > MaxRSABits {
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
	cfg  Config
}

func (h apiServerHost) hosts() (bool, string) {
	if h.cfg.APIServerHost == nil {
		return false, "none is configured"
	}
	return h.cfg.APIServerHost(h.node), h.cfg.APIServerHostRule
}

func (h apiServerHost) refusesName(dns string) string {
	n := NormalizeDNS(dns)
	source, ok := h.cfg.APIServer.Names[n]
	if !ok {
		return ""
	}
	hosts, rule := h.hosts()
	if !hosts {
		return fmt.Sprintf("an API server name (%s); only a node that hosts an API server may have its own (%s), and %s does not", source, rule, h.node)
	}
	if n == NormalizeDNS(h.node) {
		return ""
	}
	if own, known := h.own(); known && slices.ContainsFunc(own.DNSNames, func(o string) bool { return NormalizeDNS(o) == n }) {
		return ""
	}
	return fmt.Sprintf("an API server name (%s) and not %s's own: neither its node name nor recorded for it before it was labelled as an API server host", source, h.node)
}

func (h apiServerHost) refusesAddress(ip netip.Addr) string {
	u := ip.Unmap()
	source, ok := h.cfg.APIServer.Addresses[u]
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
	if h.cfg.APIServer.Endpoints[u] {
		return "" // an API server advertises it; the inventory checks that the node reports it
	}
	return fmt.Sprintf("an API server address (%s) that no API server advertises as its endpoint: no node's own", source)
}

func (h apiServerHost) own() (inventory.Entry, bool) {
	if h.cfg.HostOwn == nil {
		return inventory.Entry{}, false
	}
	return h.cfg.HostOwn(h.node)
}

func parseRequest(node string, data []byte) (*x509.CertificateRequest, Decision) {
	block, rest := pem.Decode(data)
	if block == nil || block.Type != "CERTIFICATE REQUEST" {
		return nil, refuse(node, RuleRequestNotOnePEM, "spec.request is not a PEM CERTIFICATE REQUEST")
	}
	if len(bytes.TrimSpace(rest)) != 0 {
		return nil, refuse(node, RuleRequestNotOnePEM, "spec.request holds more than one PEM block or trailing data")
	}
	if len(block.Headers) != 0 {
		return nil, refuse(node, RuleRequestNotOnePEM, "the PEM block carries headers")
	}
	req, err := x509.ParseCertificateRequest(block.Bytes)
	if err != nil {
		return nil, refuse(node, RuleRequestUnparseable, "%v", err)
	}
	if err := req.CheckSignature(); err != nil {
		return nil, refuse(node, RuleRequestSignature, "%v", err)
	}
	return req, Decision{}
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
		if n == NormalizeDNS(d) {
			return "an API server name (--apiserver-names)"
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

// deniedIP says why an IP SAN may never be approved, or "". Addresses are
// classified unmapped, so ::ffff:127.0.0.1 is loopback too.
func deniedIP(ip netip.Addr, cfg Config) string {
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
	if cfg.NotNodeAddress != nil {
		if why := cfg.NotNodeAddress(u); why != "" {
			return why + ": never a node's own"
		}
	}
	return ""
}
