package capi_test

import (
	"context"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	certv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/rest"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/client-go/tools/record"

	"github.com/certready/certready/internal/testmetrics"
	"github.com/certready/certready/internal/testpki"
	"github.com/certready/certready/internal/testwait"
	"github.com/certready/certready/reporter/approver/apiserver"
	"github.com/certready/certready/reporter/approver/capi"
)

// clusterObj is a Cluster as Cluster API stores it (metadata, and the
// control plane's endpoint).
func clusterObj(ns, name string, lbls map[string]string) *unstructured.Unstructured {
	u := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Cluster",
		"spec": map[string]any{"controlPlaneEndpoint": map[string]any{"host": "api." + name + ".example.com", "port": int64(6443)}}}}
	u.SetNamespace(ns)
	u.SetName(name)
	u.SetUID(types.UID("uid-" + ns + "-" + name))
	u.SetLabels(lbls)
	return u
}

// workloadCA signs the workload clusters' API server certificates.
var workloadCA = func() *testpki.CA {
	ca, err := testpki.NewCA("workload clusters")
	if err != nil {
		panic(err)
	}
	return ca
}()

// kubeconfig is what Cluster API writes: server, inline CA, inline client
// credentials.
func kubeconfig(t *testing.T, cluster, server string, edit func(*clientcmdapi.Config)) []byte {
	t.Helper()
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters[cluster] = &clientcmdapi.Cluster{Server: server, CertificateAuthorityData: workloadCA.PEM()}
	cfg.AuthInfos["admin"] = &clientcmdapi.AuthInfo{Token: "not-a-secret"}
	cfg.Contexts["admin@"+cluster] = &clientcmdapi.Context{Cluster: cluster, AuthInfo: "admin"}
	cfg.CurrentContext = "admin@" + cluster
	if edit != nil {
		edit(cfg)
	}
	value, err := clientcmd.Write(*cfg)
	if err != nil {
		t.Fatal(err)
	}
	return value
}

// kubeconfigSecret is the Secret Cluster API keeps for a cluster, owned by
// it, its kubeconfig naming server.
func kubeconfigSecret(t *testing.T, ns, cluster, server string) *corev1.Secret {
	t.Helper()
	return &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: capi.KubeconfigSecretName(cluster), ResourceVersion: "1", Labels: map[string]string{capi.ClusterNameLabel: cluster},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "cluster.x-k8s.io/v1beta2", Kind: "Cluster", Name: cluster, UID: types.UID("uid-" + ns + "-" + cluster)}}},
		Type: capi.KubeconfigSecretType,
		Data: map[string][]byte{"value": kubeconfig(t, cluster, server, nil)},
	}
}

// workloadCluster is a fake workload API server with the API server's own
// EndpointSlice, as every cluster has.
func workloadCluster(apiserverIP string) *fake.Clientset {
	ready := true
	cs := fake.NewClientset(&discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Namespace: apiserver.Namespace, Name: apiserver.Name, Labels: map[string]string{discoveryv1.LabelServiceName: apiserver.Name}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{apiserverIP}, Conditions: discoveryv1.EndpointConditions{Ready: &ready}}},
	})
	// The fake's watch hands out its stored object itself for objects
	// created between the informer's list and its watch (client-go
	// v0.37.2 testing/fixture.go, tracker.Watch); the informer's trimming
	// transform then writes into the store. A real watch decodes a copy:
	// so does this one.
	cs.PrependWatchReactor("*", func(a k8stesting.Action) (bool, watch.Interface, error) {
		var opts []metav1.ListOptions
		if wa, ok := a.(k8stesting.WatchActionImpl); ok {
			opts = append(opts, wa.ListOptions)
		}
		w, err := cs.Tracker().Watch(a.GetResource(), a.GetNamespace(), opts...)
		if err != nil {
			return false, nil, err
		}
		return true, watch.Filter(w, func(ev watch.Event) (watch.Event, bool) {
			ev.Object = ev.Object.DeepCopyObject()
			return ev, true
		}), nil
	})
	return cs
}

