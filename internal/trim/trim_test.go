package trim

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	certv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/certready/certready/internal/csrstate"
	"github.com/certready/certready/internal/names"
)

// kubeletNode is a Node as a kubelet reports it: thirty images, node info,
// capacity, managed fields of three writers.
func kubeletNode() *corev1.Node {
	n := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: "worker-1", UID: "u1", ResourceVersion: "42",
			Labels:      map[string]string{"kubernetes.io/hostname": "worker-1", "node-role.kubernetes.io/control-plane": ""},
			Annotations: map[string]string{"node.alpha.kubernetes.io/ttl": "0"}},
		Spec: corev1.NodeSpec{PodCIDR: "10.244.1.0/24", Taints: []corev1.Taint{{Key: "readiness.k8s.io/KubeletServingCertNotReady", Value: "pending", Effect: corev1.TaintEffectNoSchedule}}},
		Status: corev1.NodeStatus{
			Addresses:       []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "192.0.2.11"}, {Type: corev1.NodeHostName, Address: "worker-1"}},
			Conditions:      []corev1.NodeCondition{{Type: "Ready", Status: corev1.ConditionTrue}, {Type: "KubeletServingCertNotReady", Status: corev1.ConditionFalse}},
			DaemonEndpoints: corev1.NodeDaemonEndpoints{KubeletEndpoint: corev1.DaemonEndpoint{Port: 10250}},
			NodeInfo:        corev1.NodeSystemInfo{MachineID: "abc", KernelVersion: "6.18", OSImage: "Debian GNU/Linux 12", ContainerRuntimeVersion: "containerd://1.6.20", KubeletVersion: "v1.37.2"},
			Capacity:        corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("2"), corev1.ResourceMemory: resource.MustParse("24Gi")},
			Allocatable:     corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("2"), corev1.ResourceMemory: resource.MustParse("23Gi")},
		},
	}
	for i := 0; i < 30; i++ {
		n.Status.Images = append(n.Status.Images, corev1.ContainerImage{
			Names:     []string{fmt.Sprintf("registry.example.com/team/app-%d@sha256:%064d", i, i), fmt.Sprintf("registry.example.com/team/app-%d:v1.%d", i, i)},
			SizeBytes: 50 << 20,
		})
	}
	for _, m := range []string{"kubelet", "kube-controller-manager", "certready-agent"} {
		n.ManagedFields = append(n.ManagedFields, metav1.ManagedFieldsEntry{Manager: m, Operation: metav1.ManagedFieldsOperationUpdate,
			FieldsV1: metav1.NewFieldsV1(`{"f:status":{"f:conditions":{"k:{\"type\":\"Ready\"}":{".":{},"f:lastHeartbeatTime":{},"f:message":{},"f:reason":{},"f:status":{},"f:type":{}}},"f:images":{},"f:nodeInfo":{}}}`)})
	}
	return n
}

func size(t *testing.T, v any) int {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return len(b)
}

func TestNodeKeepsWhatCertreadyReads(t *testing.T) {
	n := kubeletNode()
	before := size(t, n)
	out, err := Node("KubeletServingCertNotReady")(n)
	if err != nil {
		t.Fatal(err)
	}
	got := out.(*corev1.Node)
	if got.Name != "worker-1" || got.UID != "u1" || got.ResourceVersion != "42" || len(got.Labels) != 2 || len(got.Annotations) != 1 {
		t.Errorf("metadata lost: %+v", got.ObjectMeta)
	}
	if len(got.Spec.Taints) != 1 || got.Spec.PodCIDR == "" {
		t.Errorf("spec lost: %+v", got.Spec)
	}
	if len(got.Status.Addresses) != 2 || len(got.Status.Conditions) != 1 || got.Status.Conditions[0].Type != "KubeletServingCertNotReady" || got.Status.DaemonEndpoints.KubeletEndpoint.Port != 10250 {
		t.Errorf("addresses, conditions or the kubelet port lost: %+v", got.Status)
	}
	if len(got.ManagedFields) != 0 || len(got.Status.Images) != 0 || got.Status.NodeInfo.MachineID != "" || len(got.Status.Capacity) != 0 {
		t.Errorf("kept what nothing reads: managed fields %d, images %d, node info %+v", len(got.ManagedFields), len(got.Status.Images), got.Status.NodeInfo)
	}
	after := size(t, got)
	t.Logf("a kubelet's Node: %d bytes of JSON, %d trimmed", before, after)
	if after*4 > before {
		t.Errorf("trimmed to %d of %d bytes: want under a quarter", after, before)
	}
}

