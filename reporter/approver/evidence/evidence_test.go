package evidence_test

import (
	"context"
	"net/netip"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	certv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/cache"

	"github.com/certready/certready/internal/names"
	"github.com/certready/certready/internal/testwait"
	"github.com/certready/certready/reporter/approver/evidence"
	"github.com/certready/certready/reporter/approver/inventory"
	"github.com/certready/certready/reporter/approver/policy"
)

func csr(name string, request []byte) *certv1.CertificateSigningRequest {
	return &certv1.CertificateSigningRequest{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec:       certv1.CertificateSigningRequestSpec{SignerName: certv1.KubeletServingSignerName, Username: "system:node:w1", Request: request},
	}
}

// TestCSRsDropsOversizedRequestsAfterObserve: the informer caches a
// request over the policy's bound without its bytes (marked dropped), and
// the observer (the taint fallback's issued index) saw it whole first.
func TestCSRsDropsOversizedRequestsAfterObserve(t *testing.T) {
	small, big := csr("small", []byte(strings.Repeat("a", 100))), csr("big", []byte(strings.Repeat("b", 1000)))
	cs := fake.NewClientset(small, big)
	var observedBig atomic.Int64
	observe := func(next cache.TransformFunc) cache.TransformFunc {
		return func(obj any) (any, error) {
			if c, ok := obj.(*certv1.CertificateSigningRequest); ok && c.Name == "big" {
				observedBig.Store(int64(len(c.Spec.Request)))
			}
			return next(obj)
		}
	}
	factory, inf, err := evidence.CSRs(cs, policy.Config{MaxRequestBytes: 500}, observe)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer func() { cancel(); factory.Shutdown() }()
	factory.Start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
		t.Fatal("the CSR cache did not sync")
	}
	for _, tc := range []struct {
		name        string
		wantRequest int
		dropped     bool
	}{
		{name: "small", wantRequest: 100},
		{name: "big", dropped: true},
	} {
		obj, ok, err := inf.GetStore().GetByKey(tc.name)
		if err != nil || !ok {
			t.Fatalf("%s not cached: %v", tc.name, err)
		}
		c := obj.(*certv1.CertificateSigningRequest)
		if len(c.Spec.Request) != tc.wantRequest {
			t.Errorf("%s: cached request of %d bytes, want %d", tc.name, len(c.Spec.Request), tc.wantRequest)
		}
		if _, marked := c.Spec.Extra[names.DroppedRequestKey]; marked != tc.dropped {
			t.Errorf("%s: marked dropped = %v, want %v", tc.name, marked, tc.dropped)
		}
	}
	if got := observedBig.Load(); got != 1000 {
		t.Errorf("the observer saw the big request with %d bytes, want it whole (1000)", got)
	}
}

// TestNewLearnsTheAPIServerForThePolicy: the evidence's APIServer reads
// the identity learned from the cluster (its Service's ClusterIP and the
// Extra a mode knows), and the mode's views are the policy's.
func TestNewLearnsTheAPIServerForThePolicy(t *testing.T) {
	cs := fake.NewClientset(&corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "kubernetes"},
		Spec:       corev1.ServiceSpec{ClusterIP: "10.96.0.1", ClusterIPs: []string{"10.96.0.1"}},
	})
	inv := inventory.NewStatic("test", map[string]inventory.Entry{"cp-1": {IPs: []netip.Addr{netip.MustParseAddr("192.0.2.10")}}})
	var changes atomic.Int64
	ev, err := evidence.New(evidence.Sources{
		Client: cs, ExtraAPIServer: map[string]string{"api.example.com": "the Cluster's spec.controlPlaneEndpoint"},
		OnChange:  func() { changes.Add(1) },
		Inventory: inv, HostsAPIServer: func(n string) bool { return n == "cp-1" }, HostRule: "its Machine labelled x", HostOwn: inv.Lookup,
		NotNodeAddress: func(netip.Addr) string { return "inside a Pod CIDR" },
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ev.Identity.Start(ctx)
	svcIP := netip.MustParseAddr("10.96.0.1")
	if !testwait.Until(10*time.Second, func() bool {
		_, ok := ev.Policy.APIServer().Addresses[svcIP]
		return ev.Identity.HasSynced() && ok
	}) {
		t.Fatalf("the policy's API server never held the Service's ClusterIP: %+v", ev.Policy.APIServer())
	}
	if _, ok := ev.Policy.APIServer().Names["api.example.com"]; !ok {
		t.Errorf("the mode's extra name is not the API server's: %+v", ev.Policy.APIServer().Names)
	}
	if changes.Load() == 0 {
		t.Error("OnChange never ran while the identity was learned")
	}
	if !ev.Policy.APIServerHost("cp-1") || ev.Policy.APIServerHost("w-1") || ev.Policy.APIServerHostRule != "its Machine labelled x" {
		t.Error("the mode's API server host rule is not the policy's")
	}
	if ev.Policy.Inventory != inv || ev.Policy.NotNodeAddress(svcIP) == "" || ev.Policy.NodeNetwork != nil {
		t.Error("the mode's views are not the policy's as given")
	}
	if own, ok := ev.Policy.HostOwn("cp-1"); !ok || len(own.IPs) != 1 || own.IPs[0] != netip.MustParseAddr("192.0.2.10") {
		t.Errorf("HostOwn(cp-1) = %+v, %v: not the mode's record", own, ok)
	}
	if _, ok := ev.Policy.HostOwn("w-1"); ok {
		t.Error("HostOwn(w-1) found a record the mode does not have")
	}
}

func TestNewRefusesIncompleteSources(t *testing.T) {
	inv := inventory.NewStatic("test", nil)
	for _, tc := range []struct {
		name string
		src  evidence.Sources
		want string
	}{
		{name: "no inventory", src: evidence.Sources{Client: fake.NewClientset()}, want: "no inventory"},
		{name: "a host rule without its name", src: evidence.Sources{Client: fake.NewClientset(), Inventory: inv, HostsAPIServer: func(string) bool { return true }}, want: "both its test and its name"},
		{name: "a host rule's name without its test", src: evidence.Sources{Client: fake.NewClientset(), Inventory: inv, HostRule: "label x"}, want: "both its test and its name"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := evidence.New(tc.src)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err %v, want it to contain %q", err, tc.want)
			}
		})
	}
}
