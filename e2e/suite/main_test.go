// Package suite is certready's end-to-end suite: one cluster, certready
// deployed from manifests/ with kubectl, and the scenarios an operator would
// check, in order. The cluster is the local cluster of the real Kubernetes
// binaries (default; needs root) or, with CERTREADY_E2E_PROVIDER=kind, the
// kind cluster CERTREADY_KIND_CLUSTER made by kind/kind-up.sh without
// certready deployed (make e2e-kind).
package suite

import (
	"context"
	"crypto/ecdsa"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"testing"
	"time"

	certv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/certready/certready/e2e/deploy"
	"github.com/certready/certready/e2e/localcluster"
	"github.com/certready/certready/e2e/provider"
)

var cluster provider.Cluster

const (
	standalone = "../../manifests/overlays/standalone"
	base       = "../../manifests/base"
	chartDir   = "../../charts/certready"
)

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	state, err := os.MkdirTemp("", "cre2e-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(state)
	switch p := os.Getenv("CERTREADY_E2E_PROVIDER"); p {
	case "", "local":
		return runLocal(m, state)
	case "kind":
		name := os.Getenv("CERTREADY_KIND_CLUSTER")
		if name == "" {
			name = "certready-e2e"
		}
		k, err := provider.NewKind(name, state)
		if err != nil {
			fmt.Fprintln(os.Stderr, "e2e:", err)
			return 1
		}
		cluster = k
		return m.Run()
	default:
		fmt.Fprintf(os.Stderr, "e2e: CERTREADY_E2E_PROVIDER=%q: want local or kind\n", p)
		return 1
	}
}

func runLocal(m *testing.M, state string) int {
	if os.Geteuid() != 0 {
		fmt.Fprintln(os.Stderr, "e2e: the local cluster needs root (network namespace, mounts); run 'sudo make e2e'")
		return 1
	}
	bins, err := localcluster.BinariesFromEnv()
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		return 1
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	// Tear down on an interrupt too, also one during start-up (Start then
	// fails on the cancelled context and cleans up after itself): nothing
	// may be left behind.
	var local *localcluster.Cluster
	started := make(chan struct{})
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM)
	go func() {
		<-sig
		cancel()
		<-started
		if local != nil {
			local.Stop()
		}
		os.Exit(1)
	}()
	logf := func(format string, args ...any) { fmt.Printf("    cluster: "+format+"\n", args...) }
	local, err = localcluster.Start(ctx, localcluster.Config{Binaries: bins, StateDir: state, Netns: "certready-e2e", Workers: 2, Logf: logf})
	close(started)
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e: starting the local cluster:", err)
		return 1
	}
	defer local.Stop()
	cluster = provider.Local{C: local}
	return m.Run()
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
	return c != nil && c.Status == corev1.ConditionFalse && !deploy.HasStartupTaint(n)
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
	s, err := cluster.Clientset().AppsV1().Deployments(deploy.Namespace).GetScale(ctx, "certready-approver", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	s.Spec.Replicas = replicas
	if _, err := cluster.Clientset().AppsV1().Deployments(deploy.Namespace).UpdateScale(ctx, "certready-approver", s, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	err = localcluster.Poll(ctx, 2*time.Minute, fmt.Sprintf("approver at %d ready replicas", replicas), func() (bool, error) {
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
