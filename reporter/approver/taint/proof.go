package taint

import (
	"context"
	"crypto/sha256"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"net"
	"slices"
	"strconv"
	"sync"
	"time"

	certv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"

	"github.com/certready/certready/internal/csrstate"
	"github.com/certready/certready/internal/fingerprint"
	"github.com/certready/certready/internal/names"
	"github.com/certready/certready/reporter/servingcert/observe"
	"github.com/certready/certready/reporter/servingcert/probe"
)

// Prover looks at a node's kubelet as the API server would before the
// fallback lifts its taint: it dials the node's address of the first
// preferred type on its kubelet port, and wants a certificate that
// verifies for that address against the kubelet CA, names the node, and
// was issued by a kubelet-serving CSR of that node (or is older than the
// CSR cleaner's retention, which deleted its CSR). A False condition says
// the node's agent checked; this says the approver saw it too, so that a
// node that holds the agent's token but no approved certificate stays
// tainted.
type Prover struct {
	Roots *x509.CertPool
	// AddressTypes: the API server's --kubelet-preferred-address-types
	// (observe.DefaultPreferredAddressTypes when empty).
	AddressTypes []corev1.NodeAddressType
	// Port: the kubelet port (0: the Node's daemonEndpoints, else 10250).
	Port    int
	Timeout time.Duration
	// Issued returns the fingerprints of the certificates issued to node's
	// kubelet-serving CSRs (IssuedIndex.Of).
	Issued func(node string) []fingerprint.SHA256
	// Retention: a certificate at least this old needs no CSR.
	Retention time.Duration
	// Now is the clock (time.Now when nil).
	Now func() time.Time
}

// Prove returns nil when node's kubelet serves a certificate it was issued.
func (p *Prover) Prove(ctx context.Context, node *corev1.Node) error {
	info := observe.NodeInfo(node, p.AddressTypes)
	if info.Dial == "" {
		return fmt.Errorf("the node reports no address of the types %v to dial", p.addressTypes())
	}
	now := time.Now()
	if p.Now != nil {
		now = p.Now()
	}
	port := observe.KubeletPort(p.Port, node)
	res := probe.Probe(ctx, probe.Target{Addr: net.JoinHostPort(info.Dial, strconv.Itoa(port)), ServerName: info.Dial, Roots: p.Roots, Timeout: p.Timeout, Now: now})
	if res.Outcome != probe.Presented {
		return fmt.Errorf("the kubelet serves no certificate: %s", res.Describe())
	}
	if res.VerifyErr != nil {
		return fmt.Errorf("%s presents %s, which does not verify for %s (%s) against the kubelet CA: %w", res.Addr, res.Fingerprint, info.Dial, info.DialType, res.VerifyErr)
	}
	if cn, orgs := res.Leaf.Subject.CommonName, res.Leaf.Subject.Organization; cn != names.NodeUser(node.Name) || !slices.Contains(orgs, names.NodesGroup) {
		return fmt.Errorf("%s presents %s for %q %v, not for %s", res.Addr, res.Fingerprint, cn, orgs, names.NodeUser(node.Name))
	}
	if p.Issued != nil && slices.Contains(p.Issued(node.Name), res.Fingerprint) {
		return nil
	}
	if age := now.Sub(res.Leaf.NotBefore); p.Retention > 0 && age >= p.Retention {
		return nil // its CSR is gone with age; the chain and the name are proven
	}
	return fmt.Errorf("%s presents %s, issued %s ago, which no issued kubelet-serving CSR of %s explains", res.Addr, res.Fingerprint, now.Sub(res.Leaf.NotBefore).Round(time.Second), node.Name)
}

func (p *Prover) addressTypes() []corev1.NodeAddressType {
	if len(p.AddressTypes) == 0 {
		return observe.DefaultPreferredAddressTypes
	}
	return p.AddressTypes
}

// IssuedIndex keeps, by requesting node, the fingerprint of each
// certificate issued to a kubelet-serving CSR, read before the CSR cache
// drops the certificate itself (Observe runs in the informer's transform):
// 32 bytes per issued CSR instead of the certificate.
type IssuedIndex struct {
	mu     sync.RWMutex
	byNode map[string]map[types.UID]fingerprint.SHA256
}

// NewIssuedIndex returns an empty index.
func NewIssuedIndex() *IssuedIndex {
	return &IssuedIndex{byNode: map[string]map[types.UID]fingerprint.SHA256{}}
}

// Transform records obj's issued certificate, then applies next.
func (i *IssuedIndex) Transform(next cache.TransformFunc) cache.TransformFunc {
	return func(obj any) (any, error) {
		if c, ok := obj.(*certv1.CertificateSigningRequest); ok {
			i.observe(c)
		}
		return next(obj)
	}
}

func (i *IssuedIndex) observe(c *certv1.CertificateSigningRequest) {
	node, ok := names.NodeOf(c.Spec.Username)
	if !ok || c.Spec.SignerName != names.SignerName || csrstate.Of(c) != csrstate.Issued {
		return
	}
	block, _ := pem.Decode(c.Status.Certificate)
	if block == nil || block.Type != "CERTIFICATE" {
		return
	}
	i.mu.Lock()
	defer i.mu.Unlock()
	m := i.byNode[node]
	if m == nil {
		m = map[types.UID]fingerprint.SHA256{}
		i.byNode[node] = m
	}
	m[c.UID] = sha256.Sum256(block.Bytes)
}

// Forget drops a deleted CSR (an informer's DeleteFunc).
func (i *IssuedIndex) Forget(obj any) {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	c, ok := obj.(*certv1.CertificateSigningRequest)
	if !ok {
		return
	}
	node, _ := names.NodeOf(c.Spec.Username)
	i.mu.Lock()
	defer i.mu.Unlock()
	if m := i.byNode[node]; m != nil {
		delete(m, c.UID)
		if len(m) == 0 {
			delete(i.byNode, node)
		}
	}
}

// Of returns the fingerprints issued to node.
func (i *IssuedIndex) Of(node string) []fingerprint.SHA256 {
	i.mu.RLock()
	defer i.mu.RUnlock()
	out := make([]fingerprint.SHA256, 0, len(i.byNode[node]))
	for _, f := range i.byNode[node] {
		out = append(out, f)
	}
	return out
}
