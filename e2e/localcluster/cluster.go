// Package localcluster runs a real Kubernetes cluster made of the real
// binaries (etcd, kube-apiserver, kube-controller-manager, kube-scheduler,
// kubelet) as processes in a network namespace of its own, without Docker.
// Each node has its own mount namespace in which its folders appear at the
// standard paths, and a CRI runtime of this project's own that runs
// certready's image as real processes. Stop leaves nothing behind.
package localcluster

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
	kubeletv1beta1 "k8s.io/kubelet/config/v1beta1"
	"sigs.k8s.io/yaml"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/certready/certready/internal/names"
)

// StartupTaint is the taint workers register with.
const StartupTaint = names.TaintKey

// Binaries are the programs the cluster runs.
type Binaries struct {
	K8sDir    string // etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kubelet
	Certready string // the certready binary: the content of image certready:*
	Localnode string // this module's cmd/localnode
}

// BinariesFromEnv reads CERTREADY_K8S_BIN, CERTREADY_BIN and
// CERTREADY_LOCALNODE_BIN (set by e2e/Makefile) and names what is missing.
func BinariesFromEnv() (Binaries, error) {
	b := Binaries{K8sDir: os.Getenv("CERTREADY_K8S_BIN"), Certready: os.Getenv("CERTREADY_BIN"), Localnode: os.Getenv("CERTREADY_LOCALNODE_BIN")}
	for name, path := range map[string]string{"CERTREADY_K8S_BIN": b.K8sDir, "CERTREADY_BIN": b.Certready, "CERTREADY_LOCALNODE_BIN": b.Localnode} {
		if path == "" {
			return b, fmt.Errorf("%s is not set: run through 'make -C e2e test' or 'make demo', which build the binaries", name)
		}
		if _, err := os.Stat(path); err != nil {
			return b, fmt.Errorf("%s=%s: %w", name, path, err)
		}
	}
	return b, nil
}

// Config configures a cluster.
type Config struct {
	Binaries Binaries
	// StateDir holds every file of the cluster; it is removed by Stop. Keep
	// it short: CRI socket paths live below it.
	StateDir string
	// Netns names the network namespace (default certready-e2e).
	Netns   string
	Workers int
	// SigningDuration is the controller manager's --cluster-signing-duration.
	SigningDuration time.Duration
	// ControlPlaneOnly starts no kubelet at all (benchmarks simulate nodes)
	// and no node lifecycle controller.
	ControlPlaneOnly bool
	// AuditPolicy, when set, is written as the API server's audit policy;
	// the log is AuditLog().
	AuditPolicy string
	Logf        func(format string, args ...any)
}

// Node is one kubelet.
type Node struct {
	Name         string
	IP           string
	ControlPlane bool
	Dir          string // host folder that is /var/lib/kubelet inside the node
	index        int
	proc         *proc
	cluster      *Cluster
}

// PKIDir is the node's /var/lib/kubelet/pki as seen from the host.
func (n *Node) PKIDir() string { return filepath.Join(n.Dir, "pki") }

// Cluster is a running local cluster.
type Cluster struct {
	cfg        Config
	pki        *pki
	ns         *netns
	dial       *dialer
	sup        *supervisor
	forwarder  net.Listener
	createdDir []string

	mu    sync.Mutex
	nodes []*Node
	procs map[string]*proc

	// Kubeconfig is an admin kubeconfig usable from the host (through a
	// forwarder on 127.0.0.1).
	Kubeconfig string
	Client     kubernetes.Interface
	RESTConfig *rest.Config
	CAFile     string
}

func (c *Cluster) logf(format string, args ...any) {
	if c.cfg.Logf != nil {
		c.cfg.Logf(format, args...)
	}
}

