package capi

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	certv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"

	"github.com/certready/certready/internal/names"
	"github.com/certready/certready/internal/workloop"
	"github.com/certready/certready/reporter/approver/apiserver"
	"github.com/certready/certready/reporter/approver/controller"
	"github.com/certready/certready/reporter/approver/events"
	"github.com/certready/certready/reporter/approver/evidence"
	"github.com/certready/certready/reporter/approver/ranges"
)

// Config configures the management-cluster mode.
type Config struct {
	// Controller is each workload cluster's controller configuration;
	// Inventory, APIServer and the policy's API server and network rules
	// are set per cluster.
	Controller controller.Config
	// Selector picks the Clusters to serve (labels.Everything() for all).
	Selector labels.Selector
	// UserAgent of the workload cluster clients.
	UserAgent string
	// QPS and Burst of each workload cluster's client.
	QPS   float32
	Burst int
	// Connect builds a workload cluster's client from its kubeconfig
	// (kubernetes.NewForConfig when nil; tests hand out fakes by host).
	// The config it gets reads every answer through Limits.
	Connect func(*rest.Config) (kubernetes.Interface, error)
	// Limits bound each workload cluster's answers and cache (zero
	// fields: the defaults).
	Limits Limits
}

// Manager serves every selected Cluster: one approver controller per
// workload cluster, connected with the Cluster's kubeconfig Secret, started
// when both exist, restarted when the Secret changes (rotation), stopped
// when either goes or the Cluster no longer matches the selector.
type Manager struct {
	cfg      Config
	mgmt     kubernetes.Interface
	dyn      dynamic.Interface
	reg      prometheus.Registerer
	recorder record.EventRecorder // on Machines and Clusters, in the management cluster

	clusters cache.GenericLister
	secrets  corelisters.SecretLister
	machines cache.SharedIndexInformer
	queue    *workloop.Loop[string]

	mu      sync.Mutex
	running map[string]*workload // by namespace/name of the Cluster
	// failures holds, by cluster, the attempts to serve it that failed
	// since its caches last synced, and when the next may start: its
	// backoff (the queue's own is reset by every reconcile that starts an
	// attempt, and a tenant's writes to its Cluster or Secret would start
	// one early).
	failures map[string]failures
	failed   *prometheus.CounterVec
	served   prometheus.Gauge
	// synced is 1 for a served cluster whose caches synced and whose
	// controller acts, 0 while it connects or after it failed (retried
	// with backoff); a cluster no longer served has no series.
	synced *prometheus.GaugeVec
	// observable is, for every selected Cluster, 1 when its CSRs are
	// being decided, 0 when they cannot be: no kubeconfig Secret, one
	// refused, its API server unreachable or past the bounds, or still
	// connecting. The alert CertReadyWorkloadClusterUnobservable reads it.
	observable *prometheus.GaugeVec
}

type workload struct {
	secretVersion string
	cancel        context.CancelFunc
	done          chan struct{}
	ranges        *ranges.Ranges // the Cluster's service and pod CIDR blocks

	mu       sync.Mutex
	ctrl     *controller.Controller // nil until built
	identity *apiserver.Identity    // nil until built
	endpoint string                 // spec.controlPlaneEndpoint.host
}

// setCluster takes what the Cluster says about its own network: the
// control plane's endpoint (an API server address or name, never a node's)
// and its service and pod CIDR blocks (never a node's addresses). A tenant
// can write those, and can only narrow what its nodes are approved for.
func (w *workload) setCluster(c *unstructured.Unstructured) {
	host, _, _ := unstructured.NestedString(c.Object, "spec", "controlPlaneEndpoint", "host")
	svc, _, _ := unstructured.NestedStringSlice(c.Object, "spec", "clusterNetwork", "services", "cidrBlocks")
	pods, _, _ := unstructured.NestedStringSlice(c.Object, "spec", "clusterNetwork", "pods", "cidrBlocks")
	owner := "Cluster " + c.GetNamespace() + "/" + c.GetName()
	w.ranges.SetServiceCIDRs(owner+" spec.clusterNetwork.services", svc)
	w.ranges.SetPodCIDRs(owner+" spec.clusterNetwork.pods", pods)
	w.mu.Lock()
	w.endpoint = host
	id := w.identity
	w.mu.Unlock()
	if id != nil {
		id.SetExtra(w.extra())
	}
}

