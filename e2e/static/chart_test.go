package static

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"helm.sh/helm/v3/pkg/action"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/lint/support"
	helmrelease "helm.sh/helm/v3/pkg/release"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/runtime"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/api/resmap"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	"sigs.k8s.io/yaml"

	"github.com/certready/certready/e2e/deploy"
)

const chartDir = "../../charts/certready"

// helmOnlyLabels are the labels Helm charts carry and kustomize builds do
// not; everything else must be the same.
var helmOnlyLabels = []string{"helm.sh/chart", "app.kubernetes.io/managed-by", "app.kubernetes.io/instance", "app.kubernetes.io/version"}

// clusterScoped kinds: kustomize's namespace transformer stamps a namespace
// on kinds it does not know (the admission policies), which the API server
// ignores; the comparison ignores it too.
var clusterScoped = map[string]bool{
	"Namespace": true, "ClusterRole": true, "ClusterRoleBinding": true, "FlowSchema": true, "NodeReadinessRule": true,
	"ValidatingAdmissionPolicy": true, "ValidatingAdmissionPolicyBinding": true,
}

// render renders the chart as `helm template certready charts/certready
// -n certready-system --set ...` does, through the Helm SDK.
func render(t *testing.T, values map[string]any) ([]map[string]any, error) {
	t.Helper()
	return renderAs(t, "certready", values)
}

// optionalAPIs are the APIs the chart asks for only when told to: a
// cluster with the Prometheus Operator and the node-readiness-controller
// (helm template --api-versions ...).
var optionalAPIs = chartutil.VersionSet{"monitoring.coreos.com/v1/ServiceMonitor", "monitoring.coreos.com/v1/PrometheusRule",
	"readiness.node.x-k8s.io/v1alpha1/NodeReadinessRule"}

// renderAs renders the chart as the release named release, on a cluster
// that serves optionalAPIs.
func renderAs(t *testing.T, release string, values map[string]any) ([]map[string]any, error) {
	t.Helper()
	return renderOn(t, release, optionalAPIs, values)
}

// renderOn renders the chart for a cluster that serves the APIs given
// beyond Kubernetes' own.
func renderOn(t *testing.T, release string, apis chartutil.VersionSet, values map[string]any) ([]map[string]any, error) {
	t.Helper()
	rel, err := renderRelease(t, release, apis, values)
	if err != nil {
		return nil, err
	}
	return splitYAML(t, rel.Manifest), nil
}

// renderHooks renders the chart's hooks (helm test) on a cluster that
// serves apis beyond Kubernetes' own.
func renderHooks(t *testing.T, apis chartutil.VersionSet, values map[string]any) []map[string]any {
	t.Helper()
	rel, err := renderRelease(t, "certready", apis, values)
	if err != nil {
		t.Fatalf("helm template with %v: %v", values, err)
	}
	var out []map[string]any
	for _, h := range rel.Hooks {
		out = append(out, splitYAML(t, h.Manifest)...)
	}
	return out
}

// renderRelease is `helm template <release> charts/certready -n
// certready-system --kube-version 1.37.2 --api-versions ...` through the
// Helm SDK.
func renderRelease(t *testing.T, release string, apis chartutil.VersionSet, values map[string]any) (*helmrelease.Release, error) {
	t.Helper()
	ch, err := loader.Load(chartDir)
	if err != nil {
		t.Fatalf("loading the chart: %v", err)
	}
	install := action.NewInstall(&action.Configuration{})
	install.DryRun, install.ClientOnly, install.Replace = true, true, true
	install.ReleaseName, install.Namespace = release, "certready-system"
	install.KubeVersion = &chartutil.KubeVersion{Version: "v1.37.2", Major: "1", Minor: "37"}
	install.APIVersions = apis
	return install.Run(ch, values)
}

func mustRender(t *testing.T, values map[string]any) []map[string]any {
	t.Helper()
	objs, err := render(t, values)
	if err != nil {
		t.Fatalf("helm template with %v: %v", values, err)
	}
	return objs
}

func splitYAML(t *testing.T, manifest string) []map[string]any {
	t.Helper()
	r := utilyaml.NewYAMLReader(bufio.NewReader(strings.NewReader(manifest)))
	var out []map[string]any
	for {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		var m map[string]any
		if err := yaml.Unmarshal(doc, &m); err != nil {
			t.Fatalf("rendered YAML does not parse: %v\n%s", err, doc)
		}
		if m != nil {
			out = append(out, m)
		}
	}
}

// kustomizeMaps builds a kustomization written into a temporary overlay
// folder (beside the shipped ones, so ../../ paths work) after setup has
// put what else it needs there.
func kustomizeMaps(t *testing.T, kustomization string, setup func(dir string)) []map[string]any {
	t.Helper()
	dir, err := os.MkdirTemp(filepath.Join(root, "overlays"), ".overlay-test-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if setup != nil {
		setup(dir)
	}
	if err := os.WriteFile(filepath.Join(dir, "kustomization.yaml"), []byte(kustomization), 0o644); err != nil {
		t.Fatal(err)
	}
	m, err := krusty.MakeKustomizer(krusty.MakeDefaultOptions()).Run(filesys.MakeFsOnDisk(), dir)
	if err != nil {
		t.Fatalf("kustomize build of\n%s: %v", kustomization, err)
	}
	return resMaps(t, m)
}

// resMaps is a kustomize build as plain objects.
func resMaps(t *testing.T, m resmap.ResMap) []map[string]any {
	t.Helper()
	out, err := m.AsYaml()
	if err != nil {
		t.Fatal(err)
	}
	return splitYAML(t, string(out))
}

// byKey indexes objects by kind/namespace/name, minus what the comparison
// ignores (Helm's labels, namespaces on cluster-scoped kinds), after a JSON
// round trip so that numbers compare alike.
func byKey(t *testing.T, objs []map[string]any) map[string]map[string]any {
	t.Helper()
	out := map[string]map[string]any{}
	for _, o := range objs {
		data, err := json.Marshal(o)
		if err != nil {
			t.Fatal(err)
		}
		var m map[string]any
		if err := json.Unmarshal(data, &m); err != nil {
			t.Fatal(err)
		}
		kind, _ := m["kind"].(string)
		meta, _ := m["metadata"].(map[string]any)
		if clusterScoped[kind] {
			delete(meta, "namespace")
		}
		dropHelmLabels(m)
		ns, _ := meta["namespace"].(string)
		name, _ := meta["name"].(string)
		key := kind + " " + ns + "/" + name
		if _, dup := out[key]; dup {
			t.Errorf("%s twice", key)
		}
		out[key] = m
	}
	return out
}

// dropHelmLabels removes Helm's labels wherever labels are: the objects'
// own, their pod templates' and the selectors (the release's instance
// label is one of the chart's selectors).
func dropHelmLabels(v any) {
	switch v := v.(type) {
	case map[string]any:
		for _, l := range helmOnlyLabels {
			delete(v, l)
		}
		for _, e := range v {
			dropHelmLabels(e)
		}
	case []any:
		for _, e := range v {
			dropHelmLabels(e)
		}
	}
}

