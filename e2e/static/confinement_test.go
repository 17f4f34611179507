package static

import (
	"reflect"
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

// matchCondition evaluates policy p's match condition over a plain map
// standing in for request (the API server types it; the logic is the
// same). As in the API server, a match condition sees no variables.
func matchCondition(t *testing.T, p *admissionv1.ValidatingAdmissionPolicy, request map[string]any) bool {
	t.Helper()
	env, err := cel.NewEnv(cel.Variable("request", cel.DynType), cel.Variable("object", cel.DynType), cel.Variable("oldObject", cel.DynType))
	if err != nil {
		t.Fatal(err)
	}
	eval := func(expr string) any {
		ast, iss := env.Compile(expr)
		if iss.Err() != nil {
			t.Fatalf("policy %s: %s: %v", p.Name, expr, iss.Err())
		}
		prg, err := env.Program(ast)
		if err != nil {
			t.Fatal(err)
		}
		out, _, err := prg.Eval(map[string]any{"request": request, "object": map[string]any{}, "oldObject": map[string]any{}})
		if err != nil {
			t.Fatalf("policy %s: %s: %v", p.Name, expr, err)
		}
		return out.Value()
	}
	if len(p.Spec.MatchConditions) != 1 {
		t.Fatalf("policy %s: %d match conditions", p.Name, len(p.Spec.MatchConditions))
	}
	expr := p.Spec.MatchConditions[0].Expression
	b, ok := eval(expr).(bool)
	if !ok {
		t.Fatalf("policy %s: %s: not a bool", p.Name, expr)
	}
	return b
}

func user(name string) map[string]any {
	return map[string]any{"userInfo": map[string]any{"username": name}}
}

// TestPoliciesFollowTheAgentThroughRenames builds the shipped overlays, and
// overlays on top of them that rename the namespace and prefix every name,
// and proves that each admission policy names, in itself, exactly the
// username of the agent's or the approver's ServiceAccount as built, and
// the condition type the agent's ServiceAccount carries: no parameter that
// could go missing.
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
			ds, deps := find[*appsv1.DaemonSet](objs), find[*appsv1.Deployment](objs)
			if len(ds) != 1 || len(deps) != 1 {
				t.Fatalf("%d DaemonSets, %d Deployments", len(ds), len(deps))
			}
			agentUser := "system:serviceaccount:" + ds[0].Namespace + ":" + ds[0].Spec.Template.Spec.ServiceAccountName
			approverUser := "system:serviceaccount:" + deps[0].Namespace + ":" + deps[0].Spec.Template.Spec.ServiceAccountName
			condType := ""
			for _, sa := range find[*corev1.ServiceAccount](objs) {
				if sa.Name == ds[0].Spec.Template.Spec.ServiceAccountName {
					condType = sa.Annotations["certready.io/condition-type"]
				}
			}
			if condType == "" {
				t.Fatal("the agent's ServiceAccount carries no certready.io/condition-type")
			}
			policies := map[string]*admissionv1.ValidatingAdmissionPolicy{}
			for _, p := range find[*admissionv1.ValidatingAdmissionPolicy](objs) {
				policies[strings.TrimSuffix(strings.TrimPrefix(p.Name, "acme-"), "-v2")] = p
			}
			// Who each policy applies to: true for those it must match.
			want := map[string]map[string]bool{
				"certready-agent-node-confinement": {agentUser: true},
				"certready-agent-events":           {agentUser: true},
				"certready-approver-node-writes":   {approverUser: true},
				"certready-condition-writers": {approverUser: true, "system:serviceaccount:certready-system:certready-agent-x": true,
					"system:node:worker-1": true, "kubernetes-admin": true},
			}
			if len(policies) != len(want) || len(find[*admissionv1.ValidatingAdmissionPolicyBinding](objs)) != len(want) {
				t.Fatalf("policies %v, %d bindings; want %d of each", policies, len(find[*admissionv1.ValidatingAdmissionPolicyBinding](objs)), len(want))
			}
			for _, b := range find[*admissionv1.ValidatingAdmissionPolicyBinding](objs) {
				if b.Spec.ParamRef != nil || b.Spec.PolicyName != b.Name {
					t.Errorf("binding %s: paramRef %+v, policy %s; want no parameter, its own policy", b.Name, b.Spec.ParamRef, b.Spec.PolicyName)
				}
			}
			for name, applies := range want {
				p := policies[name]
				if p == nil {
					t.Fatalf("no policy %s", name)
				}
				if p.Spec.ParamKind != nil {
					t.Fatalf("policy %s: paramKind %+v", p.Name, p.Spec.ParamKind)
				}
				for _, u := range []string{agentUser, approverUser, "system:serviceaccount:certready-system:certready-agent-x", "system:node:worker-1", "kubernetes-admin"} {
					if got := matchCondition(t, p, user(u)); got != applies[u] {
						t.Errorf("policy %s applies to %s: %v, want %v", p.Name, u, got, applies[u])
					}
				}
				if strings.Contains(mustJSON(p), "$(") {
					t.Errorf("policy %s keeps an unresolved kustomize var", p.Name)
				}
			}
			for _, name := range []string{"certready-agent-node-confinement", "certready-condition-writers"} {
				if !strings.Contains(mustJSON(policies[name].Spec.Variables), "'"+condType+"'") {
					t.Errorf("policy %s does not guard the condition %s the agent's ServiceAccount names", name, condType)
				}
			}
			// The approver's FlowSchema follows its ServiceAccount too.
			flows := find[*flowcontrolv1.FlowSchema](objs)
			if len(flows) != 1 {
				t.Fatalf("%d FlowSchemas; want the approver's one", len(flows))
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

// TestPoliciesPinEveryNodeField: every field of NodeStatus but the
// conditions is pinned by the agent's confinement (it writes one condition
// through nodes/status, which persists the whole status), and every field
// of NodeSpec but the taints by the approver's (it writes taints through
// nodes). The fields come from k8s.io/api itself: a field a new API
// version adds fails this test until a policy pins it.
func TestPoliciesPinEveryNodeField(t *testing.T) {
	objs := decodeAll(t, build(t, "base"))
	policies := map[string]string{}
	for _, p := range find[*admissionv1.ValidatingAdmissionPolicy](objs) {
		policies[p.Name] = mustJSON(p.Spec.Validations)
	}
	for _, tc := range []struct {
		policy, prefix string
		typ            reflect.Type
		free           string // the one field the writer may change
	}{
		{"certready-agent-node-confinement", "status.", reflect.TypeFor[corev1.NodeStatus](), "conditions"},
		{"certready-approver-node-writes", "spec.", reflect.TypeFor[corev1.NodeSpec](), "taints"},
	} {
		text, ok := policies[tc.policy]
		if !ok {
			t.Fatalf("no policy %s", tc.policy)
		}
		for i := range tc.typ.NumField() {
			field, _, _ := strings.Cut(tc.typ.Field(i).Tag.Get("json"), ",")
			if field == tc.free {
				continue
			}
			// Either the field itself or the whole object (object.spec == oldObject.spec).
			if !strings.Contains(text, "object."+tc.prefix+field) && !strings.Contains(text, "object."+strings.TrimSuffix(tc.prefix, ".")+" == oldObject."+strings.TrimSuffix(tc.prefix, ".")) {
				t.Errorf("policy %s does not pin %s%s: a stolen token could change it", tc.policy, tc.prefix, field)
			}
		}
	}
}