// Start builds the PKI, the namespace and the processes, and waits until
// every node is registered.
func Start(ctx context.Context, cfg Config) (c *Cluster, err error) {
	if os.Geteuid() != 0 {
		return nil, errors.New("the local cluster needs root (network namespace, mounts): run as root")
	}
	if cfg.Netns == "" {
		cfg.Netns = "certready-e2e"
	}
	if cfg.Workers == 0 {
		cfg.Workers = 2
	}
	if err := os.MkdirAll(cfg.StateDir, 0o755); err != nil {
		return nil, err
	}
	c = &Cluster{cfg: cfg, sup: newSupervisor(), procs: map[string]*proc{}}
	cl := c // the named result is nil by the time a failed return's defer runs
	defer func() {
		if err != nil {
			cl.Stop()
		}
	}()
	if c.pki, err = newPKI(filepath.Join(cfg.StateDir, "pki")); err != nil {
		return nil, err
	}
	c.CAFile = c.pki.path("ca.crt")
	if err = c.issueControlPlane(); err != nil {
		return nil, err
	}
	c.logf("network namespace %s with %s", cfg.Netns, APIServerIP)
	if c.ns, err = createNetns(cfg.Netns); err != nil {
		return nil, err
	}
	if c.dial, err = newDialer(c.ns.path); err != nil {
		return nil, err
	}
	for _, d := range []string{"/var/lib/kubelet", "/var/log/pods", "/var/log/containers"} {
		if _, serr := os.Stat(d); os.IsNotExist(serr) {
			if err = os.MkdirAll(d, 0o755); err != nil {
				return nil, err
			}
			c.createdDir = append(c.createdDir, d)
		}
	}
	if err = c.startControlPlane(ctx); err != nil {
		return nil, err
	}
	if cfg.ControlPlaneOnly {
		cfg.Workers = 0
	} else if _, err = c.AddNode(ctx, "control-plane", true); err != nil {
		return nil, err
	}
	for i := 1; i <= cfg.Workers; i++ {
		if _, err = c.AddNode(ctx, fmt.Sprintf("worker-%d", i), false); err != nil {
			return nil, err
		}
	}
	// Pods can be created once the controller manager made the default
	// service account.
	err = poll(ctx, 60*time.Second, "the default service account", func() (bool, error) {
		_, err := c.Client.CoreV1().ServiceAccounts("default").Get(ctx, "default", metav1.GetOptions{})
		return err == nil, nil
	})
	if err != nil {
		return nil, err
	}
	return c, nil
}

func (c *Cluster) issueControlPlane() error {
	p := c.pki
	ips := []net.IP{net.ParseIP(APIServerIP), net.ParseIP(ServiceIP), net.ParseIP("127.0.0.1")}
	dns := []string{"kubernetes", "kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc.cluster.local", "localhost"}
	if err := p.issue("apiserver", "kube-apiserver", nil, ips, dns, x509.ExtKeyUsageServerAuth); err != nil {
		return err
	}
	for _, cl := range []struct{ name, cn, org string }{
		{"admin", "certready-e2e-admin", "system:masters"},
		{"apiserver-kubelet-client", "kube-apiserver-kubelet-client", "system:masters"},
		{"controller-manager", "system:kube-controller-manager", ""},
		{"scheduler", "system:kube-scheduler", ""},
	} {
		var orgs []string
		if cl.org != "" {
			orgs = []string{cl.org}
		}
		if err := p.client(cl.name, cl.cn, orgs...); err != nil {
			return err
		}
	}
	inside := "https://" + APIServerIP + ":6443"
	for _, n := range []string{"controller-manager", "scheduler", "admin"} {
		if err := p.kubeconfig(filepath.Join(c.cfg.StateDir, n+".kubeconfig"), inside, n); err != nil {
			return err
		}
	}
	return nil
}

func (c *Cluster) bin(name string) string { return filepath.Join(c.cfg.Binaries.K8sDir, name) }

func (c *Cluster) logPath(name string) string {
	return filepath.Join(c.cfg.StateDir, "logs", name+".log")
}

// startInNS starts a control-plane process inside the network namespace.
func (c *Cluster) startInNS(name string, args ...string) (*proc, error) {
	if err := os.MkdirAll(filepath.Join(c.cfg.StateDir, "logs"), 0o755); err != nil {
		return nil, err
	}
	argv := append([]string{"nsenter", "--net=" + c.ns.path, "--"}, args...)
	p, err := c.sup.start(name, c.logPath(name), argv, nil)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	c.procs[name] = p
	c.mu.Unlock()
	return p, nil
}

