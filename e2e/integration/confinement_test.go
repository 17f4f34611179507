package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	authnv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/certready/certready/e2e/localcluster"
	"github.com/certready/certready/internal/names"
	"github.com/certready/certready/internal/nodeapi"
	"github.com/certready/certready/reporter/servingcert/condition"
)

// shippedPolicy creates the admission policy name and its binding as
// manifests/base builds them (kustomize vars resolved), and deletes both
// when the test ends: the other tests here write conditions and taints as
// other users.
func shippedPolicy(t *testing.T, ctx context.Context, name string) {
	t.Helper()
	out, err := exec.CommandContext(ctx, filepath.Join(os.Getenv("CERTREADY_K8S_BIN"), "kubectl"), "kustomize", filepath.Join("..", "..", "manifests", "base")).Output()
	if err != nil {
		t.Fatalf("kubectl kustomize manifests/base: %v", err)
	}
	var policy *admissionv1.ValidatingAdmissionPolicy
	var binding *admissionv1.ValidatingAdmissionPolicyBinding
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(out), 4096)
	for {
		var raw json.RawMessage
		if err := dec.Decode(&raw); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		var meta metav1.TypeMeta
		_ = json.Unmarshal(raw, &meta)
		switch meta.Kind {
		case "ValidatingAdmissionPolicy":
			var p admissionv1.ValidatingAdmissionPolicy
			if err := json.Unmarshal(raw, &p); err != nil {
				t.Fatal(err)
			}
			if p.Name == name {
				policy = &p
			}
		case "ValidatingAdmissionPolicyBinding":
			var b admissionv1.ValidatingAdmissionPolicyBinding
			if err := json.Unmarshal(raw, &b); err != nil {
				t.Fatal(err)
			}
			if b.Name == name {
				binding = &b
			}
		}
	}
	if policy == nil || binding == nil {
		t.Fatalf("manifests/base builds no policy and binding %s", name)
	}
	vap := api.Admin.AdmissionregistrationV1()
	if _, err := vap.ValidatingAdmissionPolicies().Create(ctx, policy, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = vap.ValidatingAdmissionPolicies().Delete(context.Background(), name, metav1.DeleteOptions{})
	})
	if _, err := vap.ValidatingAdmissionPolicyBindings().Create(ctx, binding, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = vap.ValidatingAdmissionPolicyBindings().Delete(context.Background(), name, metav1.DeleteOptions{})
	})
}

// confinementCase is one write under a confined identity; write with
// dryRun asks the API server to admit it without persisting it.
type confinementCase struct {
	name    string
	write   func(dryRun bool) error
	allowed bool
}

func dryRunOf(dryRun bool) []string {
	if dryRun {
		return []string{metav1.DryRunAll}
	}
	return nil
}

// runConfinement makes each write and wants it allowed, or refused by
// policy. A new policy reaches the API server's admission chain a moment
// after it is created: the first case, a refused one, is first written as
// a dry run (admitted, never persisted) until the policy refuses it. An
// allowed write also proves that every expression evaluates
// (failurePolicy: Fail would refuse it on an error).
func runConfinement(t *testing.T, ctx context.Context, policy string, cases []confinementCase) {
	t.Helper()
	refused := func(err error) bool {
		return err != nil && apierrors.IsForbidden(err) && strings.Contains(err.Error(), policy)
	}
	if cases[0].allowed {
		t.Fatal("the first case must be one the policy refuses")
	}
	if err := localcluster.Poll(ctx, 30*time.Second, policy+" in force", func() (bool, error) {
		return refused(cases[0].write(true)), nil
	}); err != nil {
		t.Fatal(err)
	}
	for _, tc := range cases {
		err := tc.write(false)
		switch {
		case tc.allowed && err != nil:
			t.Errorf("%s: refused: %v", tc.name, err)
		case !tc.allowed && !refused(err):
			t.Errorf("%s: %v, want Forbidden by %s", tc.name, err, policy)
		case !tc.allowed:
			t.Logf("%s: refused: %v", tc.name, err)
		}
	}
}

