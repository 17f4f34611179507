package inventory_test

import (
	"context"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/certready/certready/reporter/approver/inventory"
)

func TestParse(t *testing.T) {
	cases := []struct {
		name    string
		doc     string
		wantErr string
		check   func(t *testing.T, m map[string]inventory.Entry)
	}{
		{
			name: "YAML with IPv4, IPv6 and DNS names",
			doc:  "nodes:\n  worker-1:\n    ips: [192.0.2.11, \"2001:db8::11\"]\n    dnsNames: [worker-1.example.com]\n",
			check: func(t *testing.T, m map[string]inventory.Entry) {
				e := m["worker-1"]
				if len(e.IPs) != 2 || e.IPs[1] != netip.MustParseAddr("2001:db8::11") || e.DNSNames[0] != "worker-1.example.com" {
					t.Errorf("entry %+v", e)
				}
			},
		},
		{name: "JSON", doc: `{"nodes":{"w":{"ips":["192.0.2.1"]}}}`, check: func(t *testing.T, m map[string]inventory.Entry) {
			if len(m["w"].IPs) != 1 {
				t.Errorf("%+v", m)
			}
		}},
		{name: "bad IP names the node and value", doc: "nodes:\n  worker-1:\n    ips: [192.0.2.300]\n", wantErr: `node worker-1: ip "192.0.2.300"`},
		{name: "unknown field", doc: "nodes:\n  worker-1:\n    ip: [192.0.2.1]\n", wantErr: `unknown field "ip"`},
		{name: "empty DNS name", doc: "nodes:\n  worker-1:\n    dnsNames: [\"\"]\n", wantErr: "empty DNS name"},
		{name: "not YAML", doc: "nodes: [", wantErr: "not YAML"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			m, err := inventory.Parse([]byte(tc.doc))
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			tc.check(t, m)
		})
	}
}

func TestNodesSource(t *testing.T) {
	idx := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "w1"}}
	n.Status.Addresses = []corev1.NodeAddress{
		{Type: corev1.NodeInternalIP, Address: "192.0.2.11"},
		{Type: corev1.NodeExternalIP, Address: "198.51.100.11"},
		{Type: corev1.NodeHostName, Address: "w1.local"},
		{Type: corev1.NodeInternalIP, Address: "not-an-ip"},
	}
	if err := idx.Add(n); err != nil {
		t.Fatal(err)
	}
	src := inventory.Nodes{Lister: corelisters.NewNodeLister(idx)}
	e, ok := src.Lookup("w1")
	if !ok || len(e.IPs) != 2 || e.DNSNames[0] != "w1.local" {
		t.Errorf("lookup = %+v, %v", e, ok)
	}
	if _, ok := src.Lookup("w2"); ok {
		t.Error("unknown node found")
	}
	if src.Size() != 1 {
		t.Errorf("size %d", src.Size())
	}
}

func TestWatchFileReloadsAndKeepsTheLastGoodMapping(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "inventory.yaml")
	write := func(doc string) {
		// Replace by rename, as ConfigMap volumes and editors do.
		tmp := path + ".tmp"
		if err := os.WriteFile(tmp, []byte(doc), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, path); err != nil {
			t.Fatal(err)
		}
	}
	write("nodes:\n  a:\n    ips: [192.0.2.1]\n")
	m, err := inventory.LoadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	src := inventory.NewStatic("file "+path, m)
	reloads := make(chan error, 10)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	started := make(chan struct{})
	go func() {
		close(started)
		_ = inventory.WatchFile(ctx, path, src, func(err error) { reloads <- err })
	}()
	<-started
	wait := func() error {
		select {
		case err := <-reloads:
			return err
		case <-time.After(10 * time.Second):
			t.Fatal("no reload")
		}
		return nil
	}
	// The watch may start after the first write; write until it is seen.
	deadline := time.Now().Add(10 * time.Second)
	for {
		write("nodes:\n  b:\n    ips: [192.0.2.2]\n")
		select {
		case err := <-reloads:
			if err != nil {
				t.Fatal(err)
			}
		case <-time.After(300 * time.Millisecond):
			if time.Now().After(deadline) {
				t.Fatal("no reload")
			}
			continue
		}
		break
	}
	if _, ok := src.Lookup("b"); !ok {
		t.Fatal("reloaded mapping not in use")
	}
	write("nodes: [broken")
	if err := wait(); err == nil {
		t.Fatal("a broken file reloaded without error")
	}
	if _, ok := src.Lookup("b"); !ok {
		t.Error("a broken reload dropped the previous mapping")
	}
}

func TestNodesClaimantsFromTheAddressIndex(t *testing.T) {
	idx := cache.NewIndexer(cache.MetaNamespaceKeyFunc, inventory.AddressIndexers)
	node := func(name string, addrs ...corev1.NodeAddress) *corev1.Node {
		return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}, Status: corev1.NodeStatus{Addresses: addrs}}
	}
	internal := func(a string) corev1.NodeAddress { return corev1.NodeAddress{Type: corev1.NodeInternalIP, Address: a} }
	for _, n := range []*corev1.Node{
		node("w1", internal("192.0.2.11"), corev1.NodeAddress{Type: corev1.NodeExternalIP, Address: "198.51.100.1"}),
		node("w2", internal("192.0.2.12"), corev1.NodeAddress{Type: corev1.NodeExternalIP, Address: "198.51.100.1"}),
		// A liar claiming w1's address, in an IPv4-mapped spelling.
		node("liar", internal("::ffff:192.0.2.11"), corev1.NodeAddress{Type: corev1.NodeHostName, Address: "192.0.2.12"}),
	} {
		if err := idx.Add(n); err != nil {
			t.Fatal(err)
		}
	}
	src := inventory.Nodes{Lister: corelisters.NewNodeLister(idx), Indexer: idx}
	for ip, want := range map[string][]string{
		"192.0.2.11":   {"liar", "w1"},
		"192.0.2.12":   {"w2"}, // a Hostname that looks like an IP is no address claim
		"198.51.100.1": {"w1", "w2"},
		"192.0.2.99":   {},
	} {
		if got := src.Claimants(netip.MustParseAddr(ip)); !slices.Equal(got, want) {
			t.Errorf("Claimants(%s) = %v, want %v", ip, got, want)
		}
	}
}