func (c *Cluster) apiserverArgs() []string {
	p := c.pki
	args := []string{c.bin("kube-apiserver"),
		"--etcd-servers=http://127.0.0.1:2379",
		"--bind-address=" + APIServerIP, "--advertise-address=" + APIServerIP, "--secure-port=6443",
		"--tls-cert-file=" + p.path("apiserver.crt"), "--tls-private-key-file=" + p.path("apiserver.key"),
		"--client-ca-file=" + p.path("ca.crt"),
		"--service-account-key-file=" + p.path("sa.pub"), "--service-account-signing-key-file=" + p.path("sa.key"),
		"--service-account-issuer=https://kubernetes.default.svc",
		"--service-cluster-ip-range=" + ServiceRange,
		"--authorization-mode=Node,RBAC", "--enable-admission-plugins=NodeRestriction",
		"--kubelet-certificate-authority=" + p.path("ca.crt"),
		"--kubelet-client-certificate=" + p.path("apiserver-kubelet-client.crt"),
		"--kubelet-client-key=" + p.path("apiserver-kubelet-client.key"),
		"--kubelet-preferred-address-types=InternalIP",
		"--allow-privileged=true",
		"--profiling=false",
	}
	if c.cfg.AuditPolicy != "" {
		args = append(args, "--audit-policy-file="+filepath.Join(c.cfg.StateDir, "audit-policy.yaml"), "--audit-log-path="+c.AuditLog())
	}
	return args
}

// AuditLog is the API server's audit log (with Config.AuditPolicy).
func (c *Cluster) AuditLog() string { return filepath.Join(c.cfg.StateDir, "logs", "audit.log") }

func (c *Cluster) startControlPlane(ctx context.Context) error {
	if c.cfg.AuditPolicy != "" {
		if err := os.WriteFile(filepath.Join(c.cfg.StateDir, "audit-policy.yaml"), []byte(c.cfg.AuditPolicy), 0o644); err != nil {
			return err
		}
	}
	c.logf("starting etcd and kube-apiserver")
	etcdDir := filepath.Join(c.cfg.StateDir, "etcd")
	if _, err := c.startInNS("etcd", c.bin("etcd"), "--data-dir="+etcdDir,
		"--listen-client-urls=http://127.0.0.1:2379", "--advertise-client-urls=http://127.0.0.1:2379",
		"--listen-peer-urls=http://127.0.0.1:2380", "--log-level=warn", "--quota-backend-bytes=4294967296"); err != nil {
		return err
	}
	if _, err := c.startInNS("kube-apiserver", c.apiserverArgs()...); err != nil {
		return err
	}
	if err := c.startForwarder(); err != nil {
		return err
	}
	if err := c.waitAPIServer(ctx); err != nil {
		return err
	}
	c.logf("starting kube-controller-manager and kube-scheduler")
	if err := c.startControllerManager(); err != nil {
		return err
	}
	_, err := c.startInNS("kube-scheduler", c.bin("kube-scheduler"),
		"--kubeconfig="+filepath.Join(c.cfg.StateDir, "scheduler.kubeconfig"),
		"--authentication-kubeconfig="+filepath.Join(c.cfg.StateDir, "scheduler.kubeconfig"),
		"--authorization-kubeconfig="+filepath.Join(c.cfg.StateDir, "scheduler.kubeconfig"),
		"--leader-elect=false", "--bind-address=127.0.0.1")
	return err
}

