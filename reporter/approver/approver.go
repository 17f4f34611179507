// Package approver assembles the approver process: informers (CSRs of the
// kubelet-serving signer only, Nodes, and the inventory ConfigMap when one
// is used), the inventory, the CSR controller and the optional readiness-taint
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
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/informers"
	coreinformers "k8s.io/client-go/informers/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"

	"github.com/certready/certready/internal/httpserve"
	"github.com/certready/certready/internal/ledger"
	"github.com/certready/certready/internal/names"
	"github.com/certready/certready/internal/trim"
	"github.com/certready/certready/reporter/approver/apiserver"
	"github.com/certready/certready/reporter/approver/capi"
	"github.com/certready/certready/reporter/approver/controller"
	"github.com/certready/certready/reporter/approver/events"
	"github.com/certready/certready/reporter/approver/evidence"
	"github.com/certready/certready/reporter/approver/inventory"
	"github.com/certready/certready/reporter/approver/metricscert"
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

	// LiftReadinessTaint turns on the taint fallback for this taint (off
	// when its key is empty).
	LiftReadinessTaint corev1.Taint
	// Prover, when set, looks at each node's kubelet before the fallback
	// lifts its taint (its Issued is set here).
	Prover *taint.Prover
	// SoftTaint (PreferNoSchedule) is kept by the fallback on nodes whose
	// condition is not False and fresh (off when its key is empty).
	SoftTaint     corev1.Taint
	ConditionType corev1.NodeConditionType
	// MaxConditionAge: how old a False condition may be and still lift the
	// taint (condition.DefaultMaxAge when zero).
	MaxConditionAge time.Duration
	// SharedAddressesOK turns off the refusal of an address that several
	// Nodes report (nodes behind one NAT address, for one).
	SharedAddressesOK bool
	// CloudControllers are the field managers whose writes of a Node's
	// status.addresses are the infrastructure's word (node inventory):
	// trim.NodeOptions.CloudControllers.
	CloudControllers []string
	// EventClient records events (nil: the main client). A client of its
	// own gives events their own client-side rate limit.
	EventClient kubernetes.Interface
	// APIServerHostLabel marks the Nodes that host an API server (kubeadm
	// and kind: node-role.kubernetes.io/control-plane, set by the
	// installer, never by the kubelet: NodeRestriction). Only those may
	// have their own address in a serving certificate when it is an API
	// server endpoint. Empty: no node may.
	APIServerHostLabel string
	// MetricsCert, when set, keeps the metrics endpoints' CA and serving
	// certificate in their Secrets while this replica leads.
	MetricsCert *metricscert.Keeper
}

// DefaultAPIServerHostLabel is the control-plane role label kubeadm sets.
const DefaultAPIServerHostLabel = "node-role.kubernetes.io/control-plane"

// CommonCloudControllers are the field managers of the cloud controllers
// that write Nodes' addresses, as the API server names them (a client's
// field manager is its binary's name, the user agent's first part):
// cloud-controller-manager (k8s.io/cloud-provider's own, and the GCP and
// Azure providers' binaries), aws-, openstack- and
// vsphere-cloud-controller-manager. Azure's cloud-node-manager is left
// out: it runs on each node, with a token that node's root holds. They are
// no default: a field manager's name is whatever its writer's user agent
// says, so a node's own credentials can write its addresses under any of
// them; naming them is the operator's choice for a cluster that runs one.
var CommonCloudControllers = []string{"cloud-controller-manager", "aws-cloud-controller-manager", "openstack-cloud-controller-manager", "vsphere-cloud-controller-manager"}

// ValidateCloudControllers refuses field manager names that would make
// the node's own word the infrastructure's: empty names and the kubelet.
func ValidateCloudControllers(managers []string) error {
	for _, m := range managers {
		switch {
		case strings.TrimSpace(m) == "":
			return errors.New("an empty field manager name; list cloud controllers' field managers, or set the flag to \"\" for none")
		case m == "kubelet":
			return errors.New("kubelet writes a node's own word about its addresses; list only cloud controllers' field managers")
		case len(m) > 128:
			return fmt.Errorf("field manager %q is longer than 128 characters, which the API server never records", m)
		}
	}
	return nil
}

