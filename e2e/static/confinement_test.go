package static

import (
	"strings"
	"testing"

	"github.com/google/cel-go/cel"
	admissionv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	flowcontrolv1 "k8s.io/api/flowcontrol/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/certready/certready/internal/names"
)

// buildOverlay builds a throw-away overlay of the given kustomization text
// inside manifests/overlays (kustomize takes only relative paths).
func buildOverlay(t *testing.T, kustomization string) []runtime.Object {
	t.Helper()
	return decodeStrict(t, kustomizeMaps(t, kustomization, nil))
}

// evalBool evaluates a policy's CEL expression over plain maps standing in
// for request and params (the API server types them; the logic is the same).
func evalBool(t *testing.T, expr string, vars map[string]any) bool {
	t.Helper()
	env, err := cel.NewEnv(cel.Variable("request", cel.DynType), cel.Variable("params", cel.DynType))
	if err != nil {
		t.Fatal(err)
	}
	ast, iss := env.Compile(expr)
	if iss.Err() != nil {
		t.Fatalf("%s: %v", expr, iss.Err())
	}
	prg, err := env.Program(ast)
	if err != nil {
		t.Fatal(err)
	}
	out, _, err := prg.Eval(vars)
	if err != nil {
		t.Fatalf("%s: %v", expr, err)
	}
	b, ok := out.Value().(bool)
	if !ok {
		t.Fatalf("%s: not a bool: %v", expr, out)
	}
	return b
}

