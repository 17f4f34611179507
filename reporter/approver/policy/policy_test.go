package policy_test

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"encoding/pem"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	certv1 "k8s.io/api/certificates/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/certready/certready/internal/names"
	"github.com/certready/certready/internal/testpki"
	"github.com/certready/certready/reporter/approver/inventory"
	"github.com/certready/certready/reporter/approver/policy"
)

var inv = inventory.NewStatic("test inventory", map[string]inventory.Entry{
	"worker-1": {IPs: []netip.Addr{netip.MustParseAddr("192.0.2.11"), netip.MustParseAddr("2001:db8::11")}, DNSNames: []string{"worker-1.example.com"}},
	"worker-2": {IPs: []netip.Addr{netip.MustParseAddr("192.0.2.12")}},
	"evil":     {IPs: []netip.Addr{netip.MustParseAddr("127.0.0.1"), netip.MustParseAddr("10.0.0.1"), netip.MustParseAddr("192.0.2.1")}, DNSNames: []string{"kubernetes.default.svc", "localhost", "*.example.com", "api.example.com"}},
})

// claimed is a node-objects-like inventory: several nodes may report one
// address or name, and every node is named.
type claimed struct {
	*inventory.Static
	by     map[netip.Addr][]string
	byName map[string][]string
}

func (c claimed) Claimants(ip netip.Addr) []string        { return append([]string(nil), c.by[ip]...) }
func (c claimed) NameClaimants(n string) []string         { return append([]string(nil), c.byName[n]...) }
func (c claimed) withNames(m map[string][]string) claimed { c.byName = m; return c }

var shared = claimed{Static: inv, by: map[netip.Addr][]string{
	netip.MustParseAddr("192.0.2.11"): {"worker-1", "worker-2"},
	netip.MustParseAddr("192.0.2.12"): {"worker-2"},
}, byName: map[string][]string{"worker-1": {"worker-1"}, "worker-2": {"worker-2"}, "worker-1.example.com": {"worker-1"}}}

// names: worker-1 reports worker-2's name and a name worker-2 reports too;
// worker-2 reports worker-1's name (which stays worker-1's own).
var namesInv = claimed{Static: inventory.NewStatic("node objects", map[string]inventory.Entry{
	"worker-1": {IPs: []netip.Addr{netip.MustParseAddr("192.0.2.11")}, DNSNames: []string{"worker-2", "Shared.Example.com.", "worker-1"}},
	"worker-2": {IPs: []netip.Addr{netip.MustParseAddr("192.0.2.12")}, DNSNames: []string{"worker-1", "shared.example.com"}},
})}.withNames(map[string][]string{
	"worker-1":           {"worker-1", "worker-2"},
	"worker-2":           {"worker-1", "worker-2"},
	"shared.example.com": {"worker-1", "worker-2"},
})

var cfg = policy.Config{
	DenyCIDRs:     []netip.Prefix{netip.MustParsePrefix("10.0.0.0/24")},
	DenyIPs:       []netip.Addr{netip.MustParseAddr("192.0.2.1")},
	MaxExpiration: 24 * time.Hour,
}

// apiHosts: both workers' addresses are API server endpoints; worker-1
// hosts an API server (labelled), worker-2 does not. The API server also
// answers on a load balancer (192.0.2.50, api.example.com) and presents
// worker-1's name; worker-1's own addresses before it was labelled are not
// known.
var apiHostsServer = policy.APIServer{
	Addresses: map[netip.Addr]string{
		netip.MustParseAddr("192.0.2.11"): "an endpoint", netip.MustParseAddr("192.0.2.12"): "an endpoint",
		netip.MustParseAddr("192.0.2.50"): "the load balancer",
	},
	Endpoints: map[netip.Addr]bool{netip.MustParseAddr("192.0.2.11"): true, netip.MustParseAddr("192.0.2.12"): true},
	Names:     map[string]string{"api.example.com": "the kubeconfig's host", "worker-1": "in the certificate"},
}