// ValidateAPIServerHostLabel refuses a label a kubelet could set on its
// own Node: it would let any node vouch for itself as an API server host.
func ValidateAPIServerHostLabel(key string) error {
	if key == "" || strings.HasPrefix(key, "node-role.kubernetes.io/") || strings.HasPrefix(key, "node-restriction.kubernetes.io/") {
		return nil
	}
	return fmt.Errorf("label %q can be set by a kubelet on its own Node; use one under node-role.kubernetes.io/ or node-restriction.kubernetes.io/ (NodeRestriction keeps kubelets from setting those), or empty for none", key)
}

// Validate refuses options that contradict each other or would do nothing,
// naming the flags concerned, rather than let an operator believe they act.
func (o Options) Validate() error {
	if err := ValidateAPIServerHostLabel(o.APIServerHostLabel); err != nil {
		return fmt.Errorf("--apiserver-host-label: %w", err)
	}
	selects := o.CAPI.Selector != nil && !o.CAPI.Selector.Empty()
	switch {
	case o.LeaderElect && (o.LeaseDuration <= o.RenewDeadline || o.RenewDeadline <= o.RetryPeriod):
		return errors.New("leader election needs --leader-elect-lease-duration > --leader-elect-renew-deadline > --leader-elect-retry-period")
	case o.SoftTaint.Key != "" && o.LiftReadinessTaint.Key == "":
		return errors.New("--soft-taint needs the taint fallback (--lift-readiness-taint)")
	case !o.ClusterAPI && selects:
		return errors.New("--capi-cluster-selector needs --cluster-api (it selects Cluster API workload clusters)")
	case o.ClusterAPI && o.InventorySpec != "node" && o.InventorySpec != "":
		return fmt.Errorf("--inventory=%s does nothing with --cluster-api: each workload cluster's CSRs are checked against its Machines; drop --inventory", o.InventorySpec)
	case o.ClusterAPI && o.SharedAddressesOK:
		return errors.New("--allow-shared-addresses does nothing with --cluster-api: each address is checked against the Machines the infrastructure provider wrote, and one that two Machines claim is always refused (AddressClaimedByOtherNode); drop the flag")
	case o.ClusterAPI && o.LiftReadinessTaint.Key != "":
		return errors.New("--cluster-api serves workload clusters from their management cluster: the taint fallback (--lift-readiness-taint) acts on this cluster's Nodes; lift the taint in the workload clusters with a NodeReadinessRule")
	}
	return nil
}

// errLostLease is returned when another replica took the Lease: the process
// exits and restarts as a clean standby.
var errLostLease = errors.New("lost the leader Lease")

