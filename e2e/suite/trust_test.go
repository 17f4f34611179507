package suite

import (
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"strings"
	"testing"
	"time"

	certv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/certready/certready/e2e/deploy"
	"github.com/certready/certready/e2e/localcluster"
	"github.com/certready/certready/internal/names"
	"github.com/certready/certready/internal/testpki"
)

// hostileNode creates a Node whose status reports addrs (Hostname for a
// name, InternalIP for an address), as a kubelet with its credentials can
// write its own status; spec sets its spec (nil: none). It is deleted when
// the test ends.
func hostileNode(t *testing.T, ctx context.Context, name string, spec *corev1.NodeSpec, addrs ...string) *corev1.Node {
	t.Helper()
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"kubernetes.io/os": "windows"}}}
	if spec != nil {
		n.Spec = *spec
	}
	for _, a := range addrs {
		typ := corev1.NodeHostName
		if _, err := netip.ParseAddr(a); err == nil {
			typ = corev1.NodeInternalIP
		}
		n.Status.Addresses = append(n.Status.Addresses, corev1.NodeAddress{Type: typ, Address: a})
	}
	created, err := cluster.Clientset().CoreV1().Nodes().Create(ctx, n, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cluster.Clientset().CoreV1().Nodes().Delete(context.Background(), name, metav1.DeleteOptions{})
	})
	return created
}

// hostileCSR is a kubelet-serving CSR as node would file it, with the
// given SANs and key, and padding bytes of an extra extension.
type hostileCSR struct {
	ips, dns []string
	key      crypto.Signer
	padding  int
}

func (h hostileCSR) create(t *testing.T, ctx context.Context, node string) string {
	t.Helper()
	req := testpki.Request{Node: node, DNSNames: h.dns, Key: h.key}
	for _, s := range h.ips {
		req.IPs = append(req.IPs, net.ParseIP(s))
	}
	pemBytes, _, err := testpki.NewCSR(req)
	if err != nil {
		t.Fatal(err)
	}
	if h.padding > 0 {
		// Bytes the API server stores as they are: a request over the
		// approver's bound need not be a valid one to cost memory.
		pemBytes = append(pemBytes, []byte(strings.Repeat("# padding\n", h.padding/10))...)
	}
	user := names.NodeUser(node)
	csr := &certv1.CertificateSigningRequest{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "e2e-" + node + "-"},
		Spec: certv1.CertificateSigningRequestSpec{Request: pemBytes, SignerName: names.SignerName,
			Usages: []certv1.KeyUsage{certv1.UsageDigitalSignature, certv1.UsageServerAuth}},
	}
	created, err := impersonating(t, user, "system:nodes", "system:authenticated").CertificatesV1().CertificateSigningRequests().Create(ctx, csr, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("creating a CSR as %s: %v", user, err)
	}
	deleteCSRAtCleanup(t, created.Name)
	return created.Name
}

// apiserverNames are the DNS SANs of the certificate the API server
// presents, as the approver learns them, but for those every cluster
// refuses anyway (kubernetes*, *.svc*, localhost).
func apiserverNames(t *testing.T, ctx context.Context) []string {
	t.Helper()
	cfg := cluster.AdminConfig()
	tlsCfg, err := rest.TLSConfigFor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	u, err := url.Parse(cfg.Host)
	if err != nil {
		t.Fatal(err)
	}
	conn, err := (&tls.Dialer{Config: tlsCfg}).DialContext(ctx, "tcp", u.Host)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	var out []string
	for _, n := range conn.(*tls.Conn).ConnectionState().PeerCertificates[0].DNSNames {
		if !strings.HasPrefix(n, "kubernetes") && !strings.Contains(n, ".svc") && n != "localhost" {
			out = append(out, n)
		}
	}
	return out
}

// explained is 'certready csr explain -o json' as the runbook reads it.
type explained struct {
	CSR struct {
		Stage, Rule string
	}
	Request  struct{ Key string }
	Decision struct {
		Approve bool
		Rule    string
	}
}