func (w *workload) extra() map[string]string {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.endpoint == "" {
		return nil
	}
	return map[string]string{w.endpoint: "the Cluster's spec.controlPlaneEndpoint"}
}

// sources are the evidence the policy judges a workload cluster's CSRs
// by: its own API server (its endpoints and Service, the kubeconfig's
// host, the certificate it presents, the Cluster's
// spec.controlPlaneEndpoint; not the management cluster's), its Machines'
// addresses, and its service and pod ranges.
func (w *workload) sources(client kubernetes.Interface, rc *rest.Config, inv Inventory, onChange func()) evidence.Sources {
	return evidence.Sources{
		Client: client, REST: rc, ExtraAPIServer: w.extra(),
		OnChange:       onChange,
		Inventory:      inv,
		HostsAPIServer: inv.HostsAPIServer,
		HostRule:       "its Machine labelled " + ControlPlaneLabel,
		HostOwn:        inv.Lookup,
		NotNodeAddress: w.ranges.NotNodeAddress,
	}
}

// checkedConfig is the workload cluster's connection, when its Secret is
// Cluster API's and its kubeconfig holds nothing the approver refuses.
func checkedConfig(secret *corev1.Secret, cluster *unstructured.Unstructured) (*rest.Config, error) {
	if err := CheckSecret(secret, cluster); err != nil {
		return nil, err
	}
	cfg, err := RESTConfig(secret.Data[KubeconfigKey])
	if err != nil {
		return nil, fmt.Errorf("Secret %s/%s key %s: %w", secret.Namespace, secret.Name, KubeconfigKey, err)
	}
	return cfg, nil
}

// New builds the manager; Run starts it.
func New(cfg Config, mgmt kubernetes.Interface, dyn dynamic.Interface, recorder record.EventRecorder, reg prometheus.Registerer) *Manager {
	if cfg.Selector == nil {
		cfg.Selector = labels.Everything()
	}
	if cfg.Connect == nil {
		cfg.Connect = func(c *rest.Config) (kubernetes.Interface, error) { return kubernetes.NewForConfig(c) }
	}
	cfg.Limits = cfg.Limits.withDefaults()
	m := &Manager{cfg: cfg, mgmt: mgmt, dyn: dyn, reg: reg, recorder: recorder, running: map[string]*workload{}, failures: map[string]failures{},
		failed: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "certready_approver_capi_cluster_failures_total",
			Help: "Times serving a workload cluster failed (its API server unreachable, too slow, or answering past the bounds), each retried after a backoff.",
		}, []string{"cluster"}),
		served: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "certready_approver_capi_clusters",
			Help: "Workload clusters whose kubelet-serving CSRs this approver is serving (Cluster selected and its kubeconfig Secret present).",
		}),
		synced: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "certready_approver_capi_cluster_synced",
			Help: "1 when the workload cluster's caches synced and its CSRs are being decided; 0 while connecting, or after its API server failed (too large, too slow, unreachable; retried with backoff).",
		}, []string{"cluster"}),
		observable: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "certready_approver_capi_cluster_observable",
			Help: "For every selected Cluster: 1 when its kubelet-serving CSRs are being decided; 0 when they cannot be (no kubeconfig Secret, the kubeconfig refused, its API server unreachable or past the bounds, or connecting).",
		}, []string{"cluster"}),
	}
	m.queue = workloop.New(workloop.Config[string]{Name: "certready-capi-clusters", KeyName: "cluster",
		Failure: "Workload cluster not served; retrying"}, workloop.Errors(m.reconcile))
	return m
}

