package static

import (
	"slices"
	"strings"
	"testing"

	"helm.sh/helm/v3/pkg/chartutil"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
)

// An optional API asked for where the cluster does not serve it fails the
// install, naming the value and what to install, instead of an apply error
// half-way (or nothing, as a silent skip would).
func TestChartAsksForOptionalAPIsByName(t *testing.T) {
	for _, tc := range []struct {
		name   string
		values map[string]any
		want   string
	}{
		{"ServiceMonitor", map[string]any{"monitoring": map[string]any{"serviceMonitor": map[string]any{"enabled": true}}},
			"monitoring.serviceMonitor.enabled: this cluster does not serve monitoring.coreos.com/v1/ServiceMonitor; install the Prometheus Operator's CRDs first"},
		{"PrometheusRule", map[string]any{"monitoring": map[string]any{"prometheusRule": map[string]any{"enabled": true}}},
			"monitoring.prometheusRule.enabled: this cluster does not serve monitoring.coreos.com/v1/PrometheusRule"},
		{"NodeReadinessRule", map[string]any{"taint": map[string]any{"mode": "nrc"}},
			"taint.mode=nrc: this cluster does not serve readiness.node.x-k8s.io/v1alpha1/NodeReadinessRule; install the node-readiness-controller and its CRD first"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := renderOn(t, "certready", nil, tc.values)
			if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "--api-versions") {
				t.Errorf("without the API: %v, want %q and how to pass --api-versions", err, tc.want)
			}
			if _, err := renderOn(t, "certready", optionalAPIs, tc.values); err != nil {
				t.Errorf("with the API served: %v", err)
			}
		})
	}
	// Off, nothing is asked for: the defaults render on a bare cluster.
	if _, err := renderOn(t, "certready", nil, nil); err != nil {
		t.Errorf("defaults on a cluster without optional APIs: %v", err)
	}
}

// OpenShift's restricted-v2 SCC assigns user and group IDs from the
// namespace's range and refuses others: the approver and the test pod
// leave them out there, and the agent's account may use the privileged
// SCC. Elsewhere nothing changes.
func TestChartOnOpenShift(t *testing.T) {
	openshift := chartutil.VersionSet{"security.openshift.io/v1"}
	for _, tc := range []struct {
		name    string
		apis    chartutil.VersionSet
		mode    string
		adapted bool
	}{
		{"auto on OpenShift", openshift, "auto", true},
		{"auto elsewhere", nil, "auto", false},
		{"force", nil, "force", true},
		{"disabled on OpenShift", openshift, "disabled", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			values := map[string]any{"openshift": map[string]any{"adaptSecurityContext": tc.mode}}
			raw, err := renderOn(t, "certready", tc.apis, values)
			if err != nil {
				t.Fatal(err)
			}
			objs := decodeStrict(t, raw)
			approver := find[*appsv1.Deployment](objs)[0].Spec.Template.Spec
			agent := find[*appsv1.DaemonSet](objs)[0].Spec.Template.Spec
			psc := approver.SecurityContext
			if psc == nil || psc.RunAsNonRoot == nil || !*psc.RunAsNonRoot || psc.SeccompProfile == nil {
				t.Errorf("approver pod securityContext %+v: runAsNonRoot and seccomp must stay", psc)
			}
			assigned := psc != nil && (psc.RunAsUser != nil || psc.RunAsGroup != nil || psc.FSGroup != nil)
			if assigned == tc.adapted {
				t.Errorf("approver pod securityContext %+v: IDs set %v, want %v", psc, assigned, !tc.adapted)
			}
			if c := agent.Containers[0].SecurityContext; c == nil || c.RunAsUser == nil || *c.RunAsUser != 0 {
				t.Errorf("agent securityContext %+v: UID 0 must stay (it reads the kubelet's 0600 file)", c)
			}
			scc := slices.ContainsFunc(find[*rbacv1.RoleBinding](objs), func(b *rbacv1.RoleBinding) bool {
				return b.RoleRef.Kind == "ClusterRole" && b.RoleRef.Name == "system:openshift:scc:privileged" &&
					len(b.Subjects) == 1 && b.Subjects[0].Name == "certready-agent" && b.Namespace == "certready-system"
			})
			if scc != tc.adapted {
				t.Errorf("privileged SCC binding for the agent: %v, want %v", scc, tc.adapted)
			}
			var testPod *corev1.Pod
			for _, o := range decodeStrict(t, renderHooks(t, tc.apis, values)) {
				if p, ok := o.(*corev1.Pod); ok {
					testPod = p
				}
			}
			if testPod == nil {
				t.Fatal("no helm test pod")
			}
			if got := testPod.Spec.SecurityContext.RunAsUser != nil; got == tc.adapted {
				t.Errorf("helm test pod runAsUser set %v, want %v", got, !tc.adapted)
			}
		})
	}
}

