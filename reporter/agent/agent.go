// Package agent runs the per-node loop: file events, its Node and its
// labelled CSRs, a timer at the certificate's NotAfter and a periodic resync
// all enqueue one check; a single worker observes (certfile, csrmatch,
// probe), decides (verdict) and publishes (condition), with metrics.
package agent

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/certready/certready/reporter/servingcert/evidence"

	"github.com/prometheus/client_golang/prometheus"
	certv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	certlisters "k8s.io/client-go/listers/certificates/v1"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"

	"github.com/certready/certready/internal/fingerprint"
	"github.com/certready/certready/internal/httpserve"
	"github.com/certready/certready/internal/ledger"
	"github.com/certready/certready/internal/names"
	"github.com/certready/certready/internal/nodeapi"
	"github.com/certready/certready/internal/stamp"
	"github.com/certready/certready/internal/trim"
	"github.com/certready/certready/internal/workloop"
	"github.com/certready/certready/reporter/agent/apiclock"
	"github.com/certready/certready/reporter/agent/nodeinventory"
	"github.com/certready/certready/reporter/agent/renewal"
	"github.com/certready/certready/reporter/servingcert/apipath"
	"github.com/certready/certready/reporter/servingcert/certfile"
	"github.com/certready/certready/reporter/servingcert/condition"
	"github.com/certready/certready/reporter/servingcert/csrlookup"
	"github.com/certready/certready/reporter/servingcert/csrmatch"
	"github.com/certready/certready/reporter/servingcert/kubeletconfig"
	"github.com/certready/certready/reporter/servingcert/observe"
	"github.com/certready/certready/reporter/servingcert/probe"
	"github.com/certready/certready/reporter/servingcert/verdict"
)

// Config is the agent's configuration; Defaults fills the zero values.
type Config struct {
	NodeName    string
	PKIDir      string
	CAFile      string
	KubeletPort int // 0: the Node's daemonEndpoints, else 10250
	// PreferredAddressTypes is the API server's
	// --kubelet-preferred-address-types: which address of the node it
	// dials, and so which one the certificate must cover.
	PreferredAddressTypes []corev1.NodeAddressType
	ConditionType         corev1.NodeConditionType
	Heartbeat             time.Duration
	Resync                time.Duration
	// Settle is how long a state that a healthy rotation passes through
	// (file briefly absent, kubelet still serving the previous certificate)
	// must persist before it is published.
	Settle       time.Duration
	ProbeTimeout time.Duration
	// CSRRetention is how long the controller manager keeps issued CSRs.
	CSRRetention time.Duration
	// FallbackBackoff bounds the signer-wide CSR list used while no
	// labelled CSR explains the installed certificate.
	FallbackMinBackoff, FallbackMaxBackoff time.Duration
	// CheckStalledAfter is the watchdog's bound: when no check has completed for
	// this long (a hung API call, a stuck probe), the condition is set to
	// Unknown/CheckStalled, so that a False cannot outlive the checks that
	// justified it. A check that took longer than this is thrown away and
	// run again rather than published.
	CheckStalledAfter time.Duration
	// Clock, when set, is the API server's clock as its responses show it
	// (wrap the client's transport with it); validity is then judged by
	// it, and a skew beyond MaxClockSkew is reported (ClockSkew).
	Clock        *apiclock.Clock
	MaxClockSkew time.Duration
	// Ledger receives a record of every change of the condition and every
	// rotation (nil: none). Run writes it.
	Ledger *ledger.Ledger
	// Settled runs once, after the first check completed (nil: nothing):
	// the process returns its start-up garbage, and the pages of its binary
	// that only start-up touched, to the OS there.
	Settled func()
	// Version is this agent's, stated in the Ready condition's facts.
	Version string
	// ExpiryWarning and ExpiryCritical are how long before the kubelet's
	// serving or client certificate expires the expiry alerts fire, and
	// CAExpiryWarning the same for the cluster CA. The agent publishes
	// them (certready_expiry_window_seconds), so that the alerts read the
	// node's setting rather than a constant.
	ExpiryWarning, ExpiryCritical, CAExpiryWarning time.Duration
	// APIServerProof: whether the API server's own path to the kubelet
	// (the path of kubectl logs) is asked (apipath.Observe) and required
	// for the ready verdict (apipath.Required); "" is apipath.Off. It asks
	// for one byte of this pod's container's log: PodNamespace, PodName,
	// Container.
	APIServerProof                   apipath.Mode
	PodNamespace, PodName, Container string
	// APIProofInterval: how long a proof of the same certificate stands.
	APIProofInterval time.Duration
	// KubeletConfig is the kubelet's configuration file, read at each
	// check for serverTLSBootstrap and rotateCertificates ("": not read;
	// missing or unreadable: not known, never an error).
	KubeletConfig string
	// Inventory is a desired-state inventory ("configmap:<ns>/<name>" or
	// "file:<path>", as the approver's --inventory; "" or "node": none).
	// The agent dials the address it records for this node and names the
	// drift of the Node's addresses from it (NodeAddressDrift).
	Inventory string
	// InventorySyncWait bounds how long the first check waits for the
	// inventory ConfigMap's first list (it is evidence, not a
	// precondition).
	InventorySyncWait time.Duration
}