func explainCSR(t *testing.T, ctx context.Context, kubeconfig, name string) (explained, int) {
	t.Helper()
	out, code := runCertready(t, ctx, "csr", "explain", name, "--kubeconfig="+kubeconfig, "-o", "json")
	var ex explained
	if err := json.Unmarshal([]byte(out), &ex); err != nil {
		t.Fatalf("certready csr explain %s (exit %d): %v\n%s", name, code, err, out)
	}
	return ex, code
}

// Hostile requests of the trust-boundary review (#22), each filed under the
// node identity it claims, by a Node whose status reports what it asks
// for: every one stays pending with its rule named, on an Event and on the
// CSR itself, and 'certready csr explain' (the approver's policy, run
// read-only with the approver Deployment's flags) gives the same answer.
func TestHostileRequestsOfEveryClassStayPending(t *testing.T) {
	ctx := ctxT(t, 4*time.Minute)
	deployed(t)
	victim := cluster.Workers()[0]
	kubeconfig := writeKubeconfig(t, cluster.AdminConfig())
	// First the answer for a request the approver approved: a worker's
	// issued CSR (before the hostile nodes below claim its name).
	list, _ := runCertready(t, ctx, "csr", "--kubeconfig="+kubeconfig, "--node="+victim.Name, "-o", "json")
	var rows struct {
		CSRs []struct{ Name, Stage, Rule string }
	}
	if err := json.Unmarshal([]byte(list), &rows); err != nil {
		t.Fatalf("certready csr -o json: %v\n%s", err, list)
	}
	issued := ""
	for _, r := range rows.CSRs {
		if r.Stage == "issued" && r.Rule == "CertReadyValidatedNodeIdentity" {
			issued = r.Name
			break
		}
	}
	if issued == "" {
		t.Fatalf("certready csr lists no CSR of %s issued on certready's approval: %s", victim.Name, list)
	}
	if ex, code := explainCSR(t, ctx, kubeconfig, issued); code != 0 || !ex.Decision.Approve || ex.Request.Key != "ECDSA P-256" {
		t.Errorf("csr explain %s (approved by the approver): exit %d, %+v; want it approved again, key ECDSA P-256", issued, code, ex)
	}
	learned := apiserverNames(t, ctx)
	if len(learned) == 0 {
		t.Fatal("the API server presents no name beyond kubernetes* and localhost; the suite's clusters add api.certready.test")
	}
	// A Service address, from the cluster's own ServiceCIDR.
	sc, err := cluster.Clientset().NetworkingV1().ServiceCIDRs().Get(ctx, "kubernetes", metav1.GetOptions{})
	if err != nil || len(sc.Spec.CIDRs) == 0 {
		t.Fatalf("ServiceCIDR kubernetes: %v %+v", err, sc)
	}
	svcAddr := netip.MustParsePrefix(sc.Spec.CIDRs[0]).Addr().Next().Next().Next().Next().Next().String()
	// A Pod CIDR: a Node the node IPAM controller (or an admin) gave one.
	hostileNode(t, ctx, "pod-range-owner", &corev1.NodeSpec{PodCIDR: "198.51.100.0/24", PodCIDRs: []string{"198.51.100.0/24"}})
	rsa1024, err := rsa.GenerateKey(rand.Reader, 1024)
	if err != nil {
		t.Fatal(err)
	}
	p521, err := ecdsa.GenerateKey(elliptic.P521(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	many := make([]string, 101)
	for i := range many {
		many[i] = fmt.Sprintf("rogue-sans-%d.example.com", i)
	}
	for _, tc := range []struct {
		node   string
		addrs  []string
		csr    hostileCSR
		rule   string
		detail string
	}{
		{"rogue-namesake", []string{"192.0.2.201", victim.Name}, hostileCSR{ips: []string{"192.0.2.201"}, dns: []string{victim.Name}}, "AddressClaimedByOtherNode", "is also the name of, or reported by, " + victim.Name},
		{"rogue-ipname", []string{"192.0.2.202", "192.0.2.99"}, hostileCSR{dns: []string{"192.0.2.99"}}, "SANDenied", "an IP address written as a name"},
		{"rogue-apiname", []string{"192.0.2.203", learned[0]}, hostileCSR{ips: []string{"192.0.2.203"}, dns: []string{learned[0]}}, "SANDenied", "is an API server name"},
		{"rogue-service", []string{svcAddr}, hostileCSR{ips: []string{svcAddr}}, "SANDenied", "inside the Service CIDR"},
		{"rogue-pod", []string{"198.51.100.7"}, hostileCSR{ips: []string{"198.51.100.7"}}, "SANDenied", "inside the Pod CIDR 198.51.100.0/24 of node pod-range-owner"},
		{"rogue-weakkey", []string{"192.0.2.204"}, hostileCSR{ips: []string{"192.0.2.204"}, key: rsa1024}, "KeyNotAllowed", "RSA key of 1024 bits"},
		{"rogue-curve", []string{"192.0.2.205"}, hostileCSR{ips: []string{"192.0.2.205"}, key: p521}, "KeyNotAllowed", "curve P-521"},
		{"rogue-sans", append([]string{"192.0.2.206"}, many...), hostileCSR{ips: []string{"192.0.2.206"}, dns: many}, "TooManySANs", "at most 100"},
		{"rogue-huge", []string{"192.0.2.207"}, hostileCSR{ips: []string{"192.0.2.207"}, padding: 256 << 10}, "RequestTooLarge", "at most 32768"},
	} {
		hostileNode(t, ctx, tc.node, nil, tc.addrs...)
		name := tc.csr.create(t, ctx, tc.node)
		msg := waitCSREvent(t, ctx, name, tc.rule)
		if !strings.Contains(msg, tc.detail) {
			t.Errorf("%s: %s %q, want it to say %q", tc.node, tc.rule, msg, tc.detail)
		}
		got, err := cluster.Clientset().CertificatesV1().CertificateSigningRequests().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if csrCondition(got, certv1.CertificateApproved) != nil {
			t.Errorf("%s's CSR was approved", tc.node)
		}
		// The refusal outlives its Event on the CSR (but on a request too
		// large to be worth another write of it); explain agrees.
		kept := tc.rule
		if tc.rule == "RequestTooLarge" {
			kept = ""
		} else if err := localcluster.Poll(ctx, 30*time.Second, "the refusal kept on CSR "+name, func() (bool, error) {
			got, err = cluster.Clientset().CertificatesV1().CertificateSigningRequests().Get(ctx, name, metav1.GetOptions{})
			return err == nil && got.Annotations[names.DecisionRuleAnnotation] != "", nil
		}); err != nil {
			t.Errorf("%s: %v (annotations %v)", tc.node, err, got.Annotations)
		} else if rule := got.Annotations[names.DecisionRuleAnnotation]; rule != tc.rule {
			t.Errorf("%s: CSR %s keeps rule %s, want %s", tc.node, name, rule, tc.rule)
		}
		ex, code := explainCSR(t, ctx, kubeconfig, name)
		if code != 1 || ex.Decision.Approve || ex.Decision.Rule != tc.rule || ex.CSR.Stage != "pending" || ex.CSR.Rule != kept {
			t.Errorf("%s: csr explain %s: exit %d, %+v; want exit 1, refused by %s as the approver did (recorded on the CSR: %q)", tc.node, name, code, ex, tc.rule, kept)
		}
		t.Logf("%s: left pending: %s", tc.node, msg)
	}
}

// podBoundClient is the ServiceAccount sa's token bound to a new Pod on
// node, which has no kubelet to run it, as the kubelet hands a token to a
// pod there (its node in the token).
func podBoundClient(t *testing.T, ctx context.Context, ns, sa, node string) kubernetes.Interface {
	t.Helper()
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "e2e-token-holder-", Namespace: ns},
		Spec: corev1.PodSpec{NodeName: node, ServiceAccountName: sa, Containers: []corev1.Container{{Name: "c", Image: "certready"}},
			Tolerations: []corev1.Toleration{{Operator: corev1.TolerationOpExists}}},
	}
	created, err := cluster.Clientset().CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		zero := int64(0)
		_ = cluster.Clientset().CoreV1().Pods(ns).Delete(context.Background(), created.Name, metav1.DeleteOptions{GracePeriodSeconds: &zero})
	})
	return boundClient(t, ctx, ns, sa, created.Name)
}