// The approver's identity may write its two taints exactly as it writes
// them and nothing else: not the soft taint's key with another effect
// (NoExecute would evict every pod of the node), nor a taint of either key
// that an administrator set with another value or effect; and it lifts the
// readiness taint only from a node whose condition is False.
func TestApproverNodeWritesOnTheRealAPIServer(t *testing.T) {
	ctx := ctxT(t, 2*time.Minute)
	shippedPolicy(t, ctx, "certready-approver-node-writes")
	startup := corev1.Taint{Key: names.TaintKey, Value: names.TaintValue, Effect: corev1.TaintEffectNoSchedule}
	adminStartupKey := corev1.Taint{Key: names.TaintKey, Value: "admin", Effect: corev1.TaintEffectNoExecute}
	soft := corev1.Taint{Key: "readiness.k8s.io/KubeletServingCertUnproven", Value: "pending", Effect: corev1.TaintEffectPreferNoSchedule}
	adminSoftKey := corev1.Taint{Key: soft.Key, Value: "admin", Effect: corev1.TaintEffectNoSchedule}
	node, err := api.Admin.CoreV1().Nodes().Create(ctx, &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: "conf-approver"},
		Spec:       corev1.NodeSpec{Taints: []corev1.Taint{startup, adminStartupKey, adminSoftKey}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = api.Admin.CoreV1().Nodes().Delete(context.Background(), node.Name, metav1.DeleteOptions{}) })
	cfg, err := api.ClientConfig("system:serviceaccount:certready-system:certready-approver", "system:masters")
	if err != nil {
		t.Fatal(err)
	}
	as := kubernetes.NewForConfigOrDie(cfg)
	// Each write replaces the node's taints with the current ones, changed
	// by edit: what the approver's merge patch does.
	taints := func(edit func([]corev1.Taint) []corev1.Taint) func(bool) error {
		return func(dryRun bool) error {
			n, err := api.Admin.CoreV1().Nodes().Get(ctx, node.Name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			body, _ := json.Marshal(map[string]any{"spec": map[string]any{"taints": edit(n.Spec.Taints)}})
			_, err = as.CoreV1().Nodes().Patch(ctx, node.Name, types.MergePatchType, body, metav1.PatchOptions{DryRun: dryRunOf(dryRun)})
			return err
		}
	}
	add := func(t corev1.Taint) func([]corev1.Taint) []corev1.Taint {
		return func(ts []corev1.Taint) []corev1.Taint { return append(ts, t) }
	}
	remove := func(t corev1.Taint) func([]corev1.Taint) []corev1.Taint {
		return func(ts []corev1.Taint) []corev1.Taint {
			return slices.DeleteFunc(slices.Clone(ts), func(o corev1.Taint) bool {
				return o.Key == t.Key && o.Value == t.Value && o.Effect == t.Effect
			})
		}
	}
	withSoft := func(value string, effect corev1.TaintEffect) corev1.Taint {
		return corev1.Taint{Key: soft.Key, Value: value, Effect: effect}
	}
	// The agent's verdict, as the administrator writes it here (the
	// condition-writers policy is not in force in this test).
	condition := func(status corev1.ConditionStatus) func(bool) error {
		return func(bool) error {
			n, err := api.Admin.CoreV1().Nodes().Get(ctx, node.Name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			n.Status.Conditions = []corev1.NodeCondition{{Type: names.ConditionType, Status: status, Reason: "Integration",
				LastHeartbeatTime: metav1.Now(), LastTransitionTime: metav1.Now()}}
			_, err = api.Admin.CoreV1().Nodes().UpdateStatus(ctx, n, metav1.UpdateOptions{})
			return err
		}
	}
	runConfinement(t, ctx, "certready-approver-node-writes", []confinementCase{
		{"the soft taint's key with effect NoExecute", taints(add(withSoft("pending", corev1.TaintEffectNoExecute))), false},
		{"the soft taint's key with another value", taints(add(withSoft("x", corev1.TaintEffectPreferNoSchedule))), false},
		{"an administrator's taint under the soft key removed", taints(remove(adminSoftKey)), false},
		{"an administrator's taint under the startup key removed", taints(remove(adminStartupKey)), false},
		{"another taint added", taints(add(corev1.Taint{Key: "example.com/x", Effect: corev1.TaintEffectNoExecute})), false},
		{"the soft taint added as the approver writes it", taints(add(soft)), true},
		{"the soft taint removed", taints(remove(soft)), true},
		{"the readiness taint removed from a node with no verdict", taints(remove(startup)), false},
		{"(the agent reports True)", condition(corev1.ConditionTrue), true},
		{"the readiness taint removed from a node not ready", taints(remove(startup)), false},
		{"(the agent reports False)", condition(corev1.ConditionFalse), true},
		{"the readiness taint removed from a ready node", taints(remove(startup)), true},
		{"the readiness taint added", taints(add(startup)), false},
	})
	got, err := api.Admin.CoreV1().Nodes().Get(ctx, node.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// The API server's NodeTaint admission adds node.kubernetes.io/not-ready
	// on create; only the two keys are the approver's business.
	ours := slices.DeleteFunc(got.Spec.Taints, func(t corev1.Taint) bool { return t.Key != startup.Key && t.Key != soft.Key })
	if want := []corev1.Taint{adminStartupKey, adminSoftKey}; !slices.EqualFunc(ours, want, func(a, b corev1.Taint) bool { return a.MatchTaint(&b) && a.Value == b.Value }) {
		t.Errorf("taints of the two keys after the approver's identity: %v, want the administrator's %v", ours, want)
	}
}

// The agent's identity (a token bound to its pod on a node) may change its
// own node's condition through nodes/status, and no other part of the
// status: that subresource persists the whole status, so every field the
// kubelet owns (images, volumes, phase, runtime handlers, features) is
// pinned. (status.config, which the API server no longer keeps, and
// declaredFeatures, behind a feature gate, are pinned as text:
// TestPoliciesPinEveryNodeField in e2e/static.)
func TestAgentStatusWritesOnTheRealAPIServer(t *testing.T) {
	ctx := ctxT(t, 2*time.Minute)
	shippedPolicy(t, ctx, "certready-agent-node-confinement")
	const ns, sa = "certready-system", "certready-agent"
	node, err := api.Admin.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "conf-agent"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = api.Admin.CoreV1().Nodes().Delete(context.Background(), node.Name, metav1.DeleteOptions{}) })
	no := false
	node.Status = corev1.NodeStatus{
		Phase:           corev1.NodeRunning,
		Images:          []corev1.ContainerImage{{Names: []string{"registry.example/a:1"}, SizeBytes: 1}},
		VolumesInUse:    []corev1.UniqueVolumeName{"kubernetes.io/csi/a"},
		VolumesAttached: []corev1.AttachedVolume{{Name: "kubernetes.io/csi/a", DevicePath: "/dev/a"}},
		RuntimeHandlers: []corev1.NodeRuntimeHandler{{Name: "runc"}},
		Features:        &corev1.NodeFeatures{SupplementalGroupsPolicy: &no},
	}
	if _, err := api.Admin.CoreV1().Nodes().UpdateStatus(ctx, node, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	agentConfig := agentOnNode(t, ctx, ns, sa, node.Name)
	as := kubernetes.NewForConfigOrDie(agentConfig)
	status := func(s map[string]any) func(bool) error {
		return func(dryRun bool) error {
			body, _ := json.Marshal(map[string]any{"status": s})
			_, err := as.CoreV1().Nodes().Patch(ctx, node.Name, types.StrategicMergePatchType, body, metav1.PatchOptions{DryRun: dryRunOf(dryRun)}, "status")
			return err
		}
	}
	meta := func(annotations map[string]any) func(bool) error {
		return func(dryRun bool) error {
			body, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": annotations}})
			_, err := as.CoreV1().Nodes().Patch(ctx, node.Name, types.StrategicMergePatchType, body, metav1.PatchOptions{DryRun: dryRunOf(dryRun)}, "status")
			return err
		}
	}
	yes := true
	runConfinement(t, ctx, "certready-agent-node-confinement", []confinementCase{
		{"another annotation", meta(map[string]any{"example.com/x": "y"}), false},
		{"facts over 1024 bytes", meta(map[string]any{names.FactsAnnotation: strings.Repeat("x", 1025)}), false},
		{"images", status(map[string]any{"images": []corev1.ContainerImage{{Names: []string{"registry.example/evil:1"}, SizeBytes: 1}}}), false},
		{"volumesInUse", status(map[string]any{"volumesInUse": []string{}}), false},
		{"volumesAttached", status(map[string]any{"volumesAttached": []corev1.AttachedVolume{}}), false},
		{"phase", status(map[string]any{"phase": corev1.NodeTerminated}), false},
		{"runtimeHandlers", status(map[string]any{"runtimeHandlers": []corev1.NodeRuntimeHandler{{Name: "evil"}}}), false},
		{"features", status(map[string]any{"features": corev1.NodeFeatures{SupplementalGroupsPolicy: &yes}}), false},
		{"its own condition", status(map[string]any{"conditions": []corev1.NodeCondition{{
			Type: names.ConditionType, Status: corev1.ConditionTrue, Reason: "CSRPending", Message: "integration",
			LastHeartbeatTime: metav1.Now(), LastTransitionTime: metav1.Now(),
		}}}), true},
	})

	// The agent's own write: the condition and its facts in one request
	// to nodes/status, which persists both; a not-ready one removes them.
	facts := `{"notAfter":"2027-12-01T12:00:00Z","sha256":"` + strings.Repeat("ab", 32) + `"}`
	write := func(status corev1.ConditionStatus, value *string) *corev1.Node {
		t.Helper()
		client, err := nodeapi.New(agentConfig)
		if err != nil {
			t.Fatal(err)
		}
		err = condition.NewClient(client).PatchCondition(ctx, node.Name, corev1.NodeCondition{
			Type: names.ConditionType, Status: status, Reason: "Integration", Message: "integration",
			LastHeartbeatTime: metav1.Now(), LastTransitionTime: metav1.Now(),
		}, map[string]*string{names.FactsAnnotation: value})
		if err != nil {
			t.Fatalf("the agent's write of %s with its facts: %v", status, err)
		}
		n, err := api.Admin.CoreV1().Nodes().Get(ctx, node.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	n := write(corev1.ConditionFalse, &facts)
	if c := localcluster.NodeCondition(n, names.ConditionType); c == nil || c.Status != corev1.ConditionFalse || n.Annotations[names.FactsAnnotation] != facts {
		t.Errorf("after one status patch: condition %+v, annotation %q; want False and the facts", c, n.Annotations[names.FactsAnnotation])
	}
	n = write(corev1.ConditionTrue, nil)
	if c := localcluster.NodeCondition(n, names.ConditionType); c == nil || c.Status != corev1.ConditionTrue {
		t.Errorf("condition %+v, want True", c)
	}
	if v, ok := n.Annotations[names.FactsAnnotation]; ok {
		t.Errorf("the facts %q stayed beside a not-ready condition", v)
	}
}

// Nobody but the agent writes the facts of its condition: not an
// administrator's kubectl annotate, nor, by the same rule, the kubelet or
// any other holder of nodes patch. Other annotations stay theirs.
func TestOnlyTheAgentWritesTheFacts(t *testing.T) {
	ctx := ctxT(t, 2*time.Minute)
	shippedPolicy(t, ctx, "certready-condition-writers")
	const ns, sa = "certready-system", "certready-agent"
	node, err := api.Admin.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "conf-facts"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = api.Admin.CoreV1().Nodes().Delete(context.Background(), node.Name, metav1.DeleteOptions{}) })
	annotate := func(cs kubernetes.Interface, subresource ...string) func(string, *string) func(bool) error {
		return func(key string, value *string) func(bool) error {
			return func(dryRun bool) error {
				body, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]*string{key: value}}})
				_, err := cs.CoreV1().Nodes().Patch(ctx, node.Name, types.StrategicMergePatchType, body, metav1.PatchOptions{DryRun: dryRunOf(dryRun)}, subresource...)
				return err
			}
		}
	}
	admin := annotate(api.Admin)
	agent := annotate(kubernetes.NewForConfigOrDie(agentOnNode(t, ctx, ns, sa, node.Name)), "status")
	// The node's own kubelet may patch its Node (NodeRestriction allows
	// its annotations), the forger with the most reason to.
	_, kubeletClient := nodeIdentity(t, node.Name)
	kubelet, kubeletStatus := annotate(kubeletClient), annotate(kubeletClient, "status")
	facts, forged := `{"notAfter":"2027-12-01T12:00:00Z","sha256":"`+strings.Repeat("ab", 32)+`"}`, `{"notAfter":"2099-01-01T00:00:00Z","sha256":"`+strings.Repeat("cd", 32)+`"}`
	runConfinement(t, ctx, "certready-condition-writers", []confinementCase{
		{"an administrator sets the facts", admin(names.FactsAnnotation, &forged), false},
		{"an administrator annotates otherwise", admin("example.com/owner", &forged), true},
		{"the node's kubelet sets the facts", kubelet(names.FactsAnnotation, &forged), false},
		{"the agent sets its facts", agent(names.FactsAnnotation, &facts), true},
		{"the node's kubelet changes them", kubelet(names.FactsAnnotation, &forged), false},
		{"the node's kubelet changes them through the status", kubeletStatus(names.FactsAnnotation, &forged), false},
		{"the node's kubelet annotates otherwise", kubelet("example.com/owner", &forged), true},
		{"an administrator changes them", admin(names.FactsAnnotation, &forged), false},
		{"an administrator removes them", admin(names.FactsAnnotation, nil), false},
		{"the agent removes them", agent(names.FactsAnnotation, nil), true},
	})
}

