package policy_test

import (
	"net/netip"
	"strings"

	"github.com/certready/certready/internal/testpki"
	"github.com/certready/certready/reporter/approver/inventory"
	"github.com/certready/certready/reporter/approver/policy"
)

func addrs(s ...string) []netip.Addr {
	out := make([]netip.Addr, 0, len(s))
	for _, v := range s {
		out = append(out, netip.MustParseAddr(v))
	}
	return out
}

// selfNodes is the node inventory as inventory.Nodes reads it. worker-1's
// kubelet registered with 192.0.2.11, 2001:db8::11 and three more
// addresses, and wrote later 198.51.100.77 (outside every node network)
// and 10.9.9.9 (in a network where a cloud controller wrote an InternalIP);
// a cloud controller wrote its 203.0.113.7. worker-3's entry comes from
// desired state (a ConfigMap, a file, a Machine): nothing in it is
// self-reported.
var selfNodes = inventory.NewStatic("node objects", map[string]inventory.Entry{
	"worker-1": {
		IPs:          addrs("192.0.2.11", "2001:db8::11", "192.0.2.21", "192.0.2.22", "192.0.2.23", "198.51.100.77", "10.9.9.9", "203.0.113.7"),
		SelfReported: addrs("192.0.2.11", "2001:db8::11", "192.0.2.21", "192.0.2.22", "192.0.2.23", "198.51.100.77", "10.9.9.9"),
		Registered:   addrs("192.0.2.11", "2001:db8::11", "192.0.2.21", "192.0.2.22", "192.0.2.23"),
	},
	"worker-3": {IPs: addrs("198.51.100.31", "198.51.100.32", "198.51.100.33", "198.51.100.34", "198.51.100.35", "198.51.100.36")},
})

// learned is a node network learned from a cloud controller's InternalIP.
func learned(ip netip.Addr) (netip.Prefix, bool) {
	p := inventory.LearnedNetwork(ip)
	return p, p == netip.MustParsePrefix("10.9.9.0/24")
}

var selfEv = policy.Evidence{NodeNetwork: learned}

// fixed is an API server whose identity does not change.
func fixed(a policy.APIServer) func() policy.APIServer { return func() policy.APIServer { return a } }

// dnsNodes: names a node reports, for the DNS name rules (every one is
// recorded, so that only the rule under test refuses it).
var dnsNodes = inventory.NewStatic("node objects", map[string]inventory.Entry{
	"worker-1": {IPs: addrs("192.0.2.11"), DNSNames: []string{
		"web.prod", "Web.Prod.", "worker-1.nodes.example.com", "worker-1.example.com", "nodes.example.com", "pod.example.com",
		"10-0-0-1.default.pod.cluster.local", "10-0-0-1.default.pod", "x.pod.example.com", "svc.ns.svc.cluster.local",
		"my_host.example.com", "bad\x00name.example.com", "bad\nname.example.com", "a..example.com", strings.Repeat("l", 64) + ".example.com",
		"-lead.example.com", "trail-.example.com", strings.Repeat("abcdefghi.", 25) + "example.com",
	}},
	"db.lan":                          {IPs: addrs("192.0.2.41")},
	"node-" + strings.Repeat("x", 60): {IPs: addrs("192.0.2.42")},
})

// wild: the API server's certificate carries *.api.example.com; the node
// cp-1.api.example.com hosts an API server (its name under the wildcard,
// as the API server presents it); w-9.api.example.com hosts none.
var wild = policy.Evidence{
	APIServer: fixed(policy.APIServer{
		Names:     map[string]string{"api.example.com": "the kubeconfig's host"},
		Wildcards: map[string]string{"api.example.com": "in the certificate the API server presents"},
	}),
	APIServerHost:     func(node string) bool { return node == "cp-1.api.example.com" },
	APIServerHostRule: "label node-role.kubernetes.io/control-plane",
}

var wildNodes = inventory.NewStatic("node objects", map[string]inventory.Entry{
	"cp-1.api.example.com": {IPs: addrs("192.0.2.31"), DNSNames: []string{"cp-1.api.example.com", "lb.api.example.com", "a.prod.api.example.com"}},
	"w-9.api.example.com":  {IPs: addrs("192.0.2.39"), DNSNames: []string{"w-9.api.example.com"}},
	"worker-2":             {IPs: addrs("192.0.2.12"), DNSNames: []string{"prod.api.example.com", "a.prod.api.example.com", "x.example.com"}},
})

