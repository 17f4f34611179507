// Package localcluster runs a real Kubernetes cluster made of the real
// binaries (etcd, kube-apiserver, kube-controller-manager, kube-scheduler,
// kubelet) as processes in a network namespace of its own, without Docker.
// Each node has its own mount namespace in which its folders appear at the
// standard paths, and a CRI runtime of this project's own that runs
// certready's image as real processes. Stop leaves nothing behind.
package localcluster

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/certready/certready/internal/names"
)

// ReadinessTaint is the taint workers register with.
const ReadinessTaint = names.TaintKey

// Binaries are the programs the cluster runs.
type Binaries struct {
	K8sDir    string // etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kubelet
	Certready string // the certready binary: the content of image certready:*
	// CertreadyNode is its node build (-tags nodeonly), the image's
	// /usr/local/bin/certready-node, which the agent's DaemonSet runs.
	CertreadyNode string
	Localnode     string // this module's cmd/localnode
	// NodeProblemDetector, optional: node-problem-detector's daemon, the
	// content of its upstream image (NPDImage) at /node-problem-detector.
	NodeProblemDetector string
}

// BinariesFromEnv reads CERTREADY_K8S_BIN, CERTREADY_BIN, CERTREADY_NODE_BIN
// and CERTREADY_LOCALNODE_BIN (set by e2e/Makefile) and names what is
// missing.
func BinariesFromEnv() (Binaries, error) {
	b := Binaries{K8sDir: os.Getenv("CERTREADY_K8S_BIN"), Certready: os.Getenv("CERTREADY_BIN"), CertreadyNode: os.Getenv("CERTREADY_NODE_BIN"), Localnode: os.Getenv("CERTREADY_LOCALNODE_BIN")}
	for name, path := range map[string]string{"CERTREADY_K8S_BIN": b.K8sDir, "CERTREADY_BIN": b.Certready, "CERTREADY_NODE_BIN": b.CertreadyNode, "CERTREADY_LOCALNODE_BIN": b.Localnode} {
		if path == "" {
			return b, fmt.Errorf("%s is not set: run through 'make -C e2e test' or 'make demo', which build the binaries", name)
		}
		if _, err := os.Stat(path); err != nil {
			return b, fmt.Errorf("%s=%s: %w", name, path, err)
		}
	}
	if npd := os.Getenv("CERTREADY_NPD_BIN"); npd != "" {
		if _, err := os.Stat(npd); err != nil {
			return b, fmt.Errorf("CERTREADY_NPD_BIN=%s: %w", npd, err)
		}
		b.NodeProblemDetector = npd
	}
	return b, nil
}

// NPDImage is node-problem-detector's upstream image: its containers run
// Binaries.NodeProblemDetector, at the path the image has it.
const (
	NPDImage     = "registry.k8s.io/node-problem-detector/node-problem-detector"
	npdImagePath = "/node-problem-detector"
)

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
	added int // nodes ever added: the next one's index (its address)
	procs map[string]*proc
	// kubeletsUnverified: kube-apiserver runs without
	// --kubelet-certificate-authority (VerifyKubelets).
	kubeletsUnverified bool
	// addressTypes: kube-apiserver's --kubelet-preferred-address-types
	// ("": InternalIP; PreferAddressTypes).
	addressTypes string

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

func (c *Cluster) bin(name string) string { return filepath.Join(c.cfg.Binaries.K8sDir, name) }

func (c *Cluster) logPath(name string) string {
	return filepath.Join(c.cfg.StateDir, "logs", name+".log")
}

// startInNS starts a control-plane process inside the network namespace.
func (c *Cluster) startInNS(name string, args ...string) (*proc, error) {
	return c.startInNSAs(name, nil, args...)
}

// startInNSAs is startInNS with the process's credentials.
func (c *Cluster) startInNSAs(name string, cred *syscall.Credential, args ...string) (*proc, error) {
	if err := os.MkdirAll(filepath.Join(c.cfg.StateDir, "logs"), 0o755); err != nil {
		return nil, err
	}
	argv := append([]string{"nsenter", "--net=" + c.ns.path, "--"}, args...)
	p, err := c.sup.startAs(name, c.logPath(name), argv, nil, cred)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	c.procs[name] = p
	c.mu.Unlock()
	return p, nil
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
func (c *Cluster) Logs(name string, lines int) string { return tail(c.logPath(name), lines) }

// tail returns the last lines of the file at path, or why it could not.
func tail(path string, lines int) string {
	data, err := os.ReadFile(path)
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
