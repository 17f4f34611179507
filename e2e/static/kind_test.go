package static

import (
	"os"
	"strings"
	"testing"

	kubeletv1beta1 "k8s.io/kubelet/config/v1beta1"
	kubeadmv1beta4 "k8s.io/kubernetes/cmd/kubeadm/app/apis/kubeadm/v1beta4"
	kindv1alpha4 "sigs.k8s.io/kind/pkg/apis/config/v1alpha4"
	"sigs.k8s.io/yaml"

	"github.com/certready/certready/internal/names"
)

// decodePatch decodes one kubeadm/kubelet config patch strictly into the
// type its kind names, so a typo in a field fails here without Docker.
func decodePatch(t *testing.T, where, patch string) string {
	t.Helper()
	var head struct {
		Kind string `json:"kind"`
	}
	if err := yaml.Unmarshal([]byte(patch), &head); err != nil {
		t.Fatalf("%s: %v", where, err)
	}
	var target any
	switch head.Kind {
	case "ClusterConfiguration":
		target = &kubeadmv1beta4.ClusterConfiguration{}
	case "InitConfiguration":
		target = &kubeadmv1beta4.InitConfiguration{}
	case "JoinConfiguration":
		target = &kubeadmv1beta4.JoinConfiguration{}
	case "KubeletConfiguration":
		target = &kubeletv1beta1.KubeletConfiguration{}
	default:
		t.Fatalf("%s: patch of unexpected kind %q", where, head.Kind)
	}
	if err := yaml.UnmarshalStrict([]byte(patch), target); err != nil {
		t.Errorf("%s: %s patch does not decode strictly: %v", where, head.Kind, err)
	}
	switch v := target.(type) {
	case *kubeletv1beta1.KubeletConfiguration:
		if v.ServerTLSBootstrap != true {
			t.Errorf("%s: serverTLSBootstrap is not true", where)
		}
	case *kubeadmv1beta4.ClusterConfiguration:
		found := false
		for _, a := range v.APIServer.ExtraArgs {
			found = found || (a.Name == "kubelet-certificate-authority" && a.Value != "")
		}
		if !found {
			t.Errorf("%s: the API server does not verify kubelets (kubelet-certificate-authority)", where)
		}
	case *kubeadmv1beta4.JoinConfiguration:
		found := false
		for _, taint := range v.NodeRegistration.Taints {
			found = found || (taint.Key == names.TaintKey && taint.Effect == "NoSchedule")
		}
		if !found {
			t.Errorf("%s: workers do not join with the readiness taint", where)
		}
	}
	return head.Kind
}

func TestKindConfig(t *testing.T) {
	data, err := os.ReadFile("../../kind/cluster.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var cluster kindv1alpha4.Cluster
	if err := yaml.UnmarshalStrict(data, &cluster); err != nil {
		t.Fatalf("kind/cluster.yaml does not decode strictly with kind's v1alpha4 types: %v", err)
	}
	kinds := map[string]int{}
	for i, p := range cluster.KubeadmConfigPatches {
		kinds[decodePatch(t, "cluster patch "+string(rune('0'+i)), p)]++
	}
	roles := map[kindv1alpha4.NodeRole]int{}
	for _, n := range cluster.Nodes {
		roles[n.Role]++
		for _, p := range n.KubeadmConfigPatches {
			k := decodePatch(t, string(n.Role)+" patch", p)
			if n.Role == kindv1alpha4.WorkerRole && k != "JoinConfiguration" {
				t.Errorf("worker patch of kind %s", k)
			}
			kinds[k]++
		}
	}
	if roles[kindv1alpha4.ControlPlaneRole] != 1 || roles[kindv1alpha4.WorkerRole] != 2 {
		t.Errorf("roles %v, want one control plane and two workers", roles)
	}
	for _, k := range []string{"ClusterConfiguration", "KubeletConfiguration", "JoinConfiguration"} {
		if kinds[k] == 0 {
			t.Errorf("no %s patch", k)
		}
	}
	if kinds["JoinConfiguration"] != 2 {
		t.Errorf("%d worker JoinConfiguration patches, want 2", kinds["JoinConfiguration"])
	}
	if !strings.Contains(string(data), "serverTLSBootstrap: true") {
		t.Error("serverTLSBootstrap missing")
	}
}