// npdDeployment copies node-problem-detector's own deployment folder (from
// the module the plugin protocol comes from) into dir/npd: the NPD
// component patches that DaemonSet.
func npdDeployment(t *testing.T) func(dir string) {
	return func(dir string) {
		if err := deploy.NPDDeployment("../..", filepath.Join(dir, "npd")); err != nil {
			t.Fatal(err)
		}
	}
}

// npdOwn are node-problem-detector's own objects, in the kustomize build but
// not the chart's (the chart cannot change NPD's DaemonSet: docs/reference.md).
var npdOwn = []string{
	"DaemonSet kube-system/node-problem-detector", "ServiceAccount kube-system/node-problem-detector",
	"ConfigMap kube-system/node-problem-detector-config", "ClusterRoleBinding /npd-binding",
}

// TestChartEqualsKustomize proves that the chart renders, object for object,
// what kustomize builds from the same choices: a change to one that the
// other lacks fails here.
func TestChartEqualsKustomize(t *testing.T) {
	for _, tc := range []struct {
		name          string
		values        map[string]any
		kustomization string
		setup         func(dir string)
		ignore        []string
	}{
		{name: "defaults (and the Namespace object) are the standalone overlay", values: map[string]any{"namespace": map[string]any{"create": true}},
			kustomization: "resources:\n- ../standalone\n"},
		{name: "taint.mode=nrc is the nrc overlay", values: map[string]any{"taint": map[string]any{"mode": "nrc"}, "namespace": map[string]any{"create": true}},
			kustomization: "resources:\n- ../nrc\n"},
		{name: "monitoring is the monitoring component", values: map[string]any{"namespace": map[string]any{"create": true}, "monitoring": map[string]any{
			"serviceMonitor": map[string]any{"enabled": true}, "prometheusRule": map[string]any{"enabled": true}, "dashboard": map[string]any{"enabled": true}}},
			kustomization: "resources:\n- ../standalone\ncomponents:\n- ../../components/monitoring\n"},
		{name: "namespace.name is kustomize's namespace:", values: map[string]any{"namespace": map[string]any{"name": "platform-certs", "create": true}},
			kustomization: "namespace: platform-certs\nresources:\n- ../standalone\n"},
		{name: "capi is the capi-management overlay", values: map[string]any{"capi": map[string]any{"enabled": true}, "namespace": map[string]any{"create": true}},
			kustomization: "resources:\n- ../capi-management\n"},
		{name: "npd is the npd component", values: map[string]any{"npd": map[string]any{"enabled": true}, "agent": map[string]any{"enabled": false}, "namespace": map[string]any{"create": true}},
			kustomization: "resources:\n- ../standalone\n- npd\ncomponents:\n- ../../components/npd\n", setup: npdDeployment(t), ignore: npdOwn},
	} {
		t.Run(tc.name, func(t *testing.T) {
			chart := byKey(t, mustRender(t, tc.values))
			kust := byKey(t, kustomizeMaps(t, tc.kustomization, tc.setup))
			for _, k := range tc.ignore {
				if _, ok := kust[k]; !ok {
					t.Errorf("%s is not in the kustomize build", k)
				}
				delete(kust, k)
			}
			for k, want := range kust {
				got, ok := chart[k]
				if !ok {
					t.Errorf("%s: built by kustomize, not rendered by the chart", k)
					continue
				}
				if d := cmp.Diff(want, got); d != "" {
					t.Errorf("%s differs (-kustomize +chart):\n%s", k, d)
				}
			}
			for k := range chart {
				if _, ok := kust[k]; !ok {
					t.Errorf("%s: rendered by the chart, not built by kustomize", k)
				}
			}
			if len(chart) < 10 {
				t.Errorf("only %d objects", len(chart))
			}
		})
	}
}

