package provider

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	kindcluster "sigs.k8s.io/kind/pkg/cluster"
	kindnodes "sigs.k8s.io/kind/pkg/cluster/nodes"
	"sigs.k8s.io/yaml"

	"github.com/certready/certready/e2e/localcluster"
)

// Kind is a kind cluster (made by kind/kind-up.sh from kind/cluster.yaml)
// as a Cluster. Node operations run inside the node containers through
// kind's own node API (docker exec); kubectl runs on the host.
type Kind struct {
	name       string
	kubeconfig string
	cfg        *rest.Config
	client     kubernetes.Interface
	nodes      map[string]kindnodes.Node
}

var _ Cluster = (*Kind)(nil)

// NewKind attaches to the running kind cluster name; stateDir receives its
// kubeconfig.
func NewKind(name, stateDir string) (*Kind, error) {
	opt, err := kindcluster.DetectNodeProvider()
	if err != nil || opt == nil {
		return nil, fmt.Errorf("kind needs a container engine (docker, podman or nerdctl) and none answers: %w", err)
	}
	p := kindcluster.NewProvider(opt)
	kc, err := p.KubeConfig(name, false)
	if err != nil {
		return nil, fmt.Errorf("no kind cluster %q: 'make e2e-kind' makes a fresh one and runs the suite on it (or KIND_CLUSTER_NAME=%[1]s KIND_DEPLOY=0 kind/kind-up.sh, then this): %w", name, err)
	}
	k := &Kind{name: name, kubeconfig: filepath.Join(stateDir, "kind-"+name+".kubeconfig"), nodes: map[string]kindnodes.Node{}}
	if err := os.WriteFile(k.kubeconfig, []byte(kc), 0o600); err != nil {
		return nil, err
	}
	if k.cfg, err = clientcmd.RESTConfigFromKubeConfig([]byte(kc)); err != nil {
		return nil, err
	}
	k.cfg.QPS, k.cfg.Burst = 50, 100
	if k.client, err = kubernetes.NewForConfig(k.cfg); err != nil {
		return nil, err
	}
	list, err := p.ListInternalNodes(name)
	if err != nil {
		return nil, err
	}
	for _, n := range list {
		k.nodes[n.String()] = n // the container's name is the node's name
	}
	return k, nil
}

func (k *Kind) Clientset() kubernetes.Interface { return k.client }
func (k *Kind) AdminConfig() *rest.Config       { return k.cfg }

func (k *Kind) Kubectl(ctx context.Context, args ...string) (string, error) {
	out, err := exec.CommandContext(ctx, "kubectl", append([]string{"--kubeconfig", k.kubeconfig}, args...)...).CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("kubectl %s: %w: %s", strings.Join(args, " "), err, out)
	}
	return string(out), nil
}