// Run runs the approver until ctx ends or the Lease is lost.
func Run(ctx context.Context, client kubernetes.Interface, reg prometheus.Registerer, ready *httpserve.Readiness, o Options) error {
	if o.ClusterAPI {
		return runCAPI(ctx, client, reg, ready, o)
	}
	c, err := newCaches(client, o)
	if err != nil {
		return err
	}
	var ctrl *controller.Controller
	enqueueAll := func() {
		if ctrl != nil {
			ctrl.EnqueueAll()
		}
	}
	ev, err := gatherEvidence(ctx, client, c, &o, enqueueAll)
	if err != nil {
		return err
	}
	recorder, stopEvents := eventRecorder(ctx, client, o)
	defer stopEvents()
	defer runLedger(ctx, client, o.Controller.Ledger)()
	o.Controller.NoteClient = o.EventClient
	if ctrl, err = controller.New(o.Controller, client, c.csr, recorder, reg); err != nil {
		return err
	}
	if err := reevaluateOnNodeChanges(c.node.Informer(), ctrl, ev.hosts, o.APIServerHostLabel); err != nil {
		return err
	}
	lifter, err := newLifter(client, c, o, recorder)
	if err != nil {
		return err
	}
	// Every readiness taint removal is evidence, whoever makes it.
	readinessTaint := o.LiftReadinessTaint
	if readinessTaint.Key == "" {
		readinessTaint = corev1.Taint{Key: names.TaintKey, Value: names.TaintValue, Effect: corev1.TaintEffectNoSchedule}
	}
	lifts, err := taint.NewLifts(readinessTaint, o.ConditionType, lifter != nil, recorder, o.Controller.Ledger, reg, c.node.Informer())
	if err != nil {
		return err
	}
	healthy, err := inventoryHealth(reg, ev.watch)
	if err != nil {
		return err
	}

	// The informers stop when ictx ends, and Shutdown waits for them: a
	// lost Lease returns here long before the process's ctx ends, so ictx
	// is cancelled first (defers run last in, first out), or the replica
	// would hang in Shutdown, neither leading nor exiting.
	ictx, stopInformers := context.WithCancel(ctx)
	c.csrFactory.Start(ictx.Done())
	c.nodeFactory.Start(ictx.Done())
	ev.Identity.Start(ictx)
	defer c.csrFactory.Shutdown()
	defer c.nodeFactory.Shutdown()
	defer stopInformers()
	// The caches sync while this replica stands for election: a replica
	// that starts when the Lease is free (a rolling update, a crash after
	// the Lease expired) leads at once, and decides as soon as its caches
	// hold every pending CSR and Node.
	synced := make(chan struct{})
	go func() {
		if !cache.WaitForCacheSync(ctx.Done(), c.synced...) {
			return // ctx ended
		}
		if ev.watch != nil {
			go ev.watch.Run(ctx, func(err error) {
				if err != nil {
					healthy.Set(0)
					return
				}
				healthy.Set(1)
				ctrl.EnqueueAll()
			})
		}
		ready.Set(true, "")
		api := ev.Identity.Current()
		klog.FromContext(ctx).Info("Approver caches synced", "inventory", o.Controller.Evidence.Inventory.Describe(), "apiserverAddresses", ev.Identity.Addresses(), "apiserverNames", len(api.Names), "leaderElect", o.LeaderElect, "taintFallback", o.LiftReadinessTaint.ToString())
		close(synced)
	}()
	return elect(ctx, client, o, func(lctx context.Context) {
		select {
		case <-synced:
		case <-lctx.Done():
			return
		}
		lead(lctx, ctrl, lifter, lifts, o.MetricsCert)
	})
}

// lead runs the leader's work, the controller, the taint fallback and the
// metrics certificate's keeper (each when on), until lctx ends.
func lead(lctx context.Context, ctrl *controller.Controller, lifter *taint.Lifter, lifts *taint.Lifts, keeper *metricscert.Keeper) {
	done := make(chan error, 4)
	go func() { done <- ctrl.Run(lctx) }()
	go func() { lifts.Run(lctx); done <- nil }()
	n := 2
	if lifter != nil {
		n++
		go func() { done <- lifter.Run(lctx) }()
	}
	if keeper != nil {
		n++
		go func() { keeper.Run(lctx); done <- nil }()
	}
	for i := 0; i < n; i++ {
		if err := <-done; err != nil {
			klog.FromContext(lctx).Error(err, "Leader work stopped")
		}
	}
}

// caches are the approver's informers, holding only what the policy, the
// flood guard and the taint fallback read: bounded memory per node
// whatever the kubelets report.
type caches struct {
	csrFactory, nodeFactory informers.SharedInformerFactory
	csr                     cache.SharedIndexInformer
	node                    coreinformers.NodeInformer
	// issued keeps the issued certificates' fingerprints for the taint
	// fallback's proof before the certificates are dropped.
	issued *taint.IssuedIndex
	// nodeCount is kept by the Nodes' events: the flood guard's default
	// reads it on every decision, and a count must not be a scan.
	nodeCount *atomic.Int64
	synced    []cache.InformerSynced
}