// everyValue sets every value the chart has away from its default.
var everyValue = map[string]any{
	"fullnameOverride": "acme-certready",
	"namespace":        map[string]any{"name": "platform-certs", "create": false},
	"image":            map[string]any{"repository": "registry.example/certready", "tag": "v9.9.9", "digest": "sha256:" + strings.Repeat("ab", 32), "pullPolicy": "Always"},
	"imagePullSecrets": []any{map[string]any{"name": "regcred"}},
	"conditionType":    "ServingCertNotProven",
	"agent": map[string]any{
		"priorityClassName": "node-critical-custom", "nodeSelector": map[string]any{"pool": "linux-workers"},
		"tolerations":    []any{map[string]any{"key": "dedicated", "operator": "Exists"}},
		"affinity":       map[string]any{"nodeAffinity": map[string]any{"requiredDuringSchedulingIgnoredDuringExecution": map[string]any{"nodeSelectorTerms": []any{map[string]any{"matchExpressions": []any{map[string]any{"key": "kubernetes.io/arch", "operator": "In", "values": []any{"amd64"}}}}}}}},
		"maxUnavailable": 3, "resources": map[string]any{"limits": map[string]any{"memory": "200Mi"}},
		"kubeletPKIDir": "/srv/kubelet/pki", "kubeletPreferredAddressTypes": []any{"InternalIP", "ExternalIP"}, "extraArgs": []any{"--heartbeat=2m"},
		"inventory": "configmap:platform-certs/nodes",
		"podLabels": map[string]any{"team": "platform"}, "podAnnotations": map[string]any{"example.com/scrape": "no"},
		"expiryWindows": map[string]any{"warning": "336h", "critical": "48h", "caWarning": "2160h"}, "extraEnv": []any{map[string]any{"name": "HTTPS_PROXY", "value": "http://proxy.example:3128"}},
		"extraVolumes":      []any{map[string]any{"name": "extra-ca", "configMap": map[string]any{"name": "extra-ca"}}},
		"extraVolumeMounts": []any{map[string]any{"name": "extra-ca", "mountPath": "/etc/extra-ca", "readOnly": true}},
		"serviceAccount":    map[string]any{"create": true, "name": "", "annotations": map[string]any{"example.com/owner": "platform"}},
		// SELinux hosts: the kubelet's files are readable by spc_t.
		"podSecurityContext": map[string]any{"seLinuxOptions": map[string]any{"type": "spc_t"}}, "securityContext": map[string]any{"readOnlyRootFilesystem": false},
	},
	"approver": map[string]any{
		"replicas": 3, "priorityClassName": "", "nodeSelector": map[string]any{"pool": "system"},
		"tolerations": []any{}, "placement": "pool", "affinity": map[string]any{},
		"podSecurityContext": map[string]any{"runAsUser": 1000700000, "fsGroup": nil}, "securityContext": map[string]any{"seccompProfile": map[string]any{"type": "RuntimeDefault"}},
		"topologySpreadConstraints": []any{map[string]any{"maxSkew": 2, "topologyKey": "topology.kubernetes.io/zone", "whenUnsatisfiable": "DoNotSchedule",
			"labelSelector": map[string]any{"matchLabels": map[string]any{"app.kubernetes.io/component": "approver"}}}},
		"resources":           map[string]any{"limits": map[string]any{"memory": "1Gi"}},
		"podDisruptionBudget": map[string]any{"enabled": false},
		"flowSchema":          map[string]any{"enabled": true, "priorityLevel": "global-default", "matchingPrecedence": 1000},
		"inventory":           "configmap:platform-certs/nodes",
		"policy": map[string]any{"allowedCIDRs": []any{"10.0.0.0/8", "fd00::/8"}, "denyCIDRs": []any{"10.9.0.0/16"}, "apiserverIPs": []any{"10.0.0.1"},
			"apiserverNames": []any{"api.example"}, "allowSharedAddresses": true, "maxExpiration": "720h", "maxPending": 7, "maxSANs": 40, "maxRequestBytes": 16384, "denyOnMismatch": true,
			"allowedDNSSuffixes": []any{"nodes.example"}, "cloudControllerManagers": []any{"cloud-controller-manager", "aws-cloud-controller-manager"}, "maxSelfReportedIPs": 2},
		"extraArgs": []any{"--workers=8"},
		"podLabels": map[string]any{"team": "platform"}, "podAnnotations": map[string]any{"example.com/scrape": "no"},
		"extraEnv":          []any{map[string]any{"name": "HTTPS_PROXY", "value": "http://proxy.example:3128"}},
		"extraVolumes":      []any{map[string]any{"name": "extra-ca", "configMap": map[string]any{"name": "extra-ca"}}},
		"extraVolumeMounts": []any{map[string]any{"name": "extra-ca", "mountPath": "/etc/extra-ca", "readOnly": true}},
		"serviceAccount":    map[string]any{"create": true, "name": "acme-approver", "annotations": map[string]any{"example.com/owner": "platform"}},
	},
	"taint":             map[string]any{"mode": "nrc", "nrc": map[string]any{"ruleName": "serving-cert", "dryRun": false, "placementRule": false, "nodeSelector": map[string]any{"matchLabels": map[string]any{"pool": "linux-workers"}}}},
	"criticalPodsQuota": map[string]any{"enabled": false},
	// metrics.secure=false: TestChartPlainMetricsOptIn.
	"metrics": map[string]any{"certSecret": "certready-metrics-tls", "readerSubjects": []any{map[string]any{"kind": "ServiceAccount", "name": "prometheus", "namespace": "monitoring"}}},
	"monitoring": map[string]any{"labels": map[string]any{"release": "kube-prometheus-stack"}, "prometheusRule": map[string]any{"enabled": true, "kubeletExpiryAlerts": false}, "dashboard": map[string]any{"enabled": true},
		"serviceMonitor": map[string]any{"enabled": true, "interval": "1m", "tlsConfig": map[string]any{"serverName": "certready-metrics.platform-certs.svc", "ca": map[string]any{"secret": map[string]any{"name": "certready-metrics-tls", "key": "ca.crt"}}}}},
	"npd":          map[string]any{"enabled": false},
	"commonLabels": map[string]any{"example.com/cost-center": "platform"},
	"extraObjects": []any{
		map[string]any{"apiVersion": "v1", "kind": "ConfigMap", "metadata": map[string]any{"name": "{{ .Release.Name }}-extra", "namespace": "platform-certs"}},
		"apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: extra-from-string\n  namespace: {{ .Release.Namespace }}\n",
	},
	"openshift": map[string]any{"adaptSecurityContext": "disabled"},
}

// decodeStrict decodes every object into its API type, unknown fields
// refused (the CRD kinds are checked elsewhere: schema or promtool).
func decodeStrict(t *testing.T, objs []map[string]any) []runtime.Object {
	t.Helper()
	var out []runtime.Object
	for _, m := range objs {
		kind, _ := m["kind"].(string)
		name, _ := m["metadata"].(map[string]any)["name"].(string)
		if crdKinds[kind] {
			continue
		}
		data, err := json.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		obj, _, err := strict.Decode(data, nil, nil)
		if err != nil {
			t.Errorf("%s %s does not decode strictly: %v", kind, name, err)
			continue
		}
		out = append(out, obj)
	}
	return out
}

func TestChartDecodesStrictly(t *testing.T) {
	for name, values := range map[string]map[string]any{"defaults": nil, "every value changed": everyValue} {
		t.Run(name, func(t *testing.T) {
			objs := mustRender(t, values)
			if got := decodeStrict(t, objs); len(got) < 10 {
				t.Errorf("only %d objects decoded", len(got))
			}
		})
	}
}

