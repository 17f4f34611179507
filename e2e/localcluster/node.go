package localcluster

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	kubeletv1beta1 "k8s.io/kubelet/config/v1beta1"
	"sigs.k8s.io/yaml"

	"github.com/certready/certready/internal/names"
)

// Node is one kubelet.
type Node struct {
	Name         string
	IP           string
	ControlPlane bool
	Dir          string // host folder that is /var/lib/kubelet inside the node
	index        int
	opts         NodeOptions
	proc         *proc
	cluster      *Cluster
}

// PKIDir is the node's /var/lib/kubelet/pki as seen from the host.
func (n *Node) PKIDir() string { return filepath.Join(n.Dir, "pki") }

// NodeOptions changes how a node's kubelet is configured.
type NodeOptions struct {
	// ServingBootstrapOff: serverTLSBootstrap false, as a kubelet
	// configured by hand: it serves a self-signed certificate and never
	// requests one.
	ServingBootstrapOff bool
	// BeforeKubelet, when set, runs once the node's address is known and
	// before its kubelet starts (a firewall rule in place from the start).
	BeforeKubelet func(n *Node) error
	// ExternalCloudProvider: --cloud-provider=external, as on a cloud
	// whose controller writes the Node's addresses: the kubelet reports
	// its own only while the Node has none, and registers with the
	// node.cloudprovider.kubernetes.io/uninitialized taint.
	ExternalCloudProvider bool
}

// AddNode starts one more kubelet and waits until its Node is registered.
func (c *Cluster) AddNode(ctx context.Context, name string, controlPlane bool) (*Node, error) {
	return c.AddNodeWith(ctx, name, controlPlane, NodeOptions{})
}

// AddNodeWith is AddNode with a kubelet configured by opts.
func (c *Cluster) AddNodeWith(ctx context.Context, name string, controlPlane bool, opts NodeOptions) (*Node, error) {
	c.mu.Lock()
	idx := c.added
	c.added++
	n := &Node{Name: name, IP: fmt.Sprintf("192.0.2.%d", 10+idx), ControlPlane: controlPlane, index: idx, cluster: c, opts: opts}
	c.nodes = append(c.nodes, n)
	c.mu.Unlock()
	root := filepath.Join(c.cfg.StateDir, "n", name)
	n.Dir = filepath.Join(root, "kubelet")
	if err := os.MkdirAll(n.Dir, 0o755); err != nil {
		return nil, err
	}
	if err := c.ns.addAddress(n.IP); err != nil {
		return nil, err
	}
	if err := c.pki.client("node-"+name, names.NodeUser(name), names.NodesGroup); err != nil {
		return nil, err
	}
	if err := c.pki.kubeconfig(filepath.Join(root, "kubeconfig"), "https://"+APIServerIP+":6443", "node-"+name); err != nil {
		return nil, err
	}
	kcfg, err := kubeletConfig(n, root, c.pki.path("ca.crt"))
	if err != nil {
		return nil, err
	}
	// Where kubeadm writes it, /var/lib/kubelet/config.yaml on the node:
	// the agent reads it there.
	if err := os.WriteFile(filepath.Join(n.Dir, "config.yaml"), kcfg, 0o644); err != nil {
		return nil, err
	}
	if opts.BeforeKubelet != nil {
		if err := opts.BeforeKubelet(n); err != nil {
			return nil, err
		}
	}
	if err := c.startKubelet(n); err != nil {
		return nil, err
	}
	c.logf("node %s (%s) starting", name, n.IP)
	err = poll(ctx, 90*time.Second, "node "+name+" to register", func() (bool, error) {
		if !n.proc.running() {
			return false, fmt.Errorf("node %s exited; see %s", name, c.logPath("node-"+name))
		}
		_, err := c.Client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		return err == nil, nil
	})
	if err != nil {
		return nil, err
	}
	if controlPlane {
		// NodeRestriction forbids a kubelet to label itself a control plane.
		patch := `{"metadata":{"labels":{"node-role.kubernetes.io/control-plane":""}}}`
		if _, err := c.Client.CoreV1().Nodes().Patch(ctx, name, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
			return nil, err
		}
	}
	return n, nil
}

