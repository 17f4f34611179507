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
	"k8s.io/client-go/tools/record"
)

// API is what the node side reads and writes. Client implements it over
// REST; tests use nodeapitest's adapter over a fake clientset.
type API interface {
	// Nodes and CSRs list and watch with tweak applied to every request
	// (the selectors).
	Nodes(tweak func(*metav1.ListOptions)) cache.ListerWatcher
	CSRs(tweak func(*metav1.ListOptions)) cache.ListerWatcher
	GetNode(ctx context.Context, name string) (*corev1.Node, error)
	ListCSRs(ctx context.Context, opts metav1.ListOptions) (*certv1.CertificateSigningRequestList, error)
	// PatchNodeStatus applies a strategic-merge patch to nodes/status.
	PatchNodeStatus(ctx context.Context, node string, patch []byte) error
	// Events writes events (record.EventSink).
	Events() record.EventSink
}

// Scheme holds the node side's types: core/v1 and certificates.k8s.io/v1.
var Scheme = func() *runtime.Scheme {
	s := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{corev1.AddToScheme, certv1.AddToScheme} {
		if err := add(s); err != nil {
			panic(err)
		}
	}
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

// listWatch lists into a fresh list object and watches resource.
func listWatch(c rest.Interface, resource string, newList func() runtime.Object, tweak func(*metav1.ListOptions)) cache.ListerWatcher {
	return &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			if tweak != nil {
				tweak(&o)
			}
			out := newList()
			err := c.Get().Resource(resource).VersionedParams(&o, parameterCodec).Do(ctx).Into(out)
			return out, err
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			if tweak != nil {
				tweak(&o)
			}
			o.Watch = true
			return c.Get().Resource(resource).VersionedParams(&o, parameterCodec).Watch(ctx)
		},
	}
}

func (c *Client) Nodes(tweak func(*metav1.ListOptions)) cache.ListerWatcher {
	return listWatch(c.core, "nodes", func() runtime.Object { return &corev1.NodeList{} }, tweak)
}

func (c *Client) CSRs(tweak func(*metav1.ListOptions)) cache.ListerWatcher {
	return listWatch(c.certs, "certificatesigningrequests", func() runtime.Object { return &certv1.CertificateSigningRequestList{} }, tweak)
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

func (c *Client) Events() record.EventSink { return eventSink{c.core} }

// eventSink writes core/v1 events, as client-go's EventSinkImpl does.
type eventSink struct{ c rest.Interface }

func (s eventSink) Create(e *corev1.Event) (*corev1.Event, error) {
	out := &corev1.Event{}
	err := s.c.Post().Namespace(e.Namespace).Resource("events").Body(e).Do(context.Background()).Into(out)
	return out, err
}

func (s eventSink) Update(e *corev1.Event) (*corev1.Event, error) {
	out := &corev1.Event{}
	err := s.c.Put().Namespace(e.Namespace).Resource("events").Name(e.Name).Body(e).Do(context.Background()).Into(out)
	return out, err
}

func (s eventSink) Patch(e *corev1.Event, data []byte) (*corev1.Event, error) {
	out := &corev1.Event{}
	err := s.c.Patch(types.StrategicMergePatchType).Namespace(e.Namespace).Resource("events").Name(e.Name).Body(data).Do(context.Background()).Into(out)
	return out, err
}
