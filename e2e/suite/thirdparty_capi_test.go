package suite

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	certv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	apiextv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apiextclient "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"

	"github.com/certready/certready/e2e/localcluster"
	"github.com/certready/certready/reporter/approver/capi"
)

// capiCRD is a Cluster API CRD as far as the approver reads it: the test
// installs Cluster and Machine at cluster.x-k8s.io/v1beta2, schemaless
// (Cluster API's own CRDs carry the full schema; the field paths the
// approver reads are the same).
func capiCRD(kind, plural string) *apiextv1.CustomResourceDefinition {
	preserve := true
	return &apiextv1.CustomResourceDefinition{
		ObjectMeta: metav1.ObjectMeta{Name: plural + ".cluster.x-k8s.io"},
		Spec: apiextv1.CustomResourceDefinitionSpec{
			Group: "cluster.x-k8s.io", Scope: apiextv1.NamespaceScoped,
			Names: apiextv1.CustomResourceDefinitionNames{Kind: kind, ListKind: kind + "List", Plural: plural, Singular: strings.ToLower(kind)},
			Versions: []apiextv1.CustomResourceDefinitionVersion{{Name: "v1beta2", Served: true, Storage: true,
				Schema: &apiextv1.CustomResourceValidation{OpenAPIV3Schema: &apiextv1.JSONSchemaProps{Type: "object", XPreserveUnknownFields: &preserve}}}},
		},
	}
}

// capiApprover runs `certready approver --inventory=capi` on the host
// against the cluster, as the management cluster, and keeps its log.
type capiApprover struct {
	mu  sync.Mutex
	log []string
}

func (a *capiApprover) has(s string) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, l := range a.log {
		if strings.Contains(l, s) {
			return true
		}
	}
	return false
}

func (a *capiApprover) String() string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return strings.Join(a.log, "\n")
}

func startCAPIApprover(t *testing.T, ctx context.Context, kubeconfig string, args ...string) *capiApprover {
	t.Helper()
	bin := os.Getenv("CERTREADY_BIN")
	if bin == "" {
		t.Fatal("CERTREADY_BIN is not set; run the suite through make e2e or make e2e-kind")
	}
	cctx, cancel := context.WithCancel(ctx)
	cmd := exec.CommandContext(cctx, bin, append([]string{"approver", "--inventory=capi", "--kubeconfig=" + kubeconfig,
		"--metrics-addr=", "--health-addr=", "--leader-elect-identity=e2e-capi", "--v=2"}, args...)...)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	a := &capiApprover{}
	done := make(chan struct{})
	go func() {
		defer close(done)
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			a.mu.Lock()
			a.log = append(a.log, sc.Text())
			a.mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		cancel()
		<-done
		_ = cmd.Wait()
		if t.Failed() {
			t.Logf("the Cluster API approver's log:\n%s", a)
		}
	})
	return a
}