// TestChartHonoursEveryValue renders with every value changed and checks
// that each one arrives where it acts.
func TestChartHonoursEveryValue(t *testing.T) {
	raw := mustRender(t, everyValue)
	objs := decodeStrict(t, raw)
	kinds := map[string][]map[string]any{}
	for _, m := range raw {
		kinds[m["kind"].(string)] = append(kinds[m["kind"].(string)], m)
	}
	ds := find[*appsv1.DaemonSet](objs)
	dep := find[*appsv1.Deployment](objs)
	if len(ds) != 1 || len(dep) != 1 {
		t.Fatalf("%d DaemonSets, %d Deployments", len(ds), len(dep))
	}
	agent, approver := ds[0], dep[0]
	a, p := agent.Spec.Template.Spec, approver.Spec.Template.Spec
	const image = "registry.example/certready:v9.9.9@sha256:abababababababababababababababababababababababababababababababab"
	checks := []struct {
		what string
		ok   bool
	}{
		{"names carry fullnameOverride", agent.Name == "acme-certready-agent" && approver.Name == "acme-certready-approver"},
		{"namespace.name", agent.Namespace == "platform-certs" && approver.Namespace == "platform-certs"},
		{"namespace.create=false renders no Namespace", len(kinds["Namespace"]) == 0},
		{"image with digest", a.Containers[0].Image == image && p.Containers[0].Image == image},
		{"image.pullPolicy", a.Containers[0].ImagePullPolicy == corev1.PullAlways},
		{"agent.priorityClassName", a.PriorityClassName == "node-critical-custom"},
		{"approver.priorityClassName empty: none", p.PriorityClassName == ""},
		{"agent.nodeSelector (merged with the default, as Helm merges maps)", a.NodeSelector["pool"] == "linux-workers"},
		{"approver.nodeSelector", p.NodeSelector["pool"] == "system"},
		{"agent.tolerations", len(a.Tolerations) == 1 && a.Tolerations[0].Key == "dedicated"},
		{"approver.tolerations empty: none", len(p.Tolerations) == 0},
		{"agent.affinity", a.Affinity != nil && a.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms[0].MatchExpressions[0].Key == "kubernetes.io/arch"},
		{"approver.placement=pool: the labelled pool only", p.Affinity != nil && len(p.Affinity.NodeAffinity.PreferredDuringSchedulingIgnoredDuringExecution) == 0 &&
			len(p.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms) == 1 &&
			p.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms[0].MatchExpressions[0].Key == "node-restriction.kubernetes.io/certready-approver-pool" &&
			approver.Annotations["certready.io/placement"] == "pool"},
		{"approver.podSecurityContext merged, null drops a default", p.SecurityContext != nil && *p.SecurityContext.RunAsUser == 1000700000 && p.SecurityContext.FSGroup == nil &&
			*p.SecurityContext.RunAsNonRoot},
		{"approver.securityContext merged", p.Containers[0].SecurityContext.SeccompProfile != nil && *p.Containers[0].SecurityContext.ReadOnlyRootFilesystem},
		{"agent.podSecurityContext and securityContext", a.SecurityContext != nil && a.SecurityContext.SELinuxOptions != nil && a.SecurityContext.SELinuxOptions.Type == "spc_t" &&
			!*a.Containers[0].SecurityContext.ReadOnlyRootFilesystem && *a.Containers[0].SecurityContext.RunAsUser == 0},
		{"commonLabels on every object", len(raw) == countLabelled(raw, "example.com/cost-center", "platform")},
		{"extraObjects, maps and strings, through tpl", len(kinds["ConfigMap"]) >= 2 && strings.Contains(mustJSON(kinds["ConfigMap"]), `"name":"certready-extra"`) &&
			strings.Contains(mustJSON(kinds["ConfigMap"]), `"name":"extra-from-string","namespace":"certready-system"`)},
		{"monitoring.prometheusRule.kubeletExpiryAlerts=false: the kubelet expiry alerts left to kube-prometheus-stack, the others kept",
			!strings.Contains(mustJSON(kinds["PrometheusRule"]), "CertReadyKubeletServingCertExpiringSoon") && !strings.Contains(mustJSON(kinds["PrometheusRule"]), "CertReadyKubeletClientCertExpiringCritical") &&
				strings.Contains(mustJSON(kinds["PrometheusRule"]), "CertReadyClusterCAExpiringSoon") && strings.Contains(mustJSON(kinds["PrometheusRule"]), "CertReadyKubeletServingCertNotReady")},
		{"the release in the selectors", approver.Spec.Selector.MatchLabels["app.kubernetes.io/instance"] == "certready" && agent.Spec.Template.Labels["app.kubernetes.io/instance"] == "certready"},
		{"approver.topologySpreadConstraints", len(p.TopologySpreadConstraints) == 1 && p.TopologySpreadConstraints[0].TopologyKey == "topology.kubernetes.io/zone"},
		{"approver.replicas", *approver.Spec.Replicas == 3},
		{"agent.maxUnavailable", agent.Spec.UpdateStrategy.RollingUpdate.MaxUnavailable.IntValue() == 3},
		{"agent.resources", a.Containers[0].Resources.Limits.Memory().String() == "200Mi"},
		{"approver.resources", p.Containers[0].Resources.Limits.Memory().String() == "1Gi"},
		{"agent.kubeletPKIDir mounted at its own path", a.Volumes[0].HostPath.Path == "/srv/kubelet/pki" && a.Containers[0].VolumeMounts[0].MountPath == "/srv/kubelet/pki"},
		{"imagePullSecrets on both ServiceAccounts", countPullSecrets(find[*corev1.ServiceAccount](objs)) == 2},
		{"no PodDisruptionBudget", len(kinds["PodDisruptionBudget"]) == 0},
		{"FlowSchema priority level", len(kinds["FlowSchema"]) == 1 && strings.Contains(mustJSON(kinds["FlowSchema"][0]), `"global-default"`)},
		{"policies name the renamed service accounts and the condition type", len(kinds["ValidatingAdmissionPolicy"]) == 4 &&
			strings.Contains(mustJSON(kinds["ValidatingAdmissionPolicy"]), "system:serviceaccount:platform-certs:acme-certready-agent'") &&
			strings.Contains(mustJSON(kinds["ValidatingAdmissionPolicy"]), "system:serviceaccount:platform-certs:acme-approver'") &&
			strings.Contains(mustJSON(kinds["ValidatingAdmissionPolicy"]), "'ServingCertNotProven'")},
		{"criticalPodsQuota.enabled=false", len(kinds["ResourceQuota"]) == 0},
		{"taint.mode=nrc: one rule (no placement rule), live, its selector and condition", len(kinds["NodeReadinessRule"]) == 1 &&
			strings.Contains(mustJSON(kinds["NodeReadinessRule"][0]), `"dryRun":false`) && strings.Contains(mustJSON(kinds["NodeReadinessRule"][0]), `"pool":"linux-workers"`) &&
			strings.Contains(mustJSON(kinds["NodeReadinessRule"][0]), `"type":"ServingCertNotProven"`)},
		{"taint.mode=nrc: no taint fallback and its RBAC", !slices.ContainsFunc(p.Containers[0].Args, func(s string) bool { return strings.HasPrefix(s, "--lift-readiness-taint") }) &&
			!slices.ContainsFunc(find[*rbacv1.ClusterRole](objs), func(r *rbacv1.ClusterRole) bool { return strings.HasSuffix(r.Name, "taint-fallback") })},
		{"monitoring labels on ServiceMonitor, PrometheusRule and dashboard", allLabelled(kinds["ServiceMonitor"], kinds["PrometheusRule"], kinds["ConfigMap"])},
		{"ServiceMonitor interval, in the release's namespace, no namespace pinned", strings.Contains(mustJSON(kinds["ServiceMonitor"][0]), `"interval":"1m"`) &&
			strings.Contains(mustJSON(kinds["ServiceMonitor"][0]), `"namespace":"platform-certs"`) && !strings.Contains(mustJSON(kinds["ServiceMonitor"][0]), `namespaceSelector`)},
		{"metrics.certSecret mounted in both pods, and passed as --metrics-cert-dir", hasSecretMount(a, "certready-metrics-tls") && hasSecretMount(p, "certready-metrics-tls") &&
			slices.Contains(a.Containers[0].Args, "--metrics-cert-dir=/etc/certready/metrics-tls") && slices.Contains(p.Containers[0].Args, "--metrics-cert-dir=/etc/certready/metrics-tls")},
		{"metrics.certSecret: the approver keeps no metrics certificate, and no empty Secret is made for it", slices.Contains(p.Containers[0].Args, "--metrics-ca-secret=") && slices.Contains(p.Containers[0].Args, "--metrics-tls-secret=") &&
			!slices.ContainsFunc(find[*corev1.Secret](objs), func(s *corev1.Secret) bool {
				return strings.Contains(s.Name, "metrics-ca") || s.Name == "acme-certready-metrics-tls"
			})},
		{"metrics.readerSubjects bound to the reader role", slices.ContainsFunc(find[*rbacv1.ClusterRoleBinding](objs), func(b *rbacv1.ClusterRoleBinding) bool {
			return b.RoleRef.Name == "acme-certready-metrics-reader" && len(b.Subjects) == 1 && b.Subjects[0].Name == "prometheus" && b.Subjects[0].Namespace == "monitoring"
		})},
		{"ServiceMonitor: https with Prometheus' token and the tlsConfig given", strings.Contains(mustJSON(kinds["ServiceMonitor"][0]), `"scheme":"https"`) &&
			strings.Contains(mustJSON(kinds["ServiceMonitor"][0]), `"serverName":"certready-metrics.platform-certs.svc"`) && !strings.Contains(mustJSON(kinds["ServiceMonitor"][0]), `insecureSkipVerify`) &&
			strings.Contains(mustJSON(kinds["ServiceMonitor"][0]), `"name":"acme-certready-metrics-scraper-token"`) && !strings.Contains(mustJSON(kinds["ServiceMonitor"][0]), "bearerTokenFile")},
		{"conditionType on the agent's ServiceAccount", saAnnotationKey(find[*corev1.ServiceAccount](objs), "acme-certready-agent", "certready.io/condition-type") == "ServingCertNotProven"},
		{"podLabels and podAnnotations on both pods", agent.Spec.Template.Labels["team"] == "platform" && approver.Spec.Template.Labels["team"] == "platform" &&
			agent.Spec.Template.Annotations["example.com/scrape"] == "no" && approver.Spec.Template.Annotations["example.com/scrape"] == "no"},
		{"agent.expiryWindows as the agent's flags", slices.Contains(a.Containers[0].Args, "--expiry-warning=336h") &&
			slices.Contains(a.Containers[0].Args, "--expiry-critical=48h") && slices.Contains(a.Containers[0].Args, "--ca-expiry-warning=2160h")},
		{"the agent's optional settings ConfigMap follows the name, key by key", len(a.Containers[0].EnvFrom) == 0 &&
			slices.ContainsFunc(a.Containers[0].Env, func(e corev1.EnvVar) bool {
				return e.Name == "CERTREADY_EXPIRY_WARNING" && e.ValueFrom != nil && e.ValueFrom.ConfigMapKeyRef != nil &&
					e.ValueFrom.ConfigMapKeyRef.Name == "acme-certready-agent-settings"
			})},
		{"extraEnv in both containers", slices.ContainsFunc(a.Containers[0].Env, func(e corev1.EnvVar) bool { return e.Name == "HTTPS_PROXY" }) &&
			slices.ContainsFunc(p.Containers[0].Env, func(e corev1.EnvVar) bool { return e.Name == "HTTPS_PROXY" })},
		{"extraVolumes and extraVolumeMounts in both pods", slices.ContainsFunc(a.Volumes, func(v corev1.Volume) bool { return v.Name == "extra-ca" }) &&
			slices.ContainsFunc(p.Volumes, func(v corev1.Volume) bool { return v.Name == "extra-ca" }) &&
			slices.ContainsFunc(a.Containers[0].VolumeMounts, func(m corev1.VolumeMount) bool { return m.MountPath == "/etc/extra-ca" }) &&
			slices.ContainsFunc(p.Containers[0].VolumeMounts, func(m corev1.VolumeMount) bool { return m.MountPath == "/etc/extra-ca" })},
		{"serviceAccount.name and annotations", p.ServiceAccountName == "acme-approver" && a.ServiceAccountName == "acme-certready-agent" &&
			saAnnotationKey(find[*corev1.ServiceAccount](objs), "acme-approver", "example.com/owner") == "platform" &&
			saAnnotationKey(find[*corev1.ServiceAccount](objs), "acme-certready-agent", "example.com/owner") == "platform"},
	}
	for _, c := range checks {
		if !c.ok {
			t.Errorf("%s: not as set", c.what)
		}
	}
	for _, want := range []string{"--kubelet-pki-dir=/srv/kubelet/pki", "--kubelet-preferred-address-types=InternalIP,ExternalIP", "--condition-type=ServingCertNotProven", "--heartbeat=2m", "--inventory=configmap:platform-certs/nodes"} {
		if !slices.Contains(a.Containers[0].Args, want) {
			t.Errorf("agent args %q lack %s", a.Containers[0].Args, want)
		}
	}
	for _, want := range []string{"--inventory=configmap:platform-certs/nodes", "--allowed-cidrs=10.0.0.0/8,fd00::/8", "--deny-cidrs=10.9.0.0/16", "--apiserver-ips=10.0.0.1",
		"--apiserver-names=api.example", "--allow-shared-addresses", "--max-expiration=720h", "--max-pending=7", "--max-sans=40", "--max-request-bytes=16384", "--deny-on-mismatch", "--condition-type=ServingCertNotProven", "--workers=8",
		"--allowed-dns-suffixes=nodes.example", "--cloud-controller-managers=cloud-controller-manager,aws-cloud-controller-manager", "--max-self-reported-ips=2"} {
		if !slices.Contains(p.Containers[0].Args, want) {
			t.Errorf("approver args %q lack %s", p.Containers[0].Args, want)
		}
	}
	// Every flag the chart passes must be one the binary knows.
	bin := buildCertready(t)
	for role, args := range map[string][]string{"agent": a.Containers[0].Args, "approver": p.Containers[0].Args} {
		help, _ := exec.Command(bin, role, "--help").CombinedOutput()
		for _, arg := range args[1:] {
			flag, _, _ := strings.Cut(arg, "=")
			if !bytes.Contains(help, []byte(flag+" ")) {
				t.Errorf("%s: the chart passes %s, which `certready %s --help` does not list", role, flag, role)
			}
		}
	}
}

