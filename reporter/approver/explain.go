package approver

import (
	"context"
	"errors"
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
	certv1 "k8s.io/api/certificates/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	"github.com/certready/certready/reporter/approver/controller"
	"github.com/certready/certready/reporter/approver/policy"
)

// Explain evaluates the approval policy on csr as the approver configured
// by o would now, writing nothing: the same caches (CSRs of the signer,
// Nodes), the same evidence (inventory, the API server's identity, Service
// and Pod CIDRs, API server hosts), the same controller's backlog (a newer
// request, the flood guard) and the same rules. It reads the cluster
// through client (an operator's, read-only) until its caches synced.
func Explain(ctx context.Context, client kubernetes.Interface, o Options, csr *certv1.CertificateSigningRequest) (policy.Decision, error) {
	if o.ClusterAPI {
		return policy.Decision{}, errors.New("the approver runs with --cluster-api: it decides on the CSRs of each workload cluster against its Machines; explain a CSR there against a local inventory instead (--approver='' --inventory=...)")
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	c, err := newCaches(client, o)
	if err != nil {
		return policy.Decision{}, err
	}
	ev, err := gatherEvidence(ctx, client, c, &o, func() {})
	if err != nil {
		return policy.Decision{}, err
	}
	ctrl, err := controller.New(o.Controller, client, c.csr, nil, prometheus.NewRegistry())
	if err != nil {
		return policy.Decision{}, err
	}
	if err := reevaluateOnNodeChanges(c.node.Informer(), ctrl, ev.hosts, o.APIServerHostLabel); err != nil {
		return policy.Decision{}, err
	}
	c.csrFactory.Start(ctx.Done())
	c.nodeFactory.Start(ctx.Done())
	ev.Identity.Start(ctx)
	defer func() {
		cancel() // Shutdown waits for the informers, which stop with ctx
		c.csrFactory.Shutdown()
		c.nodeFactory.Shutdown()
	}()
	if !cache.WaitForCacheSync(ctx.Done(), append(c.synced, ctrl.HasSynced)...) {
		return policy.Decision{}, fmt.Errorf("the caches of CSRs and Nodes did not sync: %w", ctx.Err())
	}
	if ev.watch != nil && !ev.watch.LoadedAtStart {
		// A ConfigMap inventory: its first load is the watch's.
		loaded := make(chan error, 1)
		go ev.watch.Run(ctx, func(err error) {
			select {
			case loaded <- err:
			default:
			}
		})
		select {
		case err := <-loaded:
			if err != nil {
				return policy.Decision{}, fmt.Errorf("--inventory=%s: %w", o.InventorySpec, err)
			}
		case <-ctx.Done():
			return policy.Decision{}, fmt.Errorf("--inventory=%s was not loaded: %w", o.InventorySpec, ctx.Err())
		}
	}
	return ctrl.Evaluate(csr), nil
}