func (c *Cluster) startKubelet(n *Node) error {
	root := filepath.Dir(n.Dir)
	var podIPs []string
	for k := 0; k < 10; k++ {
		podIPs = append(podIPs, fmt.Sprintf("192.0.2.%d", 100+10*n.index+k))
	}
	for _, d := range []string{"log-pods", "log-containers"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			return err
		}
	}
	args := []string{"nsenter", "--net=" + c.ns.path, "--", "unshare", "-m", "--propagation", "private",
		c.cfg.Binaries.Localnode, "node", "--dir", root, "--ip", n.IP, "--cri", filepath.Join(root, "cri.sock"),
		"--bind", n.Dir + ":/var/lib/kubelet",
		"--bind", filepath.Join(root, "log-pods") + ":/var/log/pods",
		"--bind", filepath.Join(root, "log-containers") + ":/var/log/containers",
		"--image", "certready=" + c.cfg.Binaries.Certready,
		"--image-file", "certready=" + c.cfg.Binaries.CertreadyNode + "=/usr/local/bin/certready-node",
	}
	if npd := c.cfg.Binaries.NodeProblemDetector; npd != "" {
		args = append(args, "--image", NPDImage+"="+npd+"="+npdImagePath)
	}
	args = append(args,
		"--pod-ips", strings.Join(podIPs, ","),
		"--kubelet-flags-file", filepath.Join(root, "kubeadm-flags.env"),
		"--", c.bin("kubelet"),
		"--config="+filepath.Join(n.Dir, "config.yaml"),
		"--kubeconfig="+filepath.Join(root, "kubeconfig"),
		"--hostname-override="+n.Name, "--node-ip="+n.IP, "--v=2",
	)
	if n.opts.ExternalCloudProvider {
		args = append(args, "--cloud-provider=external")
	}
	p, err := c.sup.start("node-"+n.Name, c.logPath("node-"+n.Name), args, nil)
	if err != nil {
		return err
	}
	n.proc = p
	return nil
}

// kubeletConfig is the node's KubeletConfiguration: serving certificates
// bootstrapped through CSRs and rotated, on a host without cgroups for
// pods, and registering with the control-plane or the readiness taint.
func kubeletConfig(n *Node, root, ca string) ([]byte, error) {
	no, yes := false, true
	empty := ""
	gcHigh, gcLow := int32(100), int32(99)
	cfg := kubeletv1beta1.KubeletConfiguration{
		TypeMeta:                 metav1.TypeMeta{APIVersion: "kubelet.config.k8s.io/v1beta1", Kind: "KubeletConfiguration"},
		Address:                  n.IP,
		HealthzBindAddress:       n.IP,
		ServerTLSBootstrap:       !n.opts.ServingBootstrapOff,
		RotateCertificates:       true,
		ContainerRuntimeEndpoint: "unix://" + root + "/cri.sock",
		CgroupsPerQOS:            &no,
		// "none": nothing enforced (without cgroups for pods there is
		// nothing to enforce it with); an empty list would read as unset.
		EnforceNodeAllocatable:        []string{"none"},
		FailSwapOn:                    &no,
		FailCgroupV1:                  &no,
		CgroupDriver:                  "cgroupfs",
		LocalStorageCapacityIsolation: &no,
		ResolverConfig:                &empty,
		EvictionHard:                  map[string]string{"memory.available": "1Mi", "nodefs.available": "1%", "imagefs.available": "1%"},
		ImageGCHighThresholdPercent:   &gcHigh,
		ImageGCLowThresholdPercent:    &gcLow,
		Authentication: kubeletv1beta1.KubeletAuthentication{
			Anonymous: kubeletv1beta1.KubeletAnonymousAuthentication{Enabled: &no},
			Webhook:   kubeletv1beta1.KubeletWebhookAuthentication{Enabled: &yes},
			X509:      kubeletv1beta1.KubeletX509Authentication{ClientCAFile: ca},
		},
		Authorization: kubeletv1beta1.KubeletAuthorization{Mode: kubeletv1beta1.KubeletAuthorizationModeWebhook},
	}
	if n.ControlPlane {
		cfg.RegisterWithTaints = []corev1.Taint{{Key: "node-role.kubernetes.io/control-plane", Effect: corev1.TaintEffectNoSchedule}}
	} else {
		cfg.RegisterWithTaints = []corev1.Taint{{Key: ReadinessTaint, Value: "pending", Effect: corev1.TaintEffectNoSchedule}}
	}
	return yaml.Marshal(cfg)
}

// RemoveNode stops the node's kubelet and the containers it ran, deletes
// its Node object and forgets it: a node taken out of the cluster.
func (c *Cluster) RemoveNode(ctx context.Context, name string) error {
	n := c.Node(name)
	if n == nil {
		return fmt.Errorf("no node %s in the local cluster", name)
	}
	pods, err := c.Client.CoreV1().Pods("").List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + name})
	if err != nil {
		return err
	}
	if n.proc != nil {
		n.proc.stop(10 * time.Second)
	}
	for _, p := range pods.Items {
		for _, pid := range ContainerPIDs("POD_NAME=" + p.Name) {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	}
	c.mu.Lock()
	for i, m := range c.nodes {
		if m == n {
			c.nodes = append(c.nodes[:i], c.nodes[i+1:]...)
			break
		}
	}
	c.mu.Unlock()
	if err := c.Client.CoreV1().Nodes().Delete(ctx, name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		return err
	}
	zero := int64(0)
	for _, p := range pods.Items {
		// The pods of a node that is gone: nothing will confirm their end.
		_ = c.Client.CoreV1().Pods(p.Namespace).Delete(ctx, p.Name, metav1.DeleteOptions{GracePeriodSeconds: &zero})
	}
	return nil
}

// Nodes lists the nodes.
func (c *Cluster) Nodes() []*Node {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]*Node(nil), c.nodes...)
}