func newCaches(client kubernetes.Interface, o Options) (*caches, error) {
	c := &caches{
		nodeFactory: informers.NewSharedInformerFactory(client, 0),
		issued:      taint.NewIssuedIndex(),
		nodeCount:   &atomic.Int64{},
	}
	var err error
	if c.csrFactory, c.csr, err = evidence.CSRs(client, o.Controller.Policy, c.issued.Transform); err != nil {
		return nil, err
	}
	c.node = c.nodeFactory.Core().V1().Nodes()
	if _, err := c.csr.AddEventHandler(cache.ResourceEventHandlerFuncs{DeleteFunc: c.issued.Forget}); err != nil {
		return nil, err
	}
	nodes := c.node.Informer()
	if err := nodes.SetTransform(trim.NodeWith(trim.NodeOptions{Conditions: []corev1.NodeConditionType{o.ConditionType}, CloudControllers: o.CloudControllers})); err != nil {
		return nil, err
	}
	if _, err := nodes.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { c.nodeCount.Add(1) },
		DeleteFunc: func(any) { c.nodeCount.Add(-1) },
	}); err != nil {
		return nil, err
	}
	if err := nodes.AddIndexers(inventory.AddressIndexers); err != nil {
		return nil, err
	}
	c.synced = []cache.InformerSynced{c.csr.HasSynced, nodes.HasSynced}
	return c, nil
}

// nodeEvidence is the policy's evidence in the approver's own cluster,
// with what Run and Explain start and watch besides: the inventory's
// watch (desired-state sources) and the API server hosts the Nodes'
// events keep.
type nodeEvidence struct {
	*evidence.Evidence
	watch *inventory.Watch
	hosts *apiserver.Hosts
}

// gatherEvidence builds the inventory and the policy's views of the
// cluster from its Nodes, its Service and Pod CIDRs and its API server
// into o.Controller.Evidence; enqueueAll re-evaluates the pending CSRs
// when the API server's identity or the node networks change.
func gatherEvidence(ctx context.Context, client kubernetes.Interface, c *caches, o *Options, enqueueAll func()) (nodeEvidence, error) {
	nodes := c.node.Informer()
	// Without the address index, no address counts as claimed by another
	// node (--allow-shared-addresses).
	addressIndex := nodes.GetIndexer()
	if o.SharedAddressesOK {
		addressIndex = nil
	}
	networks := inventory.NewNetworks()
	inv, watch, err := inventory.FromSpec(client, o.InventorySpec, inventory.Nodes{
		Lister: c.node.Lister(), Indexer: addressIndex, NamesIndexer: nodes.GetIndexer(),
		Count:      func() int { return int(c.nodeCount.Load()) },
		Registered: networks.Registered,
	})
	if err != nil {
		return nodeEvidence{}, err
	}
	src := evidence.Sources{Client: client, REST: o.RESTConfig, OnChange: enqueueAll, Inventory: inv}
	if _, ok := inv.(inventory.Nodes); ok {
		// What a Node reports about itself is checked against the node
		// networks the cluster knows; a network learned once the caches
		// synced (a cloud controller wrote a Node's InternalIP in a new
		// one) re-evaluates the pending CSRs.
		networks.Learn = func() {
			if nodes.HasSynced() {
				enqueueAll()
			}
		}
		if _, err := nodes.AddEventHandler(networks.Handler()); err != nil {
			return nodeEvidence{}, err
		}
		src.NodeNetwork = networks.Learned
	}
	// A node labelled as an API server host may have the API server's
	// names and addresses that were its own before the label.
	hosts := &apiserver.Hosts{Label: o.APIServerHostLabel}
	src.HostOwn = hosts.Own
	if static, ok := inv.(*inventory.Static); ok {
		src.HostOwn = static.Lookup // desired state, which the node cannot write
	}
	if key := o.APIServerHostLabel; key != "" {
		lister := c.node.Lister()
		src.HostsAPIServer = func(node string) bool {
			n, err := lister.Get(node)
			if err != nil {
				return false
			}
			_, ok := n.Labels[key]
			return ok
		}
		src.HostRule = "label " + key
	}
	// Service and Pod CIDRs are no node's addresses.
	netRanges := ranges.New()
	if err := netRanges.WatchNodes(nodes); err != nil {
		return nodeEvidence{}, err
	}
	src.NotNodeAddress = netRanges.NotNodeAddress
	if servesServiceCIDRs(client) {
		sc := c.nodeFactory.Networking().V1().ServiceCIDRs().Informer()
		if err := netRanges.WatchServiceCIDRs(sc); err != nil {
			return nodeEvidence{}, err
		}
		c.synced = append(c.synced, sc.HasSynced)
	} else {
		klog.FromContext(ctx).Info("The API server serves no networking.k8s.io/v1 ServiceCIDRs (Kubernetes < 1.33): Service CIDRs are refused only as --deny-cidrs")
	}
	ev, err := evidence.New(src)
	if err != nil {
		return nodeEvidence{}, err
	}
	c.synced = append(c.synced, ev.Identity.HasSynced)
	o.Controller.Evidence = ev.Policy
	return nodeEvidence{Evidence: ev, watch: watch, hosts: hosts}, nil
}