// Run serves the clusters until ctx ends.
func (m *Manager) Run(ctx context.Context) error {
	logger := klog.FromContext(ctx)
	if err := m.reg.Register(m.served); err != nil {
		return err
	}
	defer m.reg.Unregister(m.served)
	if err := m.reg.Register(m.synced); err != nil {
		return err
	}
	defer m.reg.Unregister(m.synced)
	if err := m.reg.Register(m.observable); err != nil {
		return err
	}
	defer m.reg.Unregister(m.observable)
	if err := m.reg.Register(m.failed); err != nil {
		return err
	}
	defer m.reg.Unregister(m.failed)
	dynFactory := dynamicinformer.NewDynamicSharedInformerFactory(m.dyn, 0)
	clusterInformer := dynamicinformer.NewFilteredDynamicInformer(m.dyn, ClusterGVR, metav1.NamespaceAll, 0, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc},
		func(lo *metav1.ListOptions) { lo.LabelSelector = m.cfg.Selector.String() })
	m.clusters = clusterInformer.Lister()
	m.machines = dynFactory.ForResource(MachineGVR).Informer()
	if err := m.machines.SetTransform(TrimMachine); err != nil {
		return err
	}
	if err := m.machines.AddIndexers(Indexers); err != nil {
		return err
	}
	// Only Cluster API's own Secrets are cached, not every Secret.
	secretFactory := informers.NewSharedInformerFactoryWithOptions(m.mgmt, 0, informers.WithTweakListOptions(func(lo *metav1.ListOptions) {
		lo.FieldSelector = fields.OneTermEqualSelector("type", KubeconfigSecretType).String()
		lo.LabelSelector = ClusterNameLabel
	}))
	secretInformer := secretFactory.Core().V1().Secrets()
	if err := secretInformer.Informer().SetTransform(TrimSecret); err != nil {
		return err
	}
	m.secrets = secretInformer.Lister()

	if err := onEvery(clusterInformer.Informer(), func(obj any) {
		if key, err := cache.MetaNamespaceKeyFunc(obj); err == nil {
			m.queue.Add(key)
		}
	}); err != nil {
		return err
	}
	if err := onEvery(secretInformer.Informer(), func(obj any) {
		if s, ok := obj.(*corev1.Secret); ok {
			if c := s.Labels[ClusterNameLabel]; c != "" {
				m.queue.Add(s.Namespace + "/" + c)
			}
		}
	}); err != nil {
		return err
	}
	// A Machine's addresses are its node's inventory: re-evaluate that
	// node's pending CSRs when they change.
	if err := onEvery(m.machines, func(obj any) {
		u, ok := obj.(*unstructured.Unstructured)
		if !ok {
			return
		}
		mc := ParseMachine(u)
		if mc.Node == "" {
			return
		}
		m.mu.Lock()
		w := m.running[clusterKey(mc.Namespace, mc.Cluster)]
		m.mu.Unlock()
		if w != nil {
			w.mu.Lock()
			if w.ctrl != nil {
				w.ctrl.EnqueueNode(mc.Node)
			}
			w.mu.Unlock()
		}
	}); err != nil {
		return err
	}
	go clusterInformer.Informer().Run(ctx.Done())
	dynFactory.Start(ctx.Done())
	secretFactory.Start(ctx.Done())
	defer secretFactory.Shutdown()
	defer dynFactory.Shutdown()
	if !cache.WaitForCacheSync(ctx.Done(), clusterInformer.Informer().HasSynced, m.machines.HasSynced, secretInformer.Informer().HasSynced) {
		return fmt.Errorf("management cluster caches did not sync (are the Cluster API CRDs %s and %s installed, and may this approver list them?)", ClusterGVR.GroupResource(), MachineGVR.GroupResource())
	}
	logger.Info("Serving Cluster API workload clusters", "selector", m.cfg.Selector.String())
	defer m.stopAll()
	m.queue.Run(ctx, 1)
	return nil
}

// onEvery calls f with the object of every add, update and delete of inf
// (a deletion's last known state when the informer missed the delete).
func onEvery(inf cache.SharedIndexInformer, f func(obj any)) error {
	_, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    f,
		UpdateFunc: func(_, cur any) { f(cur) },
		DeleteFunc: func(obj any) {
			if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = t.Obj
			}
			f(obj)
		},
	})
	return err
}

