// Package approver assembles the approver process: informers (CSRs of the
// kubelet-serving signer only, Nodes, and the inventory ConfigMap when one
// is used), the inventory, the CSR controller and the optional startup-taint
// fallback, all acting only while this replica holds the leader Lease.
package approver

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	certv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"

	"github.com/certready/certready/internal/httpserve"
	"github.com/certready/certready/internal/trim"
	"github.com/certready/certready/reporter/approver/apiserver"
	"github.com/certready/certready/reporter/approver/capi"
	"github.com/certready/certready/reporter/approver/controller"
	"github.com/certready/certready/reporter/approver/inventory"
	"github.com/certready/certready/reporter/approver/ranges"
	"github.com/certready/certready/reporter/approver/taint"
)

// Options configure the approver process.
type Options struct {
	Controller controller.Config // Inventory is built from InventorySpec
	// InventorySpec is what inventory.FromSpec reads: "node",
	// "configmap:<namespace>/<name>" or "file:<path>".
	InventorySpec string
	// ClusterAPI is the management-cluster mode (package capi): it serves
	// every selected Cluster API workload cluster, each against its
	// Machines, instead of this cluster. CAPI configures it (Dynamic
	// reads Clusters and Machines).
	ClusterAPI bool
	CAPI       capi.Config
	Dynamic    dynamic.Interface
	// RESTConfig is the approver's own connection (nil in tests): the
	// API server's certificate is read through it.
	RESTConfig *rest.Config

	LeaderElect    bool
	LeaseNamespace string
	LeaseName      string
	Identity       string
	LeaseDuration  time.Duration
	RenewDeadline  time.Duration
	RetryPeriod    time.Duration

	// RemoveStartupTaint turns on the taint fallback for this taint (off
	// when its key is empty).
	RemoveStartupTaint corev1.Taint
	// Prover, when set, looks at each node's kubelet before the fallback
	// lifts its taint (its Issued is set here).
	Prover *taint.Prover
	// SoftTaint (PreferNoSchedule) is kept by the fallback on nodes whose
	// condition is not False and fresh (off when its key is empty).
	SoftTaint     corev1.Taint
	ConditionType corev1.NodeConditionType
	// MaxConditionAge: how old a False condition may be and still lift the
	// taint (taint.DefaultMaxConditionAge when zero).
	MaxConditionAge time.Duration
	// SharedAddressesOK turns off the refusal of an address that several
	// Nodes report (nodes behind one NAT address, for one).
	SharedAddressesOK bool
	// EventClient records events (nil: the main client). A client of its
	// own gives events their own client-side rate limit.
	EventClient kubernetes.Interface
	// APIServerHostLabel marks the Nodes that host an API server (kubeadm
	// and kind: node-role.kubernetes.io/control-plane, set by the
	// installer, never by the kubelet: NodeRestriction). Only those may
	// have their own address in a serving certificate when it is an API
	// server endpoint. Empty: no node may.
	APIServerHostLabel string
}

// DefaultAPIServerHostLabel is the control-plane role label kubeadm sets.
const DefaultAPIServerHostLabel = "node-role.kubernetes.io/control-plane"

// ValidateAPIServerHostLabel refuses a label a kubelet could set on its
// own Node: it would let any node vouch for itself as an API server host.
func ValidateAPIServerHostLabel(key string) error {
	if key == "" || strings.HasPrefix(key, "node-role.kubernetes.io/") || strings.HasPrefix(key, "node-restriction.kubernetes.io/") {
		return nil
	}
	return fmt.Errorf("label %q can be set by a kubelet on its own Node; use one under node-role.kubernetes.io/ or node-restriction.kubernetes.io/ (NodeRestriction keeps kubelets from setting those), or empty for none", key)
}

// ErrLostLease is returned when another replica took the Lease: the process
// exits and restarts as a clean standby.
var ErrLostLease = errors.New("lost the leader Lease")

