package suite

// The suite's shared helpers: waiting on nodes, CSRs and events, the
// identities scenarios act as, and certready's deployment, installed once.

import (
	"context"
	"crypto/ecdsa"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	certv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/certready/certready/e2e/deploy"
	"github.com/certready/certready/e2e/localcluster"
)

// waitCSREvent waits for an event with reason on the CSR name and returns
// its message.
func waitCSREvent(t *testing.T, ctx context.Context, name, reason string) string {
	t.Helper()
	var msg string
	if err := localcluster.Poll(ctx, time.Minute, "a Warning "+reason+" on "+name, func() (bool, error) {
		evs, err := cluster.Clientset().CoreV1().Events("").List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=" + name})
		if err != nil {
			return false, nil
		}
		for _, e := range evs.Items {
			if e.Reason == reason {
				msg = e.Message
				return true, nil
			}
		}
		return false, nil
	}); err != nil {
		t.Fatalf("%v\n%s", err, podsAndEvents(ctx))
	}
	return msg
}

// approverWith adds args to the approver's container and waits until both
// replicas run with them; the test's end applies the standalone overlay
// again.
func approverWith(t *testing.T, ctx context.Context, args ...string) {
	t.Helper()
	patchApprover(t, ctx, args...)
	err := localcluster.Poll(ctx, 2*time.Minute, fmt.Sprintf("the approver restarted with %v", args), func() (bool, error) {
		dep, err := cluster.Clientset().AppsV1().Deployments(deploy.Namespace).Get(ctx, "certready-approver", metav1.GetOptions{})
		return err == nil && deploy.DeploymentRolledOut(dep) && dep.Status.Replicas == 2, nil
	})
	if err != nil {
		t.Fatalf("%v\n%s", err, podsAndEvents(ctx))
	}
}

// patchApprover adds args to the approver's container, without waiting for
// the roll; the test's end applies the standalone overlay again and waits
// for it.
func patchApprover(t *testing.T, ctx context.Context, args ...string) {
	t.Helper()
	patchArgs(t, ctx, "deployment", "certready-approver", args)
}

// agentWith adds args to the agents' container and waits until every
// agent runs with them; the test's end applies the standalone overlay again
// and waits for the agents.
func agentWith(t *testing.T, ctx context.Context, args ...string) {
	t.Helper()
	patchArgs(t, ctx, "daemonset", "certready-agent", args)
	if err := deploy.WaitRollout(ctx, cluster, t.Logf); err != nil {
		t.Fatalf("%v\n%s", err, podsAndEvents(ctx))
	}
}

// patchArgs appends args to the first container of the workload kind/name;
// the test's end applies the standalone overlay again and waits for the
// rollout.
func patchArgs(t *testing.T, ctx context.Context, kind, name string, args []string) {
	t.Helper()
	ops := make([]string, 0, len(args))
	for _, a := range args {
		ops = append(ops, fmt.Sprintf(`{"op":"add","path":"/spec/template/spec/containers/0/args/-","value":%q}`, a))
	}
	if out, err := cluster.Kubectl(ctx, "-n", deploy.Namespace, "patch", kind, name, "--type=json", "-p", "["+strings.Join(ops, ",")+"]"); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		if _, err := cluster.Kubectl(ctx, "apply", "-k", standalone); err != nil {
			t.Error(err)
		}
		if err := deploy.WaitRollout(ctx, cluster, t.Logf); err != nil {
			t.Error(err)
		}
	})
}

// restoreApprover brings the approver back after a failed scenario, so that
// one failure does not cascade into the next scenarios.
func restoreApprover(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	d, err := cluster.Clientset().AppsV1().Deployments(deploy.Namespace).Get(ctx, "certready-approver", metav1.GetOptions{})
	if err == nil && d.Spec.Replicas != nil && *d.Spec.Replicas != 2 {
		scaleApprover(t, ctx, 2)
	}
}

func ctxT(t *testing.T, d time.Duration) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

func node(t *testing.T, ctx context.Context, name string) *corev1.Node {
	t.Helper()
	n, err := cluster.Clientset().CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("getting node %s: %v", name, err)
	}
	return n
}