type managerEnv struct {
	t        *testing.T
	mgmt     *fake.Clientset
	dyn      *dynamicfake.FakeDynamicClient
	rec      *record.FakeRecorder
	reg      *prometheus.Registry
	mu       sync.Mutex
	byHost   map[string]*fake.Clientset
	connects map[string]int
	// real holds the hosts reached by a real client (the config the
	// manager built, bounds included), not a fake.
	real   map[string]bool
	limits capi.Limits
}

func newManagerEnv(t *testing.T) *managerEnv {
	return &managerEnv{t: t, rec: record.NewFakeRecorder(1000), reg: prometheus.NewRegistry(), byHost: map[string]*fake.Clientset{}, connects: map[string]int{}}
}

// start runs the manager over a management cluster holding objs (Clusters
// and Machines) and secrets.
func (e *managerEnv) start(selector labels.Selector, objs []runtime.Object, secrets ...runtime.Object) {
	t := e.t
	t.Helper()
	e.mgmt = fake.NewClientset(secrets...)
	e.dyn = dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(),
		map[schema.GroupVersionResource]string{capi.ClusterGVR: "ClusterList", capi.MachineGVR: "MachineList"}, objs...)
	m := capi.New(capi.Config{
		Selector: selector,
		Limits:   e.limits,
		Connect: func(c *rest.Config) (kubernetes.Interface, error) {
			e.mu.Lock()
			defer e.mu.Unlock()
			if e.real[c.Host] {
				e.connects[c.Host]++
				return kubernetes.NewForConfig(c)
			}
			cs, ok := e.byHost[c.Host]
			if !ok {
				return nil, fmt.Errorf("no workload cluster at %s", c.Host)
			}
			e.connects[c.Host]++
			return cs, nil
		},
	}, e.mgmt, e.dyn, e.rec, e.reg)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- m.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
}

// workload is a workload cluster: a fake API for its objects, and a real
// TLS listener presenting its API server's certificate (names), which the
// approver reads. It returns the fake and the server URL.
func (e *managerEnv) workload(apiserverIP string, names ...string) (*fake.Clientset, string) {
	pair, err := workloadCA.Issue(testpki.Serving{CN: "kube-apiserver", DNSNames: names, IPs: []net.IP{net.ParseIP("127.0.0.1").To4()}})
	if err != nil {
		e.t.Fatal(err)
	}
	host := "https://" + testpki.ServeTLS(e.t, pair)
	e.mu.Lock()
	defer e.mu.Unlock()
	cs := workloadCluster(apiserverIP)
	e.byHost[host] = cs
	return cs, host
}

func (e *managerEnv) connected(host string) int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.connects[host]
}

// poll checks ok until it holds, for up to 10 s.
func (e *managerEnv) poll(what string, ok func() bool) {
	e.t.Helper()
	if !testwait.Until(10*time.Second, ok) {
		e.t.Fatalf("never %s", what)
	}
}

func approvedIn(cs *fake.Clientset, name string) bool {
	c, err := cs.CertificatesV1().CertificateSigningRequests().Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		return false
	}
	for _, cond := range c.Status.Conditions {
		if cond.Type == certv1.CertificateApproved {
			return true
		}
	}
	return false
}