// hasSecretMount: the pod mounts Secret name in its first container.
func hasSecretMount(p corev1.PodSpec, name string) bool {
	for _, v := range p.Volumes {
		if v.Secret != nil && v.Secret.SecretName == name {
			return slices.ContainsFunc(p.Containers[0].VolumeMounts, func(m corev1.VolumeMount) bool { return m.Name == v.Name && m.ReadOnly })
		}
	}
	return false
}

// By default the approver keeps the metrics certificate: the chart makes
// its two Secrets empty, lets the approver get and update exactly those
// (no create), mounts the serving one in both pods, and the ServiceMonitor
// verifies with its ca.crt and sends the scraper's token. Off with plain
// metrics: no Secret, no rule, no flag.
func TestChartMetricsCertificateKeptByTheApprover(t *testing.T) {
	for _, secure := range []bool{true, false} {
		objs := decodeStrict(t, mustRender(t, map[string]any{"metrics": map[string]any{"secure": secure}, "monitoring": map[string]any{"serviceMonitor": map[string]any{"enabled": true}}}))
		var secrets []string
		for _, s := range find[*corev1.Secret](objs) {
			if len(s.Data)+len(s.StringData) != 0 {
				t.Errorf("Secret %s carries data: helm upgrade would overwrite what the approver wrote", s.Name)
			}
			secrets = append(secrets, s.Name)
		}
		slices.Sort(secrets)
		want := []string{"certready-metrics-ca", "certready-metrics-scraper-token", "certready-metrics-tls"}
		if !secure {
			want = nil
		}
		if !slices.Equal(secrets, want) {
			t.Errorf("secure=%v: Secrets %v, want %v", secure, secrets, want)
		}
		var rule *rbacv1.PolicyRule
		for _, r := range find[*rbacv1.Role](objs) {
			for i := range r.Rules {
				if slices.Contains(r.Rules[i].Resources, "secrets") {
					rule = &r.Rules[i]
				}
			}
		}
		for _, r := range find[*rbacv1.ClusterRole](objs) {
			for _, pr := range r.Rules {
				if slices.Contains(pr.Resources, "secrets") || slices.Contains(pr.Resources, "*") {
					t.Errorf("ClusterRole %s reaches Secrets: %+v", r.Name, pr)
				}
			}
		}
		switch {
		case !secure && rule != nil:
			t.Errorf("plain metrics: a Secret rule %+v", rule)
		case secure && (rule == nil || !slices.Equal(rule.Verbs, []string{"get", "update"}) || !slices.Equal(rule.ResourceNames, []string{"certready-metrics-ca", "certready-metrics-tls"})):
			t.Errorf("the approver's Secret rule %+v, want get and update of the two by name", rule)
		}
		p := find[*appsv1.Deployment](objs)[0].Spec.Template.Spec
		keeps := slices.Contains(p.Containers[0].Args, "--metrics-ca-secret=certready-metrics-ca") && slices.Contains(p.Containers[0].Args, "--metrics-tls-secret=certready-metrics-tls")
		if keeps != secure {
			t.Errorf("secure=%v: approver args %q", secure, p.Containers[0].Args)
		}
		if secure && (!hasSecretMount(p, "certready-metrics-tls") || !hasSecretMount(find[*appsv1.DaemonSet](objs)[0].Spec.Template.Spec, "certready-metrics-tls") || p.SecurityContext.FSGroup == nil) {
			t.Error("the serving Secret is not mounted in both pods (readable by the approver's group)")
		}
	}
}