// Run runs the approver until ctx ends or the Lease is lost.
func Run(ctx context.Context, client kubernetes.Interface, reg prometheus.Registerer, ready *httpserve.Readiness, o Options) error {
	if o.ClusterAPI {
		return runCAPI(ctx, client, reg, ready, o)
	}
	logger := klog.FromContext(ctx)
	csrFactory := informers.NewSharedInformerFactoryWithOptions(client, 0, informers.WithTweakListOptions(func(lo *metav1.ListOptions) {
		lo.FieldSelector = fields.OneTermEqualSelector("spec.signerName", certv1.KubeletServingSignerName).String()
	}))
	nodeFactory := informers.NewSharedInformerFactory(client, 0)
	csrInformer := csrFactory.Certificates().V1().CertificateSigningRequests().Informer()
	nodeInformer := nodeFactory.Core().V1().Nodes()
	// Cached is only what the policy, the flood guard and the taint
	// fallback read: bounded memory per node whatever the kubelets report.
	// A request over the bound is dropped before it is cached (and then
	// refused unread, RequestTooLarge): a flood of huge CSRs costs a
	// transient decode each, not memory for as long as they are pending.
	// The issued certificates' fingerprints are kept for the taint
	// fallback's proof before the certificates are dropped.
	issued := taint.NewIssuedIndex()
	if err := csrInformer.SetTransform(issued.Transform(trim.CSR(trim.CSROptions{MaxRequestBytes: o.Controller.Policy.RequestBound()}))); err != nil {
		return err
	}
	if _, err := csrInformer.AddEventHandler(cache.ResourceEventHandlerFuncs{DeleteFunc: issued.Forget}); err != nil {
		return err
	}
	if err := nodeInformer.Informer().SetTransform(trim.Node(o.ConditionType)); err != nil {
		return err
	}
	// How many Nodes there are, kept by their events: the flood guard's
	// default reads it on every decision, and a count must not be a scan.
	var nodeCount atomic.Int64
	if _, err := nodeInformer.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { nodeCount.Add(1) },
		DeleteFunc: func(any) { nodeCount.Add(-1) },
	}); err != nil {
		return err
	}

	if err := nodeInformer.Informer().AddIndexers(inventory.AddressIndexers); err != nil {
		return err
	}
	// Without the address index, no address counts as claimed by another
	// node (--allow-shared-addresses).
	addressIndex := nodeInformer.Informer().GetIndexer()
	if o.SharedAddressesOK {
		addressIndex = nil
	}
	inv, watch, err := inventory.FromSpec(client, o.InventorySpec, inventory.Nodes{
		Lister: nodeInformer.Lister(), Indexer: addressIndex, NamesIndexer: nodeInformer.Informer().GetIndexer(),
		Count: func() int { return int(nodeCount.Load()) },
	})
	if err != nil {
		return err
	}
	o.Controller.Inventory = inv
	// The API server's own names and addresses are never approved but to
	// a node that hosts it, and only its own; a change re-evaluates the
	// pending CSRs.
	var ctrl *controller.Controller
	enqueueAll := func() {
		if ctrl != nil {
			ctrl.EnqueueAll()
		}
	}
	identity, err := apiserver.New(apiserver.Config{Client: client, REST: o.RESTConfig, OnChange: enqueueAll})
	if err != nil {
		return err
	}
	o.Controller.APIServer = identity.Current
	hosts := &apiserver.Hosts{Label: o.APIServerHostLabel}
	o.Controller.Policy.HostOwn = hosts.Own
	if static, ok := inv.(*inventory.Static); ok {
		o.Controller.Policy.HostOwn = static.Lookup // desired state, which the node cannot write
	}
	// Service and Pod CIDRs are no node's addresses.
	netRanges := ranges.New()
	if err := netRanges.WatchNodes(nodeInformer.Informer()); err != nil {
		return err
	}
	o.Controller.Policy.NotNodeAddress = netRanges.NotNodeAddress
	syncedFuncs := []cache.InformerSynced{csrInformer.HasSynced, nodeInformer.Informer().HasSynced, identity.HasSynced}
	if servesServiceCIDRs(client) {
		sc := nodeFactory.Networking().V1().ServiceCIDRs().Informer()
		if err := netRanges.WatchServiceCIDRs(sc); err != nil {
			return err
		}
		syncedFuncs = append(syncedFuncs, sc.HasSynced)
	} else {
		logger.Info("The API server serves no networking.k8s.io/v1 ServiceCIDRs (Kubernetes < 1.33): Service CIDRs are refused only as --deny-cidrs")
	}
	if key := o.APIServerHostLabel; key != "" {
		lister := nodeInformer.Lister()
		o.Controller.Policy.APIServerHost = func(node string) bool {
			n, err := lister.Get(node)
			if err != nil {
				return false
			}
			_, ok := n.Labels[key]
			return ok
		}
		o.Controller.Policy.APIServerHostRule = "label " + key
	}

	recorder, stopEvents := eventRecorder(ctx, client, o)
	defer stopEvents()

	ctrl, err = controller.New(o.Controller, client, csrInformer, recorder, reg)
	if err != nil {
		return err
	}
	// A node's addresses are its inventory in node mode, and the installer
	// labels a control-plane node after its kubelet first asked:
	// re-evaluate its pending CSRs when either changes.
	hostLabel := o.APIServerHostLabel
	if _, err := nodeInformer.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) {
			hosts.Observe(nil, obj.(*corev1.Node))
			ctrl.EnqueueNode(obj.(*corev1.Node).Name)
		},
		UpdateFunc: func(old, cur any) {
			o, n := old.(*corev1.Node), cur.(*corev1.Node)
			hosts.Observe(o, n)
			_, was := o.Labels[hostLabel]
			_, is := n.Labels[hostLabel]
			if !equality.Semantic.DeepEqual(o.Status.Addresses, n.Status.Addresses) || (hostLabel != "" && was != is) {
				ctrl.EnqueueNode(n.Name)
			}
		},
		DeleteFunc: func(obj any) {
			if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = d.Obj
			}
			if n, ok := obj.(*corev1.Node); ok {
				hosts.Observe(n, nil)
			}
		},
	}); err != nil {
		return err
	}
	var remover *taint.Remover
	if o.RemoveStartupTaint.Key != "" {
		tc := taint.Config{Taint: o.RemoveStartupTaint, SoftTaint: o.SoftTaint, ConditionType: o.ConditionType, MaxConditionAge: o.MaxConditionAge, Events: recorder}
		if o.Prover != nil {
			p := *o.Prover
			p.Issued = issued.Of
			tc.Prove = p.Prove
		}
		remover, err = taint.New(tc, client, nodeInformer.Informer())
		if err != nil {
			return err
		}
	}

	var healthy prometheus.Gauge
	if watch != nil {
		healthy = prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "certready_approver_inventory_healthy",
			Help: "1 while the last load of the desired-state inventory (file or ConfigMap) succeeded; 0 while it is missing, deleted or broken and the last good one is in use.",
		})
		if err := reg.Register(healthy); err != nil {
			return err
		}
		if watch.LoadedAtStart {
			healthy.Set(1) // loaded at start-up, or the process stopped there
		}
	}
	csrFactory.Start(ctx.Done())
	nodeFactory.Start(ctx.Done())
	identity.Start(ctx)
	defer csrFactory.Shutdown()
	defer nodeFactory.Shutdown()
	// The caches sync while this replica stands for election: a replica
	// that starts when the Lease is free (a rolling update, a crash after
	// the Lease expired) leads at once, and decides as soon as its caches
	// hold every pending CSR and Node.
	synced := make(chan struct{})
	go func() {
		if !cache.WaitForCacheSync(ctx.Done(), syncedFuncs...) {
			return // ctx ended
		}
		if watch != nil {
			go watch.Run(ctx, func(err error) {
				if err != nil {
					healthy.Set(0)
					return
				}
				healthy.Set(1)
				ctrl.EnqueueAll()
			})
		}
		ready.Set(true, "")
		api := identity.Current()
		logger.Info("Approver caches synced", "inventory", inv.Describe(), "apiserverAddresses", identity.Addresses(), "apiserverNames", len(api.Names), "leaderElect", o.LeaderElect, "taintFallback", o.RemoveStartupTaint.ToString())
		close(synced)
	}()

	lead := func(lctx context.Context) {
		select {
		case <-synced:
		case <-lctx.Done():
			return
		}
		done := make(chan error, 2)
		go func() { done <- ctrl.Run(lctx) }()
		n := 1
		if remover != nil {
			n++
			go func() { done <- remover.Run(lctx) }()
		}
		for i := 0; i < n; i++ {
			if err := <-done; err != nil {
				logger.Error(err, "Leader work stopped")
			}
		}
	}
	return elect(ctx, client, o, lead)
}

