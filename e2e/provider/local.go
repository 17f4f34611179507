package provider

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/certready/certready/e2e/localcluster"
)

// Local is the local cluster of real Kubernetes binaries as a Cluster.
type Local struct{ C *localcluster.Cluster }

var _ Cluster = Local{}

func (l Local) Clientset() kubernetes.Interface { return l.C.Client }
func (l Local) AdminConfig() *rest.Config       { return l.C.RESTConfig }
func (l Local) Kubectl(ctx context.Context, args ...string) (string, error) {
	return l.C.Kubectl(ctx, args...)
}

func nodes(in []*localcluster.Node) []Node {
	out := make([]Node, 0, len(in))
	for _, n := range in {
		out = append(out, Node{Name: n.Name, IP: n.IP})
	}
	return out
}

func (l Local) Nodes() []Node   { return nodes(l.C.Nodes()) }
func (l Local) Workers() []Node { return nodes(l.C.Workers()) }

// JoinWorker starts a new kubelet named name.
func (l Local) JoinWorker(ctx context.Context, name string) (Node, error) {
	n, err := l.C.AddNode(ctx, name, false)
	if err != nil {
		return Node{}, err
	}
	return Node{Name: n.Name, IP: n.IP}, nil
}

func (l Local) ReRegisterNode(ctx context.Context, name string) error {
	return reRegister(ctx, l.C.Client, name, func() error { return l.C.RestartKubelet(name) })
}

func (l Local) NodeConfig(_ context.Context, name string) (*rest.Config, error) {
	if l.C.Node(name) == nil {
		return nil, fmt.Errorf("no node %s in the local cluster", name)
	}
	return l.C.NodeRESTConfig(name), nil
}

func (l Local) RestartAPIServer(ctx context.Context) error { return l.C.RestartAPIServer(ctx) }

// DialContext dials inside the cluster's network namespace.
func (l Local) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	return l.C.DialContext(ctx, network, addr)
}

func (l Local) SetSigningDuration(_ context.Context, d time.Duration) error {
	return l.C.RestartControllerManager(d)
}

// KillPod kills the processes our runtime started for the pod's containers
// (each carries POD_NAME=<pod> in its environment).
func (l Local) KillPod(_ context.Context, pod string) (int, error) {
	pids := localcluster.ContainerPIDs("POD_NAME=" + pod)
	killed := 0
	for _, pid := range pids {
		if err := syscall.Kill(pid, syscall.SIGKILL); err == nil {
			killed++
		}
	}
	return killed, nil
}

// hostPath maps a path on the node (under PKIDir) to the host folder that
// is mounted there.
func (l Local) hostPath(node, path string) (string, error) {
	n := l.C.Node(node)
	if n == nil {
		return "", fmt.Errorf("no node %s in the local cluster", node)
	}
	rel, ok := strings.CutPrefix(path, PKIDir+"/")
	if !ok || strings.Contains(rel, "/") {
		return "", fmt.Errorf("%s is not a file in %s", path, PKIDir)
	}
	return filepath.Join(n.PKIDir(), rel), nil
}

func (l Local) WriteServingFile(_ context.Context, node, file string, data []byte) (string, error) {
	onNode := PKIDir + "/" + file
	host, err := l.hostPath(node, onNode)
	if err != nil {
		return "", err
	}
	return onNode, os.WriteFile(host, data, 0o600)
}

func (l Local) ServingTarget(_ context.Context, node string) (string, error) {
	host, err := l.hostPath(node, ServingCurrent)
	if err != nil {
		return "", err
	}
	return os.Readlink(host)
}

func (l Local) PointServingAt(_ context.Context, node, target string) error {
	host, err := l.hostPath(node, ServingCurrent)
	if err != nil {
		return err
	}
	return localcluster.SwapSymlink(host, target) // target as the node sees it
}
