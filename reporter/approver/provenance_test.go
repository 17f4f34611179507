package approver

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"

	certv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/cache"

	"github.com/certready/certready/internal/names"
	"github.com/certready/certready/internal/testpki"
	"github.com/certready/certready/internal/testwait"
	"github.com/certready/certready/reporter/approver/policy"
)

// managedNode is a Node as the API server returns it: its addresses, and
// the managed fields saying which manager wrote each type's address.
func managedNode(name string, writer map[corev1.NodeAddressType]string, addrs ...corev1.NodeAddress) *corev1.Node {
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}, Status: corev1.NodeStatus{Addresses: addrs}}
	for typ, manager := range writer {
		n.ManagedFields = append(n.ManagedFields, metav1.ManagedFieldsEntry{Manager: manager, Operation: metav1.ManagedFieldsOperationUpdate, Subresource: "status",
			FieldsV1: metav1.NewFieldsV1(`{"f:status":{"f:addresses":{"k:{\"type\":\"` + string(typ) + `\"}":{".":{},"f:address":{},"f:type":{}}}}}`)})
	}
	return n
}

func servingCSR(t *testing.T, node string, ips ...string) *certv1.CertificateSigningRequest {
	t.Helper()
	req := testpki.Request{Node: node}
	for _, s := range ips {
		req.IPs = append(req.IPs, net.ParseIP(s).To4())
	}
	pemBytes, _, err := testpki.NewCSR(req)
	if err != nil {
		t.Fatal(err)
	}
	return &certv1.CertificateSigningRequest{
		ObjectMeta: metav1.ObjectMeta{Name: "csr-" + node},
		Spec: certv1.CertificateSigningRequestSpec{Request: pemBytes, SignerName: certv1.KubeletServingSignerName, Username: names.NodeUser(node),
			Groups: []string{names.NodesGroup}, Usages: []certv1.KeyUsage{certv1.UsageDigitalSignature, certv1.UsageServerAuth}},
	}
}

// The approver's own wiring, from the Node informer (its transform, the
// inventory, the learned networks) to the policy: a kubelet's addresses at
// registration pass, one it adds later passes only inside a network a
// cloud controller wrote an InternalIP in, and an address a cloud
// controller wrote passes wherever it is.
func TestSelfReportedAddressesThroughTheNodeInformer(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	kubelet := map[corev1.NodeAddressType]string{corev1.NodeInternalIP: "kubelet", corev1.NodeExternalIP: "kubelet"}
	ip := func(a string) corev1.NodeAddress { return corev1.NodeAddress{Type: corev1.NodeInternalIP, Address: a} }
	ext := func(a string) corev1.NodeAddress { return corev1.NodeAddress{Type: corev1.NodeExternalIP, Address: a} }
	client := fake.NewClientset(
		managedNode("worker-1", kubelet, ip("192.0.2.11")),
		managedNode("cloud-1", map[corev1.NodeAddressType]string{corev1.NodeInternalIP: "aws-cloud-controller-manager", corev1.NodeExternalIP: "aws-cloud-controller-manager"},
			ip("10.0.1.5"), ext("203.0.113.5")),
	)
	o := Options{InventorySpec: "node", CloudControllers: CommonCloudControllers, ConditionType: names.ConditionType}
	c, err := newCaches(client, o)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := gatherEvidence(ctx, client, c, &o, func() {}); err != nil {
		t.Fatal(err)
	}
	c.nodeFactory.Start(ctx.Done())
	defer func() { cancel(); c.nodeFactory.Shutdown() }() // Shutdown waits for the informers, which stop with ctx
	if !cache.WaitForCacheSync(ctx.Done(), c.node.Informer().HasSynced) {
		t.Fatal("the Node cache did not sync")
	}
	// worker-1's kubelet adds an address in cloud-1's network and two in none.
	later := managedNode("worker-1", kubelet, ip("192.0.2.11"), ip("10.0.1.77"), ext("198.51.100.77"), ext("203.0.113.9"))
	if _, err := client.CoreV1().Nodes().Update(ctx, later, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if !testwait.Until(5*time.Second, func() bool {
		e, _ := o.Controller.Evidence.Inventory.Lookup("worker-1")
		return len(e.IPs) == 4
	}) {
		t.Fatal("the Node cache never saw worker-1's new addresses")
	}
	for _, tc := range []struct {
		name, node string
		ips        []string
		want       policy.Rule
		msg        string
	}{
		{"its addresses at registration", "worker-1", []string{"192.0.2.11"}, policy.RuleApproved, ""},
		{"an address added later, in a cloud controller's network", "worker-1", []string{"192.0.2.11", "10.0.1.77"}, policy.RuleApproved, ""},
		{"an address added later, in no known network", "worker-1", []string{"192.0.2.11", "198.51.100.77"}, policy.RuleIPSANSelfReported, "198.51.100.77 was reported by worker-1 about itself"},
		{"an address added later beside a cloud controller's ExternalIP", "worker-1", []string{"203.0.113.9"}, policy.RuleIPSANSelfReported, "not in 203.0.113.0/24"},
		{"the addresses a cloud controller wrote", "cloud-1", []string{"10.0.1.5", "203.0.113.5"}, policy.RuleApproved, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := policy.Evaluate(servingCSR(t, tc.node, tc.ips...), o.Controller.Policy, o.Controller.Evidence, policy.Backlog{})
			if d.Rule != tc.want || !strings.Contains(d.Message, tc.msg) {
				t.Errorf("%s: %s, want %s with %q", tc.node, d.Message, tc.want, tc.msg)
			}
		})
	}
}
