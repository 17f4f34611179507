package main

import (
	"context"
	"fmt"
	"sync"
	"time"

	certv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	certlisters "k8s.io/client-go/listers/certificates/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"

	"github.com/certready/certready/internal/names"
)

// naiveApprover is the approach certready had before, kept here to be
// measured beside it in the same run: for every pending kubelet-serving
// CSR a label update, then the approval, then a Normal event, all on one
// client at the old defaults (QPS 100, burst 200), four workers. It checks
// nothing (the policy costs microseconds; the requests are the cost) and
// runs only while the real approver is stopped, with its identity (RBAC and
// API Priority and Fairness as for the real one).
type naiveApprover struct {
	stop func()
	done sync.WaitGroup
}

const (
	naiveQPS, naiveBurst = 100, 200
	naiveWorkers         = 4
)

func startNaive(ctx context.Context, admin *rest.Config) (*naiveApprover, error) {
	cfg := rest.CopyConfig(admin)
	cfg.QPS, cfg.Burst, cfg.UserAgent = naiveQPS, naiveBurst, "certready-bench-naive-approver"
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(ctx)
	f := informers.NewSharedInformerFactoryWithOptions(client, 0, informers.WithTweakListOptions(func(o *metav1.ListOptions) {
		o.FieldSelector = fields.OneTermEqualSelector("spec.signerName", names.SignerName).String()
	}))
	inf := f.Certificates().V1().CertificateSigningRequests()
	queue := workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[string]())
	add := func(obj any) {
		if key, err := cache.MetaNamespaceKeyFunc(obj); err == nil {
			queue.Add(key)
		}
	}
	if _, err := inf.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: add, UpdateFunc: func(_, o any) { add(o) }}); err != nil {
		cancel()
		return nil, err
	}
	f.Start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), inf.Informer().HasSynced) {
		cancel()
		return nil, fmt.Errorf("naive approver: cache did not sync")
	}
	n := &naiveApprover{}
	n.stop = func() { cancel(); queue.ShutDown(); n.done.Wait(); f.Shutdown() }
	for i := 0; i < naiveWorkers; i++ {
		n.done.Add(1)
		go func() {
			defer n.done.Done()
			for {
				key, shut := queue.Get()
				if shut {
					return
				}
				if err := naiveApprove(ctx, client, inf.Lister(), key); err != nil && ctx.Err() == nil {
					queue.AddRateLimited(key)
				} else {
					queue.Forget(key)
				}
				queue.Done(key)
			}
		}()
	}
	return n, nil
}

func naiveApprove(ctx context.Context, client kubernetes.Interface, lister certlisters.CertificateSigningRequestLister, key string) error {
	api := client.CertificatesV1().CertificateSigningRequests()
	csr, err := lister.Get(key)
	if err != nil || isApproved(csr) || len(csr.Status.Conditions) > 0 {
		return nil
	}
	node, _ := names.NodeOf(csr.Spec.Username)
	labelled := csr.DeepCopy()
	if labelled.Labels == nil {
		labelled.Labels = map[string]string{}
	}
	labelled.Labels[names.NodeLabel] = node
	written, err := api.Update(ctx, labelled, metav1.UpdateOptions{})
	if err != nil {
		return err
	}
	written.Status.Conditions = append(written.Status.Conditions, certv1.CertificateSigningRequestCondition{
		Type: certv1.CertificateApproved, Status: corev1.ConditionTrue, Reason: "NaiveApproval", Message: "bench: naive approval", LastUpdateTime: metav1.Now(),
	})
	if _, err := api.UpdateApproval(ctx, written.Name, written, metav1.UpdateOptions{}); err != nil {
		return err
	}
	_, err = client.CoreV1().Events(metav1.NamespaceDefault).Create(ctx, &corev1.Event{
		ObjectMeta:     metav1.ObjectMeta{GenerateName: written.Name + "."},
		InvolvedObject: corev1.ObjectReference{Kind: "CertificateSigningRequest", APIVersion: "certificates.k8s.io/v1", Name: written.Name, UID: written.UID},
		Reason:         "NaiveApproval", Message: "bench: naive approval", Type: corev1.EventTypeNormal,
		Source: corev1.EventSource{Component: "certready-bench-naive-approver"}, FirstTimestamp: metav1.NewTime(time.Now()), LastTimestamp: metav1.NewTime(time.Now()), Count: 1,
	}, metav1.CreateOptions{})
	return err
}
