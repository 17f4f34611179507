package suite

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	certv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"

	"github.com/certready/certready/e2e/localcluster"

	"github.com/certready/certready/internal/names"
)

// Identity mismatch: a CSR with another IP, made with the worker's own
// credentials, stays pending with a Warning naming the rule; the worker's
// condition stays truthful.
func TestCSRForAnotherAddressStaysPendingWithItsRule(t *testing.T) {
	ctx := ctxT(t, 3*time.Minute)
	deployed(t)
	w := cluster.Workers()[0]
	name, _ := requestServingCert(t, ctx, w.Name, "192.0.2.99")
	want := "IPSANNotInInventory: 192.0.2.99 not recorded for " + w.Name
	err := localcluster.Poll(ctx, time.Minute, "a Warning event naming the rule", func() (bool, error) {
		evs, err := cluster.Clientset().CoreV1().Events("default").List(ctx, metav1.ListOptions{
			FieldSelector: fields.Set{"involvedObject.name": name, "type": "Warning"}.String(),
		})
		if err != nil {
			return false, nil
		}
		for _, e := range evs.Items {
			if strings.Contains(e.Message, want) && e.Reason == "IPSANNotInInventory" {
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		t.Fatalf("%v\n%s", err, podsAndEvents(ctx))
	}
	c, err := cluster.Clientset().CertificatesV1().CertificateSigningRequests().Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Status.Conditions) != 0 {
		t.Errorf("the mismatching CSR was decided: %+v", c.Status.Conditions)
	}
	if c.Labels[names.NodeLabel] != w.Name {
		t.Errorf("labels %v", c.Labels)
	}
	if got := certCondition(node(t, ctx, w.Name)); got.Status != corev1.ConditionFalse {
		t.Errorf("a foreign pending CSR changed %s's truthful condition: %+v", w.Name, got)
	}
	// An admin approves it anyway: certready records who vouched for it
	// outside its policy, and the rule the policy refused it by.
	err = localcluster.Poll(ctx, time.Minute, "the refusal kept on the CSR", func() (bool, error) {
		c, err := cluster.Clientset().CertificatesV1().CertificateSigningRequests().Get(ctx, name, metav1.GetOptions{})
		return err == nil && c.Annotations[names.DecisionRuleAnnotation] == "IPSANNotInInventory", nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if out, err := cluster.Kubectl(ctx, "certificate", "approve", name); err != nil {
		t.Fatalf("kubectl certificate approve: %v %s", err, out)
	}
	msg := waitCSREvent(t, ctx, name, "ApprovedElsewhere")
	if !strings.Contains(msg, `field manager "kubectl`) || !strings.Contains(msg, "IPSANNotInInventory") {
		t.Errorf("ApprovedElsewhere %q: want it naming kubectl's field manager and the rule certready refused it by", msg)
	}
	t.Logf("kubectl certificate approve recorded: %s", msg)
	_ = cluster.Clientset().CertificatesV1().CertificateSigningRequests().Delete(ctx, name, metav1.DeleteOptions{})
}

// Hostile nodes, each acting under the identity it claims (the admin
// impersonates system:node:<name>, as that node's credentials would): a
// node that reports the API server's own address (learnt from the
// default/kubernetes EndpointSlice, set nowhere in the manifests) and one
// that reports another node's address both ask for a serving certificate
// for it; both stay pending with the rule named.
func TestHostileNodesGetNoCertificateForOthersAddresses(t *testing.T) {
	ctx := ctxT(t, 3*time.Minute)
	deployed(t)
	slice, err := cluster.Clientset().DiscoveryV1().EndpointSlices("default").Get(ctx, "kubernetes", metav1.GetOptions{})
	if err != nil || len(slice.Endpoints) == 0 || len(slice.Endpoints[0].Addresses) == 0 {
		t.Fatalf("the API server's EndpointSlice default/kubernetes: %v %+v", err, slice)
	}
	apiIP := slice.Endpoints[0].Addresses[0]
	victim := cluster.Workers()[0]
	for _, tc := range []struct {
		node, ip string
		rule     string
	}{
		{"rogue-apiserver", apiIP, "SANDenied"},
		{"rogue-twin", victim.IP, "AddressClaimedByOtherNode"},
	} {
		// A Node object whose status reports the address, as a kubelet
		// with those credentials can write its own status.
		n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: tc.node, Labels: map[string]string{"kubernetes.io/os": "windows"}},
			Status: corev1.NodeStatus{Addresses: []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: tc.ip}}}}
		if _, err := cluster.Clientset().CoreV1().Nodes().Create(ctx, n, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			_ = cluster.Clientset().CoreV1().Nodes().Delete(context.Background(), n.Name, metav1.DeleteOptions{})
		})
		if got := node(t, ctx, tc.node); len(got.Status.Addresses) == 0 || got.Status.Addresses[0].Address != tc.ip {
			t.Fatalf("Node %s reports %+v, want %s", tc.node, got.Status.Addresses, tc.ip)
		}
		user := names.NodeUser(tc.node)
		created, _ := createServingCSR(t, ctx, impersonating(t, user, "system:nodes", "system:authenticated"), user,
			metav1.ObjectMeta{GenerateName: "e2e-" + tc.node + "-"}, tc.node, tc.ip)
		deleteCSRAtCleanup(t, created.Name)
		msg := waitCSREvent(t, ctx, created.Name, tc.rule)
		got, err := cluster.Clientset().CertificatesV1().CertificateSigningRequests().Get(ctx, created.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if csrCondition(got, certv1.CertificateApproved) != nil {
			t.Fatalf("%s's CSR for %s was approved", tc.node, tc.ip)
		}
		t.Logf("%s asking for %s: left pending: %s", tc.node, tc.ip, msg)
	}
}

