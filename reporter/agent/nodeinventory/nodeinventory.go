// Package nodeinventory reads, for the agent, what a desired-state
// inventory (--inventory: the approver's ConfigMap or a file) records for
// its node: the address the agent dials and the Node's addresses are
// compared with (verdict.Drift). Everything in it is input a namespace
// writer or the host's root controls: it is parsed strictly, bounded, and
// never decides a status.
package nodeinventory

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"

	"github.com/certready/certready/reporter/servingcert/evidence"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	"github.com/certready/certready/internal/inventorydoc"
	"github.com/certready/certready/internal/nodeapi"
)

// Source is one inventory, as it concerns one node. A nil *Source is
// none: Lookup returns nil.
type Source struct {
	spec inventorydoc.Spec
	node string
	api  nodeapi.API

	mu     sync.Mutex
	state  record // the node's, from the ConfigMap's last good document
	loaded bool   // state comes from a good document
	err    error  // why nothing is loaded
	synced atomic.Bool
}

// record is what one document says of the node.
type record struct {
	listed bool
	rec    inventorydoc.Record
}

func (r record) equal(o record) bool {
	return r.listed == o.listed && slices.Equal(r.rec.IPs, o.rec.IPs) && slices.Equal(r.rec.DNSNames, o.rec.DNSNames)
}

// HasSynced reports whether Lookup answers from the API server's state
// (a ConfigMap listed once and handled); always for a file and for none.
func (s *Source) HasSynced() bool {
	return s == nil || s.spec.Kind != "configmap" || s.synced.Load()
}

// New returns the source spec names ("configmap:<ns>/<name>" or
// "file:<path>") for node; "" and "node" are none (nil, nil). The error
// names the flag and the forms it wants.
func New(spec, node string, api nodeapi.API) (*Source, error) {
	if spec == "" || spec == "node" {
		return nil, nil
	}
	sp, err := inventorydoc.ParseSpec(spec)
	if err != nil {
		return nil, fmt.Errorf("%w (or node: the Node's own addresses)", err)
	}
	s := &Source{spec: sp, node: node, api: api}
	if sp.Kind == "configmap" {
		s.err = errors.New("not read from the API server yet (the agent's log says why; it needs get, list and watch on that ConfigMap)")
	}
	return s, nil
}

// Describe names the source: "ConfigMap ns/name", "file path".
func (s *Source) Describe() string { return s.spec.Describe() }

// Run keeps a ConfigMap's record of the node current until ctx ends,
// calling changed when it changes (a check is due): an update of other
// nodes' entries costs a parse, not a check. For a file it returns at
// once: Lookup reads the file each time.
func (s *Source) Run(ctx context.Context, changed func()) {
	if s == nil || s.spec.Kind != "configmap" {
		return
	}
	logger := klog.FromContext(ctx).WithValues("inventory", s.spec.Describe())
	lw := s.api.ConfigMaps(s.spec.Namespace, func(o *metav1.ListOptions) {
		o.FieldSelector = fields.OneTermEqualSelector("metadata.name", s.spec.Name).String()
	})
	inf := cache.NewSharedIndexInformer(lw, &corev1.ConfigMap{}, 0, cache.Indexers{})
	// A refused list or watch (RBAC) is named where the condition shows
	// it, not only in the log.
	_ = inf.SetWatchErrorHandlerWithContext(func(ctx context.Context, r *cache.Reflector, err error) {
		cache.DefaultWatchErrorHandler(ctx, r, err)
		if apierrors.IsForbidden(err) {
			s.mu.Lock()
			if !s.loaded {
				s.err = fmt.Errorf("the agent may not read it: %w", err)
			}
			s.mu.Unlock()
		}
	})
	set := func(next record, nextErr error) {
		s.mu.Lock()
		was, wasErr := s.state, s.err
		if nextErr == nil {
			s.state, s.loaded, s.err = next, true, nil
		} else if !s.loaded {
			s.err = nextErr
		}
		now, nowErr := s.state, s.err
		s.mu.Unlock()
		if !was.equal(now) || fmt.Sprint(wasErr) != fmt.Sprint(nowErr) {
			changed()
		}
	}
	load := func(obj any) {
		cm, ok := obj.(*corev1.ConfigMap)
		if !ok || cm.Name != s.spec.Name {
			return
		}
		recs, err := parseConfigMap(cm)
		if err != nil {
			logger.Error(err, "Inventory ConfigMap rejected; keeping the last good one, if any")
		}
		r, listed := recs[s.node]
		set(record{listed: listed, rec: r}, err)
	}
	gone := errors.New("the ConfigMap does not exist")
	reg, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    load,
		UpdateFunc: func(_, o any) { load(o) },
		DeleteFunc: func(obj any) {
			if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = d.Obj
			}
			if cm, ok := obj.(*corev1.ConfigMap); !ok || cm.Name != s.spec.Name {
				return
			}
			// As the approver does: the last good document stays; losing
			// the desired state is the operator's alert, not a new dial.
			logger.Error(nil, "Inventory ConfigMap deleted; keeping the last good one, if any")
			set(record{}, gone)
		},
	})
	if err != nil {
		logger.Error(err, "Cannot watch the inventory ConfigMap")
		s.synced.Store(true)
		return
	}
	go inf.RunWithContext(ctx)
	if cache.WaitForCacheSync(ctx.Done(), reg.HasSynced) && len(inf.GetStore().List()) == 0 {
		logger.Info("Inventory ConfigMap not found; dialling the Node's own addresses until it exists")
		set(record{}, gone)
	}
	s.synced.Store(true)
	<-ctx.Done()
}

func parseConfigMap(cm *corev1.ConfigMap) (map[string]inventorydoc.Record, error) {
	data, ok := cm.Data[inventorydoc.ConfigMapKey]
	if !ok {
		return nil, fmt.Errorf("no key %q", inventorydoc.ConfigMapKey)
	}
	recs, err := inventorydoc.Parse([]byte(data))
	if err != nil {
		return nil, fmt.Errorf("key %s: %w", inventorydoc.ConfigMapKey, err)
	}
	return recs, nil
}

// Lookup is what the inventory records for the node, nil without an
// inventory.
func (s *Source) Lookup() *evidence.Inventory {
	if s == nil {
		return nil
	}
	out := &evidence.Inventory{Source: s.spec.Describe()}
	var r record
	if s.spec.Kind == "file" {
		var recs map[string]inventorydoc.Record
		recs, out.Err = readFile(s.spec.Path)
		r.rec, r.listed = recs[s.node]
	} else {
		s.mu.Lock()
		r, out.Err = s.state, s.err
		s.mu.Unlock()
	}
	if out.Err == nil && r.listed {
		out.Listed, out.IPs, out.DNSNames = true, r.rec.IPs, r.rec.DNSNames
	}
	return out
}

// readFile parses the file at path: a regular file of at most
// inventorydoc.MaxBytes (a FIFO or a device would block or never end).
func readFile(path string) (map[string]inventorydoc.Record, error) {
	// O_NONBLOCK: a named pipe planted at the path must not hang the check.
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("%s is not a regular file", path)
	}
	data, err := io.ReadAll(io.LimitReader(f, inventorydoc.MaxBytes+1))
	if err != nil {
		return nil, err
	}
	if len(data) > inventorydoc.MaxBytes {
		return nil, fmt.Errorf("%s is larger than %d bytes", path, inventorydoc.MaxBytes)
	}
	return inventorydoc.Parse(data)
}