// agentOnNode is a client as the agent's pod on node: a token from the
// TokenRequest API bound to a pod of namespace/sa scheduled there, which
// carries the node's name (authentication.kubernetes.io/node-name) as the
// kubelet's mounted token does. RBAC lets it do anything: what is tested
// is the admission policy.
func agentOnNode(t *testing.T, ctx context.Context, ns, sa, node string) *rest.Config {
	t.Helper()
	serviceAccountToken(t, ctx, ns, sa)
	pod, err := api.Admin.CoreV1().Pods(ns).Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "agent-", Namespace: ns},
		Spec: corev1.PodSpec{NodeName: node, ServiceAccountName: sa, AutomountServiceAccountToken: new(bool),
			Containers: []corev1.Container{{Name: "agent", Image: "certready"}}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = api.Admin.CoreV1().Pods(ns).Delete(context.Background(), pod.Name, metav1.DeleteOptions{}) })
	binding := "conf-" + sa + "-" + node
	if _, err := api.Admin.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: binding},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "cluster-admin"},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: sa, Namespace: ns}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = api.Admin.RbacV1().ClusterRoleBindings().Delete(context.Background(), binding, metav1.DeleteOptions{})
	})
	tr, err := api.Admin.CoreV1().ServiceAccounts(ns).CreateToken(ctx, sa, &authnv1.TokenRequest{Spec: authnv1.TokenRequestSpec{
		BoundObjectRef: &authnv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: pod.Name, UID: pod.UID},
	}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cfg := rest.AnonymousClientConfig(api.AdminConfig)
	cfg.BearerToken = tr.Status.Token
	return cfg
}