// runCAPI is the management-cluster mode: the leader serves every selected
// workload cluster (package capi); this cluster's own CSRs and Nodes are
// not its business.
func runCAPI(ctx context.Context, client kubernetes.Interface, reg prometheus.Registerer, ready *httpserve.Readiness, o Options) error {
	if o.Dynamic == nil {
		return fmt.Errorf("--cluster-api needs a dynamic client")
	}
	if o.RemoveStartupTaint.Key != "" {
		return fmt.Errorf("--cluster-api serves workload clusters from their management cluster: the taint fallback (--remove-startup-taint) acts on this cluster's Nodes; lift the taint in the workload clusters with a NodeReadinessRule")
	}
	recorder, stopEvents := eventRecorder(ctx, client, o)
	defer stopEvents()
	cfg := o.CAPI
	cfg.Controller = o.Controller
	mgr := capi.New(cfg, client, o.Dynamic, recorder, reg)
	ready.Set(true, "")
	return elect(ctx, client, o, func(lctx context.Context) {
		if err := mgr.Run(lctx); err != nil {
			klog.FromContext(ctx).Error(err, "Cluster API mode stopped")
		}
	})
}

// eventRecorder records the approver's events through a client of their
// own (Options.EventClient): they are records, and must not spend the rate
// budget of the approvals they record. stop flushes and ends it.
func eventRecorder(ctx context.Context, client kubernetes.Interface, o Options) (recorder record.EventRecorder, stop func()) {
	events := o.EventClient
	if events == nil {
		events = client
	}
	broadcaster := record.NewBroadcaster(record.WithContext(ctx))
	broadcaster.StartStructuredLogging(4)
	broadcaster.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: events.CoreV1().Events("")})
	return broadcaster.NewRecorder(scheme.Scheme, corev1.EventSource{Component: "certready-approver"}), broadcaster.Shutdown
}