func certCondition(n *corev1.Node) *corev1.NodeCondition {
	return localcluster.NodeCondition(n, deploy.ConditionType)
}

// waitCondition polls node name until cond holds; it fails with the last
// condition seen and the describe output.
func waitCondition(t *testing.T, ctx context.Context, name string, timeout time.Duration, what string, cond func(*corev1.Node) bool) *corev1.Node {
	t.Helper()
	var last *corev1.Node
	err := localcluster.Poll(ctx, timeout, what, func() (bool, error) {
		n, err := cluster.Clientset().CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		last = n
		return cond(n), nil
	})
	if err != nil {
		var c *corev1.NodeCondition
		if last != nil {
			c = certCondition(last)
		}
		t.Fatalf("node %s: %v; last condition: %+v\n%s", name, err, c, podsAndEvents(ctx))
	}
	return last
}

func hasReason(reason string, status corev1.ConditionStatus) func(*corev1.Node) bool {
	return func(n *corev1.Node) bool {
		c := certCondition(n)
		return c != nil && c.Reason == reason && c.Status == status
	}
}

func readyAndUntainted(n *corev1.Node) bool {
	c := certCondition(n)
	return c != nil && c.Status == corev1.ConditionFalse && !deploy.HasReadinessTaint(n)
}

func podsAndEvents(ctx context.Context) string {
	pods, _ := cluster.Kubectl(ctx, "get", "pods", "-A", "-o", "wide")
	ev, _ := cluster.Kubectl(ctx, "get", "events", "-A", "--sort-by=.lastTimestamp")
	lines := strings.Split(ev, "\n")
	if len(lines) > 25 {
		lines = lines[len(lines)-25:]
	}
	return pods + strings.Join(lines, "\n")
}

