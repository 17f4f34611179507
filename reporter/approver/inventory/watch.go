package inventory

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
)

// ErrConfigMapGone is what onReload receives when the inventory ConfigMap
// is absent or was deleted. The last good inventory stays in use: losing
// the desired state must not approve what it no longer lists, and must not
// refuse every node either; the operator sees the error, the metric and
// the alert instead.
var ErrConfigMapGone = errors.New("inventory ConfigMap absent or deleted; keeping the last good inventory")

// WatchConfigMap keeps s equal to the mapping in ConfigMap ns/name until
// ctx ends. onReload gets nil after each good load, the parse error of a
// rejected update, or ErrConfigMapGone; on errors s keeps its mapping.
func WatchConfigMap(ctx context.Context, client kubernetes.Interface, ns, name string, s *Static, onReload func(error)) {
	logger := klog.FromContext(ctx).WithValues("configmap", ns+"/"+name)
	f := informers.NewSharedInformerFactoryWithOptions(client, 0, informers.WithNamespace(ns),
		informers.WithTweakListOptions(func(lo *metav1.ListOptions) {
			lo.FieldSelector = fields.OneTermEqualSelector("metadata.name", name).String()
		}))
	report := func(err error) {
		if onReload != nil {
			onReload(err)
		}
	}
	load := func(obj any) {
		cm, ok := obj.(*corev1.ConfigMap)
		if !ok || cm.Namespace != ns || cm.Name != name {
			return
		}
		m, err := FromConfigMap(cm)
		if err != nil {
			logger.Error(err, "Inventory ConfigMap rejected; keeping the previous inventory")
			report(err)
			return
		}
		s.Replace(m)
		logger.Info("Inventory loaded", "nodes", len(m))
		report(nil)
	}
	gone := func(any) {
		logger.Error(ErrConfigMapGone, "Inventory ConfigMap deleted", "keptNodes", s.Size())
		report(ErrConfigMapGone)
	}
	inf := f.Core().V1().ConfigMaps().Informer()
	_, _ = inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: load, UpdateFunc: func(_, o any) { load(o) }, DeleteFunc: gone,
	})
	f.Start(ctx.Done())
	if cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) && len(inf.GetStore().List()) == 0 {
		logger.Error(ErrConfigMapGone, "Inventory ConfigMap not found; no node is known until it exists")
		report(ErrConfigMapGone)
	}
	<-ctx.Done()
	f.Shutdown()
}

// PollFile is WatchFile without file events: it reads path every interval
// and reloads s when the content changed (or could not be read before),
// until ctx ends. onReload gets each reload's error, as with WatchFile.
func PollFile(ctx context.Context, path string, s *Static, interval time.Duration, onReload func(error)) {
	logger := klog.FromContext(ctx).WithValues("file", path)
	var last []byte // the content last read (nil after a failed read)
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		data, err := os.ReadFile(path)
		if err == nil && last != nil && bytes.Equal(data, last) {
			continue
		}
		var nodes map[string]Entry
		if err != nil {
			err = fmt.Errorf("inventory file: %w", err)
		} else if nodes, err = Parse(data); err != nil {
			err = fmt.Errorf("inventory file %s: %w", path, err)
		}
		if err != nil {
			logger.Error(err, "Inventory reload failed; keeping the previous inventory")
		} else {
			s.Replace(nodes)
			logger.Info("Inventory reloaded", "nodes", len(nodes))
		}
		last = data
		if onReload != nil {
			onReload(err)
		}
	}
}