// Cluster API mode: the same API server plays the management cluster
// (Cluster API CRDs, a Cluster, its kubeconfig Secret, one Machine per
// worker with the worker's address and a floating IP) and the workload
// cluster. The approver approves a CSR for the Machine's addresses (the
// floating IP included, which no Node reports), leaves one for another
// Machine's address pending with a Warning on the node's Machine, and picks
// up a Cluster that appears while it runs, a rotated kubeconfig and a
// deleted Cluster, without a restart.
func TestClusterAPIModeApprovesAgainstMachines(t *testing.T) {
	ctx := ctxT(t, 6*time.Minute)
	workers := cluster.Workers()
	if len(workers) < 2 {
		t.Skip("needs two workers")
	}
	w1, w2 := workers[0], workers[1]
	const ns, name, floating = "capi-e2e", "workload", "203.0.113.51"

	crds := apiextclient.NewForConfigOrDie(cluster.AdminConfig()).ApiextensionsV1().CustomResourceDefinitions()
	for _, crd := range []*apiextv1.CustomResourceDefinition{capiCRD("Cluster", "clusters"), capiCRD("Machine", "machines")} {
		if _, err := crds.Create(ctx, crd, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = crds.Delete(context.Background(), crd.Name, metav1.DeleteOptions{}) })
	}
	err := localcluster.Poll(ctx, time.Minute, "the Cluster API CRDs established", func() (bool, error) {
		for _, n := range []string{"clusters.cluster.x-k8s.io", "machines.cluster.x-k8s.io"} {
			crd, err := crds.Get(ctx, n, metav1.GetOptions{})
			if err != nil {
				return false, nil
			}
			ok := false
			for _, c := range crd.Status.Conditions {
				ok = ok || (c.Type == apiextv1.Established && c.Status == apiextv1.ConditionTrue)
			}
			if !ok {
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	cs := cluster.Clientset()
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cs.CoreV1().Namespaces().Delete(context.Background(), ns, metav1.DeleteOptions{}) })
	kubeconfig, err := os.ReadFile(writeKubeconfig(t, cluster.AdminConfig()))
	if err != nil {
		t.Fatal(err)
	}
	// Only the Cluster API approver decides; it starts before the Cluster
	// exists, which it then picks up as it appears.
	scaleApprover(t, ctx, 0)
	t.Cleanup(func() { restoreApprover(t) })
	mgmt := filepath.Join(t.TempDir(), "management.kubeconfig")
	if err := os.WriteFile(mgmt, kubeconfig, 0o600); err != nil {
		t.Fatal(err)
	}
	a := startCAPIApprover(t, ctx, mgmt, "--leader-elect-namespace="+ns, "--capi-cluster-selector=certready.io/e2e=capi")
	waitLog := func(what string) {
		t.Helper()
		if err := localcluster.Poll(ctx, time.Minute, "the approver to log "+what, func() (bool, error) { return a.has(what), nil }); err != nil {
			t.Fatalf("%v\n%s", err, a)
		}
	}
	waitLog("Serving Cluster API workload clusters")
	dyn := dynamic.NewForConfigOrDie(cluster.AdminConfig())
	create := func(gvr any, obj map[string]any) {
		t.Helper()
		u := &unstructured.Unstructured{Object: obj}
		res := dyn.Resource(capi.MachineGVR)
		if gvr == "cluster" {
			res = dyn.Resource(capi.ClusterGVR)
		}
		if _, err := res.Namespace(ns).Create(ctx, u, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	create("cluster", map[string]any{"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Cluster",
		"metadata": map[string]any{"name": name, "labels": map[string]any{"certready.io/e2e": "capi"}}, "spec": map[string]any{}})
	machine := func(mname, node string, addrs ...string) {
		var list []any
		for i, a := range addrs {
			typ := "InternalIP"
			if i > 0 {
				typ = "ExternalIP"
			}
			list = append(list, map[string]any{"type": typ, "address": a})
		}
		list = append(list, map[string]any{"type": "Hostname", "address": node})
		create("machine", map[string]any{"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Machine",
			"metadata": map[string]any{"name": mname, "labels": map[string]any{capi.ClusterNameLabel: name}},
			"spec":     map[string]any{"clusterName": name},
			"status":   map[string]any{"nodeRef": map[string]any{"name": node}, "addresses": list}})
	}
	machine("machine-"+w1.Name, w1.Name, w1.IP, floating)
	machine("machine-"+w2.Name, w2.Name, w2.IP)
	secret := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: capi.KubeconfigSecretName(name), Namespace: ns, Labels: map[string]string{capi.ClusterNameLabel: name}},
		Type:       capi.KubeconfigSecretType,
		Data:       map[string][]byte{"value": kubeconfig},
	}
	if _, err := cs.CoreV1().Secrets(ns).Create(ctx, secret, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	waitLog("Serving workload cluster")

	// The Machine's addresses, the floating IP included.
	good, _ := requestServingCert(t, ctx, w1.Name, w1.IP, floating)
	deleteCSRAtCleanup(t, good)
	issued := waitIssued(t, ctx, good, time.Minute)
	if c := csrCondition(issued, certv1.CertificateApproved); c == nil || !strings.Contains(c.Message, "Machines of Cluster "+ns+"/"+name) {
		t.Fatalf("CSR %s approved %+v, want the Machines named as the evidence", good, c)
	}
	t.Logf("approved with the floating IP %s: %s", floating, csrCondition(issued, certv1.CertificateApproved).Message)

	// Another Machine's address: pending, with a Warning on w1's Machine.
	bad, _ := requestServingCert(t, ctx, w1.Name, w2.IP)
	deleteCSRAtCleanup(t, bad)
	var ev *corev1.Event
	err = localcluster.Poll(ctx, time.Minute, "a Warning on Machine machine-"+w1.Name, func() (bool, error) {
		list, err := cs.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.kind=Machine,involvedObject.name=machine-" + w1.Name})
		if err != nil {
			return false, nil
		}
		for i := range list.Items {
			if e := &list.Items[i]; e.Type == corev1.EventTypeWarning && strings.Contains(e.Message, bad) {
				ev = e
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		t.Fatalf("%v\n%s", err, a)
	}
	if ev.Reason != "IPSANNotInInventory" {
		t.Errorf("event on the Machine: %s %s, want reason IPSANNotInInventory", ev.Reason, ev.Message)
	}
	if c, err := cs.CertificatesV1().CertificateSigningRequests().Get(ctx, bad, metav1.GetOptions{}); err != nil || len(c.Status.Conditions) != 0 {
		t.Errorf("CSR %s for another Machine's address: %v %+v, want pending", bad, err, c)
	}
	t.Logf("left pending, on Machine machine-%s: %s: %s", w1.Name, ev.Reason, ev.Message)

	// A rotated kubeconfig: reconnected, and still approving.
	cur, err := cs.CoreV1().Secrets(ns).Get(ctx, secret.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cur.Data["value"] = append(append([]byte{}, kubeconfig...), []byte(fmt.Sprintf("\n# rotated %d\n", time.Now().UnixNano()))...)
	if _, err := cs.CoreV1().Secrets(ns).Update(ctx, cur, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitLog("Kubeconfig Secret changed: reconnecting")
	after, _ := requestServingCert(t, ctx, w2.Name, w2.IP)
	deleteCSRAtCleanup(t, after)
	waitIssued(t, ctx, after, time.Minute)

	// The Cluster deleted: no longer served.
	if err := dyn.Resource(capi.ClusterGVR).Namespace(ns).Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitLog("no longer serving it")
	t.Logf("rotation picked up and the deleted Cluster let go without a restart")
}
