// Package static checks the shipped manifests without a cluster: kustomize
// builds every overlay, every object decodes strictly into its API type, the
// pieces agree with each other, the NodeReadinessRule validates against the
// CRD's schema, and every alert is unit-tested with promtool.
package static

import (
	"bytes"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apiextinternal "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions"
	apiextv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apiextensions-apiserver/pkg/apiserver/validation"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer/json"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/api/resmap"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	"sigs.k8s.io/yaml"
)

const root = "../../manifests"

var overlays = []string{"base", "overlays/nrc", "overlays/standalone", "overlays/capi-management"}

func build(t *testing.T, dir string) resmap.ResMap {
	t.Helper()
	k := krusty.MakeKustomizer(krusty.MakeDefaultOptions())
	m, err := k.Run(filesys.MakeFsOnDisk(), filepath.Join(root, dir))
	if err != nil {
		t.Fatalf("kustomize build %s: %v", dir, err)
	}
	return m
}

var strict = json.NewSerializerWithOptions(json.DefaultMetaFactory, scheme.Scheme, scheme.Scheme, json.SerializerOptions{Yaml: true, Strict: true})

// crdKinds are validated elsewhere (schema or promtool), not by the scheme.
var crdKinds = map[string]bool{"NodeReadinessRule": true, "ServiceMonitor": true, "PrometheusRule": true}

func decodeAll(t *testing.T, m resmap.ResMap) []runtime.Object {
	t.Helper()
	return decodeStrict(t, resMaps(t, m))
}

func TestOverlaysBuildAndDecodeStrictly(t *testing.T) {
	for _, o := range overlays {
		t.Run(o, func(t *testing.T) {
			objs := decodeAll(t, build(t, o))
			if len(objs) < 10 {
				t.Errorf("only %d objects", len(objs))
			}
		})
	}
}

func find[T runtime.Object](objs []runtime.Object) []T {
	var out []T
	for _, o := range objs {
		if v, ok := o.(T); ok {
			out = append(out, v)
		}
	}
	return out
}

func TestPiecesAgree(t *testing.T) {
	objs := decodeAll(t, build(t, "base"))
	ds := find[*appsv1.DaemonSet](objs)
	dep := find[*appsv1.Deployment](objs)
	if len(ds) != 1 || len(dep) != 1 {
		t.Fatalf("%d DaemonSets, %d Deployments", len(ds), len(dep))
	}
	agent, approver := ds[0], dep[0]
	images := map[string]bool{agent.Spec.Template.Spec.Containers[0].Image: true, approver.Spec.Template.Spec.Containers[0].Image: true}
	if len(images) != 1 || !images["certready:dev"] {
		t.Errorf("images %v, want one image certready:dev", images)
	}
	for _, o := range objs {
		m := o.(interface {
			GetNamespace() string
			GetName() string
			GetLabels() map[string]string
		})
		if ns := m.GetNamespace(); ns != "" && ns != "certready-system" {
			t.Errorf("%s in namespace %s", m.GetName(), ns)
		}
		if m.GetLabels()["app.kubernetes.io/part-of"] != "certready" {
			t.Errorf("%T %s lacks app.kubernetes.io/part-of", o, m.GetName())
		}
	}
	for _, w := range []struct {
		name     string
		selector map[string]string
		labels   map[string]string
		sa       string
	}{
		{"agent", agent.Spec.Selector.MatchLabels, agent.Spec.Template.Labels, agent.Spec.Template.Spec.ServiceAccountName},
		{"approver", approver.Spec.Selector.MatchLabels, approver.Spec.Template.Labels, approver.Spec.Template.Spec.ServiceAccountName},
	} {
		for k, v := range w.selector {
			if w.labels[k] != v {
				t.Errorf("%s: selector %s=%s does not match the pod labels", w.name, k, v)
			}
		}
		found := false
		for _, sa := range find[*corev1.ServiceAccount](objs) {
			found = found || sa.Name == w.sa
		}
		if !found {
			t.Errorf("%s: service account %q is not shipped", w.name, w.sa)
		}
	}
	for _, svc := range find[*corev1.Service](objs) {
		matches := func(pod map[string]string) bool {
			for k, v := range svc.Spec.Selector {
				if pod[k] != v {
					return false
				}
			}
			return true
		}
		if !matches(agent.Spec.Template.Labels) && !matches(approver.Spec.Template.Labels) {
			t.Errorf("Service %s selects no pod", svc.Name)
		}
	}
}