// boundClient acts with sa's token bound to pod (its node in the token).
func boundClient(t *testing.T, ctx context.Context, ns, sa, pod string) kubernetes.Interface {
	t.Helper()
	token, err := cluster.Kubectl(ctx, "-n", ns, "create", "token", sa, "--bound-object-kind=Pod", "--bound-object-name="+pod, "--duration=10m")
	if err != nil {
		t.Fatalf("%v\n%s", err, token)
	}
	return tokenClient(t, token)
}

// podOn names the pod of selector on node.
func podOn(t *testing.T, ctx context.Context, ns, selector, node string) string {
	t.Helper()
	pods, err := cluster.Clientset().CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: selector, FieldSelector: "spec.nodeName=" + node})
	if err != nil || len(pods.Items) != 1 {
		t.Fatalf("pod %s on %s: %v (%d found)", selector, node, err, len(pods.Items))
	}
	return pods.Items[0].Name
}

func tokenClient(t *testing.T, token string) kubernetes.Interface {
	t.Helper()
	cfg := rest.AnonymousClientConfig(cluster.AdminConfig())
	cfg.BearerToken = strings.TrimSpace(token)
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return cs
}

// Root on a node holds the agent's token there and publishes False for its
// own Node (the confinement policy allows exactly that). The node reports
// a real worker's address, whose kubelet serves that worker's certificate:
// the taint fallback looks at the kubelet itself, finds no certificate
// issued to this node, and keeps the taint with a Warning on the Node.
func TestAFalseConditionAloneLiftsNoTaint(t *testing.T) {
	ctx := ctxT(t, 3*time.Minute)
	deployed(t)
	victim := cluster.Workers()[0]
	n := hostileNode(t, ctx, "rogue-ready", &corev1.NodeSpec{Taints: []corev1.Taint{{Key: names.TaintKey, Value: names.TaintValue, Effect: corev1.TaintEffectNoSchedule}}}, victim.IP)
	port := node(t, ctx, victim.Name).Status.DaemonEndpoints.KubeletEndpoint.Port
	body, _ := json.Marshal(map[string]any{"status": map[string]any{"daemonEndpoints": map[string]any{"kubeletEndpoint": map[string]any{"Port": port}}}})
	if _, err := cluster.Clientset().CoreV1().Nodes().PatchStatus(ctx, n.Name, body); err != nil {
		t.Fatal(err)
	}
	agent := podBoundClient(t, ctx, deploy.Namespace, "certready-agent", n.Name)
	now := time.Now().UTC().Format(time.RFC3339)
	body, _ = json.Marshal(map[string]any{"status": map[string]any{"conditions": []map[string]any{{
		"type": deploy.ConditionType, "status": "False", "reason": "KubeletServingCertReady", "message": "forged by root on the node",
		"lastHeartbeatTime": now, "lastTransitionTime": now,
	}}}})
	if _, err := agent.CoreV1().Nodes().PatchStatus(ctx, n.Name, body); err != nil {
		t.Fatalf("the agent's token on its own node was refused: %v", err)
	}
	var ev corev1.Event
	err := localcluster.Poll(ctx, 2*time.Minute, "a KubeletServingCertUnproven Warning on "+n.Name, func() (bool, error) {
		evs, err := cluster.Clientset().CoreV1().Events("default").List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.kind=Node,involvedObject.name=" + n.Name + ",reason=KubeletServingCertUnproven"})
		if err != nil || len(evs.Items) == 0 {
			return false, nil
		}
		ev = evs.Items[0]
		return true, nil
	})
	if err != nil {
		t.Fatalf("%v\n%s", err, podsAndEvents(ctx))
	}
	if !strings.Contains(ev.Message, `not for system:node:rogue-ready`) {
		t.Errorf("event %q, want it to name the certificate of another node", ev.Message)
	}
	// The event is recorded where the decision was taken: the taint is
	// there when it is.
	if !deploy.HasReadinessTaint(node(t, ctx, n.Name)) {
		t.Fatal("the readiness taint was lifted on a False condition alone")
	}
	t.Logf("taint kept: %s", ev.Message)
}