// elect runs lead while this replica holds the Lease (at once without
// leader election); ErrLostLease when another replica took it.
func elect(ctx context.Context, client kubernetes.Interface, o Options, lead func(context.Context)) error {
	logger := klog.FromContext(ctx)
	if !o.LeaderElect {
		lead(ctx)
		return nil
	}
	lock := &resourcelock.LeaseLock{
		LeaseMeta:  metav1.ObjectMeta{Namespace: o.LeaseNamespace, Name: o.LeaseName},
		Client:     client.CoordinationV1(),
		LockConfig: resourcelock.ResourceLockConfig{Identity: o.Identity},
	}
	lost := false
	le, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
		Lock:            lock,
		LeaseDuration:   o.LeaseDuration,
		RenewDeadline:   o.RenewDeadline,
		RetryPeriod:     o.RetryPeriod,
		ReleaseOnCancel: true,
		Name:            o.LeaseName,
		Callbacks: leaderelection.LeaderCallbacks{
			OnStartedLeading: func(lctx context.Context) {
				logger.Info("Acquired the leader Lease", "identity", o.Identity, "lease", o.LeaseNamespace+"/"+o.LeaseName)
				lead(lctx)
			},
			OnStoppedLeading: func() {
				if ctx.Err() == nil {
					lost = true
				}
			},
			OnNewLeader: func(id string) {
				if id != o.Identity {
					logger.Info("Standing by", "leader", id)
				}
			},
		},
	})
	if err != nil {
		return fmt.Errorf("leader election: %w", err)
	}
	le.Run(ctx)
	if lost {
		return ErrLostLease
	}
	return nil
}

// servesServiceCIDRs says whether the API server serves
// networking.k8s.io/v1 ServiceCIDRs (Kubernetes 1.33 and later).
func servesServiceCIDRs(client kubernetes.Interface) bool {
	list, err := client.Discovery().ServerResourcesForGroupVersion("networking.k8s.io/v1")
	if err != nil {
		return false
	}
	for _, r := range list.APIResources {
		if r.Name == "servicecidrs" {
			return true
		}
	}
	return false
}