// reconcile starts, restarts or stops the workload cluster key.
func (m *Manager) reconcile(ctx context.Context, key string) error {
	logger := klog.FromContext(ctx).WithValues("cluster", key)
	ns, name, err := cache.SplitMetaNamespaceKey(key)
	if err != nil {
		return nil
	}
	m.mu.Lock()
	cur := m.running[key]
	m.mu.Unlock()
	clusterObj, err := m.clusters.Get(key)
	if apierrors.IsNotFound(err) {
		if cur != nil {
			logger.Info("Cluster gone or no longer selected: no longer serving it")
			m.stop(key)
		}
		m.forget(key)
		return nil
	}
	if err != nil {
		return err
	}
	secret, err := m.secrets.Secrets(ns).Get(KubeconfigSecretName(name))
	if apierrors.IsNotFound(err) {
		m.observable.WithLabelValues(key).Set(0)
		if cur != nil {
			logger.Info("Kubeconfig Secret gone: no longer serving the cluster", "secret", ns+"/"+KubeconfigSecretName(name))
			m.stop(key)
		} else {
			logger.V(2).Info("No kubeconfig Secret yet", "secret", ns+"/"+KubeconfigSecretName(name))
		}
		return nil
	}
	if err != nil {
		return err
	}
	cluster, _ := clusterObj.(*unstructured.Unstructured)
	if cluster == nil {
		return fmt.Errorf("Cluster %s: not an unstructured object", key)
	}
	if cur != nil && cur.secretVersion == secret.ResourceVersion {
		cur.setCluster(cluster)
		return nil
	}
	if cur != nil {
		logger.Info("Kubeconfig Secret changed: reconnecting", "secret", secret.Name)
		m.stop(key)
	}
	if cur == nil {
		m.mu.Lock()
		wait := time.Until(m.failures[key].next)
		m.mu.Unlock()
		if wait > 0 {
			m.queue.AddAfter(key, wait)
			return nil
		}
	}
	cfg, err := checkedConfig(secret, cluster)
	if err != nil {
		// No connection at all: a refused kubeconfig is never dialled.
		logger.Info("Kubeconfig refused; not serving the cluster", "secret", secret.Name, "reason", err.Error())
		m.observable.WithLabelValues(key).Set(0)
		m.recorder.Eventf(clusterObj, corev1.EventTypeWarning, "KubeconfigRefused", "certready: %v", err)
		return nil // looked at again when the Secret or the Cluster changes
	}
	cfg.UserAgent, cfg.QPS, cfg.Burst = m.cfg.UserAgent, m.cfg.QPS, m.cfg.Burst
	// A response past a bound fails the whole attempt at once, named in
	// the log and counted, rather than leaving the informers retrying it
	// quietly: the cluster comes back after its backoff.
	wctx, cancel := context.WithCancelCause(ctx)
	bound(cfg, key, m.cfg.Limits, cancel)
	client, err := m.cfg.Connect(cfg)
	if err != nil {
		cancel(nil)
		m.observable.WithLabelValues(key).Set(0)
		return err
	}
	w := &workload{secretVersion: secret.ResourceVersion, cancel: func() { cancel(nil) }, done: make(chan struct{}), ranges: ranges.New()}
	w.setCluster(cluster)
	m.mu.Lock()
	m.running[key] = w
	m.served.Set(float64(len(m.running)))
	m.synced.WithLabelValues(key).Set(0)
	m.observable.WithLabelValues(key).Set(0)
	m.mu.Unlock()
	// Each cluster is served by goroutines of its own: one that fails,
	// hangs or answers too much never holds up the others. A failure is
	// retried after the cluster's own backoff, which caches that sync
	// reset.
	go func() {
		defer close(w.done)
		err := m.serve(klog.NewContext(wctx, logger), ns, name, clusterObj, client, cfg, w, cancel)
		if cause := context.Cause(wctx); errors.Is(cause, ErrBound) {
			err = cause
		}
		if err != nil && (wctx.Err() == nil || errors.Is(err, ErrBound)) {
			m.mu.Lock()
			if m.running[key] == w {
				delete(m.running, key)
				m.served.Set(float64(len(m.running)))
				m.synced.WithLabelValues(key).Set(0)
				m.observable.WithLabelValues(key).Set(0)
			}
			f := m.failures[key]
			f.n++
			retry := backoff(f.n)
			f.next = time.Now().Add(retry)
			m.failures[key] = f
			m.mu.Unlock()
			m.failed.WithLabelValues(key).Inc()
			logger.Error(err, "Serving the workload cluster stopped; retrying", "after", retry)
			m.queue.AddAfter(key, retry)
		}
	}()
	logger.Info("Serving workload cluster", "apiserver", cfg.Host)
	return nil
}