// list reads the nodes from the API server, by name.
func (k *Kind) list(workersOnly bool) []Node {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	nl, err := k.client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil
	}
	var out []Node
	for _, n := range nl.Items {
		if _, cp := n.Labels["node-role.kubernetes.io/control-plane"]; cp && workersOnly {
			continue
		}
		out = append(out, Node{Name: n.Name, IP: internalIP(&n)})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

func internalIP(n *corev1.Node) string {
	for _, a := range n.Status.Addresses {
		if a.Type == corev1.NodeInternalIP {
			return a.Address
		}
	}
	return ""
}

func (k *Kind) Nodes() []Node   { return k.list(false) }
func (k *Kind) Workers() []Node { return k.list(true) }

// run runs a command in node's container and returns its output.
func (k *Kind) run(ctx context.Context, node string, stdin []byte, args ...string) (string, error) {
	n, ok := k.nodes[node]
	if !ok {
		return "", fmt.Errorf("no node container %s in kind cluster %s", node, k.name)
	}
	var out bytes.Buffer
	cmd := n.CommandContext(ctx, args[0], args[1:]...).SetStdout(&out).SetStderr(&out)
	if stdin != nil {
		cmd.SetStdin(bytes.NewReader(stdin))
	}
	if err := cmd.Run(); err != nil {
		return out.String(), fmt.Errorf("%s on %s: %w: %s", strings.Join(args, " "), node, err, out.String())
	}
	return out.String(), nil
}

func (k *Kind) controlPlane() (string, error) {
	for name, n := range k.nodes {
		if role, err := n.Role(); err == nil && role == "control-plane" {
			return name, nil
		}
	}
	return "", fmt.Errorf("kind cluster %s has no control-plane node", k.name)
}

// JoinWorker cannot add a node to a kind cluster; it makes the last worker
// join again instead: kubelet stopped, its serving certificates removed,
// its Node object deleted, kubelet started. The kubelet registers anew
// with the readiness taint (kubeadm gave it --register-with-taints) and asks
// for a serving certificate, as a new worker does.
func (k *Kind) JoinWorker(ctx context.Context, _ string) (Node, error) {
	ws := k.Workers()
	if len(ws) == 0 {
		return Node{}, fmt.Errorf("kind cluster %s has no worker", k.name)
	}
	name := ws[len(ws)-1].Name
	err := reRegister(ctx, k.client, name, func() error {
		if _, err := k.run(ctx, name, nil, "systemctl", "stop", "kubelet"); err != nil {
			return err
		}
		if _, err := k.run(ctx, name, nil, "sh", "-c", `rm -f "$1"/kubelet-server-*`, "sh", PKIDir); err != nil {
			return err
		}
		_, err := k.run(ctx, name, nil, "systemctl", "start", "kubelet")
		return err
	})
	if err != nil {
		return Node{}, err
	}
	for _, w := range k.Workers() {
		if w.Name == name {
			return w, nil
		}
	}
	return Node{}, fmt.Errorf("node %s vanished after joining again", name)
}

// DialContext dials a node's address on kind's Docker network, which the
// host reaches.
func (k *Kind) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	var d net.Dialer
	return d.DialContext(ctx, network, addr)
}

func (k *Kind) ReRegisterNode(ctx context.Context, name string) error {
	return reRegister(ctx, k.client, name, func() error {
		_, err := k.run(ctx, name, nil, "systemctl", "restart", "kubelet")
		return err
	})
}

// NodeConfig uses the kubelet's own client certificate from the node.
func (k *Kind) NodeConfig(ctx context.Context, name string) (*rest.Config, error) {
	pair, err := k.run(ctx, name, nil, "cat", PKIDir+"/kubelet-client-current.pem")
	if err != nil {
		return nil, err
	}
	cfg := rest.AnonymousClientConfig(k.cfg)
	cfg.TLSClientConfig.CertData, cfg.TLSClientConfig.KeyData = []byte(pair), []byte(pair)
	return cfg, nil
}

// containerID is the id of the running control-plane container name.
func (k *Kind) containerID(ctx context.Context, cp, name string) (string, error) {
	out, err := k.run(ctx, cp, nil, "crictl", "ps", "-q", "--state", "running", "--name", name)
	return strings.TrimSpace(out), err
}

// restartStatic waits, after change, for a new running container of the
// static pod name and for the API server to answer /readyz.
func (k *Kind) restartStatic(ctx context.Context, name string, change func(cp, old string) error) error {
	cp, err := k.controlPlane()
	if err != nil {
		return err
	}
	old, err := k.containerID(ctx, cp, name)
	if err != nil {
		return err
	}
	if err := change(cp, old); err != nil {
		return err
	}
	return localcluster.Poll(ctx, 3*time.Minute, name+" running again", func() (bool, error) {
		id, err := k.containerID(ctx, cp, name)
		if err != nil || id == "" || id == old {
			return false, nil
		}
		_, err = k.client.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(ctx)
		return err == nil, nil
	})
}

func (k *Kind) RestartAPIServer(ctx context.Context) error {
	return k.restartStatic(ctx, "kube-apiserver", func(cp, old string) error {
		_, err := k.run(ctx, cp, nil, "crictl", "stop", old)
		return err
	})
}

// SetSigningDuration edits the controller manager's static pod manifest
// (decoded as the Pod it is); the kubelet restarts it.
func (k *Kind) SetSigningDuration(ctx context.Context, d time.Duration) error {
	return k.restartStatic(ctx, "kube-controller-manager", func(cp, _ string) error {
		manifest, err := k.run(ctx, cp, nil, "cat", controllerManagerManifest)
		if err != nil {
			return err
		}
		edited, err := withSigningDuration([]byte(manifest), d)
		if err != nil {
			return fmt.Errorf("%s on %s: %w", controllerManagerManifest, cp, err)
		}
		_, err = k.run(ctx, cp, edited, "sh", "-c", replaceScript, "sh", controllerManagerManifest, "/etc/kubernetes")
		return err
	})
}

