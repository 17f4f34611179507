package localcluster

import (
	"context"
	"crypto/x509"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"k8s.io/client-go/kubernetes"
)

func (c *Cluster) issueControlPlane() error {
	p := c.pki
	ips := []net.IP{net.ParseIP(APIServerIP), net.ParseIP(ServiceIP), net.ParseIP("127.0.0.1")}
	// As kubeadm's: the control-plane node's name beside the Service's
	// names, and an external name (a load balancer's, kubeadm's
	// certSANs): the approver learns both from this certificate.
	dns := []string{"kubernetes", "kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc.cluster.local", "localhost",
		"control-plane", "api.certready.test"}
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
		"--kubelet-client-certificate=" + p.path("apiserver-kubelet-client.crt"),
		"--kubelet-client-key=" + p.path("apiserver-kubelet-client.key"),
		"--kubelet-preferred-address-types=" + c.preferredAddressTypes(),
		"--allow-privileged=true",
		"--profiling=false",
	}
	if !c.kubeletsUnverified {
		args = append(args, "--kubelet-certificate-authority="+p.path("ca.crt"))
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
	if _, err := c.startInNSAs("kube-apiserver", apiserverCred, c.apiserverArgs()...); err != nil {
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
		// Every Node is simulated and no kubelet posts status or reads the
		// node TTL annotation: the node lifecycle controller would only mark
		// each one unreachable and taint it, and the TTL controller would
		// patch every Node again each time the cluster size crosses one of
		// its thresholds, both rate-limited, for minutes after thousands of
		// Nodes are made: writes that would run into every measurement.
		args[len(args)-1] += ",-node-lifecycle-controller,-taint-eviction-controller,-ttl-controller"
	}
	if c.cfg.SigningDuration > 0 {
		args = append(args, "--cluster-signing-duration="+c.cfg.SigningDuration.String())
	}
	_, err := c.startInNS("kube-controller-manager", args...)
	return err
}

func (c *Cluster) waitAPIServer(ctx context.Context) error {
	return waitReadyz(ctx, c.procs["kube-apiserver"], c.Client, c.logPath("kube-apiserver"))
}

// waitReadyz waits (90 s at most) until the API server process p answers
// ok on /readyz, and fails at once, naming its log, if p exits.
func waitReadyz(ctx context.Context, p *proc, client kubernetes.Interface, logPath string) error {
	return poll(ctx, 90*time.Second, "kube-apiserver /readyz", func() (bool, error) {
		if p != nil && !p.running() {
			return false, fmt.Errorf("kube-apiserver exited; see %s:\n%s", logPath, tail(logPath, 20))
		}
		body, err := client.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(ctx)
		return err == nil && strings.TrimSpace(string(body)) == "ok", nil
	})
}

// RestartAPIServer stops and restarts kube-apiserver and waits until it serves.
func (c *Cluster) RestartAPIServer(ctx context.Context) error {
	c.mu.Lock()
	p := c.procs["kube-apiserver"]
	c.mu.Unlock()
	p.stop(10 * time.Second)
	if _, err := c.startInNSAs("kube-apiserver", apiserverCred, c.apiserverArgs()...); err != nil {
		return err
	}
	return c.waitAPIServer(ctx)
}

// APIServerGID is kube-apiserver's group (it runs as root in it): what a
// firewall rule between the control plane and a node matches, the API
// server's traffic alone (BlockAPIServerToKubelet), as the nodes' own
// processes share its network namespace and addresses.
const APIServerGID = 4242

var apiserverCred = &syscall.Credential{Uid: 0, Gid: APIServerGID, NoSetGroups: true}

// BlockAPIServerToKubelet drops (block) or lets through again the API
// server's connections to the kubelet port of the node at ip, as a
// firewall between control plane and node does; every other process still
// reaches it.
func (c *Cluster) BlockAPIServerToKubelet(ip string, block bool) error {
	op := "-D"
	if block {
		op = "-I"
	}
	return c.ns.exec("iptables", op, "OUTPUT", "-m", "owner", "--gid-owner", strconv.Itoa(APIServerGID),
		"-d", ip, "-p", "tcp", "--dport", "10250", "-j", "DROP")
}

// VerifyKubelets restarts kube-apiserver with --kubelet-certificate-authority
// (verify) or without it (kubeadm's default: it verifies no kubelet's
// serving certificate), and waits until it serves.
func (c *Cluster) VerifyKubelets(ctx context.Context, verify bool) error {
	c.mu.Lock()
	c.kubeletsUnverified = !verify
	c.mu.Unlock()
	return c.RestartAPIServer(ctx)
}

// PreferAddressTypes restarts kube-apiserver with
// --kubelet-preferred-address-types=types ("": InternalIP, the cluster's
// setting), the order in which it picks the node address it dials for
// logs, exec and port-forward, and waits until it serves.
func (c *Cluster) PreferAddressTypes(ctx context.Context, types string) error {
	c.mu.Lock()
	c.addressTypes = types
	c.mu.Unlock()
	return c.RestartAPIServer(ctx)
}

func (c *Cluster) preferredAddressTypes() string {
	if c.addressTypes == "" {
		return "InternalIP"
	}
	return c.addressTypes
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
