package capi_test

import (
	"net"
	"net/netip"
	"testing"

	certv1 "k8s.io/api/certificates/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/tools/cache"

	"github.com/certready/certready/internal/testpki"
	"github.com/certready/certready/reporter/approver/capi"
	"github.com/certready/certready/reporter/approver/policy"
)

// machine is a Machine as Cluster API v1beta2 stores it.
func machine(ns, name, cluster, node string, addrs ...[2]string) *unstructured.Unstructured {
	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Machine",
		"metadata": map[string]any{"namespace": ns, "name": name, "labels": map[string]any{capi.ClusterNameLabel: cluster}},
		"spec":     map[string]any{"clusterName": cluster, "bootstrap": map[string]any{"dataSecretName": "x"}},
	}}
	status := map[string]any{}
	if node != "" {
		status["nodeRef"] = map[string]any{"name": node}
	}
	var list []any
	for _, a := range addrs {
		list = append(list, map[string]any{"type": a[0], "address": a[1]})
	}
	if list != nil {
		status["addresses"] = list
	}
	u.Object["status"] = status
	return u
}

func csr(t *testing.T, node string, ips []string, dns ...string) *certv1.CertificateSigningRequest {
	t.Helper()
	var parsed []net.IP
	for _, s := range ips {
		parsed = append(parsed, net.ParseIP(s))
	}
	pemBytes, _, err := testpki.NewCSR(testpki.Request{Node: node, IPs: parsed, DNSNames: dns})
	if err != nil {
		t.Fatal(err)
	}
	return testpki.KubeletCSR("csr-"+node, node, testpki.WithRequest(pemBytes))
}

// TestMachinesDecide runs the approver's policy over real CSRs with a
// workload cluster's Machines as the inventory.
func TestMachinesDecide(t *testing.T) {
	idx := cache.NewIndexer(cache.MetaNamespaceKeyFunc, capi.Indexers)
	for _, m := range []*unstructured.Unstructured{
		// A server with a floating IP and two networks, and DNS names as
		// providers write them (upper case, trailing dot).
		machine("tenant-a", "md-0-abc", "prod", "prod-md-0-abc",
			[2]string{"InternalIP", "10.0.0.11"}, [2]string{"InternalIP", "192.168.50.11"}, [2]string{"ExternalIP", "203.0.113.11"},
			[2]string{"InternalDNS", "Prod-MD-0-abc.Internal.Example."}, [2]string{"Hostname", "prod-md-0-abc"}),
		machine("tenant-a", "md-0-def", "prod", "prod-md-0-def", [2]string{"InternalIP", "10.0.0.12"}, [2]string{"InternalIP", "2001:db8::12"}),
		// Two Machines that claim one address (a stale port).
		machine("tenant-a", "md-0-ghi", "prod", "prod-md-0-ghi", [2]string{"InternalIP", "10.0.0.13"}, [2]string{"ExternalIP", "203.0.113.99"}),
		machine("tenant-a", "md-0-jkl", "prod", "prod-md-0-jkl", [2]string{"InternalIP", "10.0.0.14"}, [2]string{"ExternalIP", "203.0.113.99"}),
		// Still provisioning: no nodeRef, but its address is its server's.
		machine("tenant-a", "md-0-new", "prod", "", [2]string{"InternalIP", "10.0.0.15"}),
		// Another cluster in the namespace, and another namespace, with the
		// same node names and addresses: never mixed up with prod's.
		machine("tenant-a", "stg-0", "staging", "prod-md-0-def", [2]string{"InternalIP", "10.0.0.99"}),
		machine("tenant-b", "md-0-abc", "prod", "prod-md-0-abc", [2]string{"InternalIP", "10.9.9.9"}),
		// A node named by two Machines: which server is it?
		machine("tenant-a", "dup-1", "prod", "prod-dup", [2]string{"InternalIP", "10.0.0.21"}),
		machine("tenant-a", "dup-2", "prod", "prod-dup", [2]string{"InternalIP", "10.0.0.21"}),
		// An address a provider wrote badly is left out, not fatal.
		machine("tenant-a", "md-0-bad", "prod", "prod-md-0-bad", [2]string{"InternalIP", "10.0.0.300"}, [2]string{"InternalIP", "10.0.0.16"}),
	} {
		if err := idx.Add(m); err != nil {
			t.Fatal(err)
		}
	}
	inv := capi.Inventory{Indexer: idx, Namespace: "tenant-a", Cluster: "prod"}
	for _, tc := range []struct {
		name string
		csr  *certv1.CertificateSigningRequest
		want policy.Rule
	}{
		{"all networks and the floating IP", csr(t, "prod-md-0-abc", []string{"10.0.0.11", "192.168.50.11", "203.0.113.11"}), policy.RuleApproved},
		{"DNS in another case and with a trailing dot", csr(t, "prod-md-0-abc", []string{"10.0.0.11"}, "prod-md-0-abc.internal.example.", "PROD-MD-0-ABC.internal.example"), policy.RuleApproved},
		{"IPv6 address", csr(t, "prod-md-0-def", []string{"2001:db8::12"}), policy.RuleApproved},
		{"another Machine's address", csr(t, "prod-md-0-abc", []string{"10.0.0.11", "10.0.0.12"}), policy.RuleIPSANNotInInventory},
		{"an address two Machines claim", csr(t, "prod-md-0-ghi", []string{"10.0.0.13", "203.0.113.99"}), policy.RuleAddressClaimed},
		{"the address of a Machine still provisioning", csr(t, "prod-md-0-abc", []string{"10.0.0.15"}), policy.RuleIPSANNotInInventory},
		{"a name not on the Machine", csr(t, "prod-md-0-abc", []string{"10.0.0.11"}, "prod-md-0-def.internal.example"), policy.RuleDNSSANNotInInventory},
		{"a node no Machine names", csr(t, "prod-md-0-zzz", []string{"10.0.0.17"}), policy.RuleNodeNotInInventory},
		{"a node two Machines name", csr(t, "prod-dup", []string{"10.0.0.21"}), policy.RuleNodeNotInInventory},
		{"another cluster's address for the same node name", csr(t, "prod-md-0-def", []string{"10.0.0.99"}), policy.RuleIPSANNotInInventory},
		{"another namespace's address for the same node name", csr(t, "prod-md-0-abc", []string{"10.9.9.9"}), policy.RuleIPSANNotInInventory},
		{"the good address of a Machine with a bad one", csr(t, "prod-md-0-bad", []string{"10.0.0.16"}), policy.RuleApproved},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := policy.Evaluate(tc.csr, policy.Config{}, policy.Evidence{Inventory: inv}, policy.Backlog{})
			if d.Rule != tc.want {
				t.Fatalf("%s: %s, want %s", tc.name, d.Message, tc.want)
			}
		})
	}
	if n := inv.Size(); n != 8 {
		t.Errorf("Size %d, want prod's 8 Machines in tenant-a", n)
	}
	if got := inv.Claimants(netip.MustParseAddr("10.0.0.15")); len(got) != 1 || got[0] != "Machine md-0-new" {
		t.Errorf("Claimants of a provisioning Machine's address: %v", got)
	}
}

