package suite

import (
	"context"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	certv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/certready/certready/e2e/deploy"
	"github.com/certready/certready/e2e/localcluster"
	"github.com/certready/certready/e2e/provider"
	"github.com/certready/certready/internal/names"
	"github.com/certready/certready/reporter/servingcert/verdict"
)

// A kubelet configured without serverTLSBootstrap joins, first while the
// API server verifies kubelets, then while it verifies none (kubeadm's
// default, kube-bench 1.2.6). The agent names the kubelet's configuration
// from its first verdict, not a missing file to wait for; kubectl logs
// there fails while the API server verifies and works once it does not, and
// that is a finding about the cluster (the agent's Node event, certready
// status), never a ready node: the node stays not ready and tainted, and
// every other node stays proven by its own checks.
func TestKubeletWithoutServingBootstrapAndAnAPIServerThatVerifiesNothing(t *testing.T) {
	local, ok := cluster.(provider.Local)
	if !ok {
		t.Skip("needs the local cluster: a kubelet configured by the test and an API server restarted without --kubelet-certificate-authority")
	}
	ctx := ctxT(t, 8*time.Minute)
	deployed(t)
	const name = "selfsigned"
	for _, w := range cluster.Workers() {
		waitCondition(t, ctx, w.Name, 3*time.Minute, "every worker ready before the test", readyAndUntainted)
	}
	joinLocalNode(t, ctx, local, name, localcluster.NodeOptions{ServingBootstrapOff: true})
	n := waitCondition(t, ctx, name, 2*time.Minute, "the agent to name serverTLSBootstrap", hasReason("KubeletServingBootstrapOff", corev1.ConditionTrue))
	if c := certCondition(n); !strings.Contains(c.Message, "/var/lib/kubelet/config.yaml") || !deploy.HasReadinessTaint(n) {
		t.Errorf("condition %q, taints %v: want the configuration file named and the node tainted", c.Message, n.Spec.Taints)
	}
	agentPod := func() string {
		pods, err := cluster.Clientset().CoreV1().Pods(deploy.Namespace).List(ctx, metav1.ListOptions{
			LabelSelector: "app.kubernetes.io/component=agent", FieldSelector: "spec.nodeName=" + name,
		})
		if err != nil || len(pods.Items) != 1 {
			t.Fatalf("agent pod on %s: %v (%d pods)", name, err, len(pods.Items))
		}
		return pods.Items[0].Name
	}
	logs := func() (string, error) {
		return cluster.Kubectl(ctx, "logs", "-n", deploy.Namespace, agentPod(), "--limit-bytes=1")
	}
	if out, err := logs(); err == nil || !strings.Contains(out, "x509") {
		t.Errorf("kubectl logs on %s while the API server verifies kubelets: %v %q, want an x509 error", name, err, out)
	}
	findings := func() []corev1.Event {
		evs, err := cluster.Clientset().CoreV1().Events(metav1.NamespaceDefault).List(ctx, metav1.ListOptions{
			FieldSelector: "involvedObject.kind=Node,reason=APIServerVerifiesNoKubelet",
		})
		if err != nil {
			t.Fatal(err)
		}
		return evs.Items
	}
	if f := findings(); len(f) > 0 {
		t.Errorf("a finding while the API server verifies kubelets: %+v", f[0])
	}

	t.Log("restarting kube-apiserver without --kubelet-certificate-authority")
	if err := local.C.VerifyKubelets(ctx, false); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		if err := local.C.VerifyKubelets(cctx, true); err != nil {
			t.Errorf("restoring kube-apiserver --kubelet-certificate-authority: %v", err)
		}
	})
	if out, err := logs(); err != nil {
		t.Errorf("kubectl logs on %s with an API server that verifies no kubelet: %v %q: want the log (the exposure the finding names)", name, err, out)
	}
	// A new agent asks at once; the running one backs off the refusals it
	// had (up to its proof interval) before asking again.
	if err := cluster.Clientset().CoreV1().Pods(deploy.Namespace).Delete(ctx, agentPod(), metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	kubeconfig := writeKubeconfig(t, cluster.AdminConfig())
	var out string
	err := localcluster.Poll(ctx, 3*time.Minute, "certready status to print the finding", func() (bool, error) {
		out, _ = runCertready(t, ctx, "status", "--kubeconfig="+kubeconfig)
		return strings.Contains(out, "Cluster finding APIServerVerifiesNoKubelet (seen by the agents on "+name), nil
	})
	if err != nil {
		t.Fatalf("%v; last output:\n%s\n%s", err, out, podsAndEvents(ctx))
	}
	t.Logf("certready status:\n%s", out)
	if f := findings(); len(f) == 0 || f[0].InvolvedObject.Name != name || f[0].Type != corev1.EventTypeWarning {
		t.Errorf("finding events %+v: want a Warning about %s", f, name)
	}
	n = node(t, ctx, name)
	if c := certCondition(n); c.Status != corev1.ConditionTrue || c.Reason != "KubeletServingBootstrapOff" || !strings.Contains(c.Message, "verifies no kubelet certificate") || !deploy.HasReadinessTaint(n) {
		t.Errorf("%s: condition %+v, taints %v: want it not ready, tainted, its message naming the finding", name, c, n.Spec.Taints)
	}
	for _, w := range cluster.Workers() {
		if w.Name == name {
			continue
		}
		if c := certCondition(node(t, ctx, w.Name)); c == nil || c.Status != corev1.ConditionFalse {
			t.Errorf("%s: condition %+v: a node with a verified certificate stays ready by its own checks", w.Name, c)
		}
	}
}

