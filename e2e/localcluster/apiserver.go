package localcluster

import (
	"context"
	"crypto/x509"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// APIServer is etcd and kube-apiserver alone on loopback ports: the real
// API server's semantics (field and label selectors, subresources,
// preconditions, admission, RBAC) for integration tests that need no
// node. It needs neither root nor a network namespace.
type APIServer struct {
	// URL is the API server's https address on 127.0.0.1.
	URL string
	// Admin is a system:masters client and its config.
	Admin       kubernetes.Interface
	AdminConfig *rest.Config

	dir  string
	sup  *supervisor
	pki  *pki
	proc map[string]*proc
}

// StartAPIServer starts etcd and kube-apiserver from k8sDir with their
// state in dir, and waits until the API server is ready.
func StartAPIServer(ctx context.Context, k8sDir, dir string) (a *APIServer, err error) {
	a = &APIServer{dir: dir, sup: newSupervisor(), proc: map[string]*proc{}}
	defer func() {
		if err != nil {
			a.Stop()
		}
	}()
	if err := os.MkdirAll(filepath.Join(dir, "logs"), 0o755); err != nil {
		return nil, err
	}
	if a.pki, err = newPKI(filepath.Join(dir, "pki")); err != nil {
		return nil, err
	}
	ports, err := freePorts(3)
	if err != nil {
		return nil, err
	}
	etcd := "http://127.0.0.1:" + strconv.Itoa(ports[0])
	if err := a.start("etcd", filepath.Join(k8sDir, "etcd"), "--data-dir="+filepath.Join(dir, "etcd"),
		"--listen-client-urls="+etcd, "--advertise-client-urls="+etcd,
		"--listen-peer-urls=http://127.0.0.1:"+strconv.Itoa(ports[1]), "--log-level=warn"); err != nil {
		return nil, err
	}
	p := a.pki
	if err := p.issue("apiserver", "kube-apiserver", nil, []net.IP{net.ParseIP("127.0.0.1")}, []string{"localhost"}, x509.ExtKeyUsageServerAuth); err != nil {
		return nil, err
	}
	if err := p.client("admin", "certready-integration-admin", "system:masters"); err != nil {
		return nil, err
	}
	if err := a.start("kube-apiserver", filepath.Join(k8sDir, "kube-apiserver"),
		"--etcd-servers="+etcd, "--bind-address=127.0.0.1", "--advertise-address=127.0.0.1", "--secure-port="+strconv.Itoa(ports[2]),
		"--tls-cert-file="+p.path("apiserver.crt"), "--tls-private-key-file="+p.path("apiserver.key"),
		"--client-ca-file="+p.path("ca.crt"),
		"--service-account-key-file="+p.path("sa.pub"), "--service-account-signing-key-file="+p.path("sa.key"),
		"--service-account-issuer=https://kubernetes.default.svc", "--service-cluster-ip-range="+ServiceRange,
		"--authorization-mode=Node,RBAC", "--enable-admission-plugins=NodeRestriction", "--profiling=false",
		// No Endpoints for the default/kubernetes Service: it may not
		// point at a loopback address.
		"--endpoint-reconciler-type=none"); err != nil {
		return nil, err
	}
	a.URL = "https://127.0.0.1:" + strconv.Itoa(ports[2])
	a.AdminConfig = a.config("admin")
	if a.Admin, err = kubernetes.NewForConfig(a.AdminConfig); err != nil {
		return nil, err
	}
	return a, waitReadyz(ctx, a.proc["kube-apiserver"], a.Admin, a.logPath("kube-apiserver"))
}

// ClientConfig is a client certificate identity (user cn in groups orgs)
// on the API server.
func (a *APIServer) ClientConfig(cn string, orgs ...string) (*rest.Config, error) {
	pair, err := a.pki.pair(cn, orgs, nil, nil, x509.ExtKeyUsageClientAuth)
	if err != nil {
		return nil, err
	}
	return &rest.Config{Host: a.URL, TLSClientConfig: rest.TLSClientConfig{CAFile: a.pki.path("ca.crt"), CertData: pair.CertPEM(), KeyData: pair.KeyPEM()}}, nil
}

// Kubeconfig writes the admin's kubeconfig and returns its path.
func (a *APIServer) Kubeconfig() (string, error) {
	path := filepath.Join(a.dir, "admin.kubeconfig")
	return path, a.pki.kubeconfig(path, a.URL, "admin")
}

func (a *APIServer) logPath(name string) string { return filepath.Join(a.dir, "logs", name+".log") }

// Stop ends both processes; dir stays (the caller's, a test's TempDir).
func (a *APIServer) Stop() { a.sup.stopAll(10 * time.Second) }

func (a *APIServer) config(name string) *rest.Config {
	return &rest.Config{Host: a.URL, TLSClientConfig: rest.TLSClientConfig{
		CAFile: a.pki.path("ca.crt"), CertFile: a.pki.path(name + ".crt"), KeyFile: a.pki.path(name + ".key")}}
}

func (a *APIServer) start(name string, args ...string) error {
	p, err := a.sup.start(name, a.logPath(name), args, nil)
	if err != nil {
		return err
	}
	a.proc[name] = p
	return nil
}

// freePorts asks the kernel for n free loopback ports.
func freePorts(n int) ([]int, error) {
	var ports []int
	for range n {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		defer ln.Close()
		ports = append(ports, ln.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}
