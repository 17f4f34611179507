// Package nodeapi is the node side's whole use of the Kubernetes API: its
// own Node (read, and its status patched), kubelet-serving CSRs (listed and
// watched by selector) and Node events, through REST clients over a scheme
// of those two API groups only. client-go's clientset registers every API
// group at start-up; on every node of a fleet that cost is paid in memory
// (the binary's pages it touches), so the agent and the node-problem-
// detector check use this instead (bench table 4).
package nodeapi

import (
	"context"
	"fmt"

	certv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
)

// API is what the node side reads and writes. Client implements it over
// REST; tests use nodeapitest's adapter over a fake clientset.
type API interface {
	// Nodes and CSRs list and watch with tweak applied to every request
	// (the selectors).
	Nodes(tweak func(*metav1.ListOptions)) cache.ListerWatcher
	CSRs(tweak func(*metav1.ListOptions)) cache.ListerWatcher
	// ConfigMaps lists and watches in namespace (the agent's inventory,
	// selected by name).
	ConfigMaps(namespace string, tweak func(*metav1.ListOptions)) cache.ListerWatcher
	GetNode(ctx context.Context, name string) (*corev1.Node, error)
	ListCSRs(ctx context.Context, opts metav1.ListOptions) (*certv1.CertificateSigningRequestList, error)
	// PatchNodeStatus applies a strategic-merge patch to nodes/status.
	PatchNodeStatus(ctx context.Context, node string, patch []byte) error
	// CreateEvent writes an event (NodeEvents records through it).
	CreateEvent(ctx context.Context, e *corev1.Event) error
	// ClusterUID is the kube-system Namespace's UID: the cluster's
	// identity in the decision ledger.
	ClusterUID(ctx context.Context) (string, error)
	// PodLog asks the API server for at most one byte of a container's
	// log: the API server dials the pod's kubelet for it, as for kubectl
	// logs.
	PodLog(ctx context.Context, namespace, pod, container string) error
}

// Scheme holds the node side's types, and no others of their groups:
// Nodes, Events and ConfigMaps of core/v1, CertificateSigningRequests.
var Scheme = func() *runtime.Scheme {
	s := runtime.NewScheme()
	s.AddKnownTypes(corev1.SchemeGroupVersion, &corev1.Node{}, &corev1.NodeList{}, &corev1.Event{}, &corev1.EventList{}, &corev1.Namespace{},
		&corev1.ConfigMap{}, &corev1.ConfigMapList{})
	metav1.AddToGroupVersion(s, corev1.SchemeGroupVersion)
	s.AddKnownTypes(certv1.SchemeGroupVersion, &certv1.CertificateSigningRequest{}, &certv1.CertificateSigningRequestList{})
	metav1.AddToGroupVersion(s, certv1.SchemeGroupVersion)
	return s
}()

var (
	codecs         = serializer.NewCodecFactory(Scheme)
	parameterCodec = runtime.NewParameterCodec(Scheme)
)

// Client is API over REST.
type Client struct {
	core, certs rest.Interface
}

var _ API = (*Client)(nil)

// New returns a Client for cfg (its content type is kept: protobuf where
// the caller asked for it).
func New(cfg *rest.Config) (*Client, error) {
	core, err := restFor(cfg, corev1.SchemeGroupVersion, "/api")
	if err != nil {
		return nil, err
	}
	certs, err := restFor(cfg, certv1.SchemeGroupVersion, "/apis")
	if err != nil {
		return nil, err
	}
	return &Client{core: core, certs: certs}, nil
}

func restFor(cfg *rest.Config, gv schema.GroupVersion, path string) (*rest.RESTClient, error) {
	c := rest.CopyConfig(cfg)
	c.GroupVersion = &gv
	c.APIPath = path
	c.NegotiatedSerializer = codecs.WithoutConversion()
	if c.UserAgent == "" {
		c.UserAgent = rest.DefaultKubernetesUserAgent()
	}
	return rest.RESTClientFor(c)
}

// listWatch lists into a fresh list object and watches resource (in
// namespace, when not empty).
func listWatch(c rest.Interface, namespace, resource string, newList func() runtime.Object, tweak func(*metav1.ListOptions)) cache.ListerWatcher {
	return &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			if tweak != nil {
				tweak(&o)
			}
			out := newList()
			err := c.Get().Namespace(namespace).Resource(resource).VersionedParams(&o, parameterCodec).Do(ctx).Into(out)
			return out, err
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			if tweak != nil {
				tweak(&o)
			}
			o.Watch = true
			return c.Get().Namespace(namespace).Resource(resource).VersionedParams(&o, parameterCodec).Watch(ctx)
		},
	}
}

func (c *Client) Nodes(tweak func(*metav1.ListOptions)) cache.ListerWatcher {
	return listWatch(c.core, "", "nodes", func() runtime.Object { return &corev1.NodeList{} }, tweak)
}

func (c *Client) CSRs(tweak func(*metav1.ListOptions)) cache.ListerWatcher {
	return listWatch(c.certs, "", "certificatesigningrequests", func() runtime.Object { return &certv1.CertificateSigningRequestList{} }, tweak)
}

func (c *Client) ConfigMaps(namespace string, tweak func(*metav1.ListOptions)) cache.ListerWatcher {
	return listWatch(c.core, namespace, "configmaps", func() runtime.Object { return &corev1.ConfigMapList{} }, tweak)
}

func (c *Client) GetNode(ctx context.Context, name string) (*corev1.Node, error) {
	out := &corev1.Node{}
	err := c.core.Get().Resource("nodes").Name(name).Do(ctx).Into(out)
	return out, err
}

func (c *Client) ListCSRs(ctx context.Context, opts metav1.ListOptions) (*certv1.CertificateSigningRequestList, error) {
	out := &certv1.CertificateSigningRequestList{}
	err := c.certs.Get().Resource("certificatesigningrequests").VersionedParams(&opts, parameterCodec).Do(ctx).Into(out)
	return out, err
}

func (c *Client) PatchNodeStatus(ctx context.Context, node string, patch []byte) error {
	err := c.core.Patch(types.StrategicMergePatchType).Resource("nodes").Name(node).SubResource("status").Body(patch).Do(ctx).Error()
	if err != nil {
		return fmt.Errorf("patching the status of node %s: %w", node, err)
	}
	return nil
}

func (c *Client) ClusterUID(ctx context.Context) (string, error) {
	out := &corev1.Namespace{}
	if err := c.core.Get().Resource("namespaces").Name(metav1.NamespaceSystem).Do(ctx).Into(out); err != nil {
		return "", fmt.Errorf("reading namespace %s (the cluster's identity): %w", metav1.NamespaceSystem, err)
	}
	return string(out.UID), nil
}

func (c *Client) CreateEvent(ctx context.Context, e *corev1.Event) error {
	return c.core.Post().Namespace(e.Namespace).Resource("events").Body(e).Do(ctx).Error()
}

func (c *Client) PodLog(ctx context.Context, namespace, pod, container string) error {
	// Do, not DoRaw: its error carries the Status the API server sent
	// (the kubelet dial's failure, in its message).
	return c.core.Get().Namespace(namespace).Resource("pods").Name(pod).SubResource("log").
		Param("container", container).Param("limitBytes", "1").Do(ctx).Error()
}
