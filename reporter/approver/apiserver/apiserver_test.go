package apiserver_test

import (
	"context"
	"net/netip"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/certready/certready/internal/testwait"
	"github.com/certready/certready/reporter/approver/apiserver"
)

func slice(ns, name string, addrs ...string) *discoveryv1.EndpointSlice {
	return &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Namespace: ns, Name: name},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints:   []discoveryv1.Endpoint{{Addresses: addrs}},
	}
}

func TestEndpointsFollowTheAPIServersSlice(t *testing.T) {
	cs := fake.NewClientset(slice("default", "kubernetes", "192.0.2.1", "192.0.2.2"),
		// Another namespace's slice of the same name, and another Service's
		// slice: neither is the API server.
		slice("tenant", "kubernetes", "198.51.100.7"), slice("default", "web", "198.51.100.8"))
	var changes atomic.Int32
	e, err := apiserver.New(cs, func() { changes.Add(1) })
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	e.Start(ctx)
	want := func(w ...string) {
		t.Helper()
		var got []string
		if !testwait.Until(10*time.Second, func() bool {
			got = nil
			for _, a := range e.Addresses() {
				got = append(got, a.String())
			}
			return e.HasSynced() && slices.Equal(got, w)
		}) {
			t.Fatalf("addresses %v, want %v", got, w)
		}
	}
	want("192.0.2.1", "192.0.2.2")
	// A control-plane node replaced: the API servers rewrite their slice.
	s := slice("default", "kubernetes", "192.0.2.3", "::ffff:192.0.2.2")
	if _, err := cs.DiscoveryV1().EndpointSlices("default").Update(ctx, s, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	want("192.0.2.2", "192.0.2.3")
	if changes.Load() < 2 {
		t.Errorf("onChange ran %d times, want one per change of addresses", changes.Load())
	}
}

func TestAddressesUnmapIPv4InIPv6(t *testing.T) {
	got := apiserver.Addresses(slice("default", "kubernetes", "::ffff:192.0.2.9", "2001:db8::1", "not-an-ip"))
	if !slices.Equal(got, []netip.Addr{netip.MustParseAddr("192.0.2.9"), netip.MustParseAddr("2001:db8::1")}) {
		t.Errorf("Addresses = %v", got)
	}
}
