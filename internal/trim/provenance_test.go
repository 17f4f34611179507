package trim

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// writes is a managed fields entry of manager over the given
// status.addresses field set (the JSON under f:addresses).
func writes(manager, addresses string) metav1.ManagedFieldsEntry {
	return metav1.ManagedFieldsEntry{Manager: manager, Operation: metav1.ManagedFieldsOperationUpdate, Subresource: "status",
		FieldsV1: metav1.NewFieldsV1(`{"f:status":{"f:addresses":` + addresses + `,"f:conditions":{}}}`)}
}

const (
	elemOwned   = `{".":{},"f:address":{},"f:type":{}}`
	elemCreated = `{".":{},"f:type":{}}` // the element, not its address
)

func key(t corev1.NodeAddressType) string { return `"k:{\"type\":\"` + string(t) + `\"}"` }

func addressNode(annotations map[string]string, mf ...metav1.ManagedFieldsEntry) *corev1.Node {
	return &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: "worker-1", Annotations: annotations, ManagedFields: mf},
		Status: corev1.NodeStatus{Addresses: []corev1.NodeAddress{
			{Type: corev1.NodeInternalIP, Address: "10.0.1.5"}, {Type: corev1.NodeInternalIP, Address: "fd00::5"},
			{Type: corev1.NodeExternalIP, Address: "203.0.113.5"}, {Type: corev1.NodeHostName, Address: "worker-1"},
		}},
	}
}

var ccm = []string{"cloud-controller-manager", "aws-cloud-controller-manager"}

// The one fact kept of a Node's managed fields: which address types only
// a listed cloud controller wrote. Everything else, an unknown writer or
// none recorded, is the node's own word.
func TestNodeKeepsWhichAddressesACloudControllerWrote(t *testing.T) {
	ip, ext, host := corev1.NodeInternalIP, corev1.NodeExternalIP, corev1.NodeHostName
	for _, tc := range []struct {
		name        string
		node        *corev1.Node
		controllers []string
		want        string // the annotation, "" for none
	}{
		{"the kubelet wrote every address", addressNode(nil,
			writes("kubelet", `{".":{},`+key(ip)+`:`+elemOwned+`,`+key(host)+`:`+elemOwned+`}`)), ccm, ""},
		{"a cloud controller wrote the IPs, the kubelet its host name", addressNode(nil,
			writes("kubelet", `{".":{},`+key(ip)+`:`+elemCreated+`,`+key(host)+`:`+elemOwned+`}`),
			writes("aws-cloud-controller-manager", `{`+key(ip)+`:{"f:address":{}},`+key(ext)+`:`+elemOwned+`}`)), ccm, "ExternalIP,InternalIP"},
		{"dual-stack InternalIPs, owned whole (duplicate keys)", addressNode(nil,
			writes("cloud-controller-manager", `{".":{},`+key(ip)+`:{}}`)), ccm, "InternalIP"},
		{"the kubelet changed an address a cloud controller wrote", addressNode(nil,
			writes("cloud-controller-manager", `{`+key(ip)+`:`+elemOwned+`,`+key(ext)+`:`+elemOwned+`}`),
			writes("kubelet", `{`+key(ip)+`:{"f:address":{}}}`)), ccm, "ExternalIP"},
		{"the whole list written by a cloud controller", addressNode(nil,
			writes("cloud-controller-manager", `{}`)), ccm, "ExternalIP,Hostname,InternalIP"},
		{"a writer not listed", addressNode(nil,
			writes("gcp-controller-manager", `{`+key(ip)+`:`+elemOwned+`}`)), ccm, ""},
		{"no cloud controller configured", addressNode(nil,
			writes("cloud-controller-manager", `{`+key(ip)+`:`+elemOwned+`}`)), nil, ""},
		{"no managed fields", addressNode(nil), ccm, ""},
		{"undecodable managed fields beside a cloud controller's", addressNode(nil,
			writes("cloud-controller-manager", `{`+key(ip)+`:`+elemOwned+`}`),
			metav1.ManagedFieldsEntry{Manager: "kubelet", FieldsV1: metav1.NewFieldsV1(`{"f:status":{"f:addresses":[`)}), ccm, ""},
		{"a node's own annotation of the key never reaches the cache", addressNode(map[string]string{InfrastructureAddressTypes: "InternalIP,ExternalIP", "keep": "me"},
			writes("kubelet", `{`+key(ip)+`:`+elemOwned+`}`)), ccm, ""},
		// The limitation, pinned: the writer names its field manager, so
		// a node's credentials can write as "cloud-controller-manager".
		{"a field manager name is believed, whoever used it", addressNode(nil,
			writes("cloud-controller-manager", `{`+key(ip)+`:`+elemOwned+`}`)), ccm, "InternalIP"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, err := NodeWith(NodeOptions{Conditions: []corev1.NodeConditionType{"KubeletServingCertNotReady"}, CloudControllers: tc.controllers})(tc.node)
			if err != nil {
				t.Fatal(err)
			}
			got := out.(*corev1.Node)
			v, ok := got.Annotations[InfrastructureAddressTypes]
			if v != tc.want || ok != (tc.want != "") {
				t.Errorf("%s = %q (set %v), want %q", InfrastructureAddressTypes, v, ok, tc.want)
			}
			if len(got.ManagedFields) != 0 || len(got.Status.Addresses) != 4 {
				t.Errorf("managed fields %d (want none kept), addresses %v", len(got.ManagedFields), got.Status.Addresses)
			}
			if tc.node.Annotations["keep"] != "" && got.Annotations["keep"] != "me" {
				t.Errorf("other annotations lost: %v", got.Annotations)
			}
		})
	}
}