// metrics.secure=false is the opt-in to plain HTTP: both components are
// told so, and the ServiceMonitor scrapes plain HTTP without a token.
// Secure (the default) renders no flag: it is the binary's default.
func TestChartPlainMetricsOptIn(t *testing.T) {
	for _, secure := range []bool{true, false} {
		raw := mustRender(t, map[string]any{"metrics": map[string]any{"secure": secure}, "monitoring": map[string]any{"serviceMonitor": map[string]any{"enabled": true}}})
		objs := decodeStrict(t, raw)
		for _, args := range [][]string{find[*appsv1.DaemonSet](objs)[0].Spec.Template.Spec.Containers[0].Args, find[*appsv1.Deployment](objs)[0].Spec.Template.Spec.Containers[0].Args} {
			if got := slices.Contains(args, "--metrics-secure=false"); got == secure {
				t.Errorf("metrics.secure=%v: args %q", secure, args)
			}
		}
		for _, m := range raw {
			if m["kind"] == "ServiceMonitor" {
				if https := strings.Contains(mustJSON(m), `"scheme":"https"`) && strings.Contains(mustJSON(m), `"authorization":{"credentials":{"key":"token","name":"certready-metrics-scraper-token"},"type":"Bearer"}`) &&
					strings.Contains(mustJSON(m), `"tlsConfig":{"ca":{"secret":{"key":"ca.crt","name":"certready-metrics-tls"}},"serverName":"certready-metrics"}`); https != secure {
					t.Errorf("metrics.secure=%v: ServiceMonitor %s", secure, mustJSON(m["spec"]))
				}
			}
		}
	}
}

func TestChartRefusesBadValues(t *testing.T) {
	for _, tc := range []struct {
		name   string
		values map[string]any
		want   string
	}{
		{"unknown taint mode", map[string]any{"taint": map[string]any{"mode": "auto"}}, "at '/taint/mode': value must be one of 'standalone', 'nrc', 'none'"},
		{"digest without its algorithm", map[string]any{"image": map[string]any{"digest": "abc123"}}, `image.digest "abc123"`},
		{"npd and the agent both writing the condition", map[string]any{"npd": map[string]any{"enabled": true}}, "set agent.enabled=false"},
		{"npd beside the Cluster API mode", map[string]any{"npd": map[string]any{"enabled": true}, "agent": map[string]any{"enabled": false}, "capi": map[string]any{"enabled": true}}, "install them apart"},
		{"shared addresses beside the Cluster API mode", map[string]any{"capi": map[string]any{"enabled": true}, "approver": map[string]any{"policy": map[string]any{"allowSharedAddresses": true}}}, "always refuses one two Machines claim"},
		{"confinement off while the agent patches nodes/status", map[string]any{"confinement": map[string]any{"enabled": false}}, "confinement.enabled=false while the agent"},
		{"confinement off while node-problem-detector patches nodes/status", map[string]any{"confinement": map[string]any{"enabled": false}, "npd": map[string]any{"enabled": true}, "agent": map[string]any{"enabled": false}}, "confinement.enabled=false while the agent or node-problem-detector"},
		{"npd without a service account to name", map[string]any{"npd": map[string]any{"enabled": true, "serviceAccount": ""}, "agent": map[string]any{"enabled": false}}, "at '/npd/serviceAccount': minLength"},
		{"a value the chart does not have", map[string]any{"approvr": map[string]any{"replicas": 1}}, "approvr"},
		{"a mistyped value", map[string]any{"approver": map[string]any{"replicas": "two"}}, "replicas"},
		{"an unknown placement", map[string]any{"approver": map[string]any{"placement": "workers"}}, "at '/approver/placement': value must be one of 'trusted', 'control-plane', 'pool', 'any'"},
		{"a security context field Kubernetes does not have", map[string]any{"approver": map[string]any{"securityContext": map[string]any{"runAsUsr": 1}}}, "runAsUsr"},
		{"a mistyped pod security context field", map[string]any{"agent": map[string]any{"podSecurityContext": map[string]any{"fsGroup": "root"}}}, "fsGroup"},
		{"commonLabels redefining the release's label", map[string]any{"commonLabels": map[string]any{"app.kubernetes.io/instance": "other"}}, "commonLabels.app.kubernetes.io/instance: the chart sets this label itself"},
		{"an unknown OpenShift mode", map[string]any{"openshift": map[string]any{"adaptSecurityContext": "yes"}}, "adaptSecurityContext"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := render(t, tc.values)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %v, want one that says %q", err, tc.want)
			}
		})
	}
}

func TestChartLints(t *testing.T) {
	for name, values := range map[string]map[string]any{"defaults": nil, "every value changed": everyValue} {
		t.Run(name, func(t *testing.T) {
			lint := action.NewLint()
			lint.Strict = true
			lint.KubeVersion = &chartutil.KubeVersion{Version: "v1.37.2", Major: "1", Minor: "37"}
			res := lint.Run([]string{chartDir}, values)
			for _, m := range res.Messages {
				if m.Severity > support.InfoSev {
					t.Errorf("helm lint: %s", m)
				}
			}
			for _, err := range res.Errors {
				t.Errorf("helm lint: %v", err)
			}
		})
	}
}

