package localcluster

import (
	"context"
	"crypto/x509"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/rest"
)

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
		return string(out), fmt.Errorf("kubectl %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
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

// NodeCondition returns the node's condition of type t, or nil.
func NodeCondition(n *corev1.Node, t string) *corev1.NodeCondition {
	for i := range n.Status.Conditions {
		if string(n.Status.Conditions[i].Type) == t {
			return &n.Status.Conditions[i]
		}
	}
	return nil
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
