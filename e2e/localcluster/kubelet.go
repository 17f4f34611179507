package localcluster

import (
	"crypto/ecdsa"
	"fmt"
	"net"
	"os"

	certv1 "k8s.io/api/certificates/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/certready/certready/internal/names"
	"github.com/certready/certready/internal/testpki"
)

// What the harness does as a kubelet does it, for the e2e suite and the
// benchmarks.

// KubeletServingCSR makes a serving CSR as a kubelet does: a new ECDSA P-256
// key, subject system:node:<node> in O system:nodes, the given IP SANs, the
// kubelet-serving signer, usages digital signature and server auth. meta
// names (Name or GenerateName) and labels it. It returns the CSR, not yet
// created, and its private key.
func KubeletServingCSR(meta metav1.ObjectMeta, node string, ips ...string) (*certv1.CertificateSigningRequest, *ecdsa.PrivateKey, error) {
	req := testpki.Request{Node: node}
	for _, s := range ips {
		ip := net.ParseIP(s)
		if ip == nil {
			return nil, nil, fmt.Errorf("%q is not an IP address", s)
		}
		req.IPs = append(req.IPs, ip)
	}
	csrPEM, key, err := testpki.NewCSR(req)
	if err != nil {
		return nil, nil, err
	}
	return &certv1.CertificateSigningRequest{
		ObjectMeta: meta,
		Spec: certv1.CertificateSigningRequestSpec{
			Request:    csrPEM,
			SignerName: names.SignerName,
			Usages:     []certv1.KeyUsage{certv1.UsageDigitalSignature, certv1.UsageServerAuth},
		},
	}, key.(*ecdsa.PrivateKey), nil
}

// SwapSymlink points the symlink link at target as the kubelet replaces
// kubelet-server-current.pem: a new symlink renamed onto the old one.
func SwapSymlink(link, target string) error {
	tmp := link + ".swap"
	_ = os.Remove(tmp)
	if err := os.Symlink(target, tmp); err != nil {
		return err
	}
	return os.Rename(tmp, link)
}
