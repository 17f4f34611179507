package apiserver_test

import (
	"context"
	"maps"
	"net"
	"net/netip"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/rest"

	"github.com/certready/certready/internal/testpki"
	"github.com/certready/certready/internal/testwait"
	"github.com/certready/certready/reporter/approver/apiserver"
	"github.com/certready/certready/reporter/approver/inventory"
	"github.com/certready/certready/reporter/approver/policy"
)

func slice(ns, name string, addrs ...string) *discoveryv1.EndpointSlice {
	return &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Namespace: ns, Name: name},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints:   []discoveryv1.Endpoint{{Addresses: addrs}},
	}
}

func service(ns, name string, ips ...string) *corev1.Service {
	return &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: corev1.ServiceSpec{ClusterIP: ips[0], ClusterIPs: ips}}
}

func clusterInfo(server string) *corev1.ConfigMap {
	return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "kube-public", Name: "cluster-info"}, Data: map[string]string{
		"kubeconfig":            "apiVersion: v1\nkind: Config\nclusters:\n- name: \"\"\n  cluster:\n    certificate-authority-data: AAAA\n    server: " + server + "\n",
		"jws-kubeconfig-abcdef": "secret-signature",
	}}
}

func start(t *testing.T, cfg apiserver.Config) *apiserver.Identity {
	t.Helper()
	id, err := apiserver.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	id.Start(ctx)
	return id
}

func waitFor(t *testing.T, id *apiserver.Identity, ok func(policy.APIServer) bool) policy.APIServer {
	t.Helper()
	var got policy.APIServer
	if !testwait.Until(10*time.Second, func() bool {
		got = id.Current()
		return id.HasSynced() && ok(got)
	}) {
		t.Fatalf("identity %+v", got)
	}
	return got
}

func addrs(a policy.APIServer) []string {
	var out []string
	for _, ip := range slices.SortedFunc(maps.Keys(a.Addresses), netip.Addr.Compare) {
		out = append(out, ip.String())
	}
	return out
}

