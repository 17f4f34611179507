// Package policy decides, as a pure function, whether a kubelet-serving CSR
// proves the identity of the node that sent it. A decision is Approve, or a
// refusal naming the exact rule that failed, marked Transient when waiting
// may fix it (the node is not in the inventory yet, the backlog is too long).
package policy

import (
	"bytes"
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
)

// Rules lists every refusal rule, for metrics and documentation.
var Rules = []Rule{
	RuleWrongSigner, RuleUsernameNotNode, RuleGroupsMissingNodes, RuleRequestNotOnePEM, RuleRequestUnparseable,
	RuleRequestSignature, RuleSubjectCN, RuleSubjectOrg, RuleUsages, RuleNoSAN, RuleEmailOrURISAN, RuleSANDenied,
	RuleDNSSANNotInInventory, RuleIPSANNotInInventory, RuleIPSANNotAllowed, RuleExpirationTooLong,
	RuleNodeNotInInventory, RuleAddressClaimed, RuleFloodGuard, RuleSuperseded,
}

// Config is the operator's policy.
type Config struct {
	// AllowedCIDRs, when set, must contain every IP SAN (in every inventory mode).
	AllowedCIDRs []netip.Prefix
	// DenyCIDRs never appear in a SAN (for example the service range).
	DenyCIDRs []netip.Prefix
	// DenyIPs never appear in a SAN (the API server's addresses that are
	// no node's own: --apiserver-ips and the Service IP).
	DenyIPs []netip.Addr
	// APIServerEndpoints are the API server's addresses from the
	// default/kubernetes EndpointSlice. On kubeadm and kind an API server
	// listens on its control-plane node's own address, and that node's
	// kubelet asks for a serving certificate for it: only a node for which
	// APIServerHost holds may have one, and only its own (recorded for it,
	// claimed by no other node). Anyone else asking is SANDenied.
	APIServerEndpoints []netip.Addr
	// APIServerHost reports whether node hosts an API server, from
	// evidence the node cannot forge (a label its kubelet may not set);
	// APIServerHostRule says which, for messages. nil: no node does.
	APIServerHost     func(node string) bool
	APIServerHostRule string
	// DenyDNSNames never appear in a SAN (the API server's external names),
	// compared case-insensitively, trailing dot ignored.
	DenyDNSNames []string
	// MaxExpiration bounds spec.expirationSeconds when it is set.
	MaxExpiration time.Duration
}

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

// Evaluate decides on csr. The flood guard is the caller's (it needs the
// backlog); everything else is here.
func Evaluate(csr *certv1.CertificateSigningRequest, inv inventory.Source, cfg Config) Decision {
	spec := csr.Spec
	if spec.SignerName != certv1.KubeletServingSignerName {
		return refuse("", RuleWrongSigner, "signer %q is not %s", spec.SignerName, certv1.KubeletServingSignerName)
	}
	node, ok := NodeName(spec.Username)
	if !ok {
		return refuse("", RuleUsernameNotNode, "username %q is not system:node:<name>", spec.Username)
	}
	if !slices.Contains(spec.Groups, names.NodesGroup) {
		return refuse(node, RuleGroupsMissingNodes, "groups %v lack %s", spec.Groups, names.NodesGroup)
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
	if !usagesAllowed(spec.Usages) {
		return refuse(node, RuleUsages, "usages %v, want {digital signature, server auth} or {digital signature, key encipherment, server auth}", spec.Usages)
	}
	if len(req.EmailAddresses) > 0 || len(req.URIs) > 0 {
		return refuse(node, RuleEmailOrURISAN, "email SANs %v, URI SANs %v are not allowed", req.EmailAddresses, req.URIs)
	}
	if len(req.DNSNames) == 0 && len(req.IPAddresses) == 0 {
		return refuse(node, RuleNoSAN, "the request has no DNS or IP SAN")
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
	for _, dns := range req.DNSNames {
		if why := deniedDNS(dns, cfg); why != "" {
			return refuse(node, RuleSANDenied, "DNS SAN %q is %s", dns, why)
		}
	}
	hostsAPIServer := cfg.APIServerHost != nil && cfg.APIServerHost(node)
	for _, ip := range ips {
		if why := deniedIP(ip, cfg); why != "" {
			return refuse(node, RuleSANDenied, "IP SAN %s is %s", ip, why)
		}
		if !hostsAPIServer && slices.ContainsFunc(cfg.APIServerEndpoints, func(a netip.Addr) bool { return a.Unmap() == ip.Unmap() }) {
			rule := cfg.APIServerHostRule
			if cfg.APIServerHost == nil {
				rule = "none is configured"
			}
			return refuse(node, RuleSANDenied, "IP SAN %s is an API server address (an endpoint of default/kubernetes); only a node that hosts an API server may have its own (%s), and %s does not", ip, rule, node)
		}
	}
	entry, found := inv.Lookup(node)
	if !found {
		d := refuse(node, RuleNodeNotInInventory, "%s not recorded in the inventory (%s)", node, inv.Describe())
		d.Transient = true
		return d
	}
	for _, dns := range req.DNSNames {
		if !dnsRecorded(dns, node, entry.DNSNames) {
			return refuse(node, RuleDNSSANNotInInventory, "%s not recorded for %s", dns, node)
		}
	}
	for _, ip := range ips {
		if !slices.Contains(entry.IPs, ip) {
			return refuse(node, RuleIPSANNotInInventory, "%s not recorded for %s", ip, node)
		}
		if len(cfg.AllowedCIDRs) > 0 && !slices.ContainsFunc(cfg.AllowedCIDRs, func(p netip.Prefix) bool { return p.Contains(ip) }) {
			return refuse(node, RuleIPSANNotAllowed, "%s is outside --allowed-cidrs %v", ip, cfg.AllowedCIDRs)
		}
		if claims, ok := inv.(inventory.Claims); ok {
			if others := slices.DeleteFunc(claims.Claimants(ip), func(n string) bool { return n == node }); len(others) > 0 {
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

// NodeName returns <name> for a username system:node:<name>.
func NodeName(username string) (string, bool) {
	node, ok := names.NodeOf(username)
	if !ok || node == "" || strings.Contains(node, ":") {
		return "", false
	}
	return node, true
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

func normalizeDNS(s string) string { return strings.ToLower(strings.TrimSuffix(s, ".")) }

func dnsRecorded(dns, node string, recorded []string) bool {
	n := normalizeDNS(dns)
	if n == normalizeDNS(node) {
		return true
	}
	for _, r := range recorded {
		if n == normalizeDNS(r) {
			return true
		}
	}
	return false
}

// deniedDNS says why a DNS SAN may never be approved, or "".
func deniedDNS(dns string, cfg Config) string {
	n := normalizeDNS(dns)
	for _, d := range cfg.DenyDNSNames {
		if n == normalizeDNS(d) {
			return "an API server name (--apiserver-names)"
		}
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
	return ""
}