func TestOnlyControlPlaneMachinesHostTheAPIServer(t *testing.T) {
	idx := cache.NewIndexer(cache.MetaNamespaceKeyFunc, capi.Indexers)
	cp := machine("ns", "cp-0", "c", "c-cp-0", [2]string{"InternalIP", "10.0.0.1"})
	cp.SetLabels(map[string]string{capi.ClusterNameLabel: "c", capi.ControlPlaneLabel: ""})
	trimmed, _ := capi.TrimMachine(cp)
	for _, m := range []any{trimmed, machine("ns", "md-0", "c", "c-md-0", [2]string{"InternalIP", "10.0.0.2"})} {
		if err := idx.Add(m); err != nil {
			t.Fatal(err)
		}
	}
	inv := capi.Inventory{Indexer: idx, Namespace: "ns", Cluster: "c"}
	api := policy.APIServer{
		Addresses: map[netip.Addr]string{netip.MustParseAddr("10.0.0.1"): "an endpoint", netip.MustParseAddr("10.0.0.2"): "an endpoint"},
		Endpoints: map[netip.Addr]bool{netip.MustParseAddr("10.0.0.1"): true, netip.MustParseAddr("10.0.0.2"): true},
	}
	ev := policy.Evidence{Inventory: inv, APIServer: func() policy.APIServer { return api }, APIServerHost: inv.HostsAPIServer, HostOwn: inv.Lookup}
	if d := policy.Evaluate(csr(t, "c-cp-0", []string{"10.0.0.1"}), policy.Config{}, ev, policy.Backlog{}); d.Rule != policy.RuleApproved {
		t.Errorf("control-plane Machine's node, its own API server address: %s", d.Message)
	}
	if d := policy.Evaluate(csr(t, "c-md-0", []string{"10.0.0.2"}), policy.Config{}, ev, policy.Backlog{}); d.Rule != policy.RuleSANDenied {
		t.Errorf("worker Machine's node with an API server address: %s, want SANDenied", d.Message)
	}
}

func TestParseMachineReportsWhatItLeftOut(t *testing.T) {
	m := capi.ParseMachine(machine("ns", "m", "c", "n", [2]string{"InternalIP", "not-an-ip"}, [2]string{"Loopback", "127.0.0.1"}, [2]string{"ExternalDNS", " "}, [2]string{"InternalIP", "::ffff:10.0.0.1"}))
	if len(m.Problems) != 3 || len(m.IPs) != 1 || m.IPs[0] != netip.MustParseAddr("10.0.0.1") {
		t.Errorf("problems %q, IPs %v: want three problems and the unmapped 10.0.0.1", m.Problems, m.IPs)
	}
	// Without the label, spec.clusterName says the cluster.
	u := machine("ns", "m", "c", "n")
	u.SetLabels(nil)
	if got := capi.ParseMachine(u).Cluster; got != "c" {
		t.Errorf("cluster %q from spec.clusterName, want c", got)
	}
}

func TestTrimMachineKeepsWhatIsRead(t *testing.T) {
	u := machine("ns", "m", "c", "n", [2]string{"InternalIP", "10.0.0.1"})
	u.Object["spec"].(map[string]any)["providerID"] = "openstack:///abc"
	u.SetAnnotations(map[string]string{"big": "x"})
	out, err := capi.TrimMachine(u)
	if err != nil {
		t.Fatal(err)
	}
	tm := out.(*unstructured.Unstructured)
	if before, after := capi.ParseMachine(u), capi.ParseMachine(tm); after.Node != before.Node || after.Cluster != before.Cluster || len(after.IPs) != 1 {
		t.Errorf("trimmed %+v, was %+v", after, before)
	}
	if tm.GetAnnotations() != nil || tm.Object["spec"].(map[string]any)["providerID"] != nil || tm.GetKind() != "Machine" {
		t.Errorf("kept %v", tm.Object)
	}
}