func csr(decided bool) *certv1.CertificateSigningRequest {
	c := &certv1.CertificateSigningRequest{
		ObjectMeta: metav1.ObjectMeta{Name: "csr-1", Labels: map[string]string{"certready.io/node": "worker-1"},
			ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "kubelet"}, {Manager: "certready-approver"}}},
		Spec: certv1.CertificateSigningRequestSpec{Request: []byte("-----BEGIN CERTIFICATE REQUEST-----..."), SignerName: certv1.KubeletServingSignerName, Username: "system:node:worker-1"},
	}
	if decided {
		c.Status.Conditions = []certv1.CertificateSigningRequestCondition{{Type: certv1.CertificateApproved, Status: corev1.ConditionTrue}}
		c.Status.Certificate = []byte("-----BEGIN CERTIFICATE-----...")
	}
	return c
}

func TestCSRDropsTheRequestOnceDecided(t *testing.T) {
	for _, tc := range []struct {
		name        string
		decided     bool
		opts        CSROptions
		wantRequest bool
		wantCert    bool
		wantDropped string
	}{
		{"pending: the policy still reads the request", false, CSROptions{MaxRequestBytes: 64}, true, false, ""},
		{"approved and issued, approver: neither request nor certificate", true, CSROptions{}, false, false, ""},
		{"approved and issued, agent: the certificate it matches", true, CSROptions{KeepCertificate: true, DropRequest: true}, false, true, ""},
		{"pending, agent: it never reads requests", false, CSROptions{KeepCertificate: true, DropRequest: true}, false, false, ""},
		{"pending and over the bound: dropped unread, its size marked", false, CSROptions{MaxRequestBytes: 16}, false, false, "38"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := csr(tc.decided)
			in.Spec.Extra = map[string]certv1.ExtraValue{"requester's": {"own"}}
			out, err := CSR(tc.opts)(in)
			if err != nil {
				t.Fatal(err)
			}
			c := out.(*certv1.CertificateSigningRequest)
			if len(c.ManagedFields) != 0 {
				t.Error("managed fields kept")
			}
			if (len(c.Spec.Request) > 0) != tc.wantRequest || (len(c.Status.Certificate) > 0) != tc.wantCert {
				t.Errorf("request kept %v (want %v), certificate kept %v (want %v)", len(c.Spec.Request) > 0, tc.wantRequest, len(c.Status.Certificate) > 0, tc.wantCert)
			}
			if c.Spec.Username == "" || c.Labels["certready.io/node"] == "" || len(c.Status.Conditions) == 0 && tc.decided {
				t.Errorf("what the decision reads was lost: %+v", c)
			}
			var dropped string
			if v := c.Spec.Extra[names.DroppedRequestKey]; len(v) > 0 {
				dropped = v[0]
			}
			if dropped != tc.wantDropped {
				t.Errorf("dropped marker %q, want %q", dropped, tc.wantDropped)
			}
			if c.Spec.Extra["requester's"][0] != "own" {
				t.Errorf("the requester's own extra was lost: %v", c.Spec.Extra)
			}
			// The stage survives the trim: an issued request whose
			// certificate was dropped is still issued, not unsigned.
			if got, want := csrstate.Of(c), csrstate.Of(csr(tc.decided)); got != want {
				t.Errorf("state after trimming %s, before %s", got, want)
			}
		})
	}
}

