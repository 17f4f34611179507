package capi

import (
	"context"
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
	certv1 "k8s.io/api/certificates/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"

	"github.com/certready/certready/reporter/approver/controller"
	"github.com/certready/certready/reporter/approver/evidence"
	"github.com/certready/certready/reporter/approver/policy"
	"github.com/certready/certready/reporter/approver/ranges"
)

// Explain evaluates the approval policy on csr, a CSR of cluster's
// workload cluster, as the management-cluster approver configured by cfg
// would now, writing nothing: the same evidence (the Cluster's Machines in
// mgmt, its service and pod ranges, the workload cluster's API server
// through client and rc) and the same controller's backlog and rules. It
// reads until the caches synced or ctx ends.
func Explain(ctx context.Context, cfg controller.Config, mgmt dynamic.Interface, cluster *unstructured.Unstructured, client kubernetes.Interface, rc *rest.Config, csr *certv1.CertificateSigningRequest) (policy.Decision, error) {
	ctx, cancelCause := context.WithCancelCause(ctx)
	cancel := func() { cancelCause(nil) }
	defer cancel()
	ns, name := cluster.GetNamespace(), cluster.GetName()
	machines := dynamicinformer.NewFilteredDynamicInformer(mgmt, MachineGVR, ns, 0, cache.Indexers{}, nil).Informer()
	if err := machines.SetTransform(TrimMachine); err != nil {
		return policy.Decision{}, err
	}
	if err := machines.AddIndexers(Indexers); err != nil {
		return policy.Decision{}, err
	}
	w := &workload{ranges: ranges.New()}
	w.setCluster(cluster)
	csrFactory, csrInformer, err := evidence.CSRs(client, cfg.Policy, nil)
	if err != nil {
		return policy.Decision{}, err
	}
	// As the approver: a tenant's cluster that lists more CSRs than the
	// bound ends the reading (rc's transport bounds each answer).
	if err := countCached(csrInformer, Limits{}.withDefaults().MaxObjects, cancelCause, clusterKey(ns, name)); err != nil {
		return policy.Decision{}, err
	}
	inv := Inventory{Indexer: machines.GetIndexer(), Namespace: ns, Cluster: name}
	ev, err := evidence.New(w.sources(client, rc, inv, func() {}))
	if err != nil {
		return policy.Decision{}, err
	}
	cfg.Evidence, cfg.WorkloadCluster, cfg.Ledger = ev.Policy, clusterKey(ns, name), nil
	ctrl, err := controller.New(cfg, client, csrInformer, nil, prometheus.NewRegistry())
	if err != nil {
		return policy.Decision{}, err
	}
	go machines.Run(ctx.Done())
	csrFactory.Start(ctx.Done())
	ev.Identity.Start(ctx)
	defer func() {
		cancel() // Shutdown waits for the informers, which stop with ctx
		csrFactory.Shutdown()
	}()
	if !cache.WaitForCacheSync(ctx.Done(), machines.HasSynced, csrInformer.HasSynced, ev.Identity.HasSynced, ctrl.HasSynced) {
		return policy.Decision{}, fmt.Errorf("the caches of Cluster %s/%s's Machines and its workload cluster's CSRs did not sync: %w", ns, name, context.Cause(ctx))
	}
	return ctrl.Evaluate(csr), nil
}
