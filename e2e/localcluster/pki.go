package localcluster

import (
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"time"

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/certready/certready/internal/testpki"
)

// pki is the cluster's certificate authority (the product's own test CA,
// internal/testpki) and the files made from it.
type pki struct {
	dir string
	ca  *testpki.CA
}

func newPKI(dir string) (*pki, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	ca, err := testpki.NewCA("certready-local-ca")
	if err != nil {
		return nil, err
	}
	p := &pki{dir: dir, ca: ca}
	if err := os.WriteFile(p.path("ca.crt"), ca.PEM(), 0o644); err != nil {
		return nil, err
	}
	kder, err := x509.MarshalPKCS8PrivateKey(ca.Key)
	if err != nil {
		return nil, err
	}
	if err := writePEM(p.path("ca.key"), "PRIVATE KEY", kder, 0o600); err != nil {
		return nil, err
	}
	// The service-account signing key pair.
	sa, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return nil, err
	}
	sder, err := x509.MarshalPKCS8PrivateKey(sa)
	if err != nil {
		return nil, err
	}
	if err := writePEM(p.path("sa.key"), "PRIVATE KEY", sder, 0o600); err != nil {
		return nil, err
	}
	pub, err := x509.MarshalPKIXPublicKey(sa.Public())
	if err != nil {
		return nil, err
	}
	if err := writePEM(p.path("sa.pub"), "PUBLIC KEY", pub, 0o644); err != nil {
		return nil, err
	}
	return p, nil
}

func (p *pki) path(name string) string { return filepath.Join(p.dir, name) }

// pair issues a certificate for a year, signed by the CA.
func (p *pki) pair(cn string, orgs []string, ips []net.IP, dns []string, usage x509.ExtKeyUsage) (*testpki.Pair, error) {
	if orgs == nil {
		orgs = []string{} // testpki's default is system:nodes
	}
	pair, err := p.ca.Issue(testpki.Serving{CN: cn, Orgs: orgs, IPs: ips, DNSNames: dns,
		NotAfter: time.Now().Add(365 * 24 * time.Hour), EKU: []x509.ExtKeyUsage{usage}})
	if err != nil {
		return nil, fmt.Errorf("issuing a certificate for %s: %w", cn, err)
	}
	return pair, nil
}

// issue writes <name>.crt and <name>.key signed by the CA.
func (p *pki) issue(name, cn string, orgs []string, ips []net.IP, dns []string, usage x509.ExtKeyUsage) error {
	pair, err := p.pair(cn, orgs, ips, dns, usage)
	if err != nil {
		return err
	}
	if err := os.WriteFile(p.path(name+".crt"), pair.CertPEM(), 0o644); err != nil {
		return err
	}
	return os.WriteFile(p.path(name+".key"), pair.KeyPEM(), 0o600)
}

func (p *pki) client(name, cn string, orgs ...string) error {
	return p.issue(name, cn, orgs, nil, nil, x509.ExtKeyUsageClientAuth)
}

func writePEM(path, typ string, der []byte, mode os.FileMode) error {
	return os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), mode)
}

// kubeconfig writes a kubeconfig for the client certificate name.
func (p *pki) kubeconfig(path, server, name string) error {
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["local"] = &clientcmdapi.Cluster{Server: server, CertificateAuthority: p.path("ca.crt")}
	cfg.AuthInfos[name] = &clientcmdapi.AuthInfo{ClientCertificate: p.path(name + ".crt"), ClientKey: p.path(name + ".key")}
	cfg.Contexts["local"] = &clientcmdapi.Context{Cluster: "local", AuthInfo: name}
	cfg.CurrentContext = "local"
	return clientcmd.WriteToFile(*cfg, path)
}
