package main

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	certv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"
)

func main() {
	cfg, err := clientcmd.BuildConfigFromFlags("", os.Args[1])
	if err != nil {
		panic(err)
	}
	sch := runtime.NewScheme()
	_ = corev1.AddToScheme(sch)
	_ = certv1.AddToScheme(sch)
	metav1.AddToGroupVersion(sch, corev1.SchemeGroupVersion)
	codecs := serializer.NewCodecFactory(sch)
	c := *cfg
	c.GroupVersion = &corev1.SchemeGroupVersion
	c.APIPath = "/api"
	c.NegotiatedSerializer = codecs.WithoutConversion()
	rc, err := rest.RESTClientFor(&c)
	if err != nil {
		panic(err)
	}
	lw := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			out := &corev1.NodeList{}
			err := rc.Get().Resource("nodes").VersionedParams(&o, runtime.NewParameterCodec(sch)).Do(ctx).Into(out)
			return out, err
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			o.Watch = true
			return rc.Get().Resource("nodes").VersionedParams(&o, runtime.NewParameterCodec(sch)).Watch(ctx)
		},
	}
	inf := cache.NewSharedIndexInformer(lw, &corev1.Node{}, 0, cache.Indexers{})
	go inf.Run(context.Background().Done())
	reg := prometheus.NewRegistry()
	reg.MustRegister(prometheus.NewGauge(prometheus.GaugeOpts{Name: "x"}))
	go http.ListenAndServe("127.0.0.1:19731", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	klog.Info("started")
	time.Sleep(time.Hour)
	fmt.Println()
}