// apiProofTimeout bounds one log request through the API server: above
// its own 30 s dial timeout to the kubelet, so that a connection a
// firewall drops is named by the API server (cannot reach), not by the
// agent's deadline.
const apiProofTimeout = 35 * time.Second

// The expiry windows' defaults.
const (
	DefaultExpiryWarning   = 7 * 24 * time.Hour
	DefaultExpiryCritical  = 24 * time.Hour
	DefaultCAExpiryWarning = 30 * 24 * time.Hour
)

// Defaults returns c with zero values replaced by the documented defaults.
func (c Config) Defaults() Config {
	def := func(d *time.Duration, v time.Duration) {
		if *d == 0 {
			*d = v
		}
	}
	if c.PKIDir == "" {
		c.PKIDir = certfile.DefaultDir
	}
	if c.ConditionType == "" {
		c.ConditionType = names.ConditionType
	}
	def(&c.Heartbeat, 5*time.Minute)
	def(&c.Resync, time.Minute)
	def(&c.Settle, 2*time.Second)
	def(&c.ProbeTimeout, probe.DefaultTimeout)
	def(&c.CSRRetention, time.Hour)
	def(&c.FallbackMinBackoff, 5*time.Second)
	def(&c.FallbackMaxBackoff, 5*time.Minute)
	def(&c.CheckStalledAfter, 3*c.Resync)
	def(&c.MaxClockSkew, time.Minute)
	def(&c.ExpiryWarning, DefaultExpiryWarning)
	def(&c.ExpiryCritical, DefaultExpiryCritical)
	def(&c.CAExpiryWarning, DefaultCAExpiryWarning)
	def(&c.APIProofInterval, 10*time.Minute)
	def(&c.InventorySyncWait, 10*time.Second)
	if c.APIServerProof == "" {
		c.APIServerProof = apipath.Off
	}
	return c
}

// Validate names the first bad field.
func (c Config) Validate() error {
	switch {
	case c.NodeName == "":
		return errors.New("--node-name is empty: set it, or NODE_NAME from the downward API (fieldRef spec.nodeName)")
	case c.CAFile == "":
		return errors.New("--ca-file is empty: name the CA that signs kubelet serving certificates")
	case c.KubeletPort < 0 || c.KubeletPort > 65535:
		return fmt.Errorf("--kubelet-port=%d is not a port (0 means: from the Node object)", c.KubeletPort)
	case c.Resync <= 0 || c.Heartbeat <= 0:
		return errors.New("--resync and --heartbeat must be positive")
	case c.ValidateExpiry() != nil:
		return c.ValidateExpiry()
	case c.APIServerProof != apipath.Off && c.APIProofInterval <= 0:
		return fmt.Errorf("--apiserver-proof-interval=%s: want a positive duration", c.APIProofInterval)
	case c.APIServerProof != apipath.Off && c.CheckStalledAfter <= c.Resync+c.ProbeTimeout+c.Settle+apiProofTimeout:
		return fmt.Errorf("--check-stalled-after=%s must exceed --resync + --probe-timeout + --settle + the API server proof's %s (%s), or set --apiserver-proof=off", c.CheckStalledAfter, apiProofTimeout, c.Resync+c.ProbeTimeout+c.Settle+apiProofTimeout)
	case c.APIServerProof != apipath.Off && (c.PodName == "" || c.PodNamespace == "" || c.Container == ""):
		return fmt.Errorf("--apiserver-proof=%s asks the API server for this pod's log: set --pod-name and --pod-namespace (POD_NAME and POD_NAMESPACE from the downward API) and --container-name, or --apiserver-proof=off", c.APIServerProof)
	case c.CheckStalledAfter <= c.Resync+c.ProbeTimeout+c.Settle:
		return fmt.Errorf("--check-stalled-after=%s must exceed --resync + --probe-timeout + --settle (%s): a healthy agent completes a check at least that often", c.CheckStalledAfter, c.Resync+c.ProbeTimeout+c.Settle)
	}
	return nil
}

// ValidateExpiry checks the expiry windows (of a Config with its
// Defaults), alone: they are the settings an operator tunes through a
// ConfigMap.
func (c Config) ValidateExpiry() error {
	switch {
	case c.ExpiryWarning < 0 || c.ExpiryCritical < 0 || c.CAExpiryWarning < 0:
		return errors.New("--expiry-warning, --expiry-critical and --ca-expiry-warning must be positive (0: the default)")
	case c.ExpiryCritical > c.ExpiryWarning:
		return fmt.Errorf("--expiry-critical=%s is longer than --expiry-warning=%s: the critical alert would fire before the warning", c.ExpiryCritical, c.ExpiryWarning)
	}
	return nil
}

const checkKey = "check"

