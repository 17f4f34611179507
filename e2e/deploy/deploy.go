// Package deploy installs certready into a cluster under test from the
// project's manifests, exactly as on any cluster (kubectl apply -k), and
// shows what an operator would look at.
package deploy

import (
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/certready/certready/e2e/localcluster"
	"github.com/certready/certready/e2e/provider"

	"github.com/certready/certready/internal/names"
)

const (
	Namespace     = "certready-system"
	ConditionType = names.ConditionType
)

// Certready applies the kustomize overlay and waits for the agents on
// every node and for an approver to be ready.
func Certready(ctx context.Context, c provider.Cluster, overlay string, logf func(string, ...any)) error {
	logf("deploying certready: kubectl apply -k %s", overlay)
	if _, err := c.Kubectl(ctx, "apply", "-k", overlay); err != nil {
		return err
	}
	return WaitRollout(ctx, c, logf)
}

// WaitRollout waits until the agent DaemonSet runs its current template,
// ready, on every node and every approver replica is current and
// available.
func WaitRollout(ctx context.Context, c provider.Cluster, logf func(string, ...any)) error {
	nodes := len(c.Nodes())
	err := localcluster.Poll(ctx, 3*time.Minute, "the certready agent on every node and an approver", func() (bool, error) {
		ds, err := c.Clientset().AppsV1().DaemonSets(Namespace).Get(ctx, "certready-agent", metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		dep, err := c.Clientset().AppsV1().Deployments(Namespace).Get(ctx, "certready-approver", metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		return DaemonSetRolledOut(ds, nodes) && DeploymentRolledOut(dep), nil
	})
	if err != nil {
		return fmt.Errorf("%w\n%s", err, podSummary(ctx, c))
	}
	logf("certready agents ready on %d nodes, approver available", nodes)
	return nil
}

// DaemonSetRolledOut says whether ds runs its current template, available,
// on nodes nodes, as `kubectl rollout status` judges it (every desired pod
// updated and available; ready and unavailable counts follow from that).
// Ready pods alone are not enough: right after a template change the old
// pods are all still ready, and the controller replaces them one by one
// after that (CI once scraped an agent as its pod was being replaced).
func DaemonSetRolledOut(ds *appsv1.DaemonSet, nodes int) bool {
	st := ds.Status
	return st.ObservedGeneration >= ds.Generation &&
		int(st.DesiredNumberScheduled) == nodes &&
		st.UpdatedNumberScheduled == st.DesiredNumberScheduled &&
		st.NumberAvailable == st.DesiredNumberScheduled
}

// DeploymentRolledOut says whether every replica of dep runs its current
// template and is available, and no pod of an older one is left. A
// Deployment scaled to zero does not count: the callers wait for a
// running approver.
func DeploymentRolledOut(dep *appsv1.Deployment) bool {
	st := dep.Status
	want := int32(1)
	if dep.Spec.Replicas != nil {
		want = *dep.Spec.Replicas
	}
	return st.ObservedGeneration >= dep.Generation && want >= 1 &&
		st.UpdatedReplicas == want && st.Replicas == want && st.AvailableReplicas == want
}

func podSummary(ctx context.Context, c provider.Cluster) string {
	out, _ := c.Kubectl(ctx, "get", "pods", "-A", "-o", "wide")
	return out
}

// WaitUntainted waits until no worker carries the readiness taint.
func WaitUntainted(ctx context.Context, c provider.Cluster, timeout time.Duration) error {
	return localcluster.Poll(ctx, timeout, "every worker's readiness taint to be lifted", func() (bool, error) {
		for _, w := range c.Workers() {
			n, err := c.Clientset().CoreV1().Nodes().Get(ctx, w.Name, metav1.GetOptions{})
			if err != nil {
				return false, nil
			}
			if HasReadinessTaint(n) {
				return false, nil
			}
		}
		return true, nil
	})
}

// HasReadinessTaint reports whether n carries the readiness taint.
func HasReadinessTaint(n *corev1.Node) bool {
	for _, t := range n.Spec.Taints {
		if t.Key == localcluster.ReadinessTaint {
			return true
		}
	}
	return false
}

// Showcase waits for the taints to lift and prints what an operator sees.
func Showcase(ctx context.Context, c provider.Cluster, w io.Writer, logf func(string, ...any)) error {
	logf("waiting for every worker's serving certificate (CSR -> approval -> kubelet -> condition False -> taint removed)")
	start := time.Now()
	if err := WaitUntainted(ctx, c, 3*time.Minute); err != nil {
		return err
	}
	logf("all workers untainted after %s", time.Since(start).Round(time.Second))
	for _, n := range c.Workers() {
		out, err := c.Kubectl(ctx, "describe", "node", n.Name)
		if err != nil {
			return err
		}
		fmt.Fprintf(w, "\n$ kubectl describe node %s   (excerpt)\n%s", n.Name, excerpt(out))
	}
	out, err := c.Kubectl(ctx, "get", "csr", "-o", "custom-columns=NAME:.metadata.name,SIGNER:.spec.signerName,REQUESTOR:.spec.username,CONDITION:.status.conditions[*].type,NODE:.metadata.labels.certready\\.io/node")
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "\n$ kubectl get csr\n%s", out)
	pod, err := c.Kubectl(ctx, "-n", Namespace, "get", "pods", "-l", "app.kubernetes.io/component=agent",
		"--field-selector", "spec.nodeName="+c.Workers()[0].Name, "-o", "jsonpath={.items[0].metadata.name}")
	if err != nil {
		return err
	}
	logs, err := c.Kubectl(ctx, "-n", Namespace, "logs", pod, "--tail=3")
	if err != nil {
		return fmt.Errorf("kubectl logs through the kubelet of %s failed: %w", c.Workers()[0].Name, err)
	}
	fmt.Fprintf(w, "\n$ kubectl -n %s logs %s --tail=3   (served by the kubelet of %s over verified TLS)\n%s", Namespace, pod, c.Workers()[0].Name, logs)
	return nil
}

// excerpt keeps the Taints line and the certready condition rows.
func excerpt(describe string) string {
	var b strings.Builder
	lines := strings.Split(describe, "\n")
	for i, l := range lines {
		switch {
		case strings.HasPrefix(l, "Taints:"), strings.HasPrefix(l, "Name:"):
			b.WriteString(l + "\n")
		case strings.HasPrefix(l, "Conditions:"):
			b.WriteString(l + "\n")
			if i+2 < len(lines) {
				b.WriteString(lines[i+1] + "\n" + lines[i+2] + "\n")
			}
		case strings.Contains(l, ConditionType):
			b.WriteString(l + "\n")
		}
	}
	return b.String()
}