// reevaluateOnNodeChanges re-evaluates a node's pending CSRs when its
// addresses or who wrote them change (its inventory in node mode) or when
// it gains or loses the API server host label (the installer labels a
// control-plane node after its kubelet first asked), and keeps hosts
// current.
func reevaluateOnNodeChanges(nodes cache.SharedIndexInformer, ctrl *controller.Controller, hosts *apiserver.Hosts, hostLabel string) error {
	_, err := nodes.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) {
			hosts.Observe(nil, obj.(*corev1.Node))
			ctrl.EnqueueNode(obj.(*corev1.Node).Name)
		},
		UpdateFunc: func(old, cur any) {
			o, n := old.(*corev1.Node), cur.(*corev1.Node)
			hosts.Observe(o, n)
			_, was := o.Labels[hostLabel]
			_, is := n.Labels[hostLabel]
			infra := o.Annotations[trim.InfrastructureAddressTypes] != n.Annotations[trim.InfrastructureAddressTypes]
			if infra || !equality.Semantic.DeepEqual(o.Status.Addresses, n.Status.Addresses) || (hostLabel != "" && was != is) {
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
	})
	return err
}

// newLifter builds the taint fallback, or nil when it is off.
func newLifter(client kubernetes.Interface, c *caches, o Options, recorder record.EventRecorder) (*taint.Lifter, error) {
	if o.LiftReadinessTaint.Key == "" {
		return nil, nil
	}
	tc := taint.Config{Taint: o.LiftReadinessTaint, SoftTaint: o.SoftTaint, ConditionType: o.ConditionType, MaxConditionAge: o.MaxConditionAge, Events: recorder}
	if o.Prover != nil {
		p := *o.Prover
		p.Issued = c.issued.Of
		tc.Prove = p.Prove
	}
	return taint.New(tc, client, c.node.Informer())
}

// inventoryHealth registers the desired-state inventory's health gauge
// (nil for the Node objects, which have none).
func inventoryHealth(reg prometheus.Registerer, watch *inventory.Watch) (prometheus.Gauge, error) {
	if watch == nil {
		return nil, nil
	}
	healthy := prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "certready_approver_inventory_healthy",
		Help: "1 while the last load of the desired-state inventory (file or ConfigMap) succeeded; 0 while it is missing, deleted or broken and the last good one is in use.",
	})
	if err := reg.Register(healthy); err != nil {
		return nil, err
	}
	if watch.LoadedAtStart {
		healthy.Set(1) // loaded at start-up, or the process stopped there
	}
	return healthy, nil
}