// Agent is one node's reporter.
type Agent struct {
	cfg     Config
	client  nodeapi.API
	metrics *metrics
	ready   *httpserve.Readiness
	now     func() time.Time
	settled sync.Once

	queue    *workloop.Loop[string]
	nodes    corelisters.NodeLister
	csrs     *csrlookup.Cached
	check    observe.Check
	writer   *condition.Writer
	recorder condition.Recorder
	// writerUID is the Node object writer was made for.
	writerUID types.UID

	// Worker-only state.
	proven *provenCSR  // the CSR that proved the current fingerprint
	served *servedCert // the certificate last published ready
	// publishedReady: the last verdict this process published was ready.
	// Otherwise a ready verdict is a transition someone may act on (a
	// taint lifted), and the API server's path is proven afresh. (The
	// Node's own condition is not the measure: a Node registered again
	// has none while its kubelet restarts and answers log requests with
	// 404 for a while, which would hold the new Node's taint for the
	// retries; the certificate and this process's proof of it stand.)
	publishedReady bool
	apiProof       *apipath.Prover
	// unverified asks the API server while the kubelet presents a
	// certificate the CA does not verify; findingAt is when the
	// finding's event was last recorded.
	unverified *apipath.Prover
	findingAt  time.Time
	// kubelet is the kubelet configuration last noted.
	kubelet kubeletconfig.Settings
	// inventory is --inventory (nil: none); drift is the drift last
	// recorded as an event.
	inventory *nodeinventory.Source
	drift     string
	// stuck is the renewal's last assessment, since when it has held and
	// whether it was reported.
	stuck   stuckRenewal
	pending pendingState
	checks  int

	// Shared with the watchdog: when the last check completed (Unix
	// nanoseconds; the start until the first one) and the step the
	// worker is in now.
	completed atomic.Int64
	stage     atomic.Pointer[string]
}

type provenCSR struct {
	fp  fingerprint.SHA256
	csr csrmatch.Result
}

type servedCert struct {
	fp       fingerprint.SHA256
	notAfter time.Time
}

type stuckRenewal struct {
	status   renewal.Status
	since    time.Time
	reported bool
}

type pendingState struct {
	reason verdict.Reason
	since  time.Time
}

// New builds an agent. reg receives its metrics; ready is flipped once the
// caches synced and the first check completed.
func New(cfg Config, client nodeapi.API, reg prometheus.Registerer, ready *httpserve.Readiness) (*Agent, error) {
	cfg = cfg.Defaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	inv, err := nodeinventory.New(cfg.Inventory, cfg.NodeName, client)
	if err != nil {
		return nil, err
	}
	a := &Agent{
		cfg:       cfg,
		client:    client,
		metrics:   newMetrics(reg, cfg),
		ready:     ready,
		now:       time.Now,
		inventory: inv,
	}
	a.queue = workloop.New(workloop.Config[string]{
		Name:        "certready-agent",
		RateLimiter: workqueue.NewTypedItemExponentialFailureRateLimiter[string](100*time.Millisecond, 30*time.Second),
		KeyName:     "check", Failure: "Check failed; retrying",
	}, func(ctx context.Context, _ string) (workloop.Result, error) {
		next, err := a.Check(ctx)
		return workloop.After(next), err
	})
	return a, nil
}

// Run watches and checks until ctx ends.
func (a *Agent) Run(ctx context.Context) error {
	logger := klog.FromContext(ctx).WithValues("node", a.cfg.NodeName)
	ctx = klog.NewContext(ctx, logger)
	defer a.queue.ShutDown()

	nodeInformer, csrInformer, err := a.newInformers()
	if err != nil {
		return err
	}
	a.wireCheck(nodeInformer, csrInformer)
	events := nodeapi.NewNodeEvents(a.client, corev1.EventSource{Component: names.AgentEventSource, Host: a.cfg.NodeName})
	a.recorder = events
	go events.Run(ctx)
	if l := a.cfg.Ledger; l != nil {
		lctx, stopLedger := context.WithCancel(ctx)
		done := make(chan struct{})
		go func() { l.Run(lctx); close(done) }()
		defer func() { stopLedger(); <-done }() // what was recorded is written before the process ends
		uctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		uid, err := a.client.ClusterUID(uctx)
		cancel()
		if err != nil {
			logger.Error(err, "Ledger records will not name the cluster")
		}
		l.SetCluster(uid)
	}

	var informers sync.WaitGroup
	ictx, stopInformers := context.WithCancel(ctx)
	defer func() { stopInformers(); informers.Wait() }()
	for _, inf := range []cache.SharedIndexInformer{nodeInformer, csrInformer} {
		informers.Add(1)
		go func() { defer informers.Done(); inf.RunWithContext(ictx) }()
	}
	informers.Add(1)
	go func() { defer informers.Done(); a.inventory.Run(ictx, func() { a.queue.Add(checkKey) }) }()
	logger.Info("Waiting for caches", "pkiDir", a.cfg.PKIDir, "conditionType", a.cfg.ConditionType)
	if !cache.WaitForCacheSync(ctx.Done(), nodeInformer.HasSynced, csrInformer.HasSynced) {
		return fmt.Errorf("the caches of its Node and its CSRs did not sync: %w", ctx.Err())
	}
	// The inventory is evidence, not a precondition: an inventory the
	// agent may not read (RBAC) must not keep it from checking. It waits
	// a while for the first list, then checks without it (the message
	// says so) until it comes.
	if !a.inventory.HasSynced() {
		sctx, cancel := context.WithTimeout(ctx, a.cfg.InventorySyncWait)
		if !cache.WaitForCacheSync(sctx.Done(), a.inventory.HasSynced) {
			logger.Error(nil, "The inventory was not read in time; checking with the Node's addresses until it is", "inventory", a.inventory.Describe(), "waited", a.cfg.InventorySyncWait)
		}
		cancel()
	}

	go func() {
		_ = certfile.Watch(ctx, a.cfg.PKIDir, 5*time.Second, func() { a.queue.Add(checkKey) })
	}()
	a.completed.Store(a.now().UnixNano())
	a.setStage("waiting")
	go a.watchdog(ctx)
	a.queue.Add(checkKey)
	logger.Info("Agent started", "resync", a.cfg.Resync, "heartbeat", a.cfg.Heartbeat, "checkStalledAfter", a.cfg.CheckStalledAfter)
	a.queue.Run(ctx, 1)
	return nil
}