// Node returns the node called name, or nil.
func (c *Cluster) Node(name string) *Node {
	for _, n := range c.Nodes() {
		if n.Name == name {
			return n
		}
	}
	return nil
}

// RestartKubelet restarts the node's kubelet alone (SIGHUP to its
// localnode): the containers keep running, as when a real node's kubelet
// service restarts.
func (c *Cluster) RestartKubelet(name string) error {
	n := c.Node(name)
	if n == nil || n.proc == nil {
		return fmt.Errorf("no node %s in the local cluster", name)
	}
	if !n.proc.running() {
		return fmt.Errorf("node %s is not running; see %s", name, c.logPath("node-"+name))
	}
	return n.proc.cmd.Process.Signal(syscall.SIGHUP)
}

// MoveNodeIP renumbers node name as a host whose address changed while its
// kubelet keeps listening where it did and keeps its certificate: newIP
// reaches the kubelet from the API server (RouteAPIServerToKubelet), the
// kubelet restarts with --node-ip=newIP (in kubeadm-flags.env, where
// kubeadm puts it) and so reports it as its InternalIP. undo reverts the
// network and the flags file (the kubelet keeps reporting newIP until
// restarted).
func (c *Cluster) MoveNodeIP(name, newIP string) (undo func() error, err error) {
	n := c.Node(name)
	if n == nil {
		return nil, fmt.Errorf("no node %s in the local cluster", name)
	}
	unroute, err := c.RouteAPIServerToKubelet(name, newIP)
	if err != nil {
		return nil, err
	}
	flags := filepath.Join(filepath.Dir(n.Dir), "kubeadm-flags.env")
	undo = func() error {
		rm := os.Remove(flags)
		if errors.Is(rm, os.ErrNotExist) {
			rm = nil
		}
		return errors.Join(unroute(), rm)
	}
	if err := os.WriteFile(flags, []byte(`KUBELET_KUBEADM_ARGS="--node-ip=`+newIP+`"`+"\n"), 0o644); err != nil {
		return nil, errors.Join(err, undo())
	}
	c.logf("node %s: kubelet restarting with --node-ip=%s (listening on %s)", name, newIP, n.IP)
	if err := c.RestartKubelet(name); err != nil {
		return nil, errors.Join(err, undo())
	}
	return undo, nil
}

// RouteAPIServerToKubelet makes ip one more address of node name's host as
// the API server sees it: ip is added to the namespace and the API
// server's connections to its kubelet port reach the node's kubelet (a
// DNAT for the API server's group alone: every other process finds
// nothing listening there). undo removes both.
func (c *Cluster) RouteAPIServerToKubelet(name, ip string) (undo func() error, err error) {
	n := c.Node(name)
	if n == nil {
		return nil, fmt.Errorf("no node %s in the local cluster", name)
	}
	// One address (/32, /128): no route of its own that could shadow
	// another range of the namespace.
	host := ip + "/32"
	if strings.Contains(ip, ":") {
		host = ip + "/128"
	}
	if err := c.ns.exec("ip", "addr", "add", host, "dev", linkName); err != nil {
		return nil, err
	}
	dnat := func(op string) error {
		return c.ns.exec("iptables", "-t", "nat", op, "OUTPUT", "-m", "owner", "--gid-owner", strconv.Itoa(APIServerGID),
			"-d", ip, "-p", "tcp", "--dport", "10250", "-j", "DNAT", "--to-destination", net.JoinHostPort(n.IP, "10250"))
	}
	if err := dnat("-A"); err != nil {
		return nil, errors.Join(err, c.ns.exec("ip", "addr", "del", host, "dev", linkName))
	}
	return func() error {
		return errors.Join(dnat("-D"), c.ns.exec("ip", "addr", "del", host, "dev", linkName))
	}, nil
}

// Workers lists the worker nodes.
func (c *Cluster) Workers() []*Node {
	var out []*Node
	for _, n := range c.Nodes() {
		if !n.ControlPlane {
			out = append(out, n)
		}
	}
	return out
}

// NodeRESTConfig is a client configuration with the node's own kubelet
// credentials (system:node:<name>), to act as that node would.
func (c *Cluster) NodeRESTConfig(name string) *rest.Config {
	cfg := rest.CopyConfig(c.RESTConfig)
	cfg.TLSClientConfig.CertFile = c.pki.path("node-" + name + ".crt")
	cfg.TLSClientConfig.KeyFile = c.pki.path("node-" + name + ".key")
	return cfg
}

// ContainerPIDs returns the host pids of container processes whose
// environment holds env (for example POD_NAME=<pod>).
func ContainerPIDs(env string) []int {
	var out []int
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid := 0
		if _, err := fmt.Sscanf(e.Name(), "%d", &pid); err != nil || pid <= 0 {
			continue
		}
		data, err := os.ReadFile(filepath.Join("/proc", e.Name(), "environ"))
		if err != nil {
			continue
		}
		for _, kv := range strings.Split(string(data), "\x00") {
			if kv == env {
				out = append(out, pid)
				break
			}
		}
	}
	return out
}