// A firewall drops the control plane's connections to one joining node's
// kubelet port. The node-local path is fine (its certificate approved,
// installed and served), but the API server cannot reach the kubelet: the
// node stays not ready with APIServerCannotReachKubelet and keeps its
// readiness taint, and kubectl logs fails there at the same time. Once the
// firewall lets the API server through, the node is proven and untainted.
func TestFirewalledKubeletKeepsItsNodeTainted(t *testing.T) {
	local, ok := cluster.(provider.Local)
	if !ok {
		t.Skip("needs the local cluster: a firewall rule that drops the API server's traffic alone")
	}
	ctx := ctxT(t, 8*time.Minute)
	deployed(t)
	const name = "firewalled"
	var ip string
	block := func(n *localcluster.Node) error {
		ip = n.IP
		return local.C.BlockAPIServerToKubelet(n.IP, true)
	}
	joinLocalNode(t, ctx, local, name, localcluster.NodeOptions{BeforeKubelet: block})
	blocked := true
	t.Cleanup(func() {
		if blocked {
			if err := local.C.BlockAPIServerToKubelet(ip, false); err != nil {
				t.Errorf("removing the firewall rule: %v", err)
			}
		}
	})
	var n *corev1.Node
	err := localcluster.Poll(ctx, 3*time.Minute, "the agent to name the API server's unreachable path", func() (bool, error) {
		got, err := cluster.Clientset().CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		n = got
		return err == nil && hasReason("APIServerCannotReachKubelet", corev1.ConditionTrue)(got), nil
	})
	if err != nil {
		approver, _ := cluster.Kubectl(ctx, "logs", "-n", deploy.Namespace, "-l", "app.kubernetes.io/component=approver", "--tail=40", "--prefix")
		t.Fatalf("%v; last condition %+v\napprover:\n%s\n%s", err, certCondition(n), approver, podsAndEvents(ctx))
	}
	c := certCondition(n)
	if !strings.Contains(c.Message, ip+":10250") || !deploy.HasReadinessTaint(n) {
		t.Errorf("condition %q, taints %v: want the API server's error naming %s:10250 and the node tainted", c.Message, n.Spec.Taints, ip)
	}
	t.Logf("%s: %s", name, c.Message)
	pods, err := cluster.Clientset().CoreV1().Pods(deploy.Namespace).List(ctx, metav1.ListOptions{
		LabelSelector: "app.kubernetes.io/component=agent", FieldSelector: "spec.nodeName=" + name,
	})
	if err != nil || len(pods.Items) != 1 {
		t.Fatalf("agent pod on %s: %v", name, err)
	}
	if out, err := cluster.Kubectl(ctx, "logs", "-n", deploy.Namespace, pods.Items[0].Name, "--limit-bytes=1"); err == nil || !strings.Contains(out, ip+":10250") {
		t.Errorf("kubectl logs on %s behind the firewall: %v %q, want it failing to reach %s:10250", name, err, out, ip)
	}

	if err := local.C.BlockAPIServerToKubelet(ip, false); err != nil {
		t.Fatal(err)
	}
	blocked = false
	start := time.Now()
	n = waitCondition(t, ctx, name, 3*time.Minute, "proven and untainted once the API server gets through", readyAndUntainted)
	t.Logf("%s ready and untainted %s after the firewall let the API server through: %s", name, time.Since(start).Round(time.Second), certCondition(n).Message)
	// The lift is evidence: a Node event by the approver naming who lifted
	// it and the certificate it relied on.
	facts, _ := verdict.NodeFacts(n, certCondition(n))
	var lifted string
	err = localcluster.Poll(ctx, time.Minute, "the approver's ReadinessTaintLifted event", func() (bool, error) {
		evs, err := cluster.Clientset().CoreV1().Events(metav1.NamespaceDefault).List(ctx, metav1.ListOptions{
			FieldSelector: "involvedObject.kind=Node,involvedObject.name=" + name + ",reason=ReadinessTaintLifted",
		})
		if err != nil || len(evs.Items) == 0 {
			return false, nil
		}
		lifted = evs.Items[0].Message
		return true, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(lifted, "removed by certready") || !strings.Contains(lifted, "certificate sha256 "+facts.Fingerprint.String()) {
		t.Errorf("ReadinessTaintLifted %q: want it lifted by certready relying on certificate %s", lifted, facts.Fingerprint)
	}
	t.Logf("%s: %s", name, lifted)
}

// joinLocalNode adds a worker to the local cluster, configured by opts, and
// removes it when the test ends, after the cleanups the test registers
// later (its firewall rules, its addresses).
func joinLocalNode(t *testing.T, ctx context.Context, local provider.Local, name string, opts localcluster.NodeOptions) *localcluster.Node {
	t.Helper()
	n, err := local.C.AddNodeWith(ctx, name, false, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := local.C.RemoveNode(cctx, name); err != nil {
			t.Errorf("removing node %s: %v", name, err)
		}
	})
	return n
}

// A host renumbered under its kubelet: the Node now reports an address the
// serving certificate lacks, and the approver leaves the kubelet's new
// request pending (the address is not one the node first reported). The
// API server dials that address (--kubelet-preferred-address-types picks
// the InternalIP), so kubectl logs fails with an x509 name error there.
// The agent, given the inventory ConfigMap, dials the address the
// inventory records and names both: the certificate lacks the address the
// API server dials, and the Node's addresses drifted from the inventory.
func TestRenumberedNodeIsNamedAgainstTheInventory(t *testing.T) {
	local, ok := cluster.(provider.Local)
	if !ok {
		t.Skip("needs the local cluster: a kubelet restarted with another --node-ip")
	}
	ctx := ctxT(t, 8*time.Minute)
	deployed(t)
	// The new address lies in the Service range, which the approver never
	// signs, so the kubelet's request for it stays pending whatever else
	// the policy has learnt (in a full run, earlier scenarios teach it
	// networks).
	const name, moved, inventoryCM = "renumbered", "10.0.0.77", "certready-inventory"
	src := "ConfigMap " + deploy.Namespace + "/" + inventoryCM
	cms := cluster.Clientset().CoreV1().ConfigMaps(deploy.Namespace)
	// What an operator adds for the agents: the inventory, read access to
	// that one ConfigMap, and --inventory.
	rbac := cluster.Clientset().RbacV1()
	role := &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: "certready-agent-inventory", Namespace: deploy.Namespace},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"configmaps"}, ResourceNames: []string{inventoryCM}, Verbs: []string{"get", "list", "watch"}}}}
	binding := &rbacv1.RoleBinding{ObjectMeta: role.ObjectMeta,
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: role.Name},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: "certready-agent", Namespace: deploy.Namespace}}}
	if _, err := rbac.Roles(deploy.Namespace).Create(ctx, role, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := rbac.RoleBindings(deploy.Namespace).Create(ctx, binding, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		for _, err := range []error{
			rbac.RoleBindings(deploy.Namespace).Delete(cctx, binding.Name, metav1.DeleteOptions{}),
			rbac.Roles(deploy.Namespace).Delete(cctx, role.Name, metav1.DeleteOptions{}),
			cms.Delete(cctx, inventoryCM, metav1.DeleteOptions{}),
		} {
			if err != nil && !apierrors.IsNotFound(err) {
				t.Errorf("cleaning up the inventory: %v", err)
			}
		}
	})
	var ip string
	record := func(n *localcluster.Node) error {
		ip = n.IP
		_, err := cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: inventoryCM},
			Data: map[string]string{"inventory.yaml": fmt.Sprintf("nodes:\n  %s:\n    ips: [%q]\n", name, n.IP)}}, metav1.CreateOptions{})
		return err
	}
	agentWith(t, ctx, "--inventory=configmap:"+deploy.Namespace+"/"+inventoryCM)
	joinLocalNode(t, ctx, local, name, localcluster.NodeOptions{BeforeKubelet: record})
	n := waitCondition(t, ctx, name, 3*time.Minute, "proven and untainted at the inventory's address", readyAndUntainted)
	if c := certCondition(n); !strings.Contains(c.Message, "presented on "+ip+":10250") || strings.Contains(c.Message, "drift") {
		t.Errorf("ready condition %q: want the kubelet proven at %s:10250 and no drift", c.Message, ip)
	}

	movedAt := time.Now().Add(-time.Second).Truncate(time.Second)
	undo, err := local.C.MoveNodeIP(name, moved)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := undo(); err != nil {
			t.Errorf("undoing the renumbering: %v", err)
		}
	})
	n = waitCondition(t, ctx, name, 3*time.Minute, "the certificate named as lacking the address the API server dials",
		hasReason("CertificateIdentityMismatch", corev1.ConditionTrue))
	c := certCondition(n)
	for _, want := range []string{moved, "drifted from the inventory (" + src + ")", "the Node reports " + moved + " (InternalIP), which it does not record",
		"it records " + ip + ", which the Node does not report", "the agent dials the inventory's " + ip} {
		if !strings.Contains(c.Message, want) {
			t.Errorf("condition message %q lacks %q", c.Message, want)
		}
	}
	t.Logf("%s: %s", name, c.Message)
	pods, err := cluster.Clientset().CoreV1().Pods(deploy.Namespace).List(ctx, metav1.ListOptions{
		LabelSelector: "app.kubernetes.io/component=agent", FieldSelector: "spec.nodeName=" + name,
	})
	if err != nil || len(pods.Items) != 1 {
		t.Fatalf("agent pod on %s: %v", name, err)
	}
	// The API server dials the moved address, where the kubelet answers
	// with a certificate for the old one.
	var out string
	err = localcluster.Poll(ctx, 2*time.Minute, "kubectl logs to fail on the address the certificate lacks", func() (bool, error) {
		out, err = cluster.Kubectl(ctx, "logs", "-n", deploy.Namespace, pods.Items[0].Name, "--limit-bytes=1")
		return err != nil && strings.Contains(out, "x509") && strings.Contains(out, moved), nil
	})
	if err != nil {
		t.Fatalf("%v; last: %q", err, out)
	}
	t.Logf("kubectl logs: %s", strings.TrimSpace(out))
	// The kubelet asked for a certificate for its new address; the
	// approver leaves it pending with its rule.
	var pending, rule string
	err = localcluster.Poll(ctx, 2*time.Minute, "the renumbered kubelet's new request left pending with its rule", func() (bool, error) {
		csrs, err := cluster.Clientset().CertificatesV1().CertificateSigningRequests().List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, nil
		}
		for _, c := range csrs.Items {
			if c.Spec.Username != names.NodeUser(name) || c.CreationTimestamp.Time.Before(movedAt) || !requestsIP(c, moved) {
				continue
			}
			if csrCondition(&c, certv1.CertificateApproved) != nil {
				return false, fmt.Errorf("%s, the request for the new address, was approved", c.Name)
			}
			evs, err := cluster.Clientset().CoreV1().Events("").List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=" + c.Name + ",type=Warning"})
			if err == nil && len(evs.Items) > 0 {
				pending, rule = c.Name, evs.Items[0].Reason+": "+evs.Items[0].Message
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		t.Fatalf("%v\n%s", err, podsAndEvents(ctx))
	}
	t.Logf("%s pending: %s", pending, rule)
	err = localcluster.Poll(ctx, time.Minute, "a Warning NodeAddressDrift naming "+moved, func() (bool, error) {
		evs, err := cluster.Clientset().CoreV1().Events(metav1.NamespaceDefault).List(ctx, metav1.ListOptions{
			FieldSelector: "involvedObject.kind=Node,involvedObject.name=" + name + ",reason=NodeAddressDrift,type=Warning",
		})
		if err != nil {
			return false, nil
		}
		for _, e := range evs.Items {
			if strings.Contains(e.Message, moved) {
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		t.Error(err)
	}
}

// requestsIP reports whether CSR c asks for ip among its IP SANs.
func requestsIP(c certv1.CertificateSigningRequest, ip string) bool {
	block, _ := pem.Decode(c.Spec.Request)
	if block == nil {
		return false
	}
	req, err := x509.ParseCertificateRequest(block.Bytes)
	if err != nil {
		return false
	}
	for _, got := range req.IPAddresses {
		if got.String() == ip {
			return true
		}
	}
	return false
}

// The API server prefers an address the certificate lacks. On a cloud
// whose controller writes the Node's addresses (--cloud-provider=external:
// the kubelet leaves them alone), the Node gains an ExternalIP that its
// kubelet's certificate does not cover, and kube-apiserver picks ExternalIP
// first. The node-local proof still holds (the kubelet presents a valid
// certificate on its InternalIP, where the agent dials): only the API
// server's own path shows that kubectl logs fails there, and the agent
// names it with the address the API server dialled.
func TestAPIServerPrefersAnAddressTheCertificateLacks(t *testing.T) {
	local, ok := cluster.(provider.Local)
	if !ok {
		t.Skip("needs the local cluster: a kubelet whose addresses a cloud controller writes and an API server restarted with other --kubelet-preferred-address-types")
	}
	ctx := ctxT(t, 8*time.Minute)
	deployed(t)
	// In the Service range, which the approver never signs: the kubelet's
	// request for it stays pending and its certificate keeps lacking it.
	const name, external = "cloud-external", "10.0.0.78"
	node := joinLocalNode(t, ctx, local, name, localcluster.NodeOptions{ExternalCloudProvider: true})
	waitCondition(t, ctx, name, 3*time.Minute, "proven and untainted before the API server's preference changes", readyAndUntainted)

	unroute, err := local.C.RouteAPIServerToKubelet(name, external)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := unroute(); err != nil {
			t.Errorf("removing %s: %v", external, err)
		}
	})
	// What the cloud controller writes: the Node's addresses, by a manager
	// other than the kubelet, which keeps them from then on.
	addresses := fmt.Sprintf(`{"status":{"addresses":[{"type":"InternalIP","address":%q},{"type":"ExternalIP","address":%q},{"type":"Hostname","address":%q}]}}`, node.IP, external, name)
	if _, err := cluster.Clientset().CoreV1().Nodes().Patch(ctx, name, types.MergePatchType, []byte(addresses), metav1.PatchOptions{FieldManager: "cre2e-cloud-controller"}, "status"); err != nil {
		t.Fatal(err)
	}
	t.Log("restarting kube-apiserver with --kubelet-preferred-address-types=ExternalIP,InternalIP,Hostname")
	if err := local.C.PreferAddressTypes(ctx, "ExternalIP,InternalIP,Hostname"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		if err := local.C.PreferAddressTypes(cctx, ""); err != nil {
			t.Errorf("restoring kube-apiserver --kubelet-preferred-address-types: %v", err)
		}
	})
	// A new agent proves the API server's path before its first ready
	// verdict (a running one would within --apiserver-proof-interval).
	pods := cluster.Clientset().CoreV1().Pods(deploy.Namespace)
	onNode := metav1.ListOptions{LabelSelector: "app.kubernetes.io/component=agent", FieldSelector: "spec.nodeName=" + name}
	old, err := pods.List(ctx, onNode)
	if err != nil || len(old.Items) != 1 {
		t.Fatalf("agent pod on %s: %v (%d pods)", name, err, len(old.Items))
	}
	if err := pods.Delete(ctx, old.Items[0].Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	n := waitCondition(t, ctx, name, 3*time.Minute, "the API server's path named", hasReason("APIServerCannotVerifyKubelet", corev1.ConditionTrue))
	c := certCondition(n)
	if !strings.Contains(c.Message, "the node serves its certificate") || !strings.Contains(c.Message, external) {
		t.Errorf("condition %q: want the node-local proof held and the API server's address %s named", c.Message, external)
	}
	if !slices.ContainsFunc(n.Status.Addresses, func(a corev1.NodeAddress) bool {
		return a.Type == corev1.NodeExternalIP && a.Address == external
	}) {
		t.Errorf("Node addresses %v: the kubelet overwrote the cloud controller's ExternalIP %s", n.Status.Addresses, external)
	}
	t.Logf("%s: %s", name, c.Message)
	var agent string
	cur, err := pods.List(ctx, onNode)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range cur.Items {
		if p.DeletionTimestamp == nil {
			agent = p.Name
		}
	}
	out, err := cluster.Kubectl(ctx, "logs", "-n", deploy.Namespace, agent, "--limit-bytes=1")
	if err == nil || !strings.Contains(out, "x509") || !strings.Contains(out, external) {
		t.Errorf("kubectl logs %s: %v %q, want an x509 error for %s", agent, err, out, external)
	}
	t.Logf("kubectl logs: %s", strings.TrimSpace(out))
}
