// Package fleet looks at every node of a cluster at once, read-only: which
// nodes a NodeReadinessRule would taint, and why, before the rule exists.
package fleet

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"sort"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"

	"github.com/certready/certready/reporter/servingcert/condition"

	"github.com/certready/certready/internal/names"
)

// OptOutLabel excludes a node from the shipped NodeReadinessRule (its
// nodeSelector requires the label to be absent). A rule cannot be edited
// after creation, so the exclusion has to be in it from the start.
const OptOutLabel = "certready.io/readiness-rule-opt-out"

// Rule is what the preflight needs of a NodeReadinessRule.
type Rule struct {
	Name          string
	Selector      labels.Selector
	ConditionType corev1.NodeConditionType
	// RequiredStatus lifts the taint (the rule's conditions[].requiredStatus).
	RequiredStatus corev1.ConditionStatus
	Taint          corev1.Taint
}

// ruleDoc is the part of readiness.node.x-k8s.io/v1alpha1 NodeReadinessRule
// read here; other fields are ignored.
type ruleDoc struct {
	Kind     string `json:"kind"`
	Metadata struct {
		Name string `json:"name"`
	} `json:"metadata"`
	Spec struct {
		Conditions []struct {
			Type           string `json:"type"`
			RequiredStatus string `json:"requiredStatus"`
		} `json:"conditions"`
		Taint        corev1.Taint          `json:"taint"`
		NodeSelector *metav1.LabelSelector `json:"nodeSelector"`
	} `json:"spec"`
}

// ShippedRule is the rule in manifests/overlays/nrc (a static test keeps
// the two equal): workers, minus the opted-out, lifted on False.
func ShippedRule() Rule {
	sel, _ := metav1.LabelSelectorAsSelector(&metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{
		{Key: "node-role.kubernetes.io/control-plane", Operator: metav1.LabelSelectorOpDoesNotExist},
		{Key: OptOutLabel, Operator: metav1.LabelSelectorOpDoesNotExist},
	}})
	return Rule{Name: "kubelet-serving-cert", Selector: sel, ConditionType: names.ConditionType, RequiredStatus: corev1.ConditionFalse,
		Taint: corev1.Taint{Key: names.TaintKey, Value: names.TaintValue, Effect: corev1.TaintEffectNoSchedule}}
}

// ReadRule finds the one NodeReadinessRule in a YAML stream (a rule file,
// or the output of kustomize build) whose conditions include conditionType
// and whose taint keeps pods off (NoSchedule or NoExecute).
func ReadRule(r io.Reader, where string, conditionType corev1.NodeConditionType) (Rule, error) {
	dec := utilyaml.NewYAMLReader(bufio.NewReader(r))
	var found []Rule
	for {
		doc, err := dec.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return Rule{}, fmt.Errorf("%s: %w", where, err)
		}
		if len(bytes.TrimSpace(doc)) == 0 {
			continue
		}
		var d ruleDoc
		if err := yaml.Unmarshal(doc, &d); err != nil {
			return Rule{}, fmt.Errorf("%s: %w", where, err)
		}
		// A PreferNoSchedule rule never keeps a pod off a node: not what a
		// preflight guards against.
		if d.Kind != "NodeReadinessRule" || d.Spec.Taint.Effect == corev1.TaintEffectPreferNoSchedule {
			continue
		}
		for _, c := range d.Spec.Conditions {
			if corev1.NodeConditionType(c.Type) != conditionType {
				continue
			}
			sel := labels.Everything()
			if d.Spec.NodeSelector != nil {
				if sel, err = metav1.LabelSelectorAsSelector(d.Spec.NodeSelector); err != nil {
					return Rule{}, fmt.Errorf("%s: NodeReadinessRule %s: nodeSelector: %w", where, d.Metadata.Name, err)
				}
			}
			found = append(found, Rule{Name: d.Metadata.Name, Selector: sel, ConditionType: conditionType,
				RequiredStatus: corev1.ConditionStatus(c.RequiredStatus), Taint: d.Spec.Taint})
		}
	}
	switch len(found) {
	case 0:
		return Rule{}, fmt.Errorf("%s: no NodeReadinessRule with the condition %s", where, conditionType)
	case 1:
		return found[0], nil
	default:
		return Rule{}, fmt.Errorf("%s: %d NodeReadinessRules with the condition %s; give a file with one", where, len(found), conditionType)
	}
}

// Outcome is what creating the rule would do to one node.
type Outcome string

const (
	// Excluded: the rule's nodeSelector does not select the node.
	Excluded Outcome = "Excluded"
	// Lifted: tainted when the rule is created, lifted at once (the
	// condition already has the required status): no workload is affected.
	Lifted Outcome = "TaintedBriefly"
	// Stays: tainted and kept tainted: no new pod lands there until the
	// condition changes. These block a safe rollout.
	Stays Outcome = "StaysTainted"
)

// Row is one node's preflight line.
type Row struct {
	Node    string  `json:"node"`
	Outcome Outcome `json:"outcome"`
	Why     string  `json:"why,omitempty"`
}

// Preflight says, for every node, what creating rule would do now. A
// bootstrap-only rule taints every selected node that lacks its completion
// mark, and a new rule's mark (keyed by its UID) is on no node yet.
func Preflight(nodes []corev1.Node, rule Rule, now time.Time) []Row {
	rows := make([]Row, 0, len(nodes))
	for i := range nodes {
		n := &nodes[i]
		row := Row{Node: n.Name}
		switch cond := condition.Find(n, rule.ConditionType); {
		case !rule.Selector.Matches(labels.Set(n.Labels)):
			row.Outcome, row.Why = Excluded, "not selected by the rule's nodeSelector ("+rule.Selector.String()+")"
		case cond == nil:
			row.Outcome, row.Why = Stays, fmt.Sprintf("no %s condition: no certready agent reports on this node (agent not scheduled, another OS or kubelet directory?); fix it or label the node %s=true", rule.ConditionType, OptOutLabel)
		case cond.Status != rule.RequiredStatus:
			row.Outcome, row.Why = Stays, fmt.Sprintf("%s is %s (%s: %s); fix it or label the node %s=true", rule.ConditionType, cond.Status, cond.Reason, cond.Message, OptOutLabel)
		default:
			row.Outcome, row.Why = Lifted, fmt.Sprintf("%s is %s since %s", rule.ConditionType, cond.Status, cond.LastTransitionTime.UTC().Format(time.RFC3339))
			if !condition.Fresh(cond, condition.DefaultMaxAge, now) {
				row.Why += "; but " + stale(cond, now)
			}
		}
		rows = append(rows, row)
	}
	sort.Slice(rows, func(i, j int) bool {
		if (rows[i].Outcome == Stays) != (rows[j].Outcome == Stays) {
			return rows[i].Outcome == Stays
		}
		return rows[i].Node < rows[j].Node
	})
	return rows
}

// Blocking counts the rows whose node would stay tainted.
func Blocking(rows []Row) int {
	n := 0
	for _, r := range rows {
		if r.Outcome == Stays {
			n++
		}
	}
	return n
}