// An approved request the signer has not signed yet stays that after the
// trim: only a dropped certificate leaves the issued mark.
func TestCSRKeepsApprovedButUnsignedApart(t *testing.T) {
	in := csr(true)
	in.Status.Certificate = nil
	out, err := CSR(CSROptions{})(in)
	if err != nil {
		t.Fatal(err)
	}
	c := out.(*certv1.CertificateSigningRequest)
	if got := csrstate.Of(c); got != csrstate.Approved {
		t.Errorf("state %s, want Approved", got)
	}
	if _, marked := c.Spec.Extra[names.IssuedKey]; marked {
		t.Errorf("an unsigned request was marked issued: %v", c.Spec.Extra)
	}
}

func TestOtherObjectsPassUntouched(t *testing.T) {
	tomb := cache.DeletedFinalStateUnknown{Key: "worker-1", Obj: kubeletNode()}
	for _, f := range []cache.TransformFunc{Node("KubeletServingCertNotReady"), CSR(CSROptions{KeepCertificate: true})} {
		out, err := f(tomb)
		if err != nil || out.(cache.DeletedFinalStateUnknown).Key != "worker-1" {
			t.Errorf("tombstone: %v %v", out, err)
		}
	}
}

// Who approved a CSR is read from its managed fields before they go: the
// newest write through the approval subresource, bounded.
func TestCSRKeepsWhoWroteTheApproval(t *testing.T) {
	at := func(min int) *metav1.Time {
		t := metav1.NewTime(time.Date(2026, 12, 3, 12, min, 0, 0, time.UTC))
		return &t
	}
	cases := []struct {
		name   string
		fields []metav1.ManagedFieldsEntry
		want   string
	}{
		{name: "no approval write", fields: []metav1.ManagedFieldsEntry{{Manager: "kubelet", Operation: metav1.ManagedFieldsOperationUpdate, Time: at(0)}}},
		{name: "kubectl certificate approve", fields: []metav1.ManagedFieldsEntry{
			{Manager: "kubelet", Time: at(0)},
			{Manager: "kubectl-certificate", Subresource: "approval", Time: at(1)},
		}, want: "kubectl-certificate"},
		{name: "the newest of two", fields: []metav1.ManagedFieldsEntry{
			{Manager: "certready-approver", Subresource: "approval", Time: at(3)},
			{Manager: "kubectl-certificate", Subresource: "approval", Time: at(1)},
		}, want: "certready-approver"},
		{name: "a requester's own extra with the marker's key counts for nothing", fields: nil},
		{name: "a huge name is bounded", fields: []metav1.ManagedFieldsEntry{{Manager: strings.Repeat("x", 1000), Subresource: "approval", Time: at(1)}}, want: strings.Repeat("x", 128)},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			csr := &certv1.CertificateSigningRequest{ObjectMeta: metav1.ObjectMeta{Name: "c", ManagedFields: c.fields},
				Spec: certv1.CertificateSigningRequestSpec{Extra: map[string]certv1.ExtraValue{names.ApprovedByKey: {"certready-approver"}, names.IssuedKey: {"true"}}}}
			out, err := CSR(CSROptions{})(csr)
			if err != nil {
				t.Fatal(err)
			}
			got := out.(*certv1.CertificateSigningRequest)
			if v := got.Spec.Extra[names.ApprovedByKey]; (c.want == "" && v != nil) || (c.want != "" && (len(v) != 1 || v[0] != c.want)) {
				t.Errorf("approved by %q, want %q", v, c.want)
			}
			if got.ManagedFields != nil {
				t.Error("managed fields kept")
			}
			if _, ok := got.Spec.Extra[names.IssuedKey]; ok {
				t.Error("a requester's issued marker kept on a pending request")
			}
		})
	}
}
