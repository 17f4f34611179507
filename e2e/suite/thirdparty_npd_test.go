package suite

// node-problem-detector as the condition's writer: it needs certready
// installed (deployed), and it hands the condition to node-problem-detector
// and back.

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
	watchtools "k8s.io/client-go/tools/watch"

	"github.com/certready/certready/e2e/deploy"
	"github.com/certready/certready/e2e/localcluster"
	"github.com/certready/certready/e2e/provider"
	"github.com/certready/certready/reporter/npdcheck"
)

// conditionRecorder keeps every distinct state of each node's condition
// from the moment it is made, through a watch that survives reconnects. A
// Node object made anew under the same name (kind's JoinWorker makes a
// worker register again) starts a new history.
type conditionRecorder struct {
	mu   sync.Mutex
	hist map[string][]corev1.NodeCondition
	uid  map[string]types.UID
}

func recordConditions(t *testing.T, ctx context.Context) *conditionRecorder {
	t.Helper()
	nodes := cluster.Clientset().CoreV1().Nodes()
	list, err := nodes.List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	r := &conditionRecorder{hist: map[string][]corev1.NodeCondition{}, uid: map[string]types.UID{}}
	for i := range list.Items {
		r.add(&list.Items[i])
	}
	rw, err := watchtools.NewRetryWatcherWithContext(ctx, list.ResourceVersion, &cache.ListWatch{
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) { return nodes.Watch(ctx, o) },
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(rw.Stop)
	go func() {
		for ev := range rw.ResultChan() {
			if n, ok := ev.Object.(*corev1.Node); ok {
				r.add(n)
			}
		}
	}()
	return r
}

func (r *conditionRecorder) add(n *corev1.Node) {
	c := certCondition(n)
	if c == nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.uid[n.Name] != n.UID {
		r.uid[n.Name], r.hist[n.Name] = n.UID, nil
	}
	h := r.hist[n.Name]
	if k := len(h); k > 0 && h[k-1].Status == c.Status && h[k-1].Reason == c.Reason && h[k-1].Message == c.Message && h[k-1].LastTransitionTime.Equal(&c.LastTransitionTime) {
		return
	}
	r.hist[n.Name] = append(h, *c)
}

func (r *conditionRecorder) of(name string) []corev1.NodeCondition {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]corev1.NodeCondition(nil), r.hist[name]...)
}

func summary(h []corev1.NodeCondition) string {
	var parts []string
	for _, c := range h {
		parts = append(parts, string(c.Status)+" "+c.Reason+" ("+c.Message+")")
	}
	return strings.Join(parts, " -> ")
}