func (c *Cluster) startControllerManager() error {
	p := c.pki
	kc := filepath.Join(c.cfg.StateDir, "controller-manager.kubeconfig")
	args := []string{c.bin("kube-controller-manager"),
		"--kubeconfig=" + kc, "--authentication-kubeconfig=" + kc, "--authorization-kubeconfig=" + kc,
		"--cluster-signing-cert-file=" + p.path("ca.crt"), "--cluster-signing-key-file=" + p.path("ca.key"),
		"--use-service-account-credentials", "--root-ca-file=" + p.path("ca.crt"),
		"--service-account-private-key-file=" + p.path("sa.key"),
		"--service-cluster-ip-range=" + ServiceRange,
		"--leader-elect=false", "--bind-address=127.0.0.1",
		"--controllers=*,-nodeipam",
	}
	if c.cfg.ControlPlaneOnly {
		// Every Node is simulated and no kubelet posts status: the node
		// lifecycle controller would only mark each one unreachable and
		// taint it, rate-limited, for minutes after the Nodes are made: a
		// trickle of writes that real, heartbeating kubelets never cause.
		args[len(args)-1] += ",-node-lifecycle-controller,-taint-eviction-controller"
	}
	if c.cfg.SigningDuration > 0 {
		args = append(args, "--cluster-signing-duration="+c.cfg.SigningDuration.String())
	}
	_, err := c.startInNS("kube-controller-manager", args...)
	return err
}

