package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync/atomic"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	corev1 "k8s.io/api/core/v1"
	flowcontrolv1 "k8s.io/api/flowcontrol/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/yaml"

	"github.com/certready/certready/e2e/localcluster"
)

// The bench agent's identity is a user of its own (not system:masters,
// which API Priority and Fairness exempts and lumps together) holding the
// shipped agent ClusterRole, so that the API server's own flow-control
// metrics can count its requests: apiserver_request_total has no client
// label, apiserver_flowcontrol_dispatched_requests_total has the flow
// schema, and one flow schema matches the agent's user only.
const (
	agentGroup     = "certready:bench"
	agentFlow      = "certready-bench-agent"
	agentRelayAddr = "127.0.0.1:16443" // inside the namespace; the apiserver certificate names 127.0.0.1
)

// grantAgentRole creates the agent ClusterRole from the shipped manifest
// and binds it to the bench agent's user.
func grantAgentRole(ctx context.Context, c *localcluster.Cluster, manifests string) error {
	role, err := agentRBAC[rbacv1.ClusterRole](manifests, "ClusterRole")
	if err != nil {
		return err
	}
	if _, err := c.Client.RbacV1().ClusterRoles().Create(ctx, role, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("creating ClusterRole %s: %w", role.Name, err)
	}
	_, err = c.Client.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: agentFlow},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role.Name},
		Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: agentUser}},
	}, metav1.CreateOptions{})
	return err
}

// createAgentFlowSchema routes every request of the agent's user to a flow
// schema of its own, at the priority level service accounts get by default.
func createAgentFlowSchema(ctx context.Context, c *localcluster.Cluster) error {
	_, err := c.Client.FlowcontrolV1().FlowSchemas().Create(ctx, &flowcontrolv1.FlowSchema{
		ObjectMeta: metav1.ObjectMeta{Name: agentFlow},
		Spec: flowcontrolv1.FlowSchemaSpec{
			PriorityLevelConfiguration: flowcontrolv1.PriorityLevelConfigurationReference{Name: "workload-low"},
			MatchingPrecedence:         1000,
			DistinguisherMethod:        &flowcontrolv1.FlowDistinguisherMethod{Type: flowcontrolv1.FlowDistinguisherMethodByUserType},
			Rules: []flowcontrolv1.PolicyRulesWithSubjects{{
				Subjects: []flowcontrolv1.Subject{{Kind: flowcontrolv1.SubjectKindUser, User: &flowcontrolv1.UserSubject{Name: agentUser}}},
				ResourceRules: []flowcontrolv1.ResourcePolicyRule{{Verbs: []string{"*"}, APIGroups: []string{"*"}, Resources: []string{"*"},
					ClusterScope: true, Namespaces: []string{"*"}}},
				NonResourceRules: []flowcontrolv1.NonResourcePolicyRule{{Verbs: []string{"*"}, NonResourceURLs: []string{"*"}}},
			}},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		return fmt.Errorf("creating FlowSchema %s: %w", agentFlow, err)
	}
	return nil
}

// dispatched reads, from the API server's /metrics, how many requests API
// Priority and Fairness has dispatched for the agent's flow schema.
func dispatched(ctx context.Context, c *localcluster.Cluster) (float64, error) {
	raw, err := c.Client.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		return 0, fmt.Errorf("reading the API server's metrics: %w", err)
	}
	return sumSeries(bytes.NewReader(raw), "apiserver_flowcontrol_dispatched_requests_total", map[string]string{"flow_schema": agentFlow})
}

// sumSeries sums the samples of metric (counters, gauges, untyped) that
// carry every label in want, in a Prometheus text exposition.
func sumSeries(r io.Reader, metric string, want map[string]string) (float64, error) {
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(r)
	if err != nil {
		return 0, fmt.Errorf("parsing metrics: %w", err)
	}
	sum := 0.0
	for _, m := range families[metric].GetMetric() {
		labels := labelsOf(m)
		matches := true
		for k, v := range want {
			matches = matches && labels[k] == v
		}
		if !matches {
			continue
		}
		switch {
		case m.Counter != nil:
			sum += m.GetCounter().GetValue()
		case m.Gauge != nil:
			sum += m.GetGauge().GetValue()
		case m.Untyped != nil:
			sum += m.GetUntyped().GetValue()
		}
	}
	return sum, nil
}

// relay forwards the agent's API connections to the API server inside the
// namespace and counts the bytes that flow to the agent: what it receives
// on the wire, TLS records included. The API server has no per-client byte
// metric.
type relay struct {
	received atomic.Int64
}

func (r *relay) start(c *localcluster.Cluster) error {
	ln, err := c.ListenInNS(agentRelayAddr)
	if err != nil {
		return err
	}
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return // closed with the namespace
			}
			go c.RelayToAPIServer(conn, &r.received)
		}
	}()
	return nil
}

// pointAt rewrites the kubeconfig at path to reach the API server at addr.
func pointAt(path, addr string) error {
	cfg, err := clientcmd.LoadFromFile(path)
	if err != nil {
		return err
	}
	for _, cl := range cfg.Clusters {
		cl.Server = "https://" + addr
	}
	return clientcmd.WriteToFile(*cfg, path)
}

// grantAgentLogProof gives the bench agent what --apiserver-proof needs,
// as the shipped manifests do: the Role certready-agent (get on pods/log
// in certready's namespace) bound to its user, and a pod of its own there,
// bound to the simulated node (never run: the API server only needs its
// node and container to dial the kubelet for its log).
func grantAgentLogProof(ctx context.Context, c *localcluster.Cluster, manifests string) error {
	role, err := agentRBAC[rbacv1.Role](manifests, "Role")
	if err != nil {
		return err
	}
	role.Namespace = approverNS
	if _, err := c.Client.RbacV1().Roles(approverNS).Create(ctx, role, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("creating Role %s: %w", role.Name, err)
	}
	if _, err := c.Client.RbacV1().RoleBindings(approverNS).Create(ctx, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: agentFlow, Namespace: approverNS},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: role.Name},
		Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: agentUser}},
	}, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("binding Role %s: %w", role.Name, err)
	}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: benchPod, Namespace: approverNS},
		Spec: corev1.PodSpec{NodeName: simNode, Containers: []corev1.Container{{Name: "agent", Image: "certready"}},
			// Never evicted from a node whose kubelet never reports.
			Tolerations: []corev1.Toleration{{Operator: corev1.TolerationOpExists}}}}
	if _, err := c.Client.CoreV1().Pods(approverNS).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("creating pod %s: %w", benchPod, err)
	}
	return nil
}

// agentRBAC reads the object of kind from the shipped agent RBAC
// (base/agent-rbac.yaml under manifests): the bench grants its agent what
// the manifests grant, no more.
func agentRBAC[T any](manifests, kind string) (*T, error) {
	path := filepath.Join(manifests, "base", "agent-rbac.yaml")
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("reading the agent's RBAC (--manifests names the repository's manifests folder): %w", err)
	}
	docs := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	for {
		doc, err := docs.Read()
		if errors.Is(err, io.EOF) {
			return nil, fmt.Errorf("%s holds no %s", path, kind)
		}
		if err != nil {
			return nil, fmt.Errorf("reading %s: %w", path, err)
		}
		var meta metav1.TypeMeta
		if err := yaml.Unmarshal(doc, &meta); err != nil || meta.Kind != kind {
			continue
		}
		var obj T
		if err := yaml.Unmarshal(doc, &obj); err != nil {
			return nil, fmt.Errorf("reading the %s in %s: %w", kind, path, err)
		}
		return &obj, nil
	}
}
