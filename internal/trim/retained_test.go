package trim

import (
	"fmt"
	"runtime"
	"testing"
	"time"

	certv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"
)

// benchNode is a Node as make bench's storm leaves it: created with one
// label, addresses patched in, and what the node lifecycle controller adds
// to a node whose kubelet never posts status (four Unknown conditions, two
// taints), with the managed fields of three writers.
func benchNode(i int) *corev1.Node {
	now := metav1.NewTime(time.Now())
	n := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("storm1-%d", i), UID: types.UID(fmt.Sprintf("6f1c2d3e-0000-4000-8000-%012d", i)),
			ResourceVersion: fmt.Sprint(100000 + i), CreationTimestamp: now,
			Labels: map[string]string{"certready.io/bench": "true"}},
		Spec: corev1.NodeSpec{Taints: []corev1.Taint{
			{Key: "node.kubernetes.io/unreachable", Effect: corev1.TaintEffectNoSchedule, TimeAdded: &now},
			{Key: "node.kubernetes.io/unreachable", Effect: corev1.TaintEffectNoExecute, TimeAdded: &now},
		}},
		Status: corev1.NodeStatus{
			Addresses: []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: fmt.Sprintf("198.18.%d.%d", i/250, 1+i%250)},
				{Type: corev1.NodeHostName, Address: fmt.Sprintf("storm1-%d", i)}},
			DaemonEndpoints: corev1.NodeDaemonEndpoints{KubeletEndpoint: corev1.DaemonEndpoint{Port: 10250}},
		},
	}
	for _, t := range []corev1.NodeConditionType{"MemoryPressure", "DiskPressure", "PIDPressure", "Ready"} {
		n.Status.Conditions = append(n.Status.Conditions, corev1.NodeCondition{Type: t, Status: corev1.ConditionUnknown,
			LastHeartbeatTime: now, LastTransitionTime: now, Reason: "NodeStatusNeverUpdated", Message: "Kubelet never posted node status."})
	}
	for _, m := range []string{"bench", "kube-controller-manager", "certready-approver"} {
		n.ManagedFields = append(n.ManagedFields, metav1.ManagedFieldsEntry{Manager: m, Operation: metav1.ManagedFieldsOperationUpdate,
			FieldsV1: metav1.NewFieldsV1(`{"f:status":{"f:conditions":{"k:{\"type\":\"Ready\"}":{".":{},"f:lastHeartbeatTime":{},"f:message":{},"f:reason":{},"f:status":{},"f:type":{}}}}}`)})
	}
	return n
}

// benchCSR is the storm's CSR once approved and issued: a real-sized
// request and certificate, the groups and usages a kubelet sends.
func benchCSR(i int) *certv1.CertificateSigningRequest {
	now := metav1.NewTime(time.Now())
	node := fmt.Sprintf("storm1-%d", i)
	return &certv1.CertificateSigningRequest{
		ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("storm1-csr-%d", i), UID: types.UID(fmt.Sprintf("7f1c2d3e-0000-4000-8000-%012d", i)),
			ResourceVersion: fmt.Sprint(200000 + i), CreationTimestamp: now,
			Labels:        map[string]string{"certready.io/bench": "storm", "certready.io/node": node},
			ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "bench"}, {Manager: "certready-approver"}, {Manager: "kube-controller-manager"}}},
		Spec: certv1.CertificateSigningRequestSpec{Request: make([]byte, 560), SignerName: certv1.KubeletServingSignerName,
			Username: "system:node:" + node, Groups: []string{"system:nodes", "system:authenticated"},
			Usages: []certv1.KeyUsage{certv1.UsageDigitalSignature, certv1.UsageServerAuth}},
		Status: certv1.CertificateSigningRequestStatus{Certificate: make([]byte, 900), Conditions: []certv1.CertificateSigningRequestCondition{
			{Type: certv1.CertificateApproved, Status: corev1.ConditionTrue, Reason: "NodeIdentityVerified",
				Message: "requester system:node:" + node + " owns every SAN", LastUpdateTime: now, LastTransitionTime: now}}},
	}
}

// BenchmarkApproverCachePerNode prints the heap the approver's two caches
// keep per node (a Node and its issued CSR, both trimmed as the approver
// trims them, in informer stores with the namespace index), measured as
// live heap after a full GC. make bench measures the running approver; this
// is the same figure without a cluster, to compare transforms quickly.
func BenchmarkApproverCachePerNode(b *testing.B) {
	const nodes = 5000
	for b.Loop() {
		nodeStore := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
		csrStore := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
		before := liveHeap()
		for i := 0; i < nodes; i++ {
			n, _ := Node("KubeletServingCertNotReady")(benchNode(i))
			c, _ := CSR(CSROptions{})(benchCSR(i))
			_ = nodeStore.Add(n)
			_ = csrStore.Add(c)
		}
		after := liveHeap()
		b.ReportMetric(float64(after-before)/nodes, "B/node")
		runtime.KeepAlive(nodeStore)
		runtime.KeepAlive(csrStore)
	}
}

func liveHeap() uint64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}