func TestEndpointsFollowTheAPIServersSlice(t *testing.T) {
	cs := fake.NewClientset(slice("default", "kubernetes", "192.0.2.1", "192.0.2.2"),
		// Another namespace's slice of the same name, and another Service's
		// slice: neither is the API server.
		slice("tenant", "kubernetes", "198.51.100.7"), slice("default", "web", "198.51.100.8"))
	var changes atomic.Int32
	id := start(t, apiserver.Config{Client: cs, OnChange: func() { changes.Add(1) }})
	want := func(w ...string) {
		t.Helper()
		waitFor(t, id, func(a policy.APIServer) bool {
			return slices.Equal(addrs(a), w) && len(a.Endpoints) == len(w)
		})
	}
	want("192.0.2.1", "192.0.2.2")
	// A control-plane node replaced: the API servers rewrite their slice.
	s := slice("default", "kubernetes", "192.0.2.3", "::ffff:192.0.2.2")
	if _, err := cs.DiscoveryV1().EndpointSlices("default").Update(context.Background(), s, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	want("192.0.2.2", "192.0.2.3")
	if changes.Load() < 2 {
		t.Errorf("OnChange ran %d times, want one per change of addresses", changes.Load())
	}
}

// Every source without configuration: the Service's ClusterIPs, the
// server kubeadm publishes in cluster-info, the approver's own host, the
// SANs of the certificate the API server presents (a real TLS handshake),
// and what the caller adds; a wildcard SAN is a pattern, kept as the
// domain it covers, not a name; a "*" elsewhere is no pattern TLS clients
// match, and is left out.
func TestIdentityIsLearnedFromEverySource(t *testing.T) {
	ca, err := testpki.NewCA("cluster CA")
	if err != nil {
		t.Fatal(err)
	}
	pair, err := ca.Issue(testpki.Serving{CN: "kube-apiserver", Node: "cp-1",
		DNSNames: []string{"kubernetes.default.svc", "cp-1", "API.Example.com.", "*.Apps.example.com.", "f*.example.com"},
		IPs:      []net.IP{net.ParseIP("127.0.0.1").To4(), net.ParseIP("192.0.2.100").To4()}})
	if err != nil {
		t.Fatal(err)
	}
	host := testpki.ServeTLS(t, pair)
	cs := fake.NewClientset(
		slice("default", "kubernetes", "192.0.2.1"),
		service("default", "kubernetes", "10.96.0.1", "fd00::1"), service("default", "web", "10.96.0.9"),
		clusterInfo("https://lb.example.com:6443"))
	id := start(t, apiserver.Config{Client: cs, REST: &rest.Config{Host: "https://" + host, TLSClientConfig: rest.TLSClientConfig{CAData: ca.PEM()}},
		Extra: map[string]string{"203.0.113.5": "the Cluster's spec.controlPlaneEndpoint"}})
	got := waitFor(t, id, func(a policy.APIServer) bool { return len(a.Addresses) == 6 && len(a.Names) == 4 })
	for ip, source := range map[string]string{
		"192.0.2.1": apiserver.SourceEndpoint, "10.96.0.1": apiserver.SourceServiceIP, "fd00::1": apiserver.SourceServiceIP,
		"127.0.0.1": apiserver.SourceClientHost, "192.0.2.100": apiserver.SourceCertificate, "203.0.113.5": "the Cluster's spec.controlPlaneEndpoint",
	} {
		if got.Addresses[netip.MustParseAddr(ip)] != source {
			t.Errorf("address %s: source %q, want %q (all: %v)", ip, got.Addresses[netip.MustParseAddr(ip)], source, got.Addresses)
		}
	}
	if !got.Endpoints[netip.MustParseAddr("192.0.2.1")] || len(got.Endpoints) != 1 {
		t.Errorf("endpoints %v, want only the EndpointSlice's", got.Endpoints)
	}
	for name, source := range map[string]string{
		"lb.example.com": apiserver.SourceClusterInfo, "kubernetes.default.svc": apiserver.SourceCertificate,
		"cp-1": apiserver.SourceCertificate, "api.example.com": apiserver.SourceCertificate,
	} {
		if got.Names[name] != source {
			t.Errorf("name %s: source %q, want %q (all: %v)", name, got.Names[name], source, got.Names)
		}
	}
	if !maps.Equal(got.Wildcards, map[string]string{"apps.example.com": apiserver.SourceCertificate}) {
		t.Errorf("wildcards %v, want apps.example.com from the certificate", got.Wildcards)
	}
	// The caller's own knowledge changes (a Cluster's endpoint moved).
	id.SetExtra(map[string]string{"api-2.example.com": "the Cluster's spec.controlPlaneEndpoint"})
	got = id.Current()
	if _, ok := got.Names["api-2.example.com"]; !ok || got.Addresses[netip.MustParseAddr("203.0.113.5")] != "" {
		t.Errorf("after SetExtra: %+v", got)
	}
}

// The approver's own host is the API server's even when its certificate
// cannot be read (nothing listens there).
func TestTheClientHostIsKnownWithoutAHandshake(t *testing.T) {
	id := start(t, apiserver.Config{Client: fake.NewClientset(), REST: &rest.Config{Host: "https://127.0.0.1:1"}})
	got := waitFor(t, id, func(policy.APIServer) bool { return true })
	if got.Addresses[netip.MustParseAddr("127.0.0.1")] != apiserver.SourceClientHost {
		t.Errorf("the client's own host is known without a handshake: %+v", got)
	}
}

func TestURLHost(t *testing.T) {
	for in, want := range map[string]string{
		"https://api.example.com:6443": "api.example.com", "https://[2001:db8::1]:443/prefix": "2001:db8::1",
		"10.0.0.1:6443": "10.0.0.1", "": "", "https://": "",
	} {
		if got := apiserver.URLHost(in); got != want {
			t.Errorf("URLHost(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestAddressesUnmapIPv4InIPv6(t *testing.T) {
	got := apiserver.Addresses(slice("default", "kubernetes", "::ffff:192.0.2.9", "2001:db8::1", "not-an-ip"))
	if !slices.Equal(got, []netip.Addr{netip.MustParseAddr("192.0.2.9"), netip.MustParseAddr("2001:db8::1")}) {
		t.Errorf("Addresses = %v", got)
	}
}

func node(name string, labelled bool, addrs ...string) *corev1.Node {
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{}}}
	if labelled {
		n.Labels["node-role.kubernetes.io/control-plane"] = ""
	}
	for _, a := range addrs {
		typ := corev1.NodeInternalIP
		if _, err := netip.ParseAddr(a); err != nil {
			typ = corev1.NodeHostName
		}
		n.Status.Addresses = append(n.Status.Addresses, corev1.NodeAddress{Type: typ, Address: a})
	}
	return n
}

// Hosts keeps what a node reported just before it was labelled, and
// nothing for nodes labelled before they were seen or never labelled.
func TestHostsRememberAddressesFromBeforeTheLabel(t *testing.T) {
	h := &apiserver.Hosts{Label: "node-role.kubernetes.io/control-plane"}
	h.Observe(nil, node("worker", false, "192.0.2.20"))
	h.Observe(nil, node("cp-old", true, "192.0.2.30"))
	before := node("cp-new", false, "192.0.2.40", "cp-new")
	h.Observe(nil, before)
	// Labelled, and then reporting the load balancer's address too.
	h.Observe(before, node("cp-new", true, "192.0.2.40", "cp-new"))
	h.Observe(node("cp-new", true, "192.0.2.40", "cp-new"), node("cp-new", true, "192.0.2.40", "192.0.2.50", "cp-new"))
	for _, n := range []string{"worker", "cp-old"} {
		if e, ok := h.Own(n); ok {
			t.Errorf("%s: a record %+v, want none", n, e)
		}
	}
	e, ok := h.Own("cp-new")
	want := inventory.Entry{IPs: []netip.Addr{netip.MustParseAddr("192.0.2.40")}, DNSNames: []string{"cp-new"}}
	if !ok || !slices.Equal(e.IPs, want.IPs) || !slices.Equal(e.DNSNames, want.DNSNames) {
		t.Errorf("cp-new: %+v %v, want %+v", e, ok, want)
	}
	h.Observe(node("cp-new", true), nil)
	if _, ok := h.Own("cp-new"); ok {
		t.Error("a deleted node's record kept")
	}
}
