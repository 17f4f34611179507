package ranges_test

import (
	"fmt"
	"net/netip"
	"testing"

	"github.com/certready/certready/reporter/approver/ranges"
)

func TestNotNodeAddress(t *testing.T) {
	r := ranges.New()
	r.SetServiceCIDRs("ServiceCIDR kubernetes", []string{"10.96.0.0/12", "fd00:10:96::/112", "not-a-cidr"})
	r.SetPodCIDRs("node worker-1", []string{"10.244.1.0/24", "fd00:10:244:1::/64"})
	r.SetPodCIDRs("node worker-2", []string{"10.244.2.0/24"})
	r.SetPodCIDRs("node worker-3", []string{"10.244.2.0/24"}) // a duplicate, kept for both
	for ip, want := range map[string]string{
		"10.96.0.1":         "inside the Service CIDR 10.96.0.0/12 (ServiceCIDR kubernetes)",
		"::ffff:10.96.0.10": "inside the Service CIDR 10.96.0.0/12 (ServiceCIDR kubernetes)",
		"fd00:10:96::1":     "inside the Service CIDR fd00:10:96::/112 (ServiceCIDR kubernetes)",
		"10.244.1.7":        "inside the Pod CIDR 10.244.1.0/24 of node worker-1",
		"fd00:10:244:1::7":  "inside the Pod CIDR fd00:10:244:1::/64 of node worker-1",
		"10.244.2.7":        "inside the Pod CIDR 10.244.2.0/24 of node worker-2, node worker-3",
		"10.244.3.7":        "",
		"192.0.2.11":        "",
		"fd00:10:244:2::1":  "",
	} {
		if got := r.NotNodeAddress(netip.MustParseAddr(ip)); got != want {
			t.Errorf("%s: %q, want %q", ip, got, want)
		}
	}
	// A node gone, another's CIDR changed: nothing of the old stays.
	r.SetPodCIDRs("node worker-1", nil)
	r.SetPodCIDRs("node worker-2", []string{"10.244.9.0/24"})
	for ip, want := range map[string]string{
		"10.244.1.7": "", "fd00:10:244:1::7": "",
		"10.244.2.7": "inside the Pod CIDR 10.244.2.0/24 of node worker-3",
		"10.244.9.1": "inside the Pod CIDR 10.244.9.0/24 of node worker-2",
	} {
		if got := r.NotNodeAddress(netip.MustParseAddr(ip)); got != want {
			t.Errorf("after the change, %s: %q, want %q", ip, got, want)
		}
	}
}

// BenchmarkNotNodeAddress: a lookup costs one map probe per distinct prefix
// length, whatever the number of Nodes.
func BenchmarkNotNodeAddress(b *testing.B) {
	r := ranges.New()
	for i := 0; i < 5000; i++ {
		r.SetPodCIDRs(fmt.Sprintf("node %d", i), []string{fmt.Sprintf("10.%d.%d.0/24", 100+i/256, i%256)})
	}
	ip := netip.MustParseAddr("192.0.2.11")
	b.ReportAllocs()
	for b.Loop() {
		if r.NotNodeAddress(ip) != "" {
			b.Fatal("a node address refused")
		}
	}
}
