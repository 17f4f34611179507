// Package evidence builds what the approval policy checks a request
// against besides the request itself (policy.Evidence), and the informer
// of the requests: one constructor for the approver's own cluster, for
// each Cluster API workload cluster and for 'certready csr explain'. The
// mode says only where its inventory and its API server hosts come from.
package evidence

import (
	"errors"
	"net/netip"

	certv1 "k8s.io/api/certificates/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"

	"github.com/certready/certready/internal/trim"
	"github.com/certready/certready/reporter/approver/apiserver"
	"github.com/certready/certready/reporter/approver/inventory"
	"github.com/certready/certready/reporter/approver/policy"
)

// CSRs returns an informer (and its factory, for Start and Shutdown) of
// the kubelet-serving CSRs only, each trimmed on arrival to what the
// policy reads: a request over pol's bound is dropped before it is cached
// (and then refused unread, RequestTooLarge), so a flood of huge CSRs
// costs a transient decode each, not memory for as long as they are
// pending. observe, when set, sees each CSR whole before it is trimmed.
func CSRs(client kubernetes.Interface, pol policy.Config, observe func(next cache.TransformFunc) cache.TransformFunc) (informers.SharedInformerFactory, cache.SharedIndexInformer, error) {
	factory := informers.NewSharedInformerFactoryWithOptions(client, 0, informers.WithTweakListOptions(func(lo *metav1.ListOptions) {
		lo.FieldSelector = fields.OneTermEqualSelector("spec.signerName", certv1.KubeletServingSignerName).String()
	}))
	inf := factory.Certificates().V1().CertificateSigningRequests().Informer()
	transform := trim.CSR(trim.CSROptions{MaxRequestBytes: pol.RequestBound()})
	if observe != nil {
		transform = observe(transform)
	}
	if err := inf.SetTransform(transform); err != nil {
		return nil, nil, err
	}
	return factory, inf, nil
}

// Sources are what a mode knows: its inventory, which of its nodes host
// an API server and what is theirs, and the views of its networks. The
// API server's own names and addresses are learned from the cluster for
// every mode alike.
type Sources struct {
	// Client reads the API server's Service, EndpointSlice and
	// cluster-info; REST is the connection the approver reaches it by.
	Client kubernetes.Interface
	REST   *rest.Config
	// ExtraAPIServer are names or addresses the API server is known by
	// outside the cluster (a Cluster's spec.controlPlaneEndpoint), each
	// with where it was learned.
	ExtraAPIServer map[string]string
	// OnChange runs when the API server's identity changed: the mode
	// re-evaluates its pending CSRs.
	OnChange func()

	// Inventory records each node's names and addresses (required).
	Inventory inventory.Source
	// HostsAPIServer, HostRule and HostOwn: policy.Evidence's
	// APIServerHost, APIServerHostRule and HostOwn.
	HostsAPIServer func(node string) bool
	HostRule       string
	HostOwn        func(node string) (inventory.Entry, bool)
	// NodeNetwork and NotNodeAddress: policy.Evidence's.
	NodeNetwork    func(ip netip.Addr) (netip.Prefix, bool)
	NotNodeAddress func(ip netip.Addr) string
}

// Evidence is a mode's policy.Evidence and the API server identity it
// reads, which the mode starts and waits for.
type Evidence struct {
	Policy   policy.Evidence
	Identity *apiserver.Identity
}

// New assembles a mode's evidence. The identity is not started.
func New(s Sources) (*Evidence, error) {
	if s.Inventory == nil {
		return nil, errors.New("evidence: no inventory")
	}
	if (s.HostsAPIServer == nil) != (s.HostRule == "") {
		return nil, errors.New("evidence: an API server host rule needs both its test and its name")
	}
	identity, err := apiserver.New(apiserver.Config{Client: s.Client, REST: s.REST, Extra: s.ExtraAPIServer, OnChange: s.OnChange})
	if err != nil {
		return nil, err
	}
	return &Evidence{
		Identity: identity,
		Policy: policy.Evidence{
			Inventory:         s.Inventory,
			APIServer:         identity.Current,
			APIServerHost:     s.HostsAPIServer,
			APIServerHostRule: s.HostRule,
			HostOwn:           s.HostOwn,
			NodeNetwork:       s.NodeNetwork,
			NotNodeAddress:    s.NotNodeAddress,
		},
	}, nil
}