func scaleApprover(t *testing.T, ctx context.Context, replicas int32) {
	t.Helper()
	// A merge patch of the scale subresource carries no resourceVersion: the
	// deployment controller writing the status in between cannot make it
	// conflict, as a Get then Update of the scale did in CI.
	patch := []byte(fmt.Sprintf(`{"spec":{"replicas":%d}}`, replicas))
	if _, err := cluster.Clientset().AppsV1().Deployments(deploy.Namespace).Patch(ctx, "certready-approver", types.MergePatchType, patch, metav1.PatchOptions{}, "scale"); err != nil {
		t.Fatal(err)
	}
	err := localcluster.Poll(ctx, 2*time.Minute, fmt.Sprintf("approver at %d ready replicas", replicas), func() (bool, error) {
		d, err := cluster.Clientset().AppsV1().Deployments(deploy.Namespace).Get(ctx, "certready-approver", metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		pods, err := cluster.Clientset().CoreV1().Pods(deploy.Namespace).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/component=approver"})
		if err != nil {
			return false, nil
		}
		return d.Status.ReadyReplicas == replicas && len(pods.Items) == int(replicas), nil
	})
	if err != nil {
		t.Fatalf("%v\n%s", err, podsAndEvents(ctx))
	}
}

// nodeClient acts with the node's own credentials.
func nodeClient(t *testing.T, name string) kubernetes.Interface {
	t.Helper()
	cfg, err := cluster.NodeConfig(context.Background(), name)
	if err != nil {
		t.Fatal(err)
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return cs
}

// requestServingCert creates, as node name, a kubelet-serving CSR for ips
// and returns the CSR's name and the private key.
func requestServingCert(t *testing.T, ctx context.Context, name string, ips ...string) (string, *ecdsa.PrivateKey) {
	t.Helper()
	created, key := createServingCSR(t, ctx, nodeClient(t, name), "node "+name, metav1.ObjectMeta{GenerateName: "e2e-" + name + "-"}, name, ips...)
	return created.Name, key
}

// createServingCSR creates, with cs (acting as who), a kubelet-serving CSR
// for node and ips, as a kubelet builds it.
func createServingCSR(t *testing.T, ctx context.Context, cs kubernetes.Interface, who string, meta metav1.ObjectMeta, node string, ips ...string) (*certv1.CertificateSigningRequest, *ecdsa.PrivateKey) {
	t.Helper()
	csr, key, err := localcluster.KubeletServingCSR(meta, node, ips...)
	if err != nil {
		t.Fatal(err)
	}
	created, err := cs.CertificatesV1().CertificateSigningRequests().Create(ctx, csr, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("creating a CSR as %s: %v", who, err)
	}
	return created, key
}

// impersonating acts as the admin impersonating user in groups.
func impersonating(t *testing.T, user string, groups ...string) kubernetes.Interface {
	t.Helper()
	cfg := rest.CopyConfig(cluster.AdminConfig())
	cfg.Impersonate = rest.ImpersonationConfig{UserName: user, Groups: groups}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return cs
}

// deleteCSRAtCleanup deletes the CSR name when the test ends.
func deleteCSRAtCleanup(t *testing.T, name string) {
	t.Cleanup(func() {
		_ = cluster.Clientset().CertificatesV1().CertificateSigningRequests().Delete(context.Background(), name, metav1.DeleteOptions{})
	})
}

func csrCondition(c *certv1.CertificateSigningRequest, typ certv1.RequestConditionType) *certv1.CertificateSigningRequestCondition {
	for i := range c.Status.Conditions {
		if c.Status.Conditions[i].Type == typ {
			return &c.Status.Conditions[i]
		}
	}
	return nil
}

func waitIssued(t *testing.T, ctx context.Context, name string, timeout time.Duration) *certv1.CertificateSigningRequest {
	t.Helper()
	var c *certv1.CertificateSigningRequest
	err := localcluster.Poll(ctx, timeout, "CSR "+name+" approved and issued", func() (bool, error) {
		var err error
		c, err = cluster.Clientset().CertificatesV1().CertificateSigningRequests().Get(ctx, name, metav1.GetOptions{})
		return err == nil && csrCondition(c, certv1.CertificateApproved) != nil && len(c.Status.Certificate) > 0, nil
	})
	if err != nil {
		t.Fatalf("%v; status %+v", err, c)
	}
	return c
}

// deployment is certready installed once per run through the Helm chart,
// whose defaults are the standalone overlay object for object (e2e/static
// proves it); later scenarios re-apply that overlay over it.
var deployment struct {
	sync.Mutex
	done bool
	err  error
}

// deployed installs certready unless it is installed already. The happy
// path (bootstrap_test.go, first in a full run) installs it after it has
// seen the cluster without it; any other scenario run on its own (-run)
// installs it first.
func deployed(t *testing.T) {
	t.Helper()
	deployment.Lock()
	defer deployment.Unlock()
	if !deployment.done {
		deployment.done = true
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		deployment.err = deploy.Chart(ctx, cluster, chartDir, nil, t.Logf)
	}
	if deployment.err != nil {
		t.Fatalf("installing certready: %v", deployment.err)
	}
}

// isDeployed says whether a scenario has installed certready in this run.
func isDeployed() bool {
	deployment.Lock()
	defer deployment.Unlock()
	return deployment.done
}

// serveStaleEndpoint lays a newly issued serving certificate on node's
// disk while its kubelet keeps serving the old one (the agent says
// EndpointCertificateMismatch), and returns what points it back.
func serveStaleEndpoint(t *testing.T, ctx context.Context, node, ip string) (restore func()) {
	t.Helper()
	name, key := requestServingCert(t, ctx, node, ip)
	issued := waitIssued(t, ctx, name, time.Minute)
	old, err := cluster.ServingTarget(ctx, node)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	pair := append(append([]byte{}, issued.Status.Certificate...), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER})...)
	path, err := cluster.WriteServingFile(ctx, node, "kubelet-server-"+time.Now().UTC().Format("2006-01-02-15-04-05")+"-e2e.pem", pair)
	if err != nil {
		t.Fatal(err)
	}
	if err := cluster.PointServingAt(ctx, node, path); err != nil {
		t.Fatal(err)
	}
	return func() {
		if err := cluster.PointServingAt(context.Background(), node, old); err != nil {
			t.Error(err)
		}
	}
}