func create(t *testing.T, cs *fake.Clientset, c *certv1.CertificateSigningRequest) {
	t.Helper()
	if _, err := cs.CertificatesV1().CertificateSigningRequests().Create(context.Background(), c, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// gauge reads an unlabelled gauge, or -1 when it is not registered.
func gauge(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	if s := testmetrics.Series(t, reg, name, nil); len(s) == 1 {
		return testmetrics.Value(s[0])
	}
	return -1
}

// observable is certready_approver_capi_cluster_observable{cluster=key}:
// -1 when there is no such series.
func observable(t *testing.T, reg *prometheus.Registry, key string) float64 {
	t.Helper()
	if s := testmetrics.Series(t, reg, "certready_approver_capi_cluster_observable", map[string]string{"cluster": key}); len(s) == 1 {
		return testmetrics.Value(s[0])
	}
	return -1
}

// clusterLabelled says whether a metric family carries a series with
// cluster=<key>.
func clusterLabelled(t *testing.T, reg *prometheus.Registry, name, key string) bool {
	t.Helper()
	return len(testmetrics.Series(t, reg, name, map[string]string{"cluster": key})) > 0
}

// TestManagerFollowsClustersAndTheirKubeconfigs runs the manager over a
// fake management cluster: a selected Cluster with its Secret is served
// (its CSRs decided against its Machines, re-evaluated when a Machine's
// addresses change, refusals recorded on the Machine), a rotated kubeconfig
// reconnects, a deleted Cluster is let go; an unselected Cluster is never
// connected and an unusable kubeconfig is named on its Cluster.
func TestManagerFollowsClustersAndTheirKubeconfigs(t *testing.T) {
	selected := map[string]string{"certready.io/serve": "yes"}
	worker := machine("tenant-a", "md-0-a", "prod", "prod-md-0-a", [2]string{"InternalIP", "10.0.0.11"})
	objs := []runtime.Object{
		clusterObj("tenant-a", "prod", selected),
		clusterObj("tenant-a", "other", nil), // not selected
		clusterObj("tenant-a", "broken", selected),
		worker,
		machine("tenant-a", "md-0-b", "prod", "prod-md-0-b", [2]string{"InternalIP", "10.0.0.12"}),
	}
	e := newManagerEnv(t)
	prodA, prodAHost := e.workload("10.0.0.1", "prod-api.internal")
	_, otherHost := e.workload("10.9.0.1")
	e.start(labels.SelectorFromSet(selected), objs,
		kubeconfigSecret(t, "tenant-a", "prod", prodAHost),
		kubeconfigSecret(t, "tenant-a", "other", otherHost))

	good := csr(t, "prod-md-0-a", []string{"10.0.0.11"})
	create(t, prodA, good)
	e.poll("approved the CSR of a node whose Machine records its address", func() bool { return approvedIn(prodA, good.Name) })
	if got := gauge(t, e.reg, "certready_approver_capi_clusters"); got != 1 {
		t.Errorf("certready_approver_capi_clusters %v, want 1 (prod; other is not selected, broken has no Secret)", got)
	}
	// Observable: prod served; broken selected but without a Secret (0);
	// other not selected (no series).
	e.poll("prod observable, broken not", func() bool {
		return observable(t, e.reg, "tenant-a/prod") == 1 && observable(t, e.reg, "tenant-a/broken") == 0
	})
	if got := observable(t, e.reg, "tenant-a/other"); got != -1 {
		t.Errorf("observable{cluster=tenant-a/other} = %v for a Cluster the selector leaves out, want no series", got)
	}
	// The counter follows the approval write.
	e.poll("labelled the workload cluster's decisions cluster=tenant-a/prod", func() bool {
		return clusterLabelled(t, e.reg, "certready_approver_decisions_total", "tenant-a/prod")
	})

	// A request for an address the Machine does not record stays pending,
	// with a Warning on the Machine; once the provider records the address
	// (a floating IP attached), it is approved without a restart.
	floating := csr(t, "prod-md-0-b", []string{"10.0.0.12", "203.0.113.12"})
	create(t, prodA, floating)
	var ev string
	e.poll("recorded the refusal on the Machine", func() bool {
		select {
		case ev = <-e.rec.Events:
			return strings.HasPrefix(ev, "Warning IPSANNotInInventory")
		default:
			return false
		}
	})
	if !strings.Contains(ev, "CSR csr-prod-md-0-b of node prod-md-0-b in Cluster tenant-a/prod") || !strings.Contains(ev, "203.0.113.12") {
		t.Errorf("Machine event %q", ev)
	}
	mb := machine("tenant-a", "md-0-b", "prod", "prod-md-0-b", [2]string{"InternalIP", "10.0.0.12"}, [2]string{"ExternalIP", "203.0.113.12"})
	if _, err := e.dyn.Resource(capi.MachineGVR).Namespace("tenant-a").Update(context.Background(), mb, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	e.poll("approved the request once its Machine recorded the floating IP", func() bool { return approvedIn(prodA, floating.Name) })

	// Rotation: the Secret now points at another endpoint; the manager
	// reconnects there and serves it.
	prodB, prodBHost := e.workload("10.0.0.1")
	rotated := kubeconfigSecret(t, "tenant-a", "prod", prodBHost)
	rotated.ResourceVersion = "2" // the fake keeps what it is given; an API server moves it on every write
	if _, err := e.mgmt.CoreV1().Secrets("tenant-a").Update(context.Background(), rotated, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	afterRotation := csr(t, "prod-md-0-a", []string{"10.0.0.11"})
	create(t, prodB, afterRotation)
	e.poll("approved through the rotated kubeconfig", func() bool { return approvedIn(prodB, afterRotation.Name) })

	// The broken Cluster's Secret arrives with a kubeconfig that is none:
	// named on the Cluster, not served.
	bad := kubeconfigSecret(t, "tenant-a", "broken", "https://broken.invalid")
	bad.Data["value"] = []byte("this is not a kubeconfig: [")
	if _, err := e.mgmt.CoreV1().Secrets("tenant-a").Create(context.Background(), bad, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	e.poll("named the unusable kubeconfig", func() bool {
		select {
		case ev = <-e.rec.Events:
			return strings.HasPrefix(ev, "Warning KubeconfigRefused") && strings.Contains(ev, "tenant-a/broken-kubeconfig")
		default:
			return false
		}
	})

	// Deleting the Cluster lets it go.
	if err := e.dyn.Resource(capi.ClusterGVR).Namespace("tenant-a").Delete(context.Background(), "prod", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if got := observable(t, e.reg, "tenant-a/broken"); got != 0 {
		t.Errorf("observable{cluster=tenant-a/broken} = %v with its kubeconfig refused, want 0", got)
	}
	e.poll("stopped serving the deleted Cluster", func() bool { return gauge(t, e.reg, "certready_approver_capi_clusters") == 0 })
	e.poll("dropped the deleted Cluster's observable series", func() bool { return observable(t, e.reg, "tenant-a/prod") == -1 })
	e.poll("unregistered the deleted Cluster's metrics", func() bool {
		return !clusterLabelled(t, e.reg, "certready_approver_decisions_total", "tenant-a/prod")
	})

	if n := e.connected(otherHost); n != 0 {
		t.Errorf("connected %d times to a Cluster the selector leaves out", n)
	}
	if n := e.connected(prodAHost); n != 1 {
		t.Errorf("connected %d times with the first kubeconfig, want 1 (reconnect only on rotation)", n)
	}
}

// countingListener accepts TCP connections on loopback and counts them.
func countingListener(t *testing.T) (string, func() int) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	n := 0
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			n++
			mu.Unlock()
			c.Close()
		}
	}()
	t.Cleanup(func() { ln.Close() })
	return ln.Addr().String(), func() int { mu.Lock(); defer mu.Unlock(); return n }
}

// A tenant's Cluster whose kubeconfig would have the approver send its own
// token (tokenFile) to the tenant's server without verifying it: named on
// the Cluster, and the server never dialled, not even by the approver's
// own TLS handshakes. A Secret of the right name that Cluster API did not
// write (no owner) is refused too.
func TestAHostileKubeconfigIsNeverDialled(t *testing.T) {
	addr, accepted := countingListener(t)
	hostile := kubeconfigSecret(t, "tenant-b", "evil", "https://"+addr)
	hostile.Data["value"] = kubeconfig(t, "evil", "https://"+addr, func(c *clientcmdapi.Config) {
		c.Clusters["evil"].InsecureSkipTLSVerify = true
		c.Clusters["evil"].CertificateAuthorityData = nil
		c.AuthInfos["admin"].Token = ""
		c.AuthInfos["admin"].TokenFile = "/var/run/secrets/kubernetes.io/serviceaccount/token"
	})
	unowned := kubeconfigSecret(t, "tenant-b", "forged", "https://"+addr)
	unowned.OwnerReferences = nil
	e := newManagerEnv(t)
	e.start(labels.Everything(), []runtime.Object{clusterObj("tenant-b", "evil", nil), clusterObj("tenant-b", "forged", nil)}, hostile, unowned)
	want := map[string]string{"tenant-b/evil-kubeconfig": "insecure-skip-tls-verify", "tenant-b/forged-kubeconfig": "neither owned by Cluster forged"}
	e.poll("named both refusals on their Clusters", func() bool {
		select {
		case ev := <-e.rec.Events:
			for secret, why := range want {
				if strings.HasPrefix(ev, "Warning KubeconfigRefused") && strings.Contains(ev, secret) && strings.Contains(ev, why) {
					delete(want, secret)
				}
			}
		default:
		}
		return len(want) == 0
	})
	if n := accepted(); n != 0 || e.connected("https://"+addr) != 0 {
		t.Errorf("the hostile server was dialled: %d connections, %d clients", n, e.connected("https://"+addr))
	}
	if got := gauge(t, e.reg, "certready_approver_capi_clusters"); got != 0 {
		t.Errorf("serving %v clusters, want 0", got)
	}
}

// Each workload cluster's own API server is denied to its nodes, not the
// management cluster's: the Cluster's spec.controlPlaneEndpoint, the names
// its API server presents, its endpoints; and its service and pod CIDR
// blocks are no node's.
func TestEachWorkloadClusterDeniesItsOwnAPIServer(t *testing.T) {
	c := clusterObj("tenant-a", "prod", nil)
	_ = unstructured.SetNestedStringSlice(c.Object, []string{"10.128.0.0/16"}, "spec", "clusterNetwork", "pods", "cidrBlocks")
	_ = unstructured.SetNestedStringSlice(c.Object, []string{"10.96.0.0/12"}, "spec", "clusterNetwork", "services", "cidrBlocks")
	// The worker's Machine records everything it will ask for: only the
	// API server rules can refuse it.
	asked := map[string][2][]string{
		"the controlPlaneEndpoint":       {{"10.0.0.11"}, {"api.prod.example.com"}},
		"a name the API server presents": {{"10.0.0.11"}, {"prod-api.internal"}},
		"an API server endpoint":         {{"10.0.0.1"}, nil},
		"a pod address":                  {{"10.128.3.4"}, nil},
		"a Service address":              {{"10.96.0.10"}, nil},
	}
	addrs := [][2]string{{"InternalIP", "10.0.0.11"}, {"InternalIP", "10.0.0.1"}, {"InternalIP", "10.128.3.4"}, {"InternalIP", "10.96.0.10"},
		{"InternalDNS", "api.prod.example.com"}, {"InternalDNS", "prod-api.internal"}}
	e := newManagerEnv(t)
	prod, host := e.workload("10.0.0.1", "prod-api.internal")
	e.start(labels.Everything(), []runtime.Object{c, machine("tenant-a", "md-0", "prod", "prod-md-0", addrs...)}, kubeconfigSecret(t, "tenant-a", "prod", host))
	e.poll("serving the cluster", func() bool { return gauge(t, e.reg, "certready_approver_capi_clusters") == 1 })
	i := 0
	for what, sans := range asked {
		i++
		r := csr(t, "prod-md-0", sans[0], sans[1]...)
		r.Name = fmt.Sprintf("csr-%d", i)
		create(t, prod, r)
		e.poll("refused "+what, func() bool {
			select {
			case ev := <-e.rec.Events:
				return strings.HasPrefix(ev, "Warning SANDenied") && strings.Contains(ev, r.Name)
			default:
				return false
			}
		})
		if approvedIn(prod, r.Name) {
			t.Errorf("%s approved", what)
		}
		if err := prod.CertificatesV1().CertificateSigningRequests().Delete(context.Background(), r.Name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	ok := csr(t, "prod-md-0", []string{"10.0.0.11"}, "prod-md-0")
	ok.Name = "csr-ok"
	create(t, prod, ok)
	e.poll("approved the worker's own address and name", func() bool { return approvedIn(prod, ok.Name) })
}