var apiHosts = policy.Evidence{
	APIServer:         fixed(apiHostsServer),
	APIServerHost:     func(node string) bool { return node == "worker-1" },
	APIServerHostRule: "label node-role.kubernetes.io/control-plane",
}

// withHostOwn is apiHosts where worker-1 was seen labelled, having
// reported own before.
func withHostOwn(own inventory.Entry) *policy.Evidence {
	c := apiHosts
	c.HostOwn = func(node string) (inventory.Entry, bool) { return own, node == "worker-1" }
	return &c
}

// lbHost: worker-1 hosts an API server and reports the load balancer's
// address and name as its own.
var lbHost = inventory.NewStatic("node objects", map[string]inventory.Entry{
	"worker-1": {IPs: []netip.Addr{netip.MustParseAddr("192.0.2.11"), netip.MustParseAddr("192.0.2.50")}, DNSNames: []string{"api.example.com"}},
})

func ips(s ...string) []net.IP {
	out := make([]net.IP, 0, len(s))
	for _, v := range s {
		ip := net.ParseIP(v)
		if ip.To4() != nil && !strings.Contains(v, ":") {
			ip = ip.To4()
		}
		out = append(out, ip)
	}
	return out
}

type csrCase struct {
	name    string
	req     testpki.Request
	mutate  func(*certv1.CertificateSigningRequest)
	invSrc  inventory.Source
	cfg     *policy.Config
	ev      *policy.Evidence // its Inventory is invSrc
	want    policy.Rule
	wantMsg string
	retry   bool
	backlog policy.Backlog
}

func build(t *testing.T, tc csrCase) *certv1.CertificateSigningRequest {
	t.Helper()
	if tc.req.Node == "" {
		tc.req.Node = "worker-1"
	}
	pemBytes, _, err := testpki.NewCSR(tc.req)
	if err != nil {
		t.Fatal(err)
	}
	usages := []certv1.KeyUsage{certv1.UsageDigitalSignature, certv1.UsageServerAuth}
	if tc.req.RSA {
		usages = []certv1.KeyUsage{certv1.UsageDigitalSignature, certv1.UsageKeyEncipherment, certv1.UsageServerAuth}
	}
	c := &certv1.CertificateSigningRequest{
		ObjectMeta: metav1.ObjectMeta{Name: "csr-" + tc.req.Node},
		Spec: certv1.CertificateSigningRequestSpec{
			Request:    pemBytes,
			SignerName: certv1.KubeletServingSignerName,
			Usages:     usages,
			Username:   "system:node:" + tc.req.Node,
			Groups:     []string{"system:nodes", "system:authenticated"},
		},
	}
	if tc.mutate != nil {
		tc.mutate(c)
	}
	return c
}