func TestAgentDaemonSet(t *testing.T) {
	ds := find[*appsv1.DaemonSet](decodeAll(t, build(t, "base")))[0]
	spec := ds.Spec.Template.Spec
	c := spec.Containers[0]
	var pki *corev1.Volume
	for i := range spec.Volumes {
		if spec.Volumes[i].HostPath != nil && spec.Volumes[i].HostPath.Path == "/var/lib/kubelet/pki" {
			pki = &spec.Volumes[i]
		}
	}
	if pki == nil {
		t.Fatal("no hostPath volume of /var/lib/kubelet/pki")
	}
	if pki.HostPath.Type == nil || *pki.HostPath.Type != corev1.HostPathDirectoryOrCreate {
		t.Errorf("pki hostPath type %v: a node whose kubelet has not written a serving certificate yet may lack the folder; the agent must still start", pki.HostPath.Type)
	}
	mounted := false
	for _, m := range c.VolumeMounts {
		if m.Name == pki.Name {
			mounted = true
			if m.MountPath != pki.HostPath.Path || !m.ReadOnly {
				t.Errorf("pki mounted at %s (readOnly=%v): the kubelet's symlink target is absolute, mount it read-only at its host path", m.MountPath, m.ReadOnly)
			}
		}
	}
	if !mounted {
		t.Error("pki volume not mounted")
	}
	if !spec.HostNetwork || spec.PriorityClassName != "system-node-critical" {
		t.Errorf("hostNetwork=%v priorityClass=%q", spec.HostNetwork, spec.PriorityClassName)
	}
	if len(spec.Tolerations) != 1 || spec.Tolerations[0].Operator != corev1.TolerationOpExists || spec.Tolerations[0].Key != "" {
		t.Errorf("tolerations %+v, want one that tolerates every taint", spec.Tolerations)
	}
	sc := c.SecurityContext
	if sc == nil || sc.RunAsUser == nil || *sc.RunAsUser != 0 || sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem ||
		sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation || sc.Capabilities == nil || !slices.Contains(sc.Capabilities.Drop, "ALL") {
		t.Errorf("security context %+v", sc)
	}
	if u := ds.Spec.UpdateStrategy.RollingUpdate; u == nil || u.MaxUnavailable == nil || u.MaxUnavailable.String() != "10%" {
		t.Errorf("rolling update %+v, want maxUnavailable 10%%", u)
	}
	var nodeName bool
	for _, e := range c.Env {
		nodeName = nodeName || (e.Name == "NODE_NAME" && e.ValueFrom != nil && e.ValueFrom.FieldRef.FieldPath == "spec.nodeName")
	}
	if !nodeName {
		t.Error("NODE_NAME is not from the downward API spec.nodeName")
	}
	if c.LivenessProbe == nil || c.ReadinessProbe == nil || c.Resources.Limits.Memory().IsZero() {
		t.Error("probes or limits missing")
	}
	// The node build: the image has it beside certready (Makefile,
	// Dockerfile), and it holds the agent's code only.
	if !slices.Equal(c.Command, []string{"/usr/local/bin/certready-node"}) || len(c.Args) == 0 || c.Args[0] != "agent" {
		t.Errorf("command %q args %q, want the node build's agent", c.Command, c.Args)
	}
	for _, f := range []string{"../../Makefile", "../../Dockerfile"} {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(data), "-tags nodeonly") || !strings.Contains(string(data), "certready-node") {
			t.Errorf("%s builds no certready-node (-tags nodeonly) into the image", f)
		}
	}
}

func TestStandaloneTurnsOnTheTaintFallback(t *testing.T) {
	dep := find[*appsv1.Deployment](decodeAll(t, build(t, "overlays/standalone")))[0]
	if !slices.Contains(dep.Spec.Template.Spec.Containers[0].Args, "--lift-readiness-taint=readiness.k8s.io/KubeletServingCertNotReady=pending:NoSchedule") {
		t.Errorf("args %v", dep.Spec.Template.Spec.Containers[0].Args)
	}
	base := find[*appsv1.Deployment](decodeAll(t, build(t, "base")))[0]
	for _, a := range base.Spec.Template.Spec.Containers[0].Args {
		if strings.HasPrefix(a, "--lift-readiness-taint") {
			t.Error("the base turns the taint fallback on")
		}
	}
}