// npdOverlay writes a kustomization that adds the real node-problem-detector
// (its own deployment/ folder, from the module the plugin protocol comes
// from) with certready's npd component to the standalone overlay, and
// returns its folder (inside manifests/, so that its paths are relative).
func npdOverlay(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("../../manifests/overlays", ".npd-e2e-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := deploy.NPDDeployment("../..", filepath.Join(dir, "npd", "upstream")); err != nil {
		t.Fatal(err)
	}
	files := map[string]string{
		"kustomization.yaml": `resources:
- ../standalone
- npd
components:
- ../../components/npd
images:
- name: certready
  newTag: dev
- name: ` + localcluster.NPDImage + `
  newTag: v1.36.0
`,
		// NPD's own DaemonSet as shipped, less what the local cluster cannot
		// give it: its nodes share the host's kernel log (no kernel or
		// journal monitors) and one network namespace (no listeners).
		"npd/kustomization.yaml": `resources:
- upstream
patches:
- patch: |-
    apiVersion: apps/v1
    kind: DaemonSet
    metadata:
      name: node-problem-detector
      namespace: kube-system
    spec:
      template:
        spec:
          containers:
          - name: node-problem-detector
            command: [/node-problem-detector, --logtostderr, --port=0, --prometheus-port=0]
            volumeMounts:
            - {mountPath: /dev/kmsg, $patch: delete}
            - {mountPath: /var/log, $patch: delete}
            - {mountPath: /etc/localtime, $patch: delete}
          volumes:
          - {name: kmsg, $patch: delete}
          - {name: log, $patch: delete}
          - {name: localtime, $patch: delete}
`,
	}
	for name, data := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// node-problem-detector v1.36.0, built from the Go module proxy, runs
// `certready check` with the shipped plugin config through the npd
// component. On a node verified before it started it hands over (Unknown,
// then False: it starts believing False and publishes only changes); on a
// new node its condition goes True, and False once the certificate is
// installed, never False first; the taint comes off on its word.
func TestNodeProblemDetectorPublishesTheConditionAsShipped(t *testing.T) {
	if os.Getenv("CERTREADY_NPD_BIN") == "" {
		t.Skip("needs node-problem-detector's daemon (CERTREADY_NPD_BIN: make -C e2e bins builds it for the local cluster, make e2e-kind builds its image and loads it into kind)")
	}
	ctx := ctxT(t, 12*time.Minute)
	deployed(t)
	rec := recordConditions(t, ctx)
	dir := npdOverlay(t)
	kubectl := func(args ...string) string {
		t.Helper()
		out, err := cluster.Kubectl(ctx, args...)
		if err != nil {
			t.Fatalf("kubectl %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return out
	}
	t.Cleanup(func() { handBackToTheAgent(t) })
	kubectl("apply", "-k", dir)
	// kubectl apply adds and changes; the agent's DaemonSet, Service and
	// RBAC, which the component leaves out, go by hand (docs/reference.md).
	kubectl("-n", deploy.Namespace, "delete", "daemonset/certready-agent", "service/certready-agent-metrics", "--wait=true")
	kubectl("delete", "clusterrolebinding/certready-agent", "clusterrole/certready-agent")
	handOver := time.Now()

	nodes := len(cluster.Nodes())
	err := localcluster.Poll(ctx, 3*time.Minute, "node-problem-detector ready on every node", func() (bool, error) {
		ds, err := cluster.Clientset().AppsV1().DaemonSets("kube-system").Get(ctx, "node-problem-detector", metav1.GetOptions{})
		return err == nil && deploy.DaemonSetRolledOut(ds, nodes), nil
	})
	if err != nil {
		t.Fatalf("%v\n%s", err, podsAndEvents(ctx))
	}

	// NPD's own node-bound token is confined to its node like the agent's:
	// its conditions, nothing else, and no other node's.
	w := cluster.Workers()[0].Name
	npd := boundClient(t, ctx, "kube-system", "node-problem-detector", podOn(t, ctx, "kube-system", "app=node-problem-detector", w))
	stamp := time.Now().UTC().Format(time.RFC3339)
	for _, tc := range []struct {
		name, node string
		patch      map[string]any
		allowed    bool
	}{
		{"another node's condition", cluster.Workers()[1].Name, map[string]any{"status": map[string]any{"conditions": []map[string]any{{
			"type": deploy.ConditionType, "status": "False", "reason": "Forged", "message": "forged", "lastHeartbeatTime": stamp, "lastTransitionTime": stamp}}}}, false},
		{"its own node's addresses", w, map[string]any{"status": map[string]any{"addresses": []map[string]any{{"type": "InternalIP", "address": "192.0.2.250"}}}}, false},
		{"another condition of its own node (its job)", w, map[string]any{"status": map[string]any{"conditions": []map[string]any{{
			"type": "E2EProblem", "status": "False", "reason": "E2E", "message": "e2e", "lastHeartbeatTime": stamp, "lastTransitionTime": stamp}}}}, true},
	} {
		body, _ := json.Marshal(tc.patch)
		_, err := npd.CoreV1().Nodes().PatchStatus(ctx, tc.node, body)
		switch {
		case tc.allowed && err != nil:
			t.Errorf("NPD's token, %s: refused: %v", tc.name, err)
		case !tc.allowed && (err == nil || !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "certready-npd-node-confinement")):
			t.Errorf("NPD's token, %s: %v, want Forbidden by certready-npd-node-confinement", tc.name, err)
		case !tc.allowed:
			t.Logf("NPD's token, %s: refused: %v", tc.name, err)
		}
	}

	// A node verified long before NPD started: Unknown (PublishPending),
	// then False, both written by NPD.
	byNPD := func(n *corev1.Node) bool {
		c := certCondition(n)
		return c != nil && c.Status == corev1.ConditionFalse && !c.LastTransitionTime.Time.Before(handOver.Truncate(time.Second))
	}
	waitCondition(t, ctx, w, 3*time.Minute, "False written by node-problem-detector", byNPD)
	h := rec.of(w)
	pending := -1
	for i, c := range h {
		if c.Status == corev1.ConditionUnknown && strings.HasPrefix(c.Message, npdcheck.PublishPending) {
			pending = i
		}
	}
	if pending < 0 || pending == len(h)-1 || h[len(h)-1].Status != corev1.ConditionFalse {
		t.Fatalf("%s: no hand-over (Unknown %s, then False) in %s", w, npdcheck.PublishPending, summary(h))
	}
	t.Logf("%s, verified before NPD started: %s", w, summary(h[pending:]))

	// kind cannot add a node: its JoinWorker registers a running worker
	// again, and that worker's NPD, still running, re-applies its last
	// condition (False) to the new Node object until its plugin runs
	// again. A new node starts a new NPD; only the local cluster can
	// show that.
	if _, local := cluster.(provider.Local); !local {
		t.Logf("the new-node half needs a cluster that adds nodes (the local cluster); done after the hand-over on %T", cluster)
		return
	}

	// A new node: True while its CSR waits (no approver), False once the
	// certificate is installed, and untainted.
	scaleApprover(t, ctx, 0)
	t.Cleanup(func() { restoreApprover(t) })
	n, err := cluster.JoinWorker(ctx, "worker-npd")
	if err != nil {
		t.Fatal(err)
	}
	waitCondition(t, ctx, n.Name, 3*time.Minute, "True from node-problem-detector", func(n *corev1.Node) bool {
		c := certCondition(n)
		return c != nil && c.Status == corev1.ConditionTrue
	})
	if !deploy.HasReadinessTaint(node(t, ctx, n.Name)) {
		t.Fatal("the taint came off while node-problem-detector reports True")
	}
	scaleApprover(t, ctx, 2)
	start := time.Now()
	waitCondition(t, ctx, n.Name, 3*time.Minute, "False from node-problem-detector and the taint lifted", readyAndUntainted)
	h = rec.of(n.Name)
	if len(h) < 2 || h[0].Status != corev1.ConditionTrue {
		t.Fatalf("%s: the condition did not start True: %s", n.Name, summary(h))
	}
	for _, c := range h[:len(h)-1] {
		if c.Status == corev1.ConditionFalse {
			t.Fatalf("%s: False before the certificate was installed: %s", n.Name, summary(h))
		}
	}
	if c := h[len(h)-1]; c.Reason != "KubeletServingCertReady" {
		t.Errorf("%s: ready condition %+v, want the shipped default reason KubeletServingCertReady", n.Name, c)
	}
	t.Logf("%s (new): %s; untainted %s after the approver returned", n.Name, summary(h), time.Since(start).Round(time.Second))
}

// handBackToTheAgent removes node-problem-detector and re-applies the
// standalone overlay: the agent's DaemonSet, its RBAC and the policy's
// parameter come back, and every node is ready on the agent's word again.
func handBackToTheAgent(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	for _, args := range [][]string{
		{"-n", "kube-system", "delete", "--ignore-not-found", "daemonset/node-problem-detector", "configmap/node-problem-detector-config",
			"configmap/certready-npd-plugin", "serviceaccount/node-problem-detector"},
		{"delete", "--ignore-not-found", "clusterrolebinding/npd-binding", "clusterrolebinding/certready-npd-plugin", "clusterrole/certready-npd-plugin",
			"validatingadmissionpolicybinding/certready-npd-node-confinement", "validatingadmissionpolicy/certready-npd-node-confinement"},
		{"apply", "-k", standalone},
	} {
		if out, err := cluster.Kubectl(ctx, args...); err != nil {
			t.Errorf("kubectl %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	if err := deploy.WaitRollout(ctx, cluster, t.Logf); err != nil {
		t.Error(err)
		return
	}
	for _, n := range cluster.Nodes() {
		waitCondition(t, ctx, n.Name, 2*time.Minute, "False again from the agent", readyAndUntainted)
	}
}
