// Package provider is what the e2e suite needs from a cluster under test,
// so that the same scenarios run against the local cluster of real
// Kubernetes binaries (Local) and against a kind cluster (Kind).
//
// Paths given to and returned by the serving-certificate methods are as the
// node's kubelet sees them (under /var/lib/kubelet/pki): the kubelet's
// symlink target is absolute, so they must be.
package provider

import (
	"context"
	"net"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/certready/certready/e2e/localcluster"
)

// Node is a node of the cluster under test.
type Node struct {
	Name string
	IP   string // the InternalIP the kubelet serves on
}

// Cluster is a cluster under test.
type Cluster interface {
	// Clientset and AdminConfig act as the cluster administrator.
	Clientset() kubernetes.Interface
	AdminConfig() *rest.Config
	// Kubectl runs kubectl against the cluster and returns its combined
	// output.
	Kubectl(ctx context.Context, args ...string) (string, error)
	// Nodes lists every node; Workers those that are not control plane.
	Nodes() []Node
	Workers() []Node
	// JoinWorker makes a worker join (or join again) as a new kubelet
	// does: registered with the readiness taint, no serving certificate yet.
	// name is a hint; a provider that cannot add nodes returns the worker
	// it made rejoin.
	JoinWorker(ctx context.Context, name string) (Node, error)
	// ReRegisterNode deletes the Node object and restarts the node's
	// kubelet alone (its containers keep running), as an operator's
	// kubectl delete node followed by a kubelet restart does; it returns
	// once the kubelet has registered the Node anew.
	ReRegisterNode(ctx context.Context, name string) error
	// NodeConfig acts with the node's own kubelet client credentials.
	NodeConfig(ctx context.Context, name string) (*rest.Config, error)
	// RestartAPIServer stops the API server and waits until it serves again.
	RestartAPIServer(ctx context.Context) error
	// SetSigningDuration restarts the controller manager so that the
	// kubelet-serving signer issues certificates valid for d (0: default).
	SetSigningDuration(ctx context.Context, d time.Duration) error
	// KillPod kills the processes of the pod's containers with SIGKILL,
	// without telling the API server; it returns how many it killed.
	KillPod(ctx context.Context, pod string) (int, error)
	// WriteServingFile writes data to file (a base name) in the node's
	// kubelet pki folder, mode 0600, and returns its path on the node.
	WriteServingFile(ctx context.Context, node, file string, data []byte) (string, error)
	// ServingTarget is where kubelet-server-current.pem points.
	ServingTarget(ctx context.Context, node string) (string, error)
	// PointServingAt swaps kubelet-server-current.pem onto target as the
	// kubelet does: a new symlink renamed onto the old one.
	PointServingAt(ctx context.Context, node, target string) error
	// DialContext connects to an address of the cluster's network (a
	// node's address), as a pod on the host network would.
	DialContext(ctx context.Context, network, addr string) (net.Conn, error)
}

// PKIDir is the kubelet's pki folder as seen on a node.
const PKIDir = "/var/lib/kubelet/pki"

// ServingCurrent is the kubelet's symlink to its current serving pair.
const ServingCurrent = PKIDir + "/kubelet-server-current.pem"

// reRegister deletes the Node name, runs restart (which makes its kubelet
// start again) once the deletion is through, and waits until the kubelet
// has registered a new Node object with an InternalIP.
func reRegister(ctx context.Context, cs kubernetes.Interface, name string, restart func() error) error {
	old, err := cs.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return err
	}
	if err := cs.CoreV1().Nodes().Delete(ctx, name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		return err
	}
	err = localcluster.Poll(ctx, time.Minute, "node "+name+" deleted", func() (bool, error) {
		n, err := cs.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		return apierrors.IsNotFound(err) || (err == nil && n.UID != old.UID), nil
	})
	if err != nil {
		return err
	}
	if err := restart(); err != nil {
		return err
	}
	return localcluster.Poll(ctx, 2*time.Minute, "node "+name+" registered again", func() (bool, error) {
		n, err := cs.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		return err == nil && n.UID != old.UID && internalIP(n) != "", nil
	})
}