// runCAPI is the management-cluster mode: the leader serves every selected
// workload cluster (package capi); this cluster's own CSRs and Nodes are
// not its business.
func runCAPI(ctx context.Context, client kubernetes.Interface, reg prometheus.Registerer, ready *httpserve.Readiness, o Options) error {
	if err := o.Validate(); err != nil {
		return err
	}
	if o.Dynamic == nil {
		return fmt.Errorf("--cluster-api needs a dynamic client")
	}
	recorder, stopEvents := eventRecorder(ctx, client, o)
	defer stopEvents()
	defer runLedger(ctx, client, o.Controller.Ledger)()
	cfg := o.CAPI
	cfg.Controller = o.Controller
	mgr := capi.New(cfg, client, o.Dynamic, recorder, reg)
	ready.Set(true, "")
	return elect(ctx, client, o, func(lctx context.Context) {
		if o.MetricsCert != nil {
			kctx, stop := context.WithCancel(lctx)
			defer stop()
			go o.MetricsCert.Run(kctx)
		}
		if err := mgr.Run(lctx); err != nil {
			klog.FromContext(ctx).Error(err, "Cluster API mode stopped")
		}
	})
}

// runLedger writes the decision ledger (when there is one) until the
// returned stop is called, which writes what is still queued. Its records
// name the cluster by the kube-system Namespace's UID.
func runLedger(ctx context.Context, client kubernetes.Interface, l *ledger.Ledger) (stop func()) {
	if l == nil {
		return func() {}
	}
	lctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	done := make(chan struct{})
	go func() { l.Run(lctx); close(done) }()
	uctx, cancelGet := context.WithTimeout(ctx, 10*time.Second)
	defer cancelGet()
	if ns, err := client.CoreV1().Namespaces().Get(uctx, metav1.NamespaceSystem, metav1.GetOptions{}); err != nil {
		klog.FromContext(ctx).Error(err, "Ledger records will not name the cluster: reading namespace kube-system failed")
	} else {
		l.SetCluster(string(ns.UID))
	}
	return func() { cancel(); <-done }
}

// eventRecorder records the approver's events through a client of their
// own (Options.EventClient): they are records, and must not spend the rate
// budget of the approvals they record. stop flushes and ends it.
func eventRecorder(ctx context.Context, client kubernetes.Interface, o Options) (recorder record.EventRecorder, stop func()) {
	if o.EventClient != nil {
		client = o.EventClient
	}
	return events.Recorder(ctx, client, "certready-approver")
}

// elect runs lead while this replica holds the Lease (at once without
// leader election); errLostLease when another replica took it.
func elect(ctx context.Context, client kubernetes.Interface, o Options, lead func(context.Context)) error {
	logger := klog.FromContext(ctx)
	// The ledger shows who led when, and so the periods without a leader
	// (certready ledger verify).
	led := o.Controller.Ledger
	if !o.LeaderElect {
		led.Record(ledger.Record{Action: ledger.LeaderAcquired, Message: "no leader election: this replica leads"})
		lead(ctx)
		led.Record(ledger.Record{Action: ledger.LeaderLost, Message: "stopped"})
		return nil
	}
	lock := &resourcelock.LeaseLock{
		LeaseMeta:  metav1.ObjectMeta{Namespace: o.LeaseNamespace, Name: o.LeaseName},
		Client:     client.CoordinationV1(),
		LockConfig: resourcelock.ResourceLockConfig{Identity: o.Identity},
	}
	lost := false
	var leading atomic.Bool
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
				led.Record(ledger.Record{Action: ledger.LeaderAcquired, Message: "acquired the Lease " + o.LeaseNamespace + "/" + o.LeaseName})
				leading.Store(true)
				lead(lctx)
			},
			OnStoppedLeading: func() {
				msg := "released the Lease: stopping"
				if ctx.Err() == nil {
					lost, msg = true, "lost the Lease"
				}
				// client-go calls this on a standby's stop too.
				if leading.Load() {
					led.Record(ledger.Record{Action: ledger.LeaderLost, Message: msg})
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
		return errLostLease
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
