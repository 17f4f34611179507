package verdict_test

import (
	"errors"
	"net/netip"
	"strings"
	"testing"

	"github.com/certready/certready/reporter/servingcert/evidence"

	"github.com/certready/certready/reporter/servingcert/probe"
	"github.com/certready/certready/reporter/servingcert/verdict"
)

func addrs(s ...string) []netip.Addr {
	var out []netip.Addr
	for _, a := range s {
		out = append(out, netip.MustParseAddr(a))
	}
	return out
}

func reported(typ string, s ...string) []evidence.ReportedAddress {
	var out []evidence.ReportedAddress
	for _, a := range addrs(s...) {
		out = append(out, evidence.ReportedAddress{Type: typ, IP: a})
	}
	return out
}

// The inventory decides no status: the Node's drift from it is named in
// the message of every verdict, ready or not, and a ready message keeps its
// machine facts last.
func TestInventoryDriftIsNamedNeverDecided(t *testing.T) {
	f := newFixture(t)
	const src = "ConfigMap certready-system/certready-inventory"
	for _, tc := range []struct {
		name       string
		change     func(in *evidence.Evidence)
		wantReason verdict.Reason
		want       []string // in the message
		wantNot    []string
	}{
		{name: "no inventory: nothing said", change: func(*evidence.Evidence) {},
			wantReason: verdict.Ready, wantNot: []string{"inventory"}},
		{name: "the inventory agrees", change: func(in *evidence.Evidence) {
			in.Inventory = &evidence.Inventory{Source: src, Listed: true, IPs: addrs("192.0.2.11")}
		}, wantReason: verdict.Ready, wantNot: []string{"drift", "inventory"}},
		{name: "the Node reports an address the inventory does not record", change: func(in *evidence.Evidence) {
			in.Node.Reported = append(in.Node.Reported, reported("ExternalIP", "203.0.113.5")...)
			in.Inventory = &evidence.Inventory{Source: src, Listed: true, IPs: addrs("192.0.2.11")}
		}, wantReason: verdict.Ready, want: []string{"drifted from the inventory (" + src + ")", "the Node reports 203.0.113.5 (ExternalIP), which it does not record", "the agent dials the inventory's 192.0.2.11"}},
		{name: "the inventory records an address the Node does not report", change: func(in *evidence.Evidence) {
			in.Inventory = &evidence.Inventory{Source: src, Listed: true, IPs: addrs("192.0.2.11", "2001:db8::11")}
		}, wantReason: verdict.Ready, want: []string{"it records 2001:db8::11, which the Node does not report"}},
		{name: "the Node moved: the API server dials an address the certificate lacks", change: func(in *evidence.Evidence) {
			in.Node.InternalIPs = addrs("198.51.100.11")
			in.Node.Reported = reported("InternalIP", "198.51.100.11")
			in.Node.Dial = "198.51.100.11"
			in.Inventory = &evidence.Inventory{Source: src, Listed: true, IPs: addrs("192.0.2.11")}
		}, wantReason: verdict.CertificateIdentityMismatch, want: []string{"198.51.100.11", "the Node reports 198.51.100.11 (InternalIP), which it does not record", "it records 192.0.2.11, which the Node does not report", "the agent dials the inventory's 192.0.2.11"}},
		{name: "each address once, at most four of each kind", change: func(in *evidence.Evidence) {
			in.Node.Reported = append(in.Node.Reported, reported("ExternalIP", "192.0.2.11", "203.0.113.1", "203.0.113.1", "203.0.113.2", "203.0.113.3", "203.0.113.4", "203.0.113.5")...)
			in.Inventory = &evidence.Inventory{Source: src, Listed: true, IPs: addrs("192.0.2.11", "192.0.2.11", "2001:db8::1", "2001:db8::1")}
		}, wantReason: verdict.Ready, want: []string{"the Node reports 203.0.113.1 (ExternalIP), 203.0.113.2 (ExternalIP), 203.0.113.3 (ExternalIP), 203.0.113.4 (ExternalIP) and 1 more, which it does not record",
			"it records 2001:db8::1, which the Node does not report"}, wantNot: []string{"203.0.113.5", "2001:db8::1, 2001:db8::1"}},
		{name: "not listed", change: func(in *evidence.Evidence) {
			in.Inventory = &evidence.Inventory{Source: src}
		}, wantReason: verdict.Ready, want: []string{"the inventory (" + src + ") does not list this node, so the Node's addresses were used"}},
		{name: "unreadable", change: func(in *evidence.Evidence) {
			in.Inventory = &evidence.Inventory{Source: src, Err: errors.New("the ConfigMap does not exist")}
		}, wantReason: verdict.Ready, want: []string{"cannot be read, so the Node's addresses were used: the ConfigMap does not exist"}},
		{name: "a failing verdict names the drift too", change: func(in *evidence.Evidence) {
			in.Endpoint = &probe.Result{Outcome: probe.Unreachable, Addr: "192.0.2.11:10250", Detail: "connection refused"}
			in.Node.Reported = append(in.Node.Reported, reported("InternalIP", "192.0.2.99")...)
			in.Inventory = &evidence.Inventory{Source: src, Listed: true, IPs: addrs("192.0.2.11")}
		}, wantReason: verdict.EndpointUnreachable, want: []string{"the Node reports 192.0.2.99 (InternalIP), which it does not record"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := f.ready()
			in.Node.Reported = reported("InternalIP", "192.0.2.11")
			tc.change(&in)
			v := verdict.Evaluate(in)
			if v.Reason != tc.wantReason {
				t.Fatalf("reason %s (%s), want %s", v.Reason, v.Message, tc.wantReason)
			}
			for _, w := range tc.want {
				if !strings.Contains(v.Message, w) {
					t.Errorf("message %q lacks %q", v.Message, w)
				}
			}
			for _, w := range tc.wantNot {
				if strings.Contains(v.Message, w) {
					t.Errorf("message %q has %q", v.Message, w)
				}
			}
			if v.Ready() {
				if v.Facts == nil || v.Facts.Fingerprint.IsZero() {
					t.Errorf("ready verdict %q without its facts (%+v)", v.Message, v.Facts)
				}
			}
		})
	}
}