// TestPoliciesFollowTheAgentThroughRenames builds the shipped overlays, and
// overlays on top of them that rename the namespace and prefix every name,
// and proves that each admission policy's binding still points at the
// agent's ServiceAccount and that the policies match exactly its username.
func TestPoliciesFollowTheAgentThroughRenames(t *testing.T) {
	for _, tc := range []struct {
		name, kustomization string
	}{
		{"base", "resources:\n- ../../base\n"},
		{"standalone", "resources:\n- ../../overlays/standalone\n"},
		{"renamed namespace and prefix over standalone", "namespace: platform-certs\nnamePrefix: acme-\nresources:\n- ../../overlays/standalone\n"},
		{"renamed namespace over nrc", "namespace: kube-certs\nresources:\n- ../../overlays/nrc\n"},
		{"suffix over base", "nameSuffix: -v2\nresources:\n- ../../base\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			objs := buildOverlay(t, tc.kustomization)
			ds := find[*appsv1.DaemonSet](objs)
			if len(ds) != 1 {
				t.Fatalf("%d DaemonSets", len(ds))
			}
			agentNS, agentSA := ds[0].Namespace, ds[0].Spec.Template.Spec.ServiceAccountName
			agentUser := "system:serviceaccount:" + agentNS + ":" + agentSA
			var sa *corev1.ServiceAccount
			for _, s := range find[*corev1.ServiceAccount](objs) {
				if s.Name == agentSA && s.Namespace == agentNS {
					sa = s
				}
			}
			if sa == nil {
				t.Fatalf("the agent's ServiceAccount %s/%s is not in the build", agentNS, agentSA)
			}
			params := map[string]any{"metadata": map[string]any{"namespace": sa.Namespace, "name": sa.Name, "annotations": sa.Annotations}}
			policies := map[string]*admissionv1.ValidatingAdmissionPolicy{}
			for _, p := range find[*admissionv1.ValidatingAdmissionPolicy](objs) {
				policies[p.Name] = p
			}
			bindings := find[*admissionv1.ValidatingAdmissionPolicyBinding](objs)
			if len(bindings) != 2 || len(policies) != 2 {
				t.Fatalf("%d bindings, %d policies; want the confinement and the condition-writers pair", len(bindings), len(policies))
			}
			for _, b := range bindings {
				p := policies[b.Spec.PolicyName]
				if p == nil {
					t.Fatalf("binding %s names policy %q, not in the build", b.Name, b.Spec.PolicyName)
				}
				ref := b.Spec.ParamRef
				if ref == nil || ref.Name != sa.Name || ref.Namespace != sa.Namespace {
					t.Errorf("binding %s: paramRef %+v, want the agent's ServiceAccount %s/%s", b.Name, ref, sa.Namespace, sa.Name)
				}
				if p.Spec.ParamKind == nil || p.Spec.ParamKind.Kind != "ServiceAccount" {
					t.Errorf("policy %s: paramKind %+v, want ServiceAccount", p.Name, p.Spec.ParamKind)
				}
				if len(p.Spec.MatchConditions) != 1 {
					t.Fatalf("policy %s: %d match conditions", p.Name, len(p.Spec.MatchConditions))
				}
				expr := p.Spec.MatchConditions[0].Expression
				agentMatches := evalBool(t, expr, map[string]any{"request": map[string]any{"userInfo": map[string]any{"username": agentUser}}, "params": params})
				otherMatches := evalBool(t, expr, map[string]any{"request": map[string]any{"userInfo": map[string]any{"username": "system:serviceaccount:certready-system:certready-agent-x"}}, "params": params})
				kubeletMatches := evalBool(t, expr, map[string]any{"request": map[string]any{"userInfo": map[string]any{"username": "system:node:worker-1"}}, "params": params})
				confines := strings.HasPrefix(p.Spec.MatchConditions[0].Name, "is-certready-agent")
				if confines && (!agentMatches || otherMatches || kubeletMatches) {
					t.Errorf("policy %s applies to agent=%v other=%v kubelet=%v; want the agent %s only", p.Name, agentMatches, otherMatches, kubeletMatches, agentUser)
				}
				if !confines && (agentMatches || !otherMatches || !kubeletMatches) {
					t.Errorf("policy %s applies to agent=%v other=%v kubelet=%v; want everyone but the agent %s", p.Name, agentMatches, otherMatches, kubeletMatches, agentUser)
				}
			}
			// The approver's FlowSchema follows its ServiceAccount too.
			deps := find[*appsv1.Deployment](objs)
			flows := find[*flowcontrolv1.FlowSchema](objs)
			if len(deps) != 1 || len(flows) != 1 {
				t.Fatalf("%d Deployments, %d FlowSchemas; want the approver's one each", len(deps), len(flows))
			}
			wantSA := flowcontrolv1.ServiceAccountSubject{Namespace: deps[0].Namespace, Name: deps[0].Spec.Template.Spec.ServiceAccountName}
			subjects := flows[0].Spec.Rules[0].Subjects
			if len(subjects) != 1 || subjects[0].ServiceAccount == nil || *subjects[0].ServiceAccount != wantSA {
				t.Errorf("FlowSchema %s subjects %+v, want the approver's ServiceAccount %+v", flows[0].Name, subjects, wantSA)
			}
		})
	}
}

// TestPoliciesGuardTheConditionTheAgentWrites: the condition type the
// policies read from the ServiceAccount is the agent's --condition-type.
func TestPoliciesGuardTheConditionTheAgentWrites(t *testing.T) {
	objs := decodeAll(t, build(t, "base"))
	agent := find[*appsv1.DaemonSet](objs)[0].Spec.Template.Spec.Containers[0]
	want := names.ConditionType // the agent's default
	for _, a := range agent.Args {
		if v, ok := strings.CutPrefix(a, "--condition-type="); ok {
			want = v
		}
	}
	for _, sa := range find[*corev1.ServiceAccount](objs) {
		if sa.Name != "certready-agent" {
			continue
		}
		if got := sa.Annotations["certready.io/condition-type"]; got != want {
			t.Errorf("ServiceAccount annotation certready.io/condition-type=%q, the agent publishes %q", got, want)
		}
		return
	}
	t.Fatal("no certready-agent ServiceAccount")
}