// countLabelled counts the objects labelled key=value, the operator's own
// objects (extraObjects) aside.
func countLabelled(objs []map[string]any, key, value string) int {
	n := 0
	for _, o := range objs {
		meta, _ := o["metadata"].(map[string]any)
		labels, _ := meta["labels"].(map[string]any)
		name, _ := meta["name"].(string)
		if labels[key] == value || strings.Contains(name, "extra") {
			n++
		}
	}
	return n
}

func countPullSecrets(sas []*corev1.ServiceAccount) int {
	n := 0
	for _, sa := range sas {
		if len(sa.ImagePullSecrets) == 1 && sa.ImagePullSecrets[0].Name == "regcred" {
			n++
		}
	}
	return n
}

func allLabelled(groups ...[]map[string]any) bool {
	n := 0
	for _, g := range groups {
		for _, o := range g {
			if name, _ := o["metadata"].(map[string]any)["name"].(string); strings.Contains(name, "extra") {
				continue // extraObjects: the operator's own
			}
			labels, _ := o["metadata"].(map[string]any)["labels"].(map[string]any)
			if labels["release"] != "kube-prometheus-stack" {
				return false
			}
			n++
		}
	}
	return n == 3
}

func mustJSON(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

// buildCertready builds the certready binary this tree holds.
func buildCertready(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "certready")
	cmd := exec.Command("go", "build", "-o", bin, "./cmd/certready")
	cmd.Dir = "../.."
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build certready: %v\n%s", err, out)
	}
	return bin
}

// TestChartFilesAreTheManifests: the chart's files/ are copies of the
// kustomize components' (Helm reads only files inside the chart, and would
// warn on every symlink); a change to one must be made to the other.
func TestChartFilesAreTheManifests(t *testing.T) {
	for file, source := range map[string]string{
		"dashboard.json":                "components/monitoring/dashboards/certready.json",
		"prometheusrule.yaml":           "components/monitoring/prometheusrule.yaml",
		"certready-plugin-monitor.json": "components/npd/certready-plugin-monitor.json",
	} {
		got, err := os.ReadFile(filepath.Join(chartDir, "files", file))
		if err != nil {
			t.Fatal(err)
		}
		want, err := os.ReadFile(filepath.Join(root, source))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("charts/certready/files/%s differs from manifests/%s: cp manifests/%s charts/certready/files/%s", file, source, source, file)
		}
	}
}

// TestCAPIManagementRBAC: in the management cluster the approver may read
// Clusters, Machines and Cluster API's Secrets and write events, and
// nothing about that cluster's own CSRs or Nodes.
func TestCAPIManagementRBAC(t *testing.T) {
	objs := decodeStrict(t, kustomizeMaps(t, "resources:\n- ../capi-management\n", nil))
	var granted []string
	for _, r := range find[*rbacv1.ClusterRole](objs) {
		for _, rule := range r.Rules {
			for _, res := range rule.Resources {
				granted = append(granted, res)
				if res == "certificatesigningrequests" || res == "nodes" || res == "signers" {
					t.Errorf("ClusterRole %s grants %v on %s in the management cluster", r.Name, rule.Verbs, res)
				}
				if res == "secrets" && slices.Contains(rule.Verbs, "get") {
					t.Errorf("ClusterRole %s grants get on every Secret; list/watch of Cluster API's (by field and label selector) is all it reads", r.Name)
				}
			}
		}
	}
	for _, want := range []string{"clusters", "machines", "secrets", "events"} {
		if !slices.Contains(granted, want) {
			t.Errorf("no ClusterRole grants %s (granted: %v)", want, granted)
		}
	}
	dep := find[*appsv1.Deployment](objs)
	if len(dep) != 1 || !slices.Contains(dep[0].Spec.Template.Spec.Containers[0].Args, "--cluster-api") || len(find[*appsv1.DaemonSet](objs)) != 0 {
		t.Errorf("want the approver with --cluster-api and no agent")
	}
}

// saAnnotationKey is the annotation key of the ServiceAccount name.
func saAnnotationKey(sas []*corev1.ServiceAccount, name, key string) string {
	for _, sa := range sas {
		if sa.Name == name {
			return sa.Annotations[key]
		}
	}
	return ""
}

// The conventions an operator expects of a chart: no PDB that could block a
// drain (one replica), existing service accounts used by name and bound,
// and the file: inventory mounted from a ConfigMap through extraVolumes.
func TestChartConventions(t *testing.T) {
	kinds := func(values map[string]any) (map[string]int, []runtime.Object) {
		objs := mustRender(t, values)
		n := map[string]int{}
		for _, m := range objs {
			n[m["kind"].(string)]++
		}
		return n, decodeStrict(t, objs)
	}
	if n, _ := kinds(nil); n["PodDisruptionBudget"] != 1 {
		t.Errorf("defaults (2 replicas): %d PodDisruptionBudgets, want 1", n["PodDisruptionBudget"])
	}
	if n, _ := kinds(map[string]any{"approver": map[string]any{"replicas": 1}}); n["PodDisruptionBudget"] != 0 {
		t.Errorf("one replica: %d PodDisruptionBudgets, want none (it would block every drain)", n["PodDisruptionBudget"])
	}

	n, objs := kinds(map[string]any{
		"agent":    map[string]any{"serviceAccount": map[string]any{"create": false, "name": "existing-agent"}},
		"approver": map[string]any{"serviceAccount": map[string]any{"create": false, "name": "existing-approver"}},
	})
	if n["ServiceAccount"] != 0 {
		t.Errorf("serviceAccount.create=false: %d ServiceAccounts rendered", n["ServiceAccount"])
	}
	if ds := find[*appsv1.DaemonSet](objs); len(ds) != 1 || ds[0].Spec.Template.Spec.ServiceAccountName != "existing-agent" {
		t.Errorf("the agent does not run as existing-agent")
	}
	if dep := find[*appsv1.Deployment](objs); len(dep) != 1 || dep[0].Spec.Template.Spec.ServiceAccountName != "existing-approver" {
		t.Errorf("the approver does not run as existing-approver")
	}
	bound := map[string]bool{}
	for _, b := range find[*rbacv1.ClusterRoleBinding](objs) {
		for _, s := range b.Subjects {
			bound[s.Name] = true
		}
	}
	if !bound["existing-agent"] || !bound["existing-approver"] {
		t.Errorf("ClusterRoleBindings bind %v, want both existing accounts", bound)
	}

	_, objs = kinds(map[string]any{"approver": map[string]any{
		"inventory":         "file:/etc/certready/inventory/nodes.yaml",
		"extraVolumes":      []any{map[string]any{"name": "inventory", "configMap": map[string]any{"name": "certready-inventory"}}},
		"extraVolumeMounts": []any{map[string]any{"name": "inventory", "mountPath": "/etc/certready/inventory", "readOnly": true}},
	}})
	dep := find[*appsv1.Deployment](objs)
	if len(dep) != 1 {
		t.Fatalf("%d Deployments", len(dep))
	}
	spec := dep[0].Spec.Template.Spec
	if !slices.Contains(spec.Containers[0].Args, "--inventory=file:/etc/certready/inventory/nodes.yaml") ||
		len(spec.Volumes) != 2 || spec.Volumes[1].ConfigMap == nil || spec.Volumes[1].ConfigMap.Name != "certready-inventory" ||
		len(spec.Containers[0].VolumeMounts) != 2 || spec.Containers[0].VolumeMounts[1].MountPath != "/etc/certready/inventory" {
		t.Errorf("file inventory through extraVolumes: args %v, volumes %+v, mounts %+v", spec.Containers[0].Args, spec.Volumes, spec.Containers[0].VolumeMounts)
	}
}