func TestTheInventorysAddressIsDialledInTheNodesFamily(t *testing.T) {
	for _, tc := range []struct {
		name     string
		inv      *evidence.Inventory
		internal []netip.Addr
		want     string // "": none
	}{
		{name: "no inventory", inv: nil, internal: addrs("192.0.2.11")},
		{name: "unreadable", inv: &evidence.Inventory{Err: errors.New("x"), Listed: true, IPs: addrs("192.0.2.12")}},
		{name: "not listed", inv: &evidence.Inventory{}},
		{name: "listed without IPs", inv: &evidence.Inventory{Listed: true, DNSNames: []string{"w1.example"}}},
		{name: "first IP", inv: &evidence.Inventory{Listed: true, IPs: addrs("192.0.2.12", "192.0.2.13")}, want: "192.0.2.12"},
		{name: "the family of the Node's InternalIP", inv: &evidence.Inventory{Listed: true, IPs: addrs("2001:db8::12", "192.0.2.12")},
			internal: addrs("192.0.2.11"), want: "192.0.2.12"},
		{name: "no IP of that family: the first", inv: &evidence.Inventory{Listed: true, IPs: addrs("2001:db8::12")},
			internal: addrs("192.0.2.11"), want: "2001:db8::12"},
		{name: "IPv4-mapped is IPv4", inv: &evidence.Inventory{Listed: true, IPs: addrs("::ffff:192.0.2.12")}, want: "192.0.2.12"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := tc.inv.DialIP(evidence.Node{InternalIPs: tc.internal})
			if (tc.want == "") == ok || (ok && got.String() != tc.want) {
				t.Errorf("DialIP = %v %v, want %q", got, ok, tc.want)
			}
		})
	}
}
