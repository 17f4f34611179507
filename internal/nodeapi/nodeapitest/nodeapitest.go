// Package nodeapitest adapts a clientset (client-go's fake, in tests) to
// nodeapi.API, so that the node side's tests keep the fake's tracker,
// reactors and recorded actions. Tests only: it links the whole clientset.
package nodeapitest

import (
	"context"

	certv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	"github.com/certready/certready/internal/nodeapi"
)

// FromClientset is nodeapi.API over cs.
func FromClientset(cs kubernetes.Interface) nodeapi.API { return adapter{cs} }

type adapter struct{ cs kubernetes.Interface }

func tweaked(tweak func(*metav1.ListOptions), o metav1.ListOptions) metav1.ListOptions {
	if tweak != nil {
		tweak(&o)
	}
	return o
}

// The fake clientset cannot stream initial events (watch-list): the
// ListerWatchers say so, as client-go's own informers do for it.
func (a adapter) Nodes(tweak func(*metav1.ListOptions)) cache.ListerWatcher {
	return cache.ToListWatcherWithWatchListSemantics(&cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			return a.cs.CoreV1().Nodes().List(ctx, tweaked(tweak, o))
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			return a.cs.CoreV1().Nodes().Watch(ctx, tweaked(tweak, o))
		},
	}, a.cs)
}

func (a adapter) CSRs(tweak func(*metav1.ListOptions)) cache.ListerWatcher {
	return cache.ToListWatcherWithWatchListSemantics(&cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			return a.cs.CertificatesV1().CertificateSigningRequests().List(ctx, tweaked(tweak, o))
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			return a.cs.CertificatesV1().CertificateSigningRequests().Watch(ctx, tweaked(tweak, o))
		},
	}, a.cs)
}

func (a adapter) ConfigMaps(namespace string, tweak func(*metav1.ListOptions)) cache.ListerWatcher {
	return cache.ToListWatcherWithWatchListSemantics(&cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			return a.cs.CoreV1().ConfigMaps(namespace).List(ctx, tweaked(tweak, o))
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			return a.cs.CoreV1().ConfigMaps(namespace).Watch(ctx, tweaked(tweak, o))
		},
	}, a.cs)
}

func (a adapter) GetNode(ctx context.Context, name string) (*corev1.Node, error) {
	return a.cs.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
}

func (a adapter) ListCSRs(ctx context.Context, opts metav1.ListOptions) (*certv1.CertificateSigningRequestList, error) {
	return a.cs.CertificatesV1().CertificateSigningRequests().List(ctx, opts)
}

func (a adapter) PatchNodeStatus(ctx context.Context, node string, patch []byte) error {
	_, err := a.cs.CoreV1().Nodes().Patch(ctx, node, types.StrategicMergePatchType, patch, metav1.PatchOptions{}, "status")
	return err
}

func (a adapter) ClusterUID(ctx context.Context) (string, error) {
	ns, err := a.cs.CoreV1().Namespaces().Get(ctx, metav1.NamespaceSystem, metav1.GetOptions{})
	if err != nil {
		return "", err
	}
	return string(ns.UID), nil
}

func (a adapter) CreateEvent(ctx context.Context, e *corev1.Event) error {
	_, err := a.cs.CoreV1().Events(e.Namespace).Create(ctx, e, metav1.CreateOptions{})
	return err
}

func (a adapter) PodLog(ctx context.Context, namespace, pod, container string) error {
	limit := int64(1)
	return a.cs.CoreV1().Pods(namespace).GetLogs(pod, &corev1.PodLogOptions{Container: container, LimitBytes: &limit}).Do(ctx).Error()
}