// The Namespace the chart creates carries the Pod Security labels the
// agent needs and the operator's own.
func TestChartNamespaceLabels(t *testing.T) {
	objs := decodeStrict(t, mustRender(t, map[string]any{"namespace": map[string]any{"create": true, "name": "certs",
		"labels": map[string]any{"example.com/netpol": "system"}}, "commonLabels": map[string]any{"example.com/team": "platform"}}))
	ns := find[*corev1.Namespace](objs)
	if len(ns) != 1 {
		t.Fatalf("%d Namespaces", len(ns))
	}
	for k, v := range map[string]string{"pod-security.kubernetes.io/enforce": "privileged", "example.com/netpol": "system", "example.com/team": "platform",
		"app.kubernetes.io/instance": "certready"} {
		if ns[0].Labels[k] != v {
			t.Errorf("Namespace label %s=%q, want %q (labels %v)", k, ns[0].Labels[k], v, ns[0].Labels)
		}
	}
}

// Each approver.placement choice places the approver where its line in
// values.yaml says, and names itself for `certready preflight`.
func TestChartApproverPlacementChoices(t *testing.T) {
	const pool, cp = "node-restriction.kubernetes.io/certready-approver-pool", "node-role.kubernetes.io/control-plane"
	for _, tc := range []struct {
		placement         string
		required, prefers []string
	}{
		{"trusted", []string{pool, cp}, []string{cp}},
		{"control-plane", []string{cp}, nil},
		{"pool", []string{pool}, nil},
		{"any", nil, []string{cp}},
	} {
		t.Run(tc.placement, func(t *testing.T) {
			dep := find[*appsv1.Deployment](decodeStrict(t, mustRender(t, map[string]any{"approver": map[string]any{"placement": tc.placement}})))[0]
			na := dep.Spec.Template.Spec.Affinity.NodeAffinity
			var required, prefers []string
			if r := na.RequiredDuringSchedulingIgnoredDuringExecution; r != nil {
				for _, term := range r.NodeSelectorTerms {
					required = append(required, term.MatchExpressions[0].Key)
				}
			}
			for _, p := range na.PreferredDuringSchedulingIgnoredDuringExecution {
				prefers = append(prefers, p.Preference.MatchExpressions[0].Key)
			}
			if !slices.Equal(required, tc.required) || !slices.Equal(prefers, tc.prefers) {
				t.Errorf("required %v prefers %v, want %v and %v", required, prefers, tc.required, tc.prefers)
			}
			if got := dep.Annotations["certready.io/placement"]; got != tc.placement {
				t.Errorf("annotation certready.io/placement=%q", got)
			}
		})
	}
	custom := map[string]any{"nodeAffinity": map[string]any{"requiredDuringSchedulingIgnoredDuringExecution": map[string]any{"nodeSelectorTerms": []any{
		map[string]any{"matchExpressions": []any{map[string]any{"key": "example.com/system", "operator": "Exists"}}}}}}}
	dep := find[*appsv1.Deployment](decodeStrict(t, mustRender(t, map[string]any{"approver": map[string]any{"affinity": custom}})))[0]
	if terms := dep.Spec.Template.Spec.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms; len(terms) != 1 ||
		terms[0].MatchExpressions[0].Key != "example.com/system" || dep.Annotations["certready.io/placement"] != "custom" {
		t.Errorf("approver.affinity replaces the placement: %+v, annotation %q", terms, dep.Annotations["certready.io/placement"])
	}
}
