package suite

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	certv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/certready/certready/e2e/localcluster"
	"github.com/certready/certready/reporter/approver/capi"
)

// capiVersion is the Cluster API release whose CRDs the suite installs:
// cluster.x-k8s.io/v1beta2, the field paths the approver reads.
const capiVersion = "v1.14.2"

// installCAPICRDs applies Cluster API's own Cluster and Machine CRDs, full
// schema and status subresource, from the sigs.k8s.io/cluster-api module
// the Go module proxy serves (cached in the module cache), and removes them
// when the test ends.
func installCAPICRDs(t *testing.T, ctx context.Context) {
	t.Helper()
	cmd := exec.CommandContext(ctx, "go", "mod", "download", "-json", "sigs.k8s.io/cluster-api@"+capiVersion)
	cmd.Dir = t.TempDir() // outside any module
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go mod download sigs.k8s.io/cluster-api@%s: %v", capiVersion, err)
	}
	var mod struct{ Dir string }
	if err := json.Unmarshal(out, &mod); err != nil || mod.Dir == "" {
		t.Fatalf("go mod download -json: %v %s", err, out)
	}
	for _, kind := range []string{"clusters", "machines"} {
		file := filepath.Join(mod.Dir, "core", "config", "crd", "bases", "cluster.x-k8s.io_"+kind+".yaml")
		if out, err := cluster.Kubectl(ctx, "apply", "--server-side", "--force-conflicts", "-f", file); err != nil {
			t.Fatalf("applying %s: %v\n%s", file, err, out)
		}
		name := kind + ".cluster.x-k8s.io"
		t.Cleanup(func() {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			_, _ = cluster.Kubectl(ctx, "delete", "crd", name, "--wait=false")
		})
	}
	if out, err := cluster.Kubectl(ctx, "wait", "--for=condition=Established", "--timeout=60s", "crd/clusters.cluster.x-k8s.io", "crd/machines.cluster.x-k8s.io"); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
}

// managementKubeconfig installs the shipped management-cluster RBAC (the
// capi-management overlay's ServiceAccount, ClusterRole, Role and bindings,
// in a namespace of the test's own) and returns a kubeconfig that acts as
// that ServiceAccount: the approver runs with what the manifests grant, no
// more.
func managementKubeconfig(t *testing.T, ctx context.Context, ns string) string {
	t.Helper()
	dir, err := os.MkdirTemp("../../manifests/overlays", ".capi-e2e-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.WriteFile(filepath.Join(dir, "kustomization.yaml"), []byte("namespace: "+ns+"\nnamePrefix: e2e-\nresources:\n- ../capi-management\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	built, err := cluster.Kubectl(ctx, "kustomize", dir)
	if err != nil {
		t.Fatalf("%v\n%s", err, built)
	}
	var keep []string
	for _, doc := range strings.Split(built, "\n---\n") {
		for _, kind := range []string{"ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding"} {
			if strings.Contains(doc, "\nkind: "+kind+"\n") || strings.HasPrefix(doc, "kind: "+kind+"\n") {
				keep = append(keep, doc)
			}
		}
	}
	rbac := filepath.Join(dir, "rbac.yaml")
	if err := os.WriteFile(rbac, []byte(strings.Join(keep, "\n---\n")), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := cluster.Kubectl(ctx, "apply", "-f", rbac); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		_, _ = cluster.Kubectl(ctx, "delete", "-f", rbac, "--ignore-not-found", "--wait=false")
	})
	token, err := cluster.Kubectl(ctx, "-n", ns, "create", "token", "e2e-certready-approver", "--duration=1h")
	if err != nil {
		t.Fatalf("%v\n%s", err, token)
	}
	cfg := rest.AnonymousClientConfig(cluster.AdminConfig())
	cfg.BearerToken = strings.TrimSpace(token)
	return writeKubeconfig(t, cfg)
}

// countingListener accepts TCP connections on loopback and counts them: a
// server at the address a hostile kubeconfig names.
func countingListener(t *testing.T) (string, func() int) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var n atomic.Int32
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			n.Add(1)
			c.Close()
		}
	}()
	t.Cleanup(func() { ln.Close() })
	return ln.Addr().String(), func() int { return int(n.Load()) }
}