// startForwarder exposes the API server on the host's loopback.
func (c *Cluster) startForwarder() error {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	c.forwarder = ln
	go func() {
		for {
			conn, err := ln.Accept()
			if errors.Is(err, net.ErrClosed) {
				return
			}
			if err != nil {
				// Out of file descriptors under a storm, say: wait, go on.
				time.Sleep(50 * time.Millisecond)
				continue
			}
			go c.RelayToAPIServer(conn, nil)
		}
	}()
	server := "https://" + ln.Addr().String()
	c.Kubeconfig = filepath.Join(c.cfg.StateDir, "kubeconfig")
	if err := c.pki.kubeconfig(c.Kubeconfig, server, "admin"); err != nil {
		return err
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", c.Kubeconfig)
	if err != nil {
		return err
	}
	cfg.QPS, cfg.Burst = 200, 400
	c.RESTConfig = cfg
	c.Client, err = kubernetes.NewForConfig(cfg)
	return err
}

// RelayToAPIServer connects conn to the API server inside the namespace
// and copies both ways until either side ends, then closes both. When
// received is not nil, it counts the bytes sent to conn.
func (c *Cluster) RelayToAPIServer(conn net.Conn, received *atomic.Int64) {
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	up, err := c.dial.DialContext(ctx, "tcp", APIServerIP+":6443")
	cancel()
	if err != nil {
		return
	}
	defer up.Close()
	var toConn io.Writer = conn
	if received != nil {
		toConn = countingWriter{conn, received}
	}
	done := make(chan struct{}, 2)
	go func() { _, _ = io.Copy(up, conn); done <- struct{}{} }()
	go func() { _, _ = io.Copy(toConn, up); done <- struct{}{} }()
	<-done
}

type countingWriter struct {
	w io.Writer
	n *atomic.Int64
}

func (cw countingWriter) Write(p []byte) (int, error) {
	n, err := cw.w.Write(p)
	cw.n.Add(int64(n))
	return n, err
}

func (c *Cluster) waitAPIServer(ctx context.Context) error {
	return poll(ctx, 90*time.Second, "kube-apiserver /readyz", func() (bool, error) {
		if p := c.procs["kube-apiserver"]; p != nil && !p.running() {
			return false, fmt.Errorf("kube-apiserver exited; see %s", c.logPath("kube-apiserver"))
		}
		body, err := c.Client.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(ctx)
		return err == nil && strings.TrimSpace(string(body)) == "ok", nil
	})
}

// AddNode starts one more kubelet and waits until its Node is registered.
func (c *Cluster) AddNode(ctx context.Context, name string, controlPlane bool) (*Node, error) {
	c.mu.Lock()
	idx := len(c.nodes)
	n := &Node{Name: name, IP: fmt.Sprintf("192.0.2.%d", 10+idx), ControlPlane: controlPlane, index: idx, cluster: c}
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
	if err := c.pki.client("node-"+name, names.NodeUser(name), "system:nodes"); err != nil {
		return nil, err
	}
	if err := c.pki.kubeconfig(filepath.Join(root, "kubeconfig"), "https://"+APIServerIP+":6443", "node-"+name); err != nil {
		return nil, err
	}
	kcfg, err := kubeletConfig(n, root, c.pki.path("ca.crt"))
	if err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(root, "config.yaml"), kcfg, 0o644); err != nil {
		return nil, err
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
		"--pod-ips", strings.Join(podIPs, ","),
		"--", c.bin("kubelet"),
		"--config=" + filepath.Join(root, "config.yaml"),
		"--kubeconfig=" + filepath.Join(root, "kubeconfig"),
		"--hostname-override=" + n.Name, "--node-ip=" + n.IP, "--v=2",
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
// pods, and registering with the control-plane or the startup taint.
func kubeletConfig(n *Node, root, ca string) ([]byte, error) {
	no, yes := false, true
	empty := ""
	gcHigh, gcLow := int32(100), int32(99)
	cfg := kubeletv1beta1.KubeletConfiguration{
		TypeMeta:                 metav1.TypeMeta{APIVersion: "kubelet.config.k8s.io/v1beta1", Kind: "KubeletConfiguration"},
		Address:                  n.IP,
		HealthzBindAddress:       n.IP,
		ServerTLSBootstrap:       true,
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
		cfg.RegisterWithTaints = []corev1.Taint{{Key: StartupTaint, Value: "pending", Effect: corev1.TaintEffectNoSchedule}}
	}
	return yaml.Marshal(cfg)
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

// RestartAPIServer stops and restarts kube-apiserver and waits until it serves.
func (c *Cluster) RestartAPIServer(ctx context.Context) error {
	c.mu.Lock()
	p := c.procs["kube-apiserver"]
	c.mu.Unlock()
	p.stop(10 * time.Second)
	if _, err := c.startInNS("kube-apiserver", c.apiserverArgs()...); err != nil {
		return err
	}
	return c.waitAPIServer(ctx)
}

// Kubectl runs kubectl against the cluster from the host.
func (c *Cluster) Kubectl(ctx context.Context, args ...string) (string, error) {
	// The kubectl built with the cluster's own version, else the one on PATH.
	kubectl := c.bin("kubectl")
	if _, err := os.Stat(kubectl); err != nil {
		kubectl = "kubectl"
	}
	cmd := exec.CommandContext(ctx, kubectl, append([]string{"--kubeconfig", c.Kubeconfig}, args...)...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("kubectl %s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return string(out), nil
}

// HTTPClient dials inside the cluster's namespace (for metrics endpoints).
func (c *Cluster) HTTPClient() *http.Client {
	return &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{DialContext: c.dial.DialContext}}
}

// DialContext dials an address inside the cluster's namespace.
func (c *Cluster) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	return c.dial.DialContext(ctx, network, addr)
}

// Stop ends every process and removes the namespace and the state folder.
func (c *Cluster) Stop() {
	if c.forwarder != nil {
		c.forwarder.Close()
	}
	c.sup.stopAll(10 * time.Second)
	if c.dial != nil {
		c.dial.close()
	}
	if c.ns != nil {
		c.ns.delete()
	}
	if c.cfg.StateDir != "" {
		_ = os.RemoveAll(c.cfg.StateDir)
	}
	for _, d := range c.createdDir {
		_ = os.Remove(d) // only if still empty
	}
}

// Logs returns the tail of a process's log (for failure messages).
func (c *Cluster) Logs(name string, lines int) string {
	data, err := os.ReadFile(c.logPath(name))
	if err != nil {
		return err.Error()
	}
	all := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
	if len(all) > lines {
		all = all[len(all)-lines:]
	}
	return strings.Join(all, "\n")
}

// poll calls cond every 200 ms until it is true, it errs, or timeout
// passes (an error naming what was waited for).
func poll(ctx context.Context, timeout time.Duration, what string, cond func() (bool, error)) error {
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, timeout, true, func(context.Context) (bool, error) { return cond() })
	if err != nil && wait.Interrupted(err) && ctx.Err() == nil {
		return fmt.Errorf("timed out after %s waiting for %s", timeout, what)
	}
	return err
}

// Poll is poll for callers outside the package.
func Poll(ctx context.Context, timeout time.Duration, what string, cond func() (bool, error)) error {
	return poll(ctx, timeout, what, cond)
}

// NodeCondition returns the node's condition of type t, or nil.
func NodeCondition(n *corev1.Node, t string) *corev1.NodeCondition {
	for i := range n.Status.Conditions {
		if string(n.Status.Conditions[i].Type) == t {
			return &n.Status.Conditions[i]
		}
	}
	return nil
}

// NodeRESTConfig is a client configuration with the node's own kubelet
// credentials (system:node:<name>), to act as that node would.
func (c *Cluster) NodeRESTConfig(name string) *rest.Config {
	cfg := rest.CopyConfig(c.RESTConfig)
	cfg.TLSClientConfig.CertFile = c.pki.path("node-" + name + ".crt")
	cfg.TLSClientConfig.KeyFile = c.pki.path("node-" + name + ".key")
	return cfg
}

// RestartControllerManager restarts kube-controller-manager with another
// --cluster-signing-duration (0: the default).
func (c *Cluster) RestartControllerManager(signing time.Duration) error {
	c.mu.Lock()
	p := c.procs["kube-controller-manager"]
	c.mu.Unlock()
	p.stop(10 * time.Second)
	c.cfg.SigningDuration = signing
	return c.startControllerManager()
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

// Process is a process the cluster supervises.
type Process struct{ p *proc }

// PID is the process id (of nsenter's exec'd program).
func (p *Process) PID() int { return p.p.cmd.Process.Pid }

// Stop ends it.
func (p *Process) Stop() { p.p.stop(5 * time.Second) }

// StartInNS starts args inside the cluster's network namespace; its output
// goes to the cluster's log folder as <name>.log. Stop ends it with the rest.
func (c *Cluster) StartInNS(name string, args ...string) (*Process, error) {
	p, err := c.startInNS(name, args...)
	if err != nil {
		return nil, err
	}
	return &Process{p}, nil
}

// AddAddress adds ip/24 to the namespace's link (a simulated node's address).
func (c *Cluster) AddAddress(ip string) error { return c.ns.addAddress(ip) }

// ListenInNS listens on addr inside the namespace.
func (c *Cluster) ListenInNS(addr string) (net.Listener, error) { return c.dial.listen(addr) }

// ClientCert issues a client certificate for cn/orgs from the cluster CA and
// writes a kubeconfig for it that works inside the namespace; it returns the
// kubeconfig's path and a host-usable REST config.
func (c *Cluster) ClientCert(name, cn string, orgs ...string) (string, *rest.Config, error) {
	if err := c.pki.client(name, cn, orgs...); err != nil {
		return "", nil, err
	}
	path := filepath.Join(c.cfg.StateDir, name+".kubeconfig")
	if err := c.pki.kubeconfig(path, "https://"+APIServerIP+":6443", name); err != nil {
		return "", nil, err
	}
	cfg := rest.CopyConfig(c.RESTConfig)
	cfg.TLSClientConfig.CertFile = c.pki.path(name + ".crt")
	cfg.TLSClientConfig.KeyFile = c.pki.path(name + ".key")
	return path, cfg, nil
}

// ClientCertPEM issues a client certificate and returns it and its key in
// PEM form, for clients made in memory (many simulated node identities).
func (c *Cluster) ClientCertPEM(cn string, orgs ...string) (certPEM, keyPEM []byte, err error) {
	pair, err := c.pki.pair(cn, orgs, nil, nil, x509.ExtKeyUsageClientAuth)
	if err != nil {
		return nil, nil, err
	}
	return pair.CertPEM(), pair.KeyPEM(), nil
}

// CAKeyPair returns the paths of the cluster CA certificate and key.
func (c *Cluster) CAKeyPair() (string, string) { return c.pki.path("ca.crt"), c.pki.path("ca.key") }