// newInformers watches the agent's own Node and its own kubelet-serving
// CSRs, caching only what the checks read; every event queues a check.
func (a *Agent) newInformers() (nodeInformer, csrInformer cache.SharedIndexInformer, err error) {
	nodeInformer = cache.NewSharedIndexInformer(a.client.Nodes(observe.NodeSelector(a.cfg.NodeName)),
		&corev1.Node{}, 0, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
	csrInformer = cache.NewSharedIndexInformer(a.client.CSRs(csrlookup.Selector(a.cfg.NodeName)),
		&certv1.CertificateSigningRequest{}, 0, cache.Indexers{})
	if err := nodeInformer.SetTransform(trim.Node(a.cfg.ConditionType)); err != nil {
		return nil, nil, err
	}
	if err := csrInformer.SetTransform(trim.CSR(trim.CSROptions{KeepCertificate: true, DropRequest: true})); err != nil {
		return nil, nil, err
	}
	enqueue := func(resource string) cache.ResourceEventHandlerFuncs {
		counter := a.metrics.events.WithLabelValues(resource)
		return cache.ResourceEventHandlerFuncs{
			AddFunc:    func(any) { counter.Inc(); a.queue.Add(checkKey) },
			UpdateFunc: func(any, any) { counter.Inc(); a.queue.Add(checkKey) },
			DeleteFunc: func(any) { counter.Inc(); a.queue.Add(checkKey) },
		}
	}
	if _, err := nodeInformer.AddEventHandler(enqueue("nodes")); err != nil {
		return nil, nil, err
	}
	// The API server applies both selectors; a CSR that is not this node's
	// kubelet-serving one (a client that ignores selectors, a fake) is
	// counted and ignored, never a reason to check.
	if _, err := csrInformer.AddEventHandler(cache.FilteringResourceEventHandler{
		FilterFunc: func(obj any) bool {
			if a.mine(obj) {
				return true
			}
			a.metrics.foreign.Inc()
			return false
		},
		Handler: enqueue("csrs"),
	}); err != nil {
		return nil, nil, err
	}
	return nodeInformer, csrInformer, nil
}

// wireCheck points the observation path at the informers' caches and at
// what this agent proved earlier.
func (a *Agent) wireCheck(nodeInformer, csrInformer cache.SharedIndexInformer) {
	a.nodes = corelisters.NewNodeLister(nodeInformer.GetIndexer())
	a.csrs = csrlookup.NewCached(a.cfg.NodeName, certlisters.NewCertificateSigningRequestLister(csrInformer.GetIndexer()), a.client,
		a.cfg.FallbackMinBackoff, a.cfg.FallbackMaxBackoff)
	a.check = observe.Check{
		PKIDir: a.cfg.PKIDir, CAFile: a.cfg.CAFile, KubeletPort: a.cfg.KubeletPort,
		ProbeTimeout: a.cfg.ProbeTimeout, CSRRetention: a.cfg.CSRRetention, CSRs: a.csrs,
		Remembered: func(fp fingerprint.SHA256) *csrmatch.Result {
			if a.proven == nil || a.proven.fp != fp {
				return nil
			}
			csr := a.proven.csr
			return &csr
		},
		Stage: a.setStage, Done: a.metrics.observe,
	}
	if a.cfg.APIServerProof != apipath.Off {
		a.apiProof = &apipath.Prover{
			Ask: func(ctx context.Context) error {
				return a.client.PodLog(ctx, a.cfg.PodNamespace, a.cfg.PodName, a.cfg.Container)
			},
			Timeout: apiProofTimeout, Interval: a.cfg.APIProofInterval, Fresh: time.Minute,
			Count: func(o apipath.Outcome) { a.metrics.apiProofs.WithLabelValues(string(o)).Inc() },
		}
		a.check.APIPath = func(ctx context.Context, fp fingerprint.SHA256) apipath.Result {
			return a.apiProof.Evidence(ctx, fp, a.now(), !a.publishedReady)
		}
		// A refusal is the healthy answer here: it stands as long as a
		// proof, so a kubelet with a self-signed certificate costs one
		// request per interval.
		a.unverified = &apipath.Prover{
			Ask: a.apiProof.Ask, Timeout: apiProofTimeout, Interval: a.cfg.APIProofInterval, Fresh: a.cfg.APIProofInterval,
			FailureStands: a.cfg.APIProofInterval,
			Count:         func(o apipath.Outcome) { a.metrics.unverifiedAsks.WithLabelValues(string(o)).Inc() },
		}
		a.check.Unverified = func(ctx context.Context, fp fingerprint.SHA256) apipath.Result {
			return a.unverified.Evidence(ctx, fp, a.now(), false)
		}
	}
	a.check.KubeletConfig = a.cfg.KubeletConfig
}

// Check runs one check and publishes its verdict. It returns how long until
// the next check is due (the resync, or sooner for a settle period or a
// certificate validity boundary).
func (a *Agent) Check(ctx context.Context) (time.Duration, error) {
	logger := klog.FromContext(ctx)
	node, err := a.nodes.Get(a.cfg.NodeName)
	if apierrors.IsNotFound(err) {
		return 0, fmt.Errorf("node %s not found: is --node-name right?", a.cfg.NodeName)
	}
	if err != nil {
		return 0, err
	}
	if a.writer == nil || a.writerUID != node.UID {
		// A Node deleted and registered again under its name is a new
		// object without the condition: what this process wrote to the old
		// one no longer stands, and events must name the new one.
		a.writer = condition.NewWriter(condition.Config{
			Node: node.Name, NodeUID: node.UID, Type: a.cfg.ConditionType, Heartbeat: a.cfg.Heartbeat,
			Annotation: names.FactsAnnotation,
		}, condition.NewClient(a.client), a.recorder)
		a.writerUID = node.UID
	}
	now := a.now()
	in := evidence.Evidence{Node: observe.NodeInfo(node, a.cfg.PreferredAddressTypes), Now: now, Agent: a.cfg.Version,
		RequireAPIPath: a.cfg.APIServerProof == apipath.Required, Inventory: a.inventory.Lookup()}
	if a.cfg.Clock != nil {
		if r := a.cfg.Clock.Read(); r.Known {
			in.Clock = evidence.Clock{Known: true, Skew: r.Skew, Max: a.cfg.MaxClockSkew}
			a.metrics.clockSkew.Set(r.Skew.Seconds())
		}
	}
	in = a.check.Run(ctx, in, node)
	if in.ClientNotAfter.IsZero() {
		a.metrics.clientNotAfter.Set(0)
	} else {
		a.metrics.clientNotAfter.Set(float64(in.ClientNotAfter.Unix()))
	}
	if in.File.State == certfile.Present {
		a.metrics.setNotAfter(float64(in.File.Leaf.NotAfter.Unix()))
		a.metrics.observation.Set(1)
	} else {
		a.metrics.setNotAfter(0)
		a.metrics.observation.Set(0)
	}
	if err := ctx.Err(); err != nil {
		// Shutting down: a probe cut short says nothing about the kubelet.
		return 0, err
	}
	v := verdict.Evaluate(in)
	a.metrics.evaluated(v)
	a.checks++
	if in.CSR.Match.State == csrmatch.Issued && v.Ready() {
		a.proven = &provenCSR{fp: in.File.Fingerprint, csr: in.CSR.Match}
	}

	next := a.cfg.Resync
	if in.File.State == certfile.Present {
		next = min(next, untilBoundary(now, in.File.Leaf))
	}
	if took := a.now().Sub(now); took > a.cfg.CheckStalledAfter {
		// The watchdog has published CheckStalled meanwhile; evidence this
		// old must not replace it.
		return 0, fmt.Errorf("the check took %s, over --check-stalled-after %s: its evidence is too old to publish; checking again", took.Round(time.Millisecond), a.cfg.CheckStalledAfter)
	}
	if wait := a.settle(v, now); wait > 0 {
		logger.V(2).Info("Waiting for a possibly transient state to settle", "reason", v.Reason, "wait", wait)
		a.checkDone()
		return min(next, wait), nil
	}

	a.noteKubeletConfig(ctx, node, in.Kubelet, v)
	a.noteFinding(ctx, node, in, now)
	a.noteDrift(ctx, node, in)

	a.setStage("writing the condition")
	d := condition.Desired{Status: v.Status, Reason: string(v.Reason), Message: v.Message}
	if v.Facts != nil {
		d.Annotation = v.Facts.Annotation()
	}
	out, err := a.writer.Write(ctx, now, d, node)
	if err != nil {
		a.metrics.writes.WithLabelValues("Error").Inc()
		return 0, err
	}
	a.metrics.writes.WithLabelValues(string(out)).Inc()
	a.metrics.published(v, now, out == condition.Transitioned)
	a.publishedReady = v.Ready()
	if out == condition.Transitioned {
		logger.Info("Condition changed", "type", a.cfg.ConditionType, "status", v.Status, "reason", v.Reason, "message", v.Message)
		a.recordVerdict(now, v, in)
	}
	if v.Ready() {
		a.noteServed(ctx, node, in)
		if v.CA != nil {
			a.metrics.caNotAfter.Set(float64(v.CA.NotAfter.Unix()))
		}
		if wait := a.noteRenewal(ctx, node, in, now); wait > 0 {
			next = min(next, wait)
		}
		if d := renewal.Due(in.File.Leaf).Sub(in.ValidityTime()); d > 0 {
			next = min(next, d+time.Second) // assessed as it falls due
		}
	} else {
		// A certificate that is not ready is the condition's business.
		a.metrics.setRenewal(renewal.NotDue)
		a.stuck = stuckRenewal{}
	}
	if a.ready != nil && !a.ready.Ready() {
		a.ready.Set(true, "")
	}
	if a.cfg.Settled != nil {
		a.settled.Do(a.cfg.Settled)
	}
	a.checkDone()
	return next, nil
}

// noteServed records a rotation when the certificate just published ready
// differs from the one published ready before: both full fingerprints and
// NotAfter, on a Node event CertificateRotated (the runbook's before and
// after), in the log and in certready_certificate_rotations_total. The
// first certificate a process proves is no rotation: what came before a
// restart is not known here.
func (a *Agent) noteServed(ctx context.Context, node *corev1.Node, in evidence.Evidence) {
	if in.File.Leaf == nil {
		return
	}
	prev := a.served
	a.served = &servedCert{fp: in.File.Fingerprint, notAfter: in.File.Leaf.NotAfter}
	if prev == nil || prev.fp == a.served.fp {
		return
	}
	a.metrics.rotations.Inc()
	prevNotAfter, notAfter := prev.notAfter, a.served.notAfter
	a.cfg.Ledger.Record(ledger.Record{Action: ledger.Rotated, Node: a.cfg.NodeName, CSR: in.CSR.Match.Name,
		CertificateSHA256: a.served.fp.String(), NotAfter: &notAfter, PreviousSHA256: prev.fp.String(), PreviousNotAfter: &prevNotAfter,
		Message: "serving certificate rotated, issued by " + in.CSR.Match.Describe()})
	klog.FromContext(ctx).Info("Serving certificate rotated", "old", prev.fp.String(), "oldNotAfter", prev.notAfter,
		"new", a.served.fp.String(), "newNotAfter", a.served.notAfter, "csr", in.CSR.Match.Name)
	a.recorder.Eventf(&corev1.ObjectReference{Kind: "Node", APIVersion: "v1", Name: node.Name, UID: node.UID}, corev1.EventTypeNormal, "CertificateRotated",
		"serving certificate rotated: sha256 %s (notAfter %s) -> sha256 %s (notAfter %s), issued by %s",
		prev.fp, stamp.Format(prev.notAfter), a.served.fp, stamp.Format(a.served.notAfter), in.CSR.Match.Describe())
}

// noteRenewal warns when the renewal of the certificate just proven ready
// is stuck (package renewal): certready_renewal_stuck at once, and, once
// the same cause has held for the settle period (a healthy renewal passes
// through pending and issued-not-installed in moments), a Warning event
// RenewalStuck on the Node, a ledger record and a log line, once per
// cause. The condition is left as it is: the certificate still works. It
// returns how long until the cause is due to be reported (0: nothing to
// wait for).
func (a *Agent) noteRenewal(ctx context.Context, node *corev1.Node, in evidence.Evidence, now time.Time) time.Duration {
	leaf := in.File.Leaf
	if leaf == nil {
		return 0
	}
	// Requests made after the one that issued the installed certificate
	// are its renewal; without that CSR (collected), after its NotBefore.
	since := leaf.NotBefore
	if in.CSR != nil && in.CSR.Match.State == csrmatch.Issued {
		since = in.CSR.Match.Created
	} else if in.CSR != nil && in.CSR.Remembered != nil {
		since = in.CSR.Remembered.Created
	}
	labelled := a.csrs.Labelled()
	st := renewal.Assess(in.ValidityTime(), leaf, since, labelled, a.cfg.NodeName)
	if st.Stuck() {
		// Before saying why, look at the requests no approver labelled
		// (none runs?), on a backoff of their own.
		st = renewal.Assess(in.ValidityTime(), leaf, since, a.csrs.WithUnlabelled(ctx, now, labelled), a.cfg.NodeName)
	} else {
		a.csrs.RenewalNotStuck()
	}
	a.metrics.setRenewal(st.Reason)
	if prev := a.stuck.status; st.Reason != prev.Reason || st.CSR != prev.CSR {
		a.stuck = stuckRenewal{status: st, since: now}
	}
	if !st.Stuck() || a.stuck.reported {
		return 0
	}
	if wait := a.cfg.Settle - now.Sub(a.stuck.since); wait > 0 {
		return wait
	}
	a.stuck.reported = true
	msg := st.Message(in.File.Fingerprint.String(), leaf.NotAfter)
	klog.FromContext(ctx).Info("Serving certificate renewal is stuck", "reason", st.Reason, "csr", st.CSR, "due", st.Due, "notAfter", leaf.NotAfter)
	// No key of its own: the cause (reason, request, certificate) names the
	// event, so an agent restarted into the same stuck renewal records it
	// again under the same event_id.
	notAfter := leaf.NotAfter
	a.cfg.Ledger.Record(ledger.Record{Action: ledger.RenewalStuck, Node: a.cfg.NodeName, Rule: string(st.Reason), Message: msg,
		CSR: st.CSR, CertificateSHA256: in.File.Fingerprint.String(), NotAfter: &notAfter})
	if a.recorder != nil {
		a.recorder.Eventf(&corev1.ObjectReference{Kind: "Node", APIVersion: "v1", Name: node.Name, UID: node.UID},
			corev1.EventTypeWarning, "RenewalStuck", "%s: %s", st.Reason, msg)
	}
	return 0
}

// recordVerdict writes a change of the condition to the ledger, with the
// certificate and CSR it was judged on where there is one. Its time is the
// event's key: two changes to the same state are two events.
func (a *Agent) recordVerdict(at time.Time, v verdict.Verdict, in evidence.Evidence) {
	if a.cfg.Ledger == nil {
		return
	}
	r := ledger.Record{Action: ledger.VerdictChanged, Node: a.cfg.NodeName, Status: string(v.Status), Rule: string(v.Reason),
		Message: v.Message, Key: at.UTC().Format(time.RFC3339Nano)}
	if in.CSR != nil { // none for the watchdog's Unknown: no check completed
		r.CSR = in.CSR.Match.Name
	}
	if in.File.State == certfile.Present && in.File.Leaf != nil {
		na := in.File.Leaf.NotAfter
		r.CertificateSHA256, r.NotAfter = in.File.Fingerprint.String(), &na
	}
	a.cfg.Ledger.Record(r)
}

// checkDone records a completed check for the watchdog.
func (a *Agent) checkDone() {
	a.completed.Store(a.now().UnixNano())
	a.setStage("waiting")
}

func (a *Agent) setStage(s string) { a.stage.Store(&s) }

// mine reports whether obj is a kubelet-serving CSR labelled for this node.
func (a *Agent) mine(obj any) bool {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	c, ok := obj.(*certv1.CertificateSigningRequest)
	return ok && csrlookup.Labelled(c, a.cfg.NodeName)
}

// watchdog publishes Unknown/CheckStalled once no check has completed for
// CheckStalledAfter, and again after every later stall. It writes through its own
// client call, never through the worker's writer, which may be the thing
// that is stuck.
func (a *Agent) watchdog(ctx context.Context) {
	logger := klog.FromContext(ctx)
	tick := time.NewTicker(max(a.cfg.CheckStalledAfter/10, 10*time.Millisecond))
	defer tick.Stop()
	published := false
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		now, last := a.now(), time.Unix(0, a.completed.Load())
		if now.Sub(last) < a.cfg.CheckStalledAfter {
			published = false
			a.metrics.stalled.Set(0)
			continue
		}
		a.metrics.stalled.Set(1)
		if published {
			continue
		}
		v := verdict.Stalled(now, last, *a.stage.Load())
		cond := corev1.NodeCondition{
			Type: a.cfg.ConditionType, Status: v.Status, Reason: string(v.Reason), Message: v.Message,
			LastHeartbeatTime: metav1.NewTime(now), LastTransitionTime: metav1.NewTime(now),
		}
		wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		// The facts of a ready verdict go with it.
		err := condition.NewClient(a.client).PatchCondition(wctx, a.cfg.NodeName, cond, map[string]*string{names.FactsAnnotation: nil})
		cancel()
		if err != nil {
			a.metrics.writes.WithLabelValues("Error").Inc()
			logger.Error(err, "Checks are stalled and the condition could not be set to Unknown", "since", last)
			continue
		}
		published = true
		a.metrics.writes.WithLabelValues("Stalled").Inc()
		a.metrics.published(v, now, true)
		logger.Info("Checks are stalled: condition set to Unknown", "since", last, "stage", *a.stage.Load())
		a.recordVerdict(now, v, evidence.Evidence{})
		if n, err := a.nodes.Get(a.cfg.NodeName); err == nil && a.recorder != nil {
			a.recorder.Eventf(&corev1.ObjectReference{Kind: "Node", APIVersion: "v1", Name: n.Name, UID: n.UID},
				corev1.EventTypeWarning, string(v.Reason), "%s=%s: %s", a.cfg.ConditionType, v.Status, v.Message)
		}
	}
}

