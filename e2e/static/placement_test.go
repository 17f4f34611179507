package static

import (
	"slices"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"

	"github.com/certready/certready/internal/names"
)

// TestApproverPlacement pins where the approver may run: Linux, critical,
// spread, only on control-plane nodes or nodes carrying a label kubelets
// cannot set on themselves, preferring the control plane, tolerating
// exactly the control-plane and readiness taints.
func TestApproverPlacement(t *testing.T) {
	for _, tc := range []struct {
		name, kustomization string
	}{
		{"base", "resources:\n- ../../base\n"},
		{"standalone", "resources:\n- ../../overlays/standalone\n"},
		{"nrc", "resources:\n- ../../overlays/nrc\n"},
		{"capi-management", "resources:\n- ../../overlays/capi-management\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			objs := buildOverlay(t, tc.kustomization)
			dep := find[*appsv1.Deployment](objs)[0]
			spec := dep.Spec.Template.Spec
			if spec.PriorityClassName != "system-cluster-critical" || spec.NodeSelector["kubernetes.io/os"] != "linux" {
				t.Errorf("priorityClass %q nodeSelector %v", spec.PriorityClassName, spec.NodeSelector)
			}
			var keys []string
			for _, tol := range spec.Tolerations {
				if tol.Effect != corev1.TaintEffectNoSchedule || tol.Operator != corev1.TolerationOpExists {
					t.Errorf("toleration %+v: want Exists/NoSchedule only", tol)
				}
				keys = append(keys, tol.Key)
			}
			if !slices.Equal(keys, []string{"node-role.kubernetes.io/control-plane", names.TaintKey}) {
				t.Errorf("tolerations %v: want the control-plane and readiness taints, nothing broader", keys)
			}
			na := spec.Affinity.NodeAffinity
			if len(na.PreferredDuringSchedulingIgnoredDuringExecution) == 0 || na.PreferredDuringSchedulingIgnoredDuringExecution[0].Preference.MatchExpressions[0].Key != "node-role.kubernetes.io/control-plane" {
				t.Errorf("no preference for the control plane: %+v", na.PreferredDuringSchedulingIgnoredDuringExecution)
			}
			req := na.RequiredDuringSchedulingIgnoredDuringExecution
			if req == nil || len(req.NodeSelectorTerms) != 2 {
				t.Fatalf("required affinity %+v: want the control plane or the trusted pool", req)
			}
			var required []string
			for _, term := range req.NodeSelectorTerms {
				if len(term.MatchExpressions) != 1 || term.MatchExpressions[0].Operator != corev1.NodeSelectorOpExists {
					t.Errorf("term %+v", term)
					continue
				}
				required = append(required, term.MatchExpressions[0].Key)
			}
			if !slices.Equal(required, []string{"node-restriction.kubernetes.io/certready-approver-pool", "node-role.kubernetes.io/control-plane"}) {
				t.Errorf("required on %v: a label a kubelet may set on itself would let a node volunteer", required)
			}
			if len(spec.TopologySpreadConstraints) != 1 || spec.TopologySpreadConstraints[0].TopologyKey != "kubernetes.io/hostname" {
				t.Errorf("spread %+v", spec.TopologySpreadConstraints)
			}
			if agents := find[*appsv1.DaemonSet](objs); len(agents) == 1 && agents[0].Spec.Template.Spec.NodeSelector["kubernetes.io/os"] != "linux" {
				t.Errorf("agent nodeSelector %v", agents[0].Spec.Template.Spec.NodeSelector)
			}
			quota := false
			for _, q := range find[*corev1.ResourceQuota](objs) {
				if q.Spec.ScopeSelector != nil && slices.Contains(q.Spec.ScopeSelector.MatchExpressions[0].Values, "system-cluster-critical") &&
					slices.Contains(q.Spec.ScopeSelector.MatchExpressions[0].Values, "system-node-critical") {
					quota = true
				}
			}
			if !quota {
				t.Error("no ResourceQuota admitting the critical priority classes in the namespace")
			}
		})
	}
}