func wildHostOwn(names ...string) *policy.Evidence {
	c := wild
	c.HostOwn = func(node string) (inventory.Entry, bool) {
		return inventory.Entry{IPs: addrs("192.0.2.31"), DNSNames: names}, node == "cp-1.api.example.com"
	}
	return &c
}

// secondRingCases are the cases of issue 34's points 2 and 3: the API
// server's wildcards, addresses a node reports about itself, and DNS names
// that are no host's.
func secondRingCases() []csrCase {
	approve := policy.RuleApproved
	deny := func(names ...string) *policy.Config { return &policy.Config{DenyDNSNames: names} }
	suffixes := func(s ...string) *policy.Config { return &policy.Config{AllowedDNSSuffixes: s} }
	return []csrCase{
		// The API server's wildcard covers one label, in any case, with or
		// without the root's dot.
		{name: "a name under the API server's wildcard, mixed case and trailing dot", req: testpki.Request{Node: "worker-2", DNSNames: []string{"Prod.API.Example.COM."}}, invSrc: wildNodes, ev: &wild,
			want: policy.RuleSANDenied, wantMsg: `"Prod.API.Example.COM." is an API server name under its wildcard *.api.example.com (in the certificate the API server presents); only a node that hosts an API server`},
		{name: "two labels under the API server's wildcard are not covered", req: testpki.Request{Node: "worker-2", DNSNames: []string{"a.prod.api.example.com"}, IPs: ips("192.0.2.12")}, invSrc: wildNodes, ev: &wild, want: approve},
		{name: "a name beside the wildcard's domain is not covered", req: testpki.Request{Node: "worker-2", DNSNames: []string{"x.example.com"}, IPs: ips("192.0.2.12")}, invSrc: wildNodes, ev: &wild, want: approve},
		{name: "a node that hosts no API server, named under the wildcard, is refused its own name", req: testpki.Request{Node: "w-9.api.example.com", DNSNames: []string{"w-9.api.example.com"}}, invSrc: wildNodes, ev: &wild,
			want: policy.RuleSANDenied, wantMsg: "and w-9.api.example.com does not"},
		{name: "an API server host gets its own node name under the wildcard", req: testpki.Request{Node: "cp-1.api.example.com", DNSNames: []string{"CP-1.api.example.com."}, IPs: ips("192.0.2.31")}, invSrc: wildNodes, ev: &wild, want: approve},
		{name: "an API server host asking for another name under the wildcard it reports", req: testpki.Request{Node: "cp-1.api.example.com", DNSNames: []string{"lb.api.example.com"}}, invSrc: wildNodes, ev: &wild,
			want: policy.RuleSANDenied, wantMsg: "under its wildcard *.api.example.com (in the certificate the API server presents) and not cp-1.api.example.com's own"},
		{name: "an API server host with a name under the wildcard recorded before it was labelled", req: testpki.Request{Node: "cp-1.api.example.com", DNSNames: []string{"lb.api.example.com"}}, invSrc: wildNodes, ev: wildHostOwn("LB.api.example.com"), want: approve},
		// --apiserver-names patterns.
		{name: "a name under an --apiserver-names pattern, mixed case and trailing dot", req: testpki.Request{Node: "evil", DNSNames: []string{"Prod.X.Example.com."}}, cfg: deny("*.x.example.com"),
			want: policy.RuleSANDenied, wantMsg: "an API server name (--apiserver-names *.x.example.com)"},
		{name: "a pattern in --apiserver-names refuses even the node's own name", req: testpki.Request{Node: "w-9.api.example.com", DNSNames: []string{"w-9.api.example.com"}}, invSrc: wildNodes, cfg: deny("*.API.example.com."),
			want: policy.RuleSANDenied, wantMsg: "--apiserver-names *.api.example.com"},
		{name: "an --apiserver-names pattern does not cover its own domain", req: testpki.Request{Node: "worker-2", DNSNames: []string{"x.example.com"}, IPs: ips("192.0.2.12")}, invSrc: wildNodes, cfg: deny("*.x.example.com"), want: approve},

		// Addresses a node reports about itself.
		{name: "self-reported addresses the node registered with", req: testpki.Request{IPs: ips("192.0.2.11", "2001:db8::11")}, invSrc: selfNodes, cfg: &policy.Config{}, ev: &selfEv, want: approve},
		{name: "a self-reported address outside every node network", req: testpki.Request{IPs: ips("192.0.2.11", "198.51.100.77")}, invSrc: selfNodes, cfg: &policy.Config{}, ev: &selfEv,
			want: policy.RuleIPSANSelfReported, wantMsg: "198.51.100.77 was reported by worker-1 about itself"},
		{name: "the refusal says which flag makes it pass", req: testpki.Request{IPs: ips("198.51.100.77")}, invSrc: selfNodes, cfg: &policy.Config{}, ev: &selfEv,
			want: policy.RuleIPSANSelfReported, wantMsg: "list the nodes' network in --allowed-cidrs"},
		{name: "a self-reported address outside networks with none learned", req: testpki.Request{IPs: ips("10.9.9.9")}, invSrc: selfNodes, cfg: &policy.Config{},
			want: policy.RuleIPSANSelfReported, wantMsg: "not in 10.9.9.0/24"},
		{name: "a self-reported address in a network a cloud controller wrote an InternalIP in", req: testpki.Request{IPs: ips("10.9.9.9")}, invSrc: selfNodes, cfg: &policy.Config{}, ev: &selfEv, want: approve},
		{name: "a self-reported address inside --allowed-cidrs", req: testpki.Request{IPs: ips("198.51.100.77")}, invSrc: selfNodes,
			cfg: &policy.Config{AllowedCIDRs: []netip.Prefix{netip.MustParsePrefix("0.0.0.0/0")}}, ev: &selfEv, want: approve},
		{name: "an address a cloud controller wrote, outside every network", req: testpki.Request{IPs: ips("203.0.113.7")}, invSrc: selfNodes, cfg: &policy.Config{}, ev: &selfEv, want: approve},
		{name: "self-reported addresses at the default cap", req: testpki.Request{IPs: ips("192.0.2.11", "2001:db8::11", "192.0.2.21", "192.0.2.22", "203.0.113.7")}, invSrc: selfNodes, cfg: &policy.Config{}, ev: &selfEv, want: approve},
		{name: "self-reported addresses one over the default cap", req: testpki.Request{IPs: ips("192.0.2.11", "2001:db8::11", "192.0.2.21", "192.0.2.22", "192.0.2.23")}, invSrc: selfNodes, cfg: &policy.Config{}, ev: &selfEv,
			want: policy.RuleTooManySelfReportedIPs, wantMsg: "5 IP SANs that worker-1 reported about itself (its status addresses written by no cloud controller of --cloud-controller-managers), at most 4 (--max-self-reported-ips)"},
		{name: "self-reported addresses one over a configured cap", req: testpki.Request{IPs: ips("192.0.2.11", "2001:db8::11")}, invSrc: selfNodes,
			cfg: &policy.Config{MaxSelfReportedIPs: 1}, ev: &selfEv, want: policy.RuleTooManySelfReportedIPs, wantMsg: "2 IP SANs"},
		{name: "desired state is infrastructure truth: no cap, no network", req: testpki.Request{Node: "worker-3", IPs: ips("198.51.100.31", "198.51.100.32", "198.51.100.33", "198.51.100.34", "198.51.100.35", "198.51.100.36")}, invSrc: selfNodes, cfg: &policy.Config{}, ev: &selfEv, want: approve},

		// DNS names that are no host's, or a Service's or a Pod's.
		{name: "an underscore", req: testpki.Request{DNSNames: []string{"my_host.example.com"}}, invSrc: dnsNodes, want: policy.RuleDNSSANNotHostname, wantMsg: `"my_host.example.com" of worker-1 is not a host name: an underscore`},
		{name: "a NUL", req: testpki.Request{DNSNames: []string{"bad\x00name.example.com"}}, invSrc: dnsNodes, want: policy.RuleDNSSANNotHostname, wantMsg: `"bad\x00name.example.com" of worker-1 is not a host name: a control character`},
		{name: "a newline", req: testpki.Request{DNSNames: []string{"bad\nname.example.com"}}, invSrc: dnsNodes, want: policy.RuleDNSSANNotHostname, wantMsg: "a control character"},
		{name: "an empty label", req: testpki.Request{DNSNames: []string{"a..example.com"}}, invSrc: dnsNodes, want: policy.RuleDNSSANNotHostname, wantMsg: "an empty label"},
		{name: "a label of 64 characters", req: testpki.Request{DNSNames: []string{strings.Repeat("l", 64) + ".example.com"}}, invSrc: dnsNodes, want: policy.RuleDNSSANNotHostname, wantMsg: "a label of 64 characters, at most 63"},
		{name: "a name of 261 characters", req: testpki.Request{DNSNames: []string{strings.Repeat("abcdefghi.", 25) + "example.com"}}, invSrc: dnsNodes, want: policy.RuleDNSSANNotHostname, wantMsg: "261 characters long, at most 253"},
		{name: "a leading hyphen", req: testpki.Request{DNSNames: []string{"-lead.example.com"}}, invSrc: dnsNodes, want: policy.RuleDNSSANNotHostname, wantMsg: "starts or ends with a hyphen"},
		{name: "a trailing hyphen", req: testpki.Request{DNSNames: []string{"trail-.example.com"}}, invSrc: dnsNodes, want: policy.RuleDNSSANNotHostname, wantMsg: "starts or ends with a hyphen"},
		{name: "the node's own name with a label over 63 characters, as the API server allows", req: testpki.Request{Node: "node-" + strings.Repeat("x", 60), DNSNames: []string{"node-" + strings.Repeat("x", 60)}, IPs: ips("192.0.2.42")}, invSrc: dnsNodes, want: approve},
		{name: "a Service's long name", req: testpki.Request{DNSNames: []string{"svc.ns.svc.cluster.local"}}, invSrc: dnsNodes, want: policy.RuleSANDenied, wantMsg: "a cluster service name"},
		{name: "a Pod's name", req: testpki.Request{DNSNames: []string{"10-0-0-1.default.pod.cluster.local"}}, invSrc: dnsNodes, want: policy.RuleDNSSANClusterName, wantMsg: `"10-0-0-1.default.pod.cluster.local" of worker-1 is a Pod's DNS name`},
		{name: "a Pod's short name", req: testpki.Request{DNSNames: []string{"10-0-0-1.default.pod"}}, invSrc: dnsNodes, want: policy.RuleDNSSANClusterName, wantMsg: "a Pod's DNS name"},
		{name: "a label pod anywhere after the first", req: testpki.Request{DNSNames: []string{"x.pod.example.com"}}, invSrc: dnsNodes, want: policy.RuleDNSSANClusterName},
		{name: "a first label pod is a host's", req: testpki.Request{DNSNames: []string{"pod.example.com"}, IPs: ips("192.0.2.11")}, invSrc: dnsNodes, want: approve},
		{name: "a Service's short name <service>.<namespace>", req: testpki.Request{DNSNames: []string{"Web.Prod."}}, invSrc: dnsNodes, want: policy.RuleDNSSANClusterName,
			wantMsg: `"Web.Prod." of worker-1 is of two labels, the short form <service>.<namespace> of a Service`},
		{name: "the node's own name of two labels", req: testpki.Request{Node: "db.lan", DNSNames: []string{"db.lan"}, IPs: ips("192.0.2.41")}, invSrc: dnsNodes, want: policy.RuleDNSSANClusterName, wantMsg: `when --allowed-dns-suffixes lists its domain "lan"`},
		{name: "a name of two labels under a listed domain", req: testpki.Request{Node: "db.lan", DNSNames: []string{"db.lan"}, IPs: ips("192.0.2.41")}, invSrc: dnsNodes, cfg: suffixes("LAN"), want: approve},
		{name: "under --allowed-dns-suffixes", req: testpki.Request{DNSNames: []string{"worker-1", "Worker-1.Nodes.example.com."}, IPs: ips("192.0.2.11")}, invSrc: dnsNodes, cfg: suffixes("nodes.example.com"), want: approve},
		{name: "outside --allowed-dns-suffixes", req: testpki.Request{DNSNames: []string{"worker-1.nodes.example.com", "worker-1.example.com"}}, invSrc: dnsNodes, cfg: suffixes("nodes.example.com"),
			want: policy.RuleDNSSANNotAllowedSuffix, wantMsg: `DNS SAN "worker-1.example.com" of worker-1 is under none of --allowed-dns-suffixes [nodes.example.com]`},
		{name: "a suffix itself is not under it", req: testpki.Request{DNSNames: []string{"nodes.example.com"}}, invSrc: dnsNodes, cfg: suffixes("nodes.example.com"), want: policy.RuleDNSSANNotAllowedSuffix},
	}
}