// settle returns how long to wait before publishing v, or 0 to publish now.
func (a *Agent) settle(v verdict.Verdict, now time.Time) time.Duration {
	last := a.writer.Last()
	if !v.Transient() || (last != nil && last.Reason == string(v.Reason)) {
		a.pending = pendingState{}
		return 0
	}
	if a.pending.reason != v.Reason {
		a.pending = pendingState{reason: v.Reason, since: now}
	}
	if wait := a.cfg.Settle - now.Sub(a.pending.since); wait > 0 {
		return wait
	}
	return 0
}

// untilBoundary is the time until the certificate's next validity edge
// (NotBefore in the future, else NotAfter), plus a second so that the check
// lands on the far side of it.
func untilBoundary(now time.Time, leaf *x509.Certificate) time.Duration {
	edge := leaf.NotAfter
	if now.Before(leaf.NotBefore) {
		edge = leaf.NotBefore
	}
	d := edge.Sub(now) + time.Second
	if d < time.Second {
		return time.Duration(1<<63 - 1)
	}
	return d
}

// noteKubeletConfig exports what the kubelet's configuration file says
// and, when that changes, names in the log and in a Node event a setting
// that stops a certificate's rotation: from the first check, not at the
// certificate's expiry.
func (a *Agent) noteKubeletConfig(ctx context.Context, node *corev1.Node, k kubeletconfig.Settings, v verdict.Verdict) {
	if a.cfg.KubeletConfig == "" {
		return
	}
	prev := a.kubelet
	a.kubelet = k
	if !k.Known {
		a.metrics.kubeletConfig.Reset()
		if prev.Known || prev.Path == "" {
			klog.FromContext(ctx).V(1).Info("The kubelet's configuration is not known", "path", k.Path, "err", k.Err)
		}
		return
	}
	a.metrics.kubeletConfig.WithLabelValues("serving").Set(bool01(k.ServerTLSBootstrap))
	a.metrics.kubeletConfig.WithLabelValues("client").Set(bool01(k.RotateCertificates))
	if prev.Known && prev.ServerTLSBootstrap == k.ServerTLSBootstrap && prev.RotateCertificates == k.RotateCertificates {
		return
	}
	ref := &corev1.ObjectReference{Kind: "Node", APIVersion: "v1", Name: node.Name, UID: node.UID}
	if !k.ServerTLSBootstrap && v.Ready() {
		// The running kubelet serves an issued certificate, so the file
		// changed since it started (or is not its configuration): the
		// next restart ends the rotation.
		msg := fmt.Sprintf("serverTLSBootstrap is not true in %s, yet the kubelet serves an issued certificate: the file changed since the kubelet started or is not its configuration; after its next restart the kubelet will serve a self-signed certificate", k.Path)
		klog.FromContext(ctx).Info("Serving certificate bootstrap off in the kubelet's configuration", "path", k.Path, "message", msg)
		a.recorder.Eventf(ref, corev1.EventTypeWarning, string(verdict.KubeletServingBootstrapOff), "%s", msg)
	}
	if !k.RotateCertificates {
		msg := fmt.Sprintf("rotateCertificates is not true in %s: the kubelet's client certificate is never renewed; when it expires the kubelet loses its API credentials and can request no serving certificate either; set rotateCertificates: true and restart the kubelet", k.Path)
		klog.FromContext(ctx).Info("Client certificate rotation off in the kubelet's configuration", "path", k.Path)
		a.recorder.Eventf(ref, corev1.EventTypeWarning, "KubeletClientRotationOff", "%s", msg)
	}
}