// The approver's own token (what a stolen copy grants): on a Node it may
// set its completion mark and remove the readiness taint once the node's
// condition is False, nothing else (the readiness taint removed from a ready
// node, and the soft taint, are TestApproverNodeWritesOnTheRealAPIServer in
// e2e/integration).
func TestApproverTokenChangesOnlyItsTaints(t *testing.T) {
	ctx := ctxT(t, 2*time.Minute)
	deployed(t)
	n := hostileNode(t, ctx, "approver-target", &corev1.NodeSpec{Taints: []corev1.Taint{{Key: names.TaintKey, Value: names.TaintValue, Effect: corev1.TaintEffectNoSchedule}}})
	token, err := cluster.Kubectl(ctx, "-n", deploy.Namespace, "create", "token", "certready-approver", "--duration=10m")
	if err != nil {
		t.Fatal(err)
	}
	as := tokenClient(t, token)
	// Without a resourceVersion: the running approver keeps its soft taint
	// on this node too, and a conflict would hide the policy's answer.
	patch := func(p map[string]any) error {
		body, _ := json.Marshal(p)
		_, err := as.CoreV1().Nodes().Patch(ctx, n.Name, types.MergePatchType, body, metav1.PatchOptions{})
		return err
	}
	taints := func(ts ...corev1.Taint) map[string]any { return map[string]any{"spec": map[string]any{"taints": ts}} }
	startup := corev1.Taint{Key: names.TaintKey, Value: names.TaintValue, Effect: corev1.TaintEffectNoSchedule}
	// Every taint the node carries but the readiness taint: the node
	// lifecycle controller adds node.kubernetes.io/not-ready to a node
	// without a kubelet, and that one is not the approver's to remove.
	withoutStartup := func() []corev1.Taint {
		var keep []corev1.Taint
		for _, tt := range node(t, ctx, n.Name).Spec.Taints {
			if tt.Key != startup.Key {
				keep = append(keep, tt)
			}
		}
		if keep == nil {
			keep = []corev1.Taint{}
		}
		return keep
	}
	fixed := func(p map[string]any) func() map[string]any { return func() map[string]any { return p } }
	for _, tc := range []struct {
		name    string
		patch   func() map[string]any
		allowed bool
	}{
		{"a label", fixed(map[string]any{"metadata": map[string]any{"labels": map[string]string{"e2e": "x"}}}), false},
		{"another annotation", fixed(map[string]any{"metadata": map[string]any{"annotations": map[string]string{"readiness.k8s.io/bootstrap-completed-e2e": "x"}}}), false},
		{"another taint", fixed(taints(startup, corev1.Taint{Key: "node.kubernetes.io/unschedulable", Effect: corev1.TaintEffectNoSchedule})), false},
		{"cordon", fixed(map[string]any{"spec": map[string]any{"unschedulable": true}}), false},
		// No agent runs there: its condition is not False, and only the
		// agent may write it (the approver lifting real workers' taints is
		// TestWorkersGetUntaintedAndServeLogsWithoutAHuman).
		{"the readiness taint removed from a node that never reported ready", func() map[string]any { return taints(withoutStartup()...) }, false},
		{"its completion mark alone", fixed(map[string]any{"metadata": map[string]any{"annotations": map[string]string{names.CompletedAnnotation: "e2e"}}}), true},
		{"the startup key with effect NoExecute", func() map[string]any {
			return taints(append(withoutStartup(), startup, corev1.Taint{Key: startup.Key, Value: startup.Value, Effect: corev1.TaintEffectNoExecute})...)
		}, false},
	} {
		err := patch(tc.patch())
		if tc.allowed && err != nil {
			// The patch carries the node's other taints as read just
			// before; the node lifecycle controller changes its own
			// (not-ready) meanwhile, and the policy then rightly refuses a
			// patch that would put them back. Read again and retry.
			_ = localcluster.Poll(ctx, 30*time.Second, tc.name, func() (bool, error) {
				err = patch(tc.patch())
				return err == nil, nil
			})
		}
		switch {
		case tc.allowed && err != nil:
			t.Errorf("%s: refused: %v", tc.name, err)
		case !tc.allowed && (err == nil || !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "certready-approver-node-writes")):
			t.Errorf("%s: %v, want Forbidden by certready-approver-node-writes", tc.name, err)
		case !tc.allowed:
			t.Logf("%s: refused: %v", tc.name, err)
		}
	}
	if got := node(t, ctx, n.Name); !deploy.HasReadinessTaint(got) || got.Labels["e2e"] != "" || got.Spec.Unschedulable || got.Annotations["readiness.k8s.io/bootstrap-completed-e2e"] != "" {
		t.Errorf("node after the approver's token: taints %v, labels %v, annotations %v, unschedulable %v", got.Spec.Taints, got.Labels, got.Annotations, got.Spec.Unschedulable)
	}
}