// withSigningDuration sets (or, for 0, removes) --cluster-signing-duration
// in the kube-controller-manager container of a static pod manifest.
func withSigningDuration(manifest []byte, d time.Duration) ([]byte, error) {
	var pod corev1.Pod
	if err := yaml.UnmarshalStrict(manifest, &pod); err != nil {
		return nil, fmt.Errorf("not a Pod: %w", err)
	}
	const flag = "--cluster-signing-duration="
	for i := range pod.Spec.Containers {
		c := &pod.Spec.Containers[i]
		if c.Name != "kube-controller-manager" {
			continue
		}
		if len(c.Command) == 0 || filepath.Base(c.Command[0]) != "kube-controller-manager" {
			return nil, fmt.Errorf("container kube-controller-manager runs %q, not kube-controller-manager", c.Command)
		}
		kept := []string{c.Command[0]}
		if d > 0 {
			kept = append(kept, flag+d.String())
		}
		for _, a := range c.Command[1:] {
			if !strings.HasPrefix(a, flag) {
				kept = append(kept, a)
			}
		}
		c.Command = kept
		return yaml.Marshal(&pod)
	}
	return nil, fmt.Errorf("no container kube-controller-manager")
}

// The shell run in the node containers (tested on real files in
// kind_test.go, except killScript, which needs crictl).
const (
	controllerManagerManifest = "/etc/kubernetes/manifests/kube-controller-manager.yaml"
	// replaceScript replaces the file $1 with stdin (mode 0600), written
	// first in the folder $2 (same filesystem, outside the static pod
	// folder, whose every file the kubelet reads) and renamed into place.
	replaceScript = `t=$(mktemp "$2/.e2e-XXXXXX") && cat > "$t" && chmod 600 "$t" && mv -f "$t" "$1"`
	// killScript SIGKILLs the running containers of pod $1, printing how many.
	killScript = `n=0
for c in $(crictl ps -q --state running --label io.kubernetes.pod.name="$1"); do
  pid=$(crictl inspect -o go-template --template '{{.info.pid}}' "$c") && kill -9 "$pid" && n=$((n+1))
done
echo "$n"`
	// writeScript writes stdin to $1, mode 0600.
	writeScript = `umask 077 && cat > "$1"`
	// swapScript points the symlink $2 at $1 as the kubelet does: a new
	// link renamed onto the old one, never a moment without $2.
	swapScript = `ln -sfn "$1" "$2.e2e" && mv -Tf "$2.e2e" "$2"`
)

// KillPod kills the pod's container processes on its node with SIGKILL.
func (k *Kind) KillPod(ctx context.Context, pod string) (int, error) {
	pods, err := k.client.CoreV1().Pods("").List(ctx, metav1.ListOptions{FieldSelector: "metadata.name=" + pod})
	if err != nil {
		return 0, err
	}
	if len(pods.Items) != 1 || pods.Items[0].Spec.NodeName == "" {
		return 0, nil // not (or not yet) scheduled: nothing runs
	}
	out, err := k.run(ctx, pods.Items[0].Spec.NodeName, nil, "sh", "-c", killScript, "sh", pod)
	if err != nil {
		return 0, err
	}
	return strconv.Atoi(strings.TrimSpace(out))
}

func (k *Kind) WriteServingFile(ctx context.Context, node, file string, data []byte) (string, error) {
	if strings.Contains(file, "/") {
		return "", fmt.Errorf("%q is not a base name", file)
	}
	path := PKIDir + "/" + file
	_, err := k.run(ctx, node, data, "sh", "-c", writeScript, "sh", path)
	return path, err
}

func (k *Kind) ServingTarget(ctx context.Context, node string) (string, error) {
	out, err := k.run(ctx, node, nil, "readlink", ServingCurrent)
	return strings.TrimSpace(out), err
}

func (k *Kind) PointServingAt(ctx context.Context, node, target string) error {
	_, err := k.run(ctx, node, nil, "sh", "-c", swapScript, "sh", target, ServingCurrent)
	return err
}