// findingEventEvery is how often a finding that holds is recorded again
// as an event: within the API server's event TTL (1h), so that status
// and preflight keep seeing it, and no more often.
const findingEventEvery = 30 * time.Minute

// noteFinding exports the cluster finding of in (the metric follows what
// this check saw; a check that did not look at the kubelet port leaves it)
// and records it as a Node event when first made, then every
// findingEventEvery while it holds.
func (a *Agent) noteFinding(ctx context.Context, node *corev1.Node, in evidence.Evidence, now time.Time) {
	if in.Endpoint == nil {
		return
	}
	if !verdict.APIServerVerifiesNoKubelet(in) {
		a.metrics.unverified.Set(0)
		a.findingAt = time.Time{}
		return
	}
	a.metrics.unverified.Set(1)
	if !a.findingAt.IsZero() && now.Sub(a.findingAt) >= 0 && now.Sub(a.findingAt) < findingEventEvery {
		return
	}
	a.findingAt = now
	msg := fmt.Sprintf("the API server read this node's pod log although the kubelet presents %s, which the CA does not verify (%v): the API server verifies no kubelet certificate, so any host that answers for a node's address gets the logs, exec sessions and port-forwards meant for it; set kube-apiserver --kubelet-certificate-authority to the kubelet-serving signer's CA",
		in.Endpoint.Fingerprint.Short(), in.Endpoint.VerifyErr)
	klog.FromContext(ctx).Info("The API server verifies no kubelet certificate", "node", node.Name, "presented", in.Endpoint.Fingerprint.String())
	a.recorder.Eventf(&corev1.ObjectReference{Kind: "Node", APIVersion: "v1", Name: node.Name, UID: node.UID},
		corev1.EventTypeWarning, verdict.FindingAPIServerVerifiesNoKubelet, "%s", msg)
}

// noteDrift exports whether the Node's addresses drifted from the
// inventory's record and records each new drift as a Warning Node event
// NodeAddressDrift (once per distinct drift, in this process).
func (a *Agent) noteDrift(ctx context.Context, node *corev1.Node, in evidence.Evidence) {
	if a.inventory == nil {
		return
	}
	d := verdict.Drift(in)
	a.metrics.drift.Set(bool01(d != ""))
	if d == "" || d == a.drift {
		a.drift = d
		return
	}
	a.drift = d
	klog.FromContext(ctx).Info("The Node's addresses drifted from the inventory", "drift", d)
	a.recorder.Eventf(&corev1.ObjectReference{Kind: "Node", APIVersion: "v1", Name: node.Name, UID: node.UID},
		corev1.EventTypeWarning, EventNodeAddressDrift, "%s: the API server dials the Node's addresses, the approver approves what the inventory records; fix the inventory or the node's address", d)
}

// EventNodeAddressDrift is the Node event of a drift from the inventory.
const EventNodeAddressDrift = "NodeAddressDrift"

func bool01(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