func TestEvaluate(t *testing.T) {
	approve := policy.RuleApproved
	cases := []csrCase{
		// Every valid shape is approved.
		{name: "IPv4", req: testpki.Request{IPs: ips("192.0.2.11")}, want: approve},
		{name: "IPv6", req: testpki.Request{IPs: ips("2001:db8::11")}, want: approve},
		{name: "IPv6 in another spelling", req: testpki.Request{IPs: []net.IP{net.ParseIP("2001:0db8:0:0::0011")}}, want: approve},
		{name: "DNS-only with the node name", req: testpki.Request{DNSNames: []string{"worker-1"}}, want: approve},
		{name: "DNS name from the inventory, case and trailing dot ignored", req: testpki.Request{DNSNames: []string{"Worker-1.Example.COM."}}, want: approve},
		{name: "dual-stack with hostname", req: testpki.Request{IPs: ips("192.0.2.11", "2001:db8::11"), DNSNames: []string{"worker-1"}}, want: approve},
		{name: "RSA key with key encipherment", req: testpki.Request{RSA: true, IPs: ips("192.0.2.11")}, want: approve},
		{name: "expiration within the maximum", req: testpki.Request{IPs: ips("192.0.2.11")}, mutate: func(c *certv1.CertificateSigningRequest) { c.Spec.ExpirationSeconds = ptr(int32(3600)) }, want: approve},

		// Identity of the requester.
		{name: "another signer, otherwise valid", req: testpki.Request{IPs: ips("192.0.2.11")}, mutate: func(c *certv1.CertificateSigningRequest) {
			c.Spec.SignerName = "kubernetes.io/kube-apiserver-client-kubelet"
		}, want: policy.RuleWrongSigner},
		{name: "username is not a node", req: testpki.Request{IPs: ips("192.0.2.11")}, mutate: func(c *certv1.CertificateSigningRequest) { c.Spec.Username = "alice" }, want: policy.RuleUsernameNotNode},
		{name: "username with an empty node name", req: testpki.Request{IPs: ips("192.0.2.11")}, mutate: func(c *certv1.CertificateSigningRequest) { c.Spec.Username = "system:node:" }, want: policy.RuleUsernameNotNode},
		{name: "groups without system:nodes", req: testpki.Request{IPs: ips("192.0.2.11")}, mutate: func(c *certv1.CertificateSigningRequest) { c.Spec.Groups = []string{"system:authenticated"} }, want: policy.RuleGroupsMissingNodes},
		{name: "username names another node than the CN", req: testpki.Request{IPs: ips("192.0.2.12")}, mutate: func(c *certv1.CertificateSigningRequest) { c.Spec.Username = "system:node:worker-2" }, want: policy.RuleSubjectCN, wantMsg: `"system:node:worker-1" differs`},

		// The request itself.
		{name: "second PEM block", req: testpki.Request{IPs: ips("192.0.2.11")}, mutate: func(c *certv1.CertificateSigningRequest) { c.Spec.Request = append(c.Spec.Request, c.Spec.Request...) }, want: policy.RuleRequestNotOnePEM},
		{name: "not PEM", req: testpki.Request{IPs: ips("192.0.2.11")}, mutate: func(c *certv1.CertificateSigningRequest) { c.Spec.Request = []byte("hello") }, want: policy.RuleRequestNotOnePEM},
		{name: "certificate instead of request", req: testpki.Request{IPs: ips("192.0.2.11")}, mutate: func(c *certv1.CertificateSigningRequest) {
			b, _ := pem.Decode(c.Spec.Request)
			c.Spec.Request = pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: b.Bytes})
		}, want: policy.RuleRequestNotOnePEM},
		{name: "garbage DER", req: testpki.Request{IPs: ips("192.0.2.11")}, mutate: func(c *certv1.CertificateSigningRequest) {
			c.Spec.Request = pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: []byte("garbage")})
		}, want: policy.RuleRequestUnparseable},
		{name: "bad signature", req: testpki.Request{IPs: ips("192.0.2.11")}, mutate: func(c *certv1.CertificateSigningRequest) {
			b, _ := pem.Decode(c.Spec.Request)
			b.Bytes[len(b.Bytes)-3] ^= 0xff
			c.Spec.Request = pem.EncodeToMemory(b)
		}, want: policy.RuleRequestSignature},
		{name: "CN of another node", req: testpki.Request{CN: "system:node:worker-2", IPs: ips("192.0.2.11")}, want: policy.RuleSubjectCN},
		{name: "O system:masters", req: testpki.Request{Orgs: []string{"system:masters"}, IPs: ips("192.0.2.11")}, want: policy.RuleSubjectOrg},
		{name: "O with an extra group", req: testpki.Request{Orgs: []string{"system:nodes", "system:masters"}, IPs: ips("192.0.2.11")}, want: policy.RuleSubjectOrg},
		{name: "client auth usage", req: testpki.Request{IPs: ips("192.0.2.11")}, mutate: func(c *certv1.CertificateSigningRequest) {
			c.Spec.Usages = append(c.Spec.Usages, certv1.UsageClientAuth)
		}, want: policy.RuleUsages},
		{name: "server auth alone", req: testpki.Request{IPs: ips("192.0.2.11")}, mutate: func(c *certv1.CertificateSigningRequest) { c.Spec.Usages = []certv1.KeyUsage{certv1.UsageServerAuth} }, want: policy.RuleUsages},
		{name: "email SAN", req: testpki.Request{IPs: ips("192.0.2.11"), Emails: []string{"a@example.com"}}, want: policy.RuleEmailOrURISAN},
		{name: "URI SAN", req: testpki.Request{IPs: ips("192.0.2.11"), URIs: []string{"spiffe://cluster/ns/x"}}, want: policy.RuleEmailOrURISAN},
		{name: "no SAN", req: testpki.Request{}, want: policy.RuleNoSAN},
		{name: "expiration above the maximum", req: testpki.Request{IPs: ips("192.0.2.11")}, mutate: func(c *certv1.CertificateSigningRequest) { c.Spec.ExpirationSeconds = ptr(int32(30 * 24 * 3600)) }, want: policy.RuleExpirationTooLong},

		// SANs against the inventory and the deny list.
		{name: "another node's IP", req: testpki.Request{IPs: ips("192.0.2.12")}, want: policy.RuleIPSANNotInInventory, wantMsg: "IPSANNotInInventory: 192.0.2.12 not recorded for worker-1"},
		{name: "unknown IP", req: testpki.Request{IPs: ips("192.0.2.11", "192.0.2.99")}, want: policy.RuleIPSANNotInInventory, wantMsg: "192.0.2.99"},
		{name: "IPv4-mapped IPv6 spelling of the node's IP", req: testpki.Request{RawIPSANs: [][]byte{net.ParseIP("::ffff:192.0.2.11").To16()}}, want: policy.RuleIPSANNotInInventory},
		{name: "another node's name", req: testpki.Request{DNSNames: []string{"worker-2"}}, want: policy.RuleDNSSANNotInInventory},
		{name: "suffix of the node name", req: testpki.Request{DNSNames: []string{"worker-1.evil.com"}}, want: policy.RuleDNSSANNotInInventory},
		// The backlog: only a node's newest request is a candidate, and the
		// flood guard defers every request while too many nodes wait.
		{name: "a newer request of the same node supersedes this one", req: testpki.Request{IPs: ips("192.0.2.11")}, backlog: policy.Backlog{Newer: "csr-newer"}, want: policy.RuleSuperseded, wantMsg: "csr-newer is pending too and newer"},
		{name: "flood guard at the limit defers a valid request", req: testpki.Request{IPs: ips("192.0.2.11")}, backlog: policy.Backlog{PendingNodes: 3, MaxPending: 3}, want: policy.RuleFloodGuard, wantMsg: "the limit is 3", retry: true},
		{name: "below the flood limit a valid request is approved", req: testpki.Request{IPs: ips("192.0.2.11")}, backlog: policy.Backlog{PendingNodes: 2, MaxPending: 3}, want: approve},
		{name: "flood guard comes before every other rule", req: testpki.Request{IPs: ips("127.0.0.1")}, mutate: func(c *certv1.CertificateSigningRequest) { c.Spec.Username = "alice" }, backlog: policy.Backlog{PendingNodes: 5, MaxPending: 3}, want: policy.RuleFloodGuard, retry: true},
		{name: "node missing from the inventory is retried", req: testpki.Request{Node: "worker-9", IPs: ips("192.0.2.19")}, want: policy.RuleNodeNotInInventory, retry: true},
		{name: "IP outside --allowed-cidrs", req: testpki.Request{IPs: ips("192.0.2.11")}, cfg: &policy.Config{AllowedCIDRs: []netip.Prefix{netip.MustParsePrefix("198.51.100.0/24")}}, want: policy.RuleIPSANNotAllowed},
		{name: "IP inside --allowed-cidrs", req: testpki.Request{IPs: ips("192.0.2.11")}, cfg: &policy.Config{AllowedCIDRs: []netip.Prefix{netip.MustParsePrefix("192.0.2.0/24")}}, want: approve},
		{name: "an address another Node reports too", req: testpki.Request{IPs: ips("192.0.2.11")}, invSrc: shared, want: policy.RuleAddressClaimed, wantMsg: "192.0.2.11 is also claimed by worker-2"},
		{name: "an address only this Node reports", req: testpki.Request{Node: "worker-2", IPs: ips("192.0.2.12")}, invSrc: shared, want: approve},
		// The API server's endpoints: on kubeadm and kind, a control-plane
		// node's own address.
		{name: "an API server endpoint, asked by the node that hosts it", req: testpki.Request{IPs: ips("192.0.2.11")}, ev: &apiHosts, want: approve},
		{name: "an API server endpoint, asked by a node that hosts none", req: testpki.Request{Node: "worker-2", IPs: ips("192.0.2.12")}, ev: &apiHosts,
			want: policy.RuleSANDenied, wantMsg: "192.0.2.12 is an API server address (an endpoint); only a node that hosts an API server may have its own (label node-role.kubernetes.io/control-plane), and worker-2 does not"},
		{name: "an API server endpoint, no host rule configured", req: testpki.Request{IPs: ips("192.0.2.11")}, ev: &policy.Evidence{APIServer: fixed(apiHostsServer)},
			want: policy.RuleSANDenied, wantMsg: "none is configured"},
		// The API server's names and other addresses, learned without
		// configuration.
		{name: "the API server's name, asked by a node that hosts none", req: testpki.Request{Node: "worker-2", DNSNames: []string{"API.example.com."}}, ev: &apiHosts,
			want: policy.RuleSANDenied, wantMsg: `"API.example.com." is an API server name (the kubeconfig's host); only a node that hosts an API server`},
		{name: "an API server host's own node name, which the API server presents", req: testpki.Request{DNSNames: []string{"worker-1"}, IPs: ips("192.0.2.11")}, ev: &apiHosts, want: approve},
		{name: "an API server host reporting the load balancer's name", req: testpki.Request{DNSNames: []string{"api.example.com"}}, invSrc: lbHost, ev: &apiHosts,
			want: policy.RuleSANDenied, wantMsg: "not worker-1's own"},
		{name: "an API server host reporting the load balancer's address", req: testpki.Request{IPs: ips("192.0.2.50")}, invSrc: lbHost, ev: &apiHosts,
			want: policy.RuleSANDenied, wantMsg: "192.0.2.50 is an API server address (the load balancer) that no API server advertises as its endpoint"},
		{name: "an API server host whose load balancer address was its own before it was labelled", req: testpki.Request{IPs: ips("192.0.2.50"), DNSNames: []string{"api.example.com"}}, invSrc: lbHost,
			ev: withHostOwn(inventory.Entry{IPs: []netip.Addr{netip.MustParseAddr("192.0.2.50")}, DNSNames: []string{"API.example.com"}}), want: approve},
		{name: "an API server host asking for an endpoint it did not report before it was labelled", req: testpki.Request{IPs: ips("192.0.2.11")},
			ev: withHostOwn(inventory.Entry{IPs: []netip.Addr{netip.MustParseAddr("192.0.2.13")}}), want: policy.RuleSANDenied, wantMsg: "not among the addresses recorded for worker-1 before it was labelled"},
		{name: "an address in a Service or Pod CIDR", req: testpki.Request{IPs: ips("192.0.2.11")}, ev: &policy.Evidence{NotNodeAddress: func(ip netip.Addr) string {
			if ip == netip.MustParseAddr("192.0.2.11") {
				return "inside the Pod CIDR 192.0.2.0/24 of node worker-7"
			}
			return ""
		}}, want: policy.RuleSANDenied, wantMsg: "IP SAN 192.0.2.11 is inside the Pod CIDR 192.0.2.0/24 of node worker-7: never a node's own"},
		// DNS names another node has or reports.
		{name: "another Node's name, reported as this node's own host name", req: testpki.Request{DNSNames: []string{"worker-2"}}, invSrc: namesInv,
			want: policy.RuleAddressClaimed, wantMsg: "worker-2 is also the name of, or reported by, worker-2"},
		{name: "a DNS name another Node reports too, in another spelling", req: testpki.Request{DNSNames: []string{"SHARED.example.com"}}, invSrc: namesInv,
			want: policy.RuleAddressClaimed, wantMsg: "reported by, worker-2"},
		{name: "its own node name, even though another Node reports it", req: testpki.Request{Node: "worker-2", DNSNames: []string{"worker-2"}, IPs: ips("192.0.2.12")}, invSrc: namesInv, want: approve},
		{name: "a DNS SAN that is an IP address", req: testpki.Request{Node: "evil", DNSNames: []string{"192.0.2.1"}}, want: policy.RuleSANDenied, wantMsg: "an IP address written as a name"},
		{name: "a DNS SAN that is an IPv6 address", req: testpki.Request{Node: "evil", DNSNames: []string{"2001:db8::1"}}, want: policy.RuleSANDenied, wantMsg: "an IP address written as a name"},
		// Bounds.
		{name: "more SANs than the bound", req: testpki.Request{DNSNames: manyNames(5)}, cfg: &policy.Config{MaxSANs: 4}, want: policy.RuleTooManySANs, wantMsg: "5 SANs, at most 4"},
		{name: "more SANs than the default bound", req: testpki.Request{DNSNames: manyNames(policy.DefaultMaxSANs + 1)}, want: policy.RuleTooManySANs},
		{name: "a request over the size bound", req: testpki.Request{IPs: ips("192.0.2.11")}, cfg: &policy.Config{MaxRequestBytes: 200}, want: policy.RuleRequestTooLarge, wantMsg: "at most 200"},
		{name: "a request the cache dropped for its size", req: testpki.Request{IPs: ips("192.0.2.11")}, mutate: func(c *certv1.CertificateSigningRequest) {
			c.Spec.Request, c.Spec.Extra = nil, map[string]certv1.ExtraValue{names.DroppedRequestKey: {"1048576"}}
		}, want: policy.RuleRequestTooLarge, wantMsg: "spec.request of 1048576 bytes"},
		{name: "RSA key under 2048 bits", req: testpki.Request{Key: rsaKey(t, 1024), IPs: ips("192.0.2.11")}, want: policy.RuleKeyNotAllowed, wantMsg: "RSA key of 1024 bits"},
		{name: "RSA key of 4096 bits", req: testpki.Request{Key: rsaKey(t, 4096), RSA: true, IPs: ips("192.0.2.11")}, want: approve},
		{name: "ECDSA P-384", req: testpki.Request{Key: ecKey(t, elliptic.P384()), IPs: ips("192.0.2.11")}, want: approve},
		{name: "ECDSA P-224", req: testpki.Request{Key: ecKey(t, elliptic.P224()), IPs: ips("192.0.2.11")}, want: policy.RuleKeyNotAllowed, wantMsg: "curve P-224"},
		{name: "ECDSA P-521", req: testpki.Request{Key: ecKey(t, elliptic.P521()), IPs: ips("192.0.2.11")}, want: policy.RuleKeyNotAllowed, wantMsg: "curve P-521"},
		{name: "Ed25519", req: testpki.Request{Key: edKey(t), IPs: ips("192.0.2.11")}, want: policy.RuleKeyNotAllowed, wantMsg: "ed25519"},
		{name: "an API server host asking for another host's endpoint", req: testpki.Request{IPs: ips("192.0.2.12")}, ev: &apiHosts, want: policy.RuleIPSANNotInInventory},
		{name: "an API server host asking for an endpoint another Node claims too", req: testpki.Request{IPs: ips("192.0.2.11")}, invSrc: shared, ev: &apiHosts, want: policy.RuleAddressClaimed},
		{name: "an API server host asking for the Service IP", req: testpki.Request{Node: "evil", IPs: ips("192.0.2.1")}, cfg: &policy.Config{DenyIPs: cfg.DenyIPs}, ev: &policy.Evidence{APIServerHost: func(string) bool { return true }}, want: policy.RuleSANDenied, wantMsg: "an API server address"},
		{name: "the API server's external name (--apiserver-names), case and dot aside", req: testpki.Request{Node: "evil", DNSNames: []string{"API.example.com."}},
			cfg: &policy.Config{DenyDNSNames: []string{"api.example.com"}}, want: policy.RuleSANDenied, wantMsg: "--apiserver-names"},
	}
	cases = append(cases, secondRingCases()...)
	// The deny list wins even when the inventory records the value.
	for _, d := range []struct{ name, dns, ip string }{
		{name: "kubernetes", dns: "kubernetes"},
		{name: "kubernetes.default", dns: "kubernetes.default"},
		{name: "kubernetes.default.svc.cluster.local", dns: "kubernetes.default.svc.cluster.local"},
		{name: "a service name", dns: "metrics.kube-system.svc"},
		{name: "wildcard", dns: "*.example.com"},
		{name: "localhost", dns: "localhost"},
		{name: "loopback", ip: "127.0.0.1"},
		{name: "IPv6 loopback", ip: "::1"},
		{name: "IPv4-mapped loopback", ip: "::ffff:127.0.0.1"},
		{name: "unspecified", ip: "0.0.0.0"},
		{name: "link-local", ip: "169.254.169.254"},
		{name: "IPv6 link-local", ip: "fe80::1"},
		{name: "multicast", ip: "224.0.0.1"},
		{name: "the API server's address", ip: "192.0.2.1"},
		{name: "inside --deny-cidrs", ip: "10.0.0.1"},
	} {
		req := testpki.Request{Node: "evil"}
		if d.dns != "" {
			req.DNSNames = []string{d.dns}
		} else if strings.HasPrefix(d.ip, "::ffff:") {
			req.RawIPSANs = [][]byte{net.ParseIP(d.ip).To16()}
		} else {
			ip := net.ParseIP(d.ip)
			if v4 := ip.To4(); v4 != nil && !strings.Contains(d.ip, ":") {
				ip = v4
			}
			req.IPs = []net.IP{ip}
		}
		cases = append(cases, csrCase{name: "deny list: " + d.name, req: req, want: policy.RuleSANDenied})
	}

	seen := map[policy.Rule]bool{}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := build(t, tc)
			src := tc.invSrc
			if src == nil {
				src = inv
			}
			conf := cfg
			if tc.cfg != nil {
				conf = *tc.cfg
			}
			var ev policy.Evidence
			if tc.ev != nil {
				ev = *tc.ev
			}
			ev.Inventory = src
			d := policy.Evaluate(c, conf, ev, tc.backlog)
			seen[d.Rule] = true
			if d.Rule != tc.want || d.Approve != (tc.want == approve) {
				t.Fatalf("decision %v/%s (%s), want %s", d.Approve, d.Rule, d.Message, tc.want)
			}
			if d.Transient != tc.retry {
				t.Errorf("transient = %v, want %v", d.Transient, tc.retry)
			}
			if !strings.Contains(d.Message, tc.wantMsg) {
				t.Errorf("message %q, want it to contain %q", d.Message, tc.wantMsg)
			}
			if !d.Approve && !strings.HasPrefix(d.Message, string(d.Rule)+": ") {
				t.Errorf("message %q does not start with its rule", d.Message)
			}
		})
	}
	for _, r := range policy.Rules {
		if !seen[r] {
			t.Errorf("no case refuses with %s", r)
		}
	}
}

func ptr[T any](v T) *T { return &v }

func manyNames(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("name-%d.example.com", i)
	}
	return out
}

func rsaKey(t *testing.T, bits int) crypto.Signer {
	t.Helper()
	k, err := rsa.GenerateKey(rand.Reader, bits)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func ecKey(t *testing.T, c elliptic.Curve) crypto.Signer {
	t.Helper()
	k, err := ecdsa.GenerateKey(c, rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func edKey(t *testing.T) crypto.Signer {
	t.Helper()
	_, k, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return k
}