// capiApprover runs `certready approver --cluster-api` on the host
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
	cmd := exec.CommandContext(cctx, bin, append([]string{"approver", "--cluster-api", "--kubeconfig=" + kubeconfig,
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
// (Cluster API's own CRDs, a Cluster, its kubeconfig Secret as Cluster API
// writes it, one Machine per worker with the worker's address and a
// floating IP) and the workload cluster. The approver runs under the
// shipped management-cluster RBAC. It approves a CSR for the Machine's
// addresses (the floating IP included, which no Node reports), leaves one
// for another Machine's address and one for the Cluster's own API server
// endpoint pending with a Warning on the node's Machine, refuses a tenant's
// Cluster whose kubeconfig would send the approver's own token to the
// tenant's server (never dialled), and picks up a Cluster that appears
// while it runs, a rotated kubeconfig and a deleted Cluster, without a
// restart.
func TestClusterAPIModeApprovesAgainstMachines(t *testing.T) {
	ctx := ctxT(t, 6*time.Minute)
	deployed(t)
	workers := cluster.Workers()
	if len(workers) < 2 {
		t.Skip("needs two workers")
	}
	w1, w2 := workers[0], workers[1]
	const ns, tenant, name, floating, endpoint = "capi-e2e", "capi-tenant", "workload", "203.0.113.51", "api.workload.certready.test"
	installCAPICRDs(t, ctx)
	cs := cluster.Clientset()
	for _, n := range []string{ns, tenant} {
		if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: n}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cs.CoreV1().Namespaces().Delete(context.Background(), n, metav1.DeleteOptions{}) })
	}
	mgmt := managementKubeconfig(t, ctx, ns)
	kubeconfig, err := os.ReadFile(writeKubeconfig(t, cluster.AdminConfig()))
	if err != nil {
		t.Fatal(err)
	}
	// Only the Cluster API approver decides; it starts before the Cluster
	// exists, which it then picks up as it appears.
	scaleApprover(t, ctx, 0)
	t.Cleanup(func() { restoreApprover(t) })
	ledgerFile := filepath.Join(t.TempDir(), "ledger.jsonl")
	// Its ledger leaves the cluster: redacted.
	a := startCAPIApprover(t, ctx, mgmt, "--leader-elect-namespace="+ns, "--capi-cluster-selector=certready.io/e2e=capi", "--ledger=file:"+ledgerFile, "--ledger-redact")
	admin := writeKubeconfig(t, cluster.AdminConfig())
	waitLog := func(what string) {
		t.Helper()
		if err := localcluster.Poll(ctx, time.Minute, "the approver to log "+what, func() (bool, error) { return a.has(what), nil }); err != nil {
			t.Fatalf("%v\n%s", err, a)
		}
	}
	waitLog("Serving Cluster API workload clusters")
	dyn := dynamic.NewForConfigOrDie(cluster.AdminConfig())
	newCluster := func(namespace, cname string) *unstructured.Unstructured {
		t.Helper()
		u := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Cluster",
			"metadata": map[string]any{"name": cname, "labels": map[string]any{"certready.io/e2e": "capi"}},
			"spec":     map[string]any{"controlPlaneEndpoint": map[string]any{"host": endpoint, "port": int64(6443)}}}}
		created, err := dyn.Resource(capi.ClusterGVR).Namespace(namespace).Create(ctx, u, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return created
	}
	machine := func(mname, node string, addrs ...[2]string) {
		t.Helper()
		res := dyn.Resource(capi.MachineGVR).Namespace(ns)
		u := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Machine",
			"metadata": map[string]any{"name": mname, "labels": map[string]any{capi.ClusterNameLabel: name}},
			"spec": map[string]any{"clusterName": name, "bootstrap": map[string]any{"dataSecretName": mname + "-bootstrap"},
				"infrastructureRef": map[string]any{"apiGroup": "infrastructure.cluster.x-k8s.io", "kind": "DockerMachine", "name": mname}}}}
		created, err := res.Create(ctx, u, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		// What the Machine controller copies from the infrastructure
		// provider: status, through its subresource.
		var list []any
		for _, a := range addrs {
			list = append(list, map[string]any{"type": a[0], "address": a[1]})
		}
		created.Object["status"] = map[string]any{"nodeRef": map[string]any{"name": node}, "addresses": list}
		if _, err := res.UpdateStatus(ctx, created, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	// The kubeconfig Secret as Cluster API writes it: its type and label,
	// owned by the Cluster.
	secret := func(namespace string, c *unstructured.Unstructured, value []byte) *corev1.Secret {
		t.Helper()
		s := &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Name: capi.KubeconfigSecretName(c.GetName()), Namespace: namespace, Labels: map[string]string{capi.ClusterNameLabel: c.GetName()},
				OwnerReferences: []metav1.OwnerReference{{APIVersion: "cluster.x-k8s.io/v1beta2", Kind: "Cluster", Name: c.GetName(), UID: c.GetUID()}}},
			Type: capi.KubeconfigSecretType,
			Data: map[string][]byte{capi.KubeconfigKey: value},
		}
		created, err := cs.CoreV1().Secrets(namespace).Create(ctx, s, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return created
	}
	c := newCluster(ns, name)
	machine("machine-"+w1.Name, w1.Name, [2]string{"InternalIP", w1.IP}, [2]string{"ExternalIP", floating}, [2]string{"Hostname", w1.Name})
	machine("machine-"+w2.Name, w2.Name, [2]string{"InternalIP", w2.IP}, [2]string{"Hostname", w2.Name}, [2]string{"ExternalDNS", endpoint})
	kcSecret := secret(ns, c, kubeconfig)

	// A tenant's Cluster whose kubeconfig would send the approver's own
	// token to the tenant's server, trusting whatever it presents.
	hostileAddr, dialled := countingListener(t)
	hostile := clientcmdapi.NewConfig()
	hostile.Clusters["evil"] = &clientcmdapi.Cluster{Server: "https://" + hostileAddr, InsecureSkipTLSVerify: true}
	hostile.AuthInfos["evil"] = &clientcmdapi.AuthInfo{TokenFile: "/var/run/secrets/kubernetes.io/serviceaccount/token"}
	hostile.Contexts["evil"] = &clientcmdapi.Context{Cluster: "evil", AuthInfo: "evil"}
	hostile.CurrentContext = "evil"
	hostileData, err := clientcmd.Write(*hostile)
	if err != nil {
		t.Fatal(err)
	}
	secret(tenant, newCluster(tenant, "evil"), hostileData)

	waitLog("Serving workload cluster")

	// The Machine's addresses, the floating IP included.
	good, _ := requestServingCert(t, ctx, w1.Name, w1.IP, floating)
	deleteCSRAtCleanup(t, good)
	issued := waitIssued(t, ctx, good, time.Minute)
	if c := csrCondition(issued, certv1.CertificateApproved); c == nil || !strings.Contains(c.Message, "Machines of Cluster "+ns+"/"+name) {
		t.Fatalf("CSR %s approved %+v, want the Machines named as the evidence", good, c)
	}
	t.Logf("approved with the floating IP %s: %s", floating, csrCondition(issued, certv1.CertificateApproved).Message)
	// The ledger's record of it names the workload cluster, and, redacted,
	// neither the node nor its addresses.
	err = localcluster.Poll(ctx, time.Minute, "the approval's ledger record naming the workload cluster", func() (bool, error) {
		data, _ := os.ReadFile(ledgerFile)
		for _, line := range strings.Split(string(data), "\n") {
			var r map[string]any
			if json.Unmarshal([]byte(line), &r) == nil && r["action"] == "approved" && r["csr"] == good {
				node, _ := r["node"].(string)
				if r["workload_cluster"] != ns+"/"+name || r["redacted"] != true || !strings.HasPrefix(node, "node-") {
					return false, fmt.Errorf("ledger record %s: want workload_cluster %s/%s, redacted, the node as a pseudonym", line, ns, name)
				}
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if data, _ := os.ReadFile(ledgerFile); strings.Contains(string(data), floating) || strings.Contains(string(data), w1.IP) || strings.Contains(string(data), "system:node:"+w1.Name) {
		t.Errorf("the redacted ledger names %s or its addresses:\n%s", w1.Name, data)
	}

	// Another Machine's address, and the workload cluster's own API server
	// name (its spec.controlPlaneEndpoint, which w2's Machine even records):
	// pending, with a Warning on the node's Machine.
	for _, tc := range []struct {
		node, machine, reason string
		create                func() string
	}{
		{w1.Name, "machine-" + w1.Name, "IPSANNotInInventory", func() string { n, _ := requestServingCert(t, ctx, w1.Name, w2.IP); return n }},
		{w2.Name, "machine-" + w2.Name, "SANDenied", func() string {
			return hostileCSR{ips: []string{w2.IP}, dns: []string{endpoint}}.create(t, ctx, w2.Name)
		}},
	} {
		bad := tc.create()
		deleteCSRAtCleanup(t, bad)
		var ev *corev1.Event
		err = localcluster.Poll(ctx, time.Minute, "a Warning on Machine "+tc.machine, func() (bool, error) {
			list, err := cs.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.kind=Machine,involvedObject.name=" + tc.machine})
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
		if ev.Reason != tc.reason {
			t.Errorf("event on the Machine: %s %s, want reason %s", ev.Reason, ev.Message, tc.reason)
		}
		if c, err := cs.CertificatesV1().CertificateSigningRequests().Get(ctx, bad, metav1.GetOptions{}); err != nil || csrCondition(c, certv1.CertificateApproved) != nil {
			t.Errorf("CSR %s: %v %+v, want pending", bad, err, c)
		}
		t.Logf("left pending, on Machine %s: %s: %s", tc.machine, ev.Reason, ev.Message)
		// The operator asks the management cluster why: the same rule.
		out, code := runCertready(t, ctx, "csr", "explain", bad, "--cluster-api", "--workload-cluster="+ns+"/"+name, "--approver=defaults", "--kubeconfig="+admin, "-o", "json")
		var ex struct {
			Decision struct {
				Approve bool
				Rule    string
			}
			WorkloadCluster string
		}
		if err := json.Unmarshal([]byte(out), &ex); err != nil || code != 1 || ex.Decision.Approve || ex.Decision.Rule != tc.reason || ex.WorkloadCluster != ns+"/"+name {
			t.Errorf("csr explain %s --cluster-api: exit %d, %+v (%v), want exit 1 and rule %s\n%s", bad, code, ex, err, tc.reason, out)
		}
		// Gone before the node asks again below: only a node's newest
		// request is a candidate, and one filed in the same second with a
		// greater name would count as the newer.
		if err := cs.CertificatesV1().CertificateSigningRequests().Delete(ctx, bad, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		if err := localcluster.Poll(ctx, time.Minute, "CSR "+bad+" deleted", func() (bool, error) {
			_, err := cs.CertificatesV1().CertificateSigningRequests().Get(ctx, bad, metav1.GetOptions{})
			return apierrors.IsNotFound(err), nil
		}); err != nil {
			t.Fatal(err)
		}
	}

	// The tenant's kubeconfig: refused on its Cluster, never dialled.
	err = localcluster.Poll(ctx, time.Minute, "a KubeconfigRefused Warning on the tenant's Cluster", func() (bool, error) {
		list, err := cs.CoreV1().Events(tenant).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.kind=Cluster,involvedObject.name=evil,reason=KubeconfigRefused"})
		return err == nil && len(list.Items) > 0, nil
	})
	if err != nil {
		t.Fatalf("%v\n%s", err, a)
	}
	if n := dialled(); n != 0 {
		t.Fatalf("the tenant's server received %d connections", n)
	}
	t.Logf("the tenant's kubeconfig refused; its server received no connection")

	// The fleet from the management cluster: the workload cluster's nodes,
	// and the tenant's cluster named as not observable, its kubeconfig
	// refused by the command too (never dialled).
	out, code := runCertready(t, ctx, "status", "--cluster-api", "--capi-cluster-selector=certready.io/e2e=capi", "--kubeconfig="+admin, "-o", "json")
	var fleetDoc struct {
		Clusters []struct {
			Cluster    string
			Observable bool
			Reason     string
			Nodes      []struct{ Node string }
		}
	}
	if err := json.Unmarshal([]byte(out), &fleetDoc); err != nil || code != 1 || len(fleetDoc.Clusters) != 2 {
		t.Fatalf("status --cluster-api: exit %d (%v), want 1 and two clusters\n%s", code, err, out)
	}
	workload, evil := fleetDoc.Clusters[0], fleetDoc.Clusters[1] // by namespace/name
	if evil.Cluster != tenant+"/evil" || evil.Observable || !strings.Contains(evil.Reason, "kubeconfig refused") {
		t.Errorf("status --cluster-api, the tenant's cluster: %+v, want not observable, its kubeconfig refused", evil)
	}
	nodes, err := cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if workload.Cluster != ns+"/"+name || !workload.Observable || len(workload.Nodes) != len(nodes.Items) {
		t.Errorf("status --cluster-api, the workload cluster: %+v, want observable with its %d nodes", workload, len(nodes.Items))
	}
	if n := dialled(); n != 0 {
		t.Fatalf("status --cluster-api dialled the tenant's server %d times", n)
	}
	table, _ := runCertready(t, ctx, "status", "--cluster-api", "--capi-cluster-selector=certready.io/e2e=capi", "--kubeconfig="+admin)
	t.Logf("certready status --cluster-api:\n%s", table)

	// A rotated kubeconfig: reconnected, and still approving.
	cur, err := cs.CoreV1().Secrets(ns).Get(ctx, kcSecret.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cur.Data[capi.KubeconfigKey] = append(append([]byte{}, kubeconfig...), []byte(fmt.Sprintf("\n# rotated %d\n", time.Now().UnixNano()))...)
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
	if n := dialled(); n != 0 {
		t.Errorf("the tenant's server received %d connections", n)
	}
	t.Logf("rotation picked up and the deleted Cluster let go without a restart")
}