// The agent's token records events only about its own Node, in default.
func TestAgentTokenRecordsEventsOnlyAboutItsNode(t *testing.T) {
	ctx := ctxT(t, 2*time.Minute)
	deployed(t)
	w1, w2 := cluster.Workers()[0].Name, cluster.Workers()[1].Name
	agent := boundClient(t, ctx, deploy.Namespace, "certready-agent", podOn(t, ctx, deploy.Namespace, "app.kubernetes.io/component=agent", w1))
	event := func(ns, kind, name string) error {
		ref := corev1.ObjectReference{Kind: kind, Name: name, APIVersion: "v1"}
		if ns != "default" {
			ref.Namespace = ns // as the API server wants it of an event outside default
		}
		e := &corev1.Event{ObjectMeta: metav1.ObjectMeta{GenerateName: "e2e-", Namespace: ns},
			InvolvedObject: ref,
			Reason:         "E2E", Message: "e2e", Type: corev1.EventTypeNormal, Source: corev1.EventSource{Component: "certready-agent"},
			FirstTimestamp: metav1.Now(), LastTimestamp: metav1.Now(), Count: 1}
		created, err := agent.CoreV1().Events(ns).Create(ctx, e, metav1.CreateOptions{})
		if err == nil {
			_ = cluster.Clientset().CoreV1().Events(ns).Delete(context.Background(), created.Name, metav1.DeleteOptions{})
		}
		return err
	}
	for _, tc := range []struct {
		name, ns, kind, obj string
		allowed             bool
	}{
		{"about its own Node in default", "default", "Node", w1, true},
		{"about another Node", "default", "Node", w2, false},
		{"about its own Node, filed in another namespace", deploy.Namespace, "Node", w1, false},
		{"about a Pod", "default", "Pod", "x", false},
	} {
		err := event(tc.ns, tc.kind, tc.obj)
		switch {
		case tc.allowed && err != nil:
			t.Errorf("%s: refused: %v", tc.name, err)
		case !tc.allowed && (err == nil || !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "certready-agent-events")):
			t.Errorf("%s: %v, want Forbidden by certready-agent-events", tc.name, err)
		case !tc.allowed:
			t.Logf("%s: refused: %v", tc.name, err)
		}
	}
}
