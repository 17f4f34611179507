package integration

import (
	"context"
	"slices"
	"testing"
	"time"

	certv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	"github.com/certready/certready/e2e/localcluster"
	"github.com/certready/certready/internal/names"
	"github.com/certready/certready/internal/nodeapi"
	"github.com/certready/certready/reporter/servingcert/condition"
	"github.com/certready/certready/reporter/servingcert/csrlookup"
	"github.com/certready/certready/reporter/servingcert/observe"
)

// createCSR files a kubelet-serving request for node as who (a kubelet's
// identity), labelled for labelNode when set, under signer. It returns the
// CSR's name.
func createCSR(t *testing.T, ctx context.Context, who kubernetes.Interface, name, node, labelNode, signer string) string {
	t.Helper()
	meta := metav1.ObjectMeta{Name: name}
	if labelNode != "" {
		meta.Labels = map[string]string{names.NodeLabel: labelNode}
	}
	csr, _, err := localcluster.KubeletServingCSR(meta, node, "10.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	if signer != names.SignerName {
		csr.Spec.SignerName = signer
		csr.Spec.Usages = []certv1.KeyUsage{certv1.UsageDigitalSignature, certv1.UsageClientAuth}
	}
	if _, err := who.CertificatesV1().CertificateSigningRequests().Create(ctx, csr, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating CSR %s: %v", name, err)
	}
	t.Cleanup(func() {
		_ = api.Admin.CertificatesV1().CertificateSigningRequests().Delete(context.Background(), name, metav1.DeleteOptions{})
	})
	return name
}

func createNode(t *testing.T, ctx context.Context, name string, addrs ...corev1.NodeAddress) *corev1.Node {
	t.Helper()
	n, err := api.Admin.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = api.Admin.CoreV1().Nodes().Delete(context.Background(), name, metav1.DeleteOptions{}) })
	if len(addrs) > 0 {
		n.Status.Addresses = addrs
		if n, err = api.Admin.CoreV1().Nodes().UpdateStatus(ctx, n, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	return n
}

func listNames(t *testing.T, lw cache.ListerWatcher) []string {
	t.Helper()
	obj, err := cache.ToListerWithContext(lw).ListWithContext(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	items, err := meta.ExtractList(obj)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, it := range items {
		m, _ := meta.Accessor(it)
		out = append(out, m.GetName())
	}
	slices.Sort(out)
	return out
}

// The agent's selectors, as the API server applies them (the fake
// clientset ignores field selectors): its own Node only; of the CSRs, only
// the kubelet-serving signer's labelled for its node, whoever labelled
// them; the signer's unlabelled ones only through ListBySigner, which keeps
// the node's own.
func TestAgentReadsOnlyItsOwnNodeAndKubeletServingCSRs(t *testing.T) {
	ctx := ctxT(t, time.Minute)
	createNode(t, ctx, "reads-w1")
	createNode(t, ctx, "reads-w2")
	_, w1 := nodeIdentity(t, "reads-w1")
	_, w2 := nodeIdentity(t, "reads-w2")
	mine := createCSR(t, ctx, w1, "reads-mine", "reads-w1", "reads-w1", names.SignerName)
	unlabelled := createCSR(t, ctx, w1, "reads-mine-unlabelled", "reads-w1", "", names.SignerName)
	otherSigner := createCSR(t, ctx, w1, "reads-other-signer", "reads-w1", "reads-w1", certv1.KubeAPIServerClientKubeletSignerName)
	spoofed := createCSR(t, ctx, w2, "reads-spoofed-label", "reads-w2", "reads-w1", names.SignerName)
	createCSR(t, ctx, w2, "reads-w2-own", "reads-w2", "reads-w2", names.SignerName)

	client, err := nodeapi.New(api.AdminConfig)
	if err != nil {
		t.Fatal(err)
	}
	if got := listNames(t, client.Nodes(observe.NodeSelector("reads-w1"))); !slices.Equal(got, []string{"reads-w1"}) {
		t.Errorf("NodeSelector(reads-w1) lists %v, want only reads-w1", got)
	}
	// The label selects; the requester is checked later (csrmatch): a
	// label another node set is in, another signer's is not.
	want := []string{spoofed, mine}
	slices.Sort(want)
	if got := listNames(t, client.CSRs(csrlookup.Selector("reads-w1"))); !slices.Equal(got, want) {
		t.Errorf("csrlookup.Selector(reads-w1) lists %v, want %v (not %s: another signer's)", got, want, otherSigner)
	}
	byList, err := client.ListCSRs(ctx, func() metav1.ListOptions {
		var o metav1.ListOptions
		csrlookup.Selector("reads-w1")(&o)
		return o
	}())
	if err != nil || len(byList.Items) != 2 {
		t.Errorf("ListCSRs with csrlookup.Selector: %d items, %v; want 2", len(byList.Items), err)
	}
	own, err := csrlookup.ListBySigner(ctx, client, "reads-w1")
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, c := range own {
		got = append(got, c.Name)
		if len(c.Spec.Request) != 0 {
			t.Errorf("ListBySigner kept %s's request bytes", c.Name)
		}
	}
	slices.Sort(got)
	want = []string{mine, unlabelled}
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("ListBySigner(reads-w1) = %v, want the node's own kubelet-serving CSRs %v", got, want)
	}
}

// The agent's one write, its condition, is a strategic-merge patch of
// nodes/status: the API server merges it by condition type, so another
// writer's conditions stay.
func TestAgentConditionPatchKeepsOtherConditions(t *testing.T) {
	ctx := ctxT(t, time.Minute)
	n := createNode(t, ctx, "cond-w1")
	n.Status.Conditions = []corev1.NodeCondition{{Type: "SomeoneElses", Status: corev1.ConditionTrue, Reason: "Theirs", LastHeartbeatTime: metav1.Now(), LastTransitionTime: metav1.Now()}}
	if _, err := api.Admin.CoreV1().Nodes().UpdateStatus(ctx, n, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	client, err := nodeapi.New(api.AdminConfig)
	if err != nil {
		t.Fatal(err)
	}
	now := metav1.Now()
	if err := condition.NewClient(client).PatchCondition(ctx, "cond-w1", corev1.NodeCondition{Type: "KubeletServingCertNotReady",
		Status: corev1.ConditionTrue, Reason: "CertificateMissing", Message: "m", LastHeartbeatTime: now, LastTransitionTime: now}, nil); err != nil {
		t.Fatal(err)
	}
	got, err := client.GetNode(ctx, "cond-w1")
	if err != nil {
		t.Fatal(err)
	}
	types := map[corev1.NodeConditionType]string{}
	for _, c := range got.Status.Conditions {
		types[c.Type] = c.Reason
	}
	if types["SomeoneElses"] != "Theirs" || types["KubeletServingCertNotReady"] != "CertificateMissing" {
		t.Errorf("conditions after the patch: %v, want both", types)
	}
}