func loadCRD(t *testing.T) *apiextv1.CustomResourceDefinition {
	t.Helper()
	// The node-readiness-controller's CRD as released (controller-gen
	// v0.19.0), kept in the repository so that this check runs in any clone.
	data, err := os.ReadFile("../../manifests/crds/nodereadinessrules.crd.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var crd apiextv1.CustomResourceDefinition
	if err := yaml.UnmarshalStrict(data, &crd); err != nil {
		t.Fatal(err)
	}
	return &crd
}

func TestNodeReadinessRuleMatchesTheCRD(t *testing.T) {
	crd := loadCRD(t)
	var rules []map[string]any
	for _, r := range build(t, "overlays/nrc").Resources() {
		if r.GetKind() == "NodeReadinessRule" {
			m, err := r.Map()
			if err != nil {
				t.Fatal(err)
			}
			rules = append(rules, m)
		}
	}
	if len(rules) != 2 {
		t.Fatalf("the nrc overlay ships %d NodeReadinessRules, want the startup rule and the placement rule", len(rules))
	}
	for _, rule := range rules {
		for _, e := range validateAgainst(t, crd, rule) {
			t.Errorf("%v: %s", rule["metadata"].(map[string]any)["name"], e)
		}
	}
	rule := rules[0]
	// The validator must be able to say no.
	bad := map[string]any{"apiVersion": rule["apiVersion"], "kind": rule["kind"], "metadata": rule["metadata"],
		"spec": map[string]any{"enforcementMode": "sometimes"}}
	if len(validateAgainst(t, crd, bad)) == 0 {
		t.Error("the schema accepted a rule without conditions or taint")
	}
}

func validateAgainst(t *testing.T, crd *apiextv1.CustomResourceDefinition, obj map[string]any) []string {
	t.Helper()
	gv := strings.SplitN(obj["apiVersion"].(string), "/", 2)
	if gv[0] != crd.Spec.Group || obj["kind"] != crd.Spec.Names.Kind {
		return []string{fmt.Sprintf("%v/%v is not %s/%s", obj["apiVersion"], obj["kind"], crd.Spec.Group, crd.Spec.Names.Kind)}
	}
	for _, v := range crd.Spec.Versions {
		if v.Name != gv[1] {
			continue
		}
		var internal apiextinternal.CustomResourceValidation
		if err := apiextv1.Convert_v1_CustomResourceValidation_To_apiextensions_CustomResourceValidation(v.Schema, &internal, nil); err != nil {
			t.Fatal(err)
		}
		sv, _, err := validation.NewSchemaValidator(internal.OpenAPIV3Schema)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, e := range validation.ValidateCustomResource(field.NewPath(""), obj, sv) {
			out = append(out, e.Error())
		}
		return out
	}
	return []string{fmt.Sprintf("the CRD serves no version %s", gv[1])}
}

func TestAlertsWithPromtool(t *testing.T) {
	if _, err := exec.LookPath("promtool"); err != nil {
		t.Fatal("promtool not found: install the Debian package prometheus (.ci/run does)")
	}
	data, err := os.ReadFile(filepath.Join(root, "components/monitoring/prometheusrule.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var pr struct {
		APIVersion string         `json:"apiVersion"`
		Kind       string         `json:"kind"`
		Metadata   map[string]any `json:"metadata"`
		Spec       struct {
			Groups []any `json:"groups"`
		} `json:"spec"`
	}
	if err := yaml.UnmarshalStrict(data, &pr); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	rules, err := yaml.Marshal(map[string]any{"groups": pr.Spec.Groups})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "rules.yaml"), rules, 0o644); err != nil {
		t.Fatal(err)
	}
	tests, err := os.ReadFile(filepath.Join(root, "components/monitoring/tests/alerts_test.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "alerts_test.yaml"), tests, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{{"check", "rules", "rules.yaml"}, {"test", "rules", "alerts_test.yaml"}} {
		cmd := exec.Command("promtool", args...)
		cmd.Dir = dir
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Run(); err != nil {
			t.Fatalf("promtool %s: %v\n%s", strings.Join(args, " "), err, out.String())
		}
	}
	// Every alert has at least one promtool test case.
	for _, g := range pr.Spec.Groups {
		for _, r := range g.(map[string]any)["rules"].([]any) {
			name := r.(map[string]any)["alert"].(string)
			if !strings.Contains(string(tests), "alertname: "+name+"\n") {
				t.Errorf("alert %s has no promtool test", name)
			}
		}
	}
}

func TestMonitoringComponentBuilds(t *testing.T) {
	m := buildMonitoring(t)
	var kinds []string
	for _, r := range m.Resources() {
		kinds = append(kinds, r.GetKind())
	}
	for _, want := range []string{"ServiceMonitor", "PrometheusRule"} {
		if !slices.Contains(kinds, want) {
			t.Errorf("no %s in %v", want, kinds)
		}
	}
}

// TestListenAddressesWorkOnEveryIPFamily expands the workloads' address
// arguments as the kubelet does ($(VAR) from the downward API) with an IPv4
// and an IPv6 address and listens on each, as the binaries do.
func TestListenAddressesWorkOnEveryIPFamily(t *testing.T) {
	objs := decodeAll(t, build(t, "base"))
	var containers []corev1.Container
	for _, ds := range find[*appsv1.DaemonSet](objs) {
		containers = append(containers, ds.Spec.Template.Spec.Containers...)
	}
	for _, d := range find[*appsv1.Deployment](objs) {
		containers = append(containers, d.Spec.Template.Spec.Containers...)
	}
	checked := 0
	for _, c := range containers {
		for _, a := range c.Args {
			flag, value, ok := strings.Cut(a, "=")
			if !ok || !strings.HasSuffix(flag, "-addr") {
				continue
			}
			for _, ip := range []string{"127.0.0.1", "::1"} {
				addr := value
				for _, e := range c.Env {
					if e.ValueFrom != nil && e.ValueFrom.FieldRef != nil && strings.HasSuffix(e.ValueFrom.FieldRef.FieldPath, "IP") {
						addr = strings.ReplaceAll(addr, "$("+e.Name+")", ip)
					}
				}
				if strings.Contains(addr, "$(") {
					t.Fatalf("%s %s: unexpanded variable in %q", c.Name, flag, addr)
				}
				// Same port, any free one: only the host part is at stake.
				host, _, err := net.SplitHostPort(addr)
				if err != nil {
					t.Errorf("%s %s with %s: %q is not host:port: %v", c.Name, flag, ip, addr, err)
					continue
				}
				ln, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
				if err != nil {
					t.Errorf("%s %s with %s: %v", c.Name, flag, ip, err)
					continue
				}
				ln.Close()
				checked++
			}
		}
	}
	if checked < 8 {
		t.Errorf("checked %d address arguments (2 families), want the agent's and approver's metrics and health addresses", checked)
	}
}

// An overlay sets the agent's expiry windows without patching the
// arguments: a configMapGenerator named certready-agent-settings (docs/operations.md:
// Expiry windows). kustomize points each key reference at the generated,
// hashed name, so a change rolls the agents. Only the three window keys
// reach the agent, each by name: a key such as KUBERNETES_SERVICE_HOST or
// CERTREADY_METRICS_SECURE in that ConfigMap reaches nothing (envFrom
// would have handed every key to the agent, its service variables
// included).
func TestAgentSettingsFromAnOverlaysConfigMap(t *testing.T) {
	objs := kustomizeMaps(t, "resources:\n- ../standalone\nconfigMapGenerator:\n- name: certready-agent-settings\n  namespace: certready-system\n  literals:\n  - CERTREADY_EXPIRY_WARNING=336h\n  - KUBERNETES_SERVICE_HOST=203.0.113.9\n  - CERTREADY_METRICS_SECURE=false\n", nil)
	decoded := decodeStrict(t, objs)
	ds := find[*appsv1.DaemonSet](decoded)[0]
	var cm *corev1.ConfigMap
	for _, c := range find[*corev1.ConfigMap](decoded) {
		if strings.HasPrefix(c.Name, "certready-agent-settings-") {
			cm = c
		}
	}
	if cm == nil {
		t.Fatal("no generated certready-agent-settings ConfigMap")
	}
	agent := ds.Spec.Template.Spec.Containers[0]
	if len(agent.EnvFrom) != 0 {
		t.Errorf("the agent's envFrom %+v: every key of a ConfigMap would reach it", agent.EnvFrom)
	}
	want := []string{"CERTREADY_EXPIRY_WARNING", "CERTREADY_EXPIRY_CRITICAL", "CERTREADY_CA_EXPIRY_WARNING"}
	var got []string
	for _, e := range agent.Env {
		if e.ValueFrom == nil || e.ValueFrom.ConfigMapKeyRef == nil {
			continue
		}
		ref := e.ValueFrom.ConfigMapKeyRef
		got = append(got, e.Name)
		if ref.Name != cm.Name || ref.Key != e.Name || ref.Optional == nil || !*ref.Optional || cm.Namespace != ds.Namespace {
			t.Errorf("env %s from %+v, want the optional key %s of the generated ConfigMap %s/%s", e.Name, ref, e.Name, cm.Namespace, cm.Name)
		}
	}
	if !slices.Equal(got, want) {
		t.Errorf("variables from the settings ConfigMap %v, want exactly %v", got, want)
	}
	if cm.Data["CERTREADY_EXPIRY_WARNING"] != "336h" {
		t.Errorf("ConfigMap data %v", cm.Data)
	}
}