// serve runs one workload cluster's controller until ctx ends.
// fail ends it early with its cause (a bound the cluster went past).
func (m *Manager) serve(ctx context.Context, ns, name string, clusterObj runtime.Object, client kubernetes.Interface, rc *rest.Config, w *workload, fail context.CancelCauseFunc) error {
	csrFactory, csrInformer, err := evidence.CSRs(client, m.cfg.Controller.Policy, nil)
	if err != nil {
		return err
	}
	if err := countCached(csrInformer, m.cfg.Limits.MaxObjects, fail, clusterKey(ns, name)); err != nil {
		return err
	}
	inv := Inventory{Indexer: m.machines.GetIndexer(), Namespace: ns, Cluster: name}
	// This workload cluster's API server: its endpoints and Service, the
	// kubeconfig's host, the certificate it presents, and the Cluster's
	// spec.controlPlaneEndpoint; not the management cluster's. What the
	// infrastructure provider recorded on a control-plane Machine is
	// that node's own, API server addresses included.
	ev, err := evidence.New(w.sources(client, rc, inv, func() {
		w.mu.Lock()
		defer w.mu.Unlock()
		if w.ctrl != nil {
			w.ctrl.EnqueueAll()
		}
	}))
	if err != nil {
		return err
	}
	identity := ev.Identity
	w.mu.Lock()
	w.identity = identity
	w.mu.Unlock()
	cfg := m.cfg.Controller
	cfg.Evidence = ev.Policy
	cfg.WorkloadCluster = clusterKey(ns, name)

	onCSR, stopEvents := events.Recorder(ctx, client, "certready-approver")
	defer stopEvents()
	reg := &registrations{Registerer: prometheus.WrapRegistererWith(prometheus.Labels{"cluster": clusterKey(ns, name)}, m.reg)}
	defer reg.unregisterAll()
	ctrl, err := controller.New(cfg, client, csrInformer, machineEvents{onCSR: onCSR, onMachine: m.recorder, inv: inv, cluster: clusterObj}, reg)
	if err != nil {
		return err
	}
	w.mu.Lock()
	w.ctrl = ctrl
	w.mu.Unlock()
	csrFactory.Start(ctx.Done())
	identity.Start(ctx)
	defer csrFactory.Shutdown()
	sctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	if !cache.WaitForCacheSync(sctx.Done(), csrInformer.HasSynced, identity.HasSynced) {
		if ctx.Err() != nil {
			return nil
		}
		return fmt.Errorf("the workload cluster's caches did not sync within 2m (CSRs of %s, the default/kubernetes Service and EndpointSlice, kube-public/cluster-info)", certv1.KubeletServingSignerName)
	}
	key := clusterKey(ns, name)
	m.mu.Lock()
	if m.running[key] == w {
		delete(m.failures, key)
		m.synced.WithLabelValues(key).Set(1)
		m.observable.WithLabelValues(key).Set(1)
	}
	m.mu.Unlock()
	return ctrl.Run(ctx)
}

// failures is a workload cluster's backoff.
type failures struct {
	n    int
	next time.Time
}

// forget drops what is kept of a Cluster that is gone: its backoff and its
// series.
func (m *Manager) forget(key string) {
	m.mu.Lock()
	delete(m.failures, key)
	m.mu.Unlock()
	m.synced.DeleteLabelValues(key)
	m.observable.DeleteLabelValues(key)
	m.failed.DeleteLabelValues(key)
}