// One identity's pile of requests (a stuck kubelet re-requests about every
// 15 minutes) counts once against the flood guard, and identities no Node
// has do not count at all: with --max-pending=5, a node that has filed six
// is superseded down to its newest, six minted identities wait, and a real
// worker asking meanwhile is still approved. (Counting CSRs, as before,
// the six alone tripped the guard for the whole cluster.) The limit leaves
// room for two more nodes whose kubelets happen to have a request pending
// while the approver restarts (seen on kind); the six would still trip it.
func TestOneNodesPileOfRequestsStopsNobody(t *testing.T) {
	ctx := ctxT(t, 4*time.Minute)
	deployed(t)
	approverWith(t, ctx, "--max-pending=5")
	const flooder = "flood-node" // no Node object: its newest waits (NodeNotInInventory)
	user := names.NodeUser(flooder)
	cs := impersonating(t, user, "system:nodes", "system:authenticated")
	var pile []string
	for i := 0; i < 6; i++ {
		c, _ := createServingCSR(t, ctx, cs, user, metav1.ObjectMeta{Name: fmt.Sprintf("e2e-flood-%d", i)}, flooder, "198.51.100.7")
		deleteCSRAtCleanup(t, c.Name)
		pile = append(pile, c.Name)
	}
	for _, name := range pile[:len(pile)-1] {
		waitCSREvent(t, ctx, name, "SupersededByNewerRequest")
	}
	t.Logf("%s's newest: %s", flooder, waitCSREvent(t, ctx, pile[len(pile)-1], "NodeNotInInventory"))
	// Identities minted with a bootstrap token (any system:node:<name> a
	// holder asks for), more than the limit: no Node has their names, so
	// they are no node of the inventory and do not count.
	var minted []string
	for i := 0; i < 6; i++ {
		m := fmt.Sprintf("minted-%d", i)
		c, _ := createServingCSR(t, ctx, impersonating(t, names.NodeUser(m), "system:nodes", "system:authenticated"), names.NodeUser(m),
			metav1.ObjectMeta{GenerateName: "e2e-" + m + "-"}, m, "198.51.100.8")
		deleteCSRAtCleanup(t, c.Name)
		minted = append(minted, c.Name)
		waitCSREvent(t, ctx, c.Name, "NodeNotInInventory")
	}
	pile = append(pile, minted...)

	w := cluster.Workers()[0]
	name, _ := requestServingCert(t, ctx, w.Name, w.IP)
	deleteCSRAtCleanup(t, name)
	if err := localcluster.Poll(ctx, time.Minute, "the worker's CSR "+name+" approved", func() (bool, error) {
		c, err := cluster.Clientset().CertificatesV1().CertificateSigningRequests().Get(ctx, name, metav1.GetOptions{})
		return err == nil && csrCondition(c, certv1.CertificateApproved) != nil, nil
	}); err != nil {
		t.Fatalf("%v\n%s", err, podsAndEvents(ctx))
	}
	for _, n := range pile {
		c, err := cluster.Clientset().CertificatesV1().CertificateSigningRequests().Get(ctx, n, metav1.GetOptions{})
		if err != nil || csrCondition(c, certv1.CertificateApproved) != nil {
			t.Fatalf("the flooder's %s: %v %+v", n, err, c.Status.Conditions)
		}
	}
	t.Logf("%s approved beside %s's pile and %d minted identities (%d requests)", name, flooder, len(minted), len(pile))
}

// A spoofed certready.io/node label: anyone who may create CSRs can label
// one for a victim node, to fill that node's agent's cache. Created by a
// requester that is no node (here the admin), the label is removed by the
// approver; created by another node, it is set to that node.
func TestSpoofedNodeLabelsAreCorrected(t *testing.T) {
	ctx := ctxT(t, 2*time.Minute)
	deployed(t)
	victim, other := cluster.Workers()[0], cluster.Workers()[1]
	for _, tc := range []struct {
		user   string
		groups []string
		node   string // the CSR's subject node
		want   string // the label the approver leaves ("": none)
	}{
		{"", nil, victim.Name, ""}, // the admin: any requester that is no node
		{names.NodeUser(other.Name), []string{"system:nodes", "system:authenticated"}, other.Name, other.Name},
	} {
		as, who := cluster.Clientset(), "the admin"
		if tc.user != "" {
			as, who = impersonating(t, tc.user, tc.groups...), tc.user
		}
		created, _ := createServingCSR(t, ctx, as, who,
			metav1.ObjectMeta{GenerateName: "e2e-spoof-", Labels: map[string]string{names.NodeLabel: victim.Name}}, tc.node, "192.0.2.250")
		deleteCSRAtCleanup(t, created.Name)
		var got map[string]string
		if err := localcluster.Poll(ctx, time.Minute, fmt.Sprintf("the label of %s (by %s) corrected to %q", created.Name, tc.user, tc.want), func() (bool, error) {
			c, err := cluster.Clientset().CertificatesV1().CertificateSigningRequests().Get(ctx, created.Name, metav1.GetOptions{})
			if err != nil {
				return false, nil
			}
			got = c.Labels
			return c.Labels[names.NodeLabel] == tc.want, nil
		}); err != nil {
			t.Fatalf("%v; labels %v", err, got)
		}
		t.Logf("CSR by %q (empty: the admin) labelled for %s: label now %q", tc.user, victim.Name, got[names.NodeLabel])
	}
}