// The chart's README lists every value of values.yaml (opaque maps such as
// nodeSelector or resources as one row), so no value is undocumented.
func TestChartReadmeListsEveryValue(t *testing.T) {
	data, err := os.ReadFile(filepath.Join(chartDir, "values.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var values map[string]any
	if err := yaml.Unmarshal(data, &values); err != nil {
		t.Fatal(err)
	}
	readme, err := os.ReadFile(filepath.Join(chartDir, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	opaque := map[string]bool{"nodeSelector": true, "affinity": true, "labels": true, "resources": true,
		"podLabels": true, "podAnnotations": true, "annotations": true, "podSecurityContext": true, "securityContext": true}
	var walk func(prefix string, m map[string]any)
	n := 0
	walk = func(prefix string, m map[string]any) {
		for k, v := range m {
			path := prefix + k
			if sub, ok := v.(map[string]any); ok && len(sub) > 0 && !opaque[k] {
				walk(path+".", sub)
				continue
			}
			n++
			if !bytes.Contains(readme, []byte("`"+path+"`")) {
				t.Errorf("charts/certready/README.md does not list `%s`", path)
			}
		}
	}
	walk("", values)
	if n < 50 {
		t.Errorf("only %d values found: is values.yaml read?", n)
	}
}

// Names derive from the release as Helm charts' do, and everything that
// names an object follows: the workloads' service accounts, the bindings
// and the admission policies' usernames.
func TestChartNamesFollowTheRelease(t *testing.T) {
	for _, tc := range []struct {
		release string
		values  map[string]any
		agent   string
	}{
		{"certready", nil, "certready-agent"},
		{"prod", nil, "prod-certready-agent"},
		{"certready-prod", nil, "certready-prod-agent"},
		{"x", map[string]any{"nameOverride": "cr"}, "x-cr-agent"},
		{"x", map[string]any{"fullnameOverride": "acme"}, "acme-agent"},
	} {
		objs, err := renderAs(t, tc.release, tc.values)
		if err != nil {
			t.Fatalf("release %s %v: %v", tc.release, tc.values, err)
		}
		typed := decodeStrict(t, objs)
		ds := find[*appsv1.DaemonSet](typed)
		if len(ds) != 1 || ds[0].Name != tc.agent || ds[0].Spec.Template.Spec.ServiceAccountName != tc.agent {
			t.Errorf("release %s %v: agent DaemonSet %v, want %s running as %s", tc.release, tc.values, ds, tc.agent, tc.agent)
			continue
		}
		if !strings.Contains(mustJSON(objs), "system:serviceaccount:certready-system:"+tc.agent+"'") {
			t.Errorf("release %s %v: the admission policies do not name %s", tc.release, tc.values, tc.agent)
		}
	}
}

// The agents dial by the approver's inventory ConfigMap unless told
// otherwise, and may read that one ConfigMap, by name, in the release
// namespace; nothing else widens their Role.
func TestChartAgentInventory(t *testing.T) {
	for _, tc := range []struct {
		name     string
		values   map[string]any
		wantArg  string // "": no --inventory
		wantRule string // the ConfigMap the agent's Role names; "": no rule
		wantErr  string
	}{
		{name: "defaults: the Node's addresses", values: nil},
		{name: "the approver's ConfigMap is followed", values: map[string]any{"approver": map[string]any{"inventory": "configmap:certready-system/nodes"}},
			wantArg: "--inventory=configmap:certready-system/nodes", wantRule: "nodes"},
		{name: "agent.inventory=node opts out", values: map[string]any{"agent": map[string]any{"inventory": "node"}, "approver": map[string]any{"inventory": "configmap:certready-system/nodes"}}},
		{name: "a file inventory of the approver is not followed (the agents do not mount it)", values: map[string]any{"approver": map[string]any{"inventory": "file:/etc/inv.yaml"}}},
		{name: "the agent's own file", values: map[string]any{"agent": map[string]any{"inventory": "file:/etc/inv/nodes.yaml"}}, wantArg: "--inventory=file:/etc/inv/nodes.yaml"},
		{name: "Cluster API: Machines are not visible to the agents", values: map[string]any{"capi": map[string]any{"enabled": true}, "approver": map[string]any{"inventory": "configmap:certready-system/nodes"}}},
		{name: "the approver's ConfigMap in another namespace is not followed", values: map[string]any{"approver": map[string]any{"inventory": "configmap:kube-system/nodes"}}},
		{name: "an agent ConfigMap in another namespace is refused", values: map[string]any{"agent": map[string]any{"inventory": "configmap:kube-system/nodes"}},
			wantErr: "agent.inventory=configmap:kube-system/nodes: the agents read the inventory ConfigMap in the release namespace certready-system only"},
		{name: "a bad value is refused by the schema", values: map[string]any{"agent": map[string]any{"inventory": "capi"}}, wantErr: "inventory"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			objs, err := render(t, tc.values)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			decoded := decodeStrict(t, objs)
			var args []string
			for _, ds := range find[*appsv1.DaemonSet](decoded) {
				if ds.Name == "certready-agent" {
					args = ds.Spec.Template.Spec.Containers[0].Args
				}
			}
			var got []string
			for _, a := range args {
				if strings.HasPrefix(a, "--inventory") {
					got = append(got, a)
				}
			}
			if (tc.wantArg == "" && len(got) > 0) || (tc.wantArg != "" && !slices.Equal(got, []string{tc.wantArg})) {
				t.Errorf("agent inventory args %q, want %q", got, tc.wantArg)
			}
			var rules []string
			for _, r := range find[*rbacv1.Role](decoded) {
				for _, rule := range r.Rules {
					if slices.Contains(rule.Resources, "configmaps") && r.Name == "certready-agent" {
						if !slices.Equal(rule.Verbs, []string{"get", "list", "watch"}) {
							t.Errorf("agent configmaps verbs %v", rule.Verbs)
						}
						rules = append(rules, strings.Join(rule.ResourceNames, ","))
					}
				}
			}
			if (tc.wantRule == "" && len(rules) > 0) || (tc.wantRule != "" && !slices.Equal(rules, []string{tc.wantRule})) {
				t.Errorf("agent Role's ConfigMap rules %q, want %q", rules, tc.wantRule)
			}
		})
	}
}