// backoff is how long a workload cluster waits after its nth failure in a
// row: 1 s, doubling, at most 5 minutes.
func backoff(n int) time.Duration {
	d := time.Second
	for i := 1; i < n && d < 5*time.Minute; i++ {
		d *= 2
	}
	return min(d, 5*time.Minute)
}

// countCached fails ctx (cancel) once the informer caches more than max
// objects: the cluster is let go and retried, its cache dropped. Counted
// by the informer's own add and delete notifications, O(1) each.
func countCached(inf cache.SharedIndexInformer, max int, cancel context.CancelCauseFunc, cluster string) error {
	var n atomic.Int64
	_, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: func(any) {
			if n.Add(1) > int64(max) {
				cancel(fmt.Errorf("workload cluster %s: %w: more than %d kubelet-serving CSRs cached", cluster, ErrBound, max))
			}
		},
		DeleteFunc: func(any) { n.Add(-1) },
	})
	return err
}

func (m *Manager) stop(key string) {
	m.mu.Lock()
	w := m.running[key]
	delete(m.running, key)
	delete(m.failures, key)
	m.synced.DeleteLabelValues(key)
	// Not served: until it is again (or forget drops a Cluster that is
	// gone), its CSRs are not being decided.
	m.observable.WithLabelValues(key).Set(0)
	m.served.Set(float64(len(m.running)))
	m.mu.Unlock()
	if w != nil {
		w.cancel()
		<-w.done
	}
}

func (m *Manager) stopAll() {
	m.mu.Lock()
	keys := make([]string, 0, len(m.running))
	for k := range m.running {
		keys = append(keys, k)
	}
	m.mu.Unlock()
	for _, k := range keys {
		m.stop(k)
	}
}

// machineEvents records the controller's events on the CSR in the workload
// cluster and, for refusals, on the node's Machine in the management
// cluster (on the Cluster when no single Machine names the node), where
// the Cluster API operator looks.
type machineEvents struct {
	onCSR, onMachine record.EventRecorder
	inv              Inventory
	cluster          runtime.Object
}

func (e machineEvents) Event(obj runtime.Object, eventtype, reason, message string) {
	e.onCSR.Event(obj, eventtype, reason, message)
	csr, ok := obj.(*certv1.CertificateSigningRequest)
	if !ok || eventtype != corev1.EventTypeWarning {
		return
	}
	node, ok := names.NodeOf(csr.Spec.Username)
	target := e.cluster
	if ok {
		if ms := e.inv.Machines(node); len(ms) == 1 {
			target = ms[0]
		}
	}
	e.onMachine.Eventf(target, eventtype, reason, "CSR %s of node %s in Cluster %s/%s: %s", csr.Name, node, e.inv.Namespace, e.inv.Cluster, message)
}

func (e machineEvents) Eventf(obj runtime.Object, eventtype, reason, format string, args ...any) {
	e.Event(obj, eventtype, reason, fmt.Sprintf(format, args...))
}

func (e machineEvents) AnnotatedEventf(obj runtime.Object, _ map[string]string, eventtype, reason, format string, args ...any) {
	e.Event(obj, eventtype, reason, fmt.Sprintf(format, args...))
}

// registrations remembers what a workload cluster's controller registered,
// so that reconnecting (a rotated kubeconfig) can register it again.
type registrations struct {
	prometheus.Registerer
	mu sync.Mutex
	cs []prometheus.Collector
}

func (r *registrations) Register(c prometheus.Collector) error {
	if err := r.Registerer.Register(c); err != nil {
		return err
	}
	r.mu.Lock()
	r.cs = append(r.cs, c)
	r.mu.Unlock()
	return nil
}

func (r *registrations) MustRegister(cs ...prometheus.Collector) {
	for _, c := range cs {
		if err := r.Register(c); err != nil {
			panic(err)
		}
	}
}

func (r *registrations) unregisterAll() {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, c := range r.cs {
		r.Registerer.Unregister(c)
	}
	r.cs = nil
}
