package suite

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	certv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/certready/certready/e2e/deploy"
	"github.com/certready/certready/e2e/localcluster"
)

// Leader failover: kill the leading approver's process during a storm of
// CSRs; the other replica takes the Lease and approves the next CSR. The
// ledger of both processes, checked by certready ledger verify, is whole
// and names the interval no replica led: from the killed leader's last
// record (it recorded no loss) to the new leader's leader-acquired.
func TestStandbyApproverTakesOverWhenTheLeaderDies(t *testing.T) {
	ctx := ctxT(t, 4*time.Minute)
	deployed(t)
	w := cluster.Workers()[0]
	var leaderLog *followedLog
	// Wait for a leader that is alive: after the apiserver restart of the
	// previous scenario the Lease may still name a process that lost it and
	// exited (its pod's restarted container has another identity). Only the
	// holder itself renews the Lease, so a renewal seen under an unchanged
	// holder proves that process runs; then its pod's processes are killed.
	var leader, leaderPod string
	var start time.Time
	var seen *metav1.MicroTime
	err := localcluster.Poll(ctx, 2*time.Minute, "a leader seen renewing its Lease, then killed", func() (bool, error) {
		lease, err := cluster.Clientset().CoordinationV1().Leases(deploy.Namespace).Get(ctx, "certready-approver", metav1.GetOptions{})
		if err != nil || lease.Spec.HolderIdentity == nil || *lease.Spec.HolderIdentity == "" || lease.Spec.RenewTime == nil {
			return false, nil
		}
		if *lease.Spec.HolderIdentity != leader || seen == nil {
			leader, seen = *lease.Spec.HolderIdentity, lease.Spec.RenewTime
			return false, nil
		}
		if !lease.Spec.RenewTime.After(seen.Time) {
			return false, nil
		}
		leaderPod, _, _ = strings.Cut(leader, "_") // identities are <pod>_<per-process suffix>
		// Its ledger to the last line it writes, then a storm of CSRs
		// it is deciding when it dies.
		leaderLog = followLog(t, ctx, leaderPod)
		for i := 0; i < 30; i++ {
			name, _ := requestServingCert(t, ctx, w.Name, w.IP)
			deleteCSRAtCleanup(t, name)
		}
		start = time.Now()
		killed, err := cluster.KillPod(ctx, leaderPod)
		return err == nil && killed > 0, nil
	})
	if err != nil {
		t.Fatalf("%v\n%s", err, podsAndEvents(ctx))
	}
	var holder string
	err = localcluster.Poll(ctx, 2*time.Minute, "another replica to take the Lease", func() (bool, error) {
		l, err := cluster.Clientset().CoordinationV1().Leases(deploy.Namespace).Get(ctx, "certready-approver", metav1.GetOptions{})
		if err != nil || l.Spec.HolderIdentity == nil {
			return false, nil
		}
		holder = *l.Spec.HolderIdentity
		return holder != leader, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	newPod, _, _ := strings.Cut(holder, "_")
	who := "the standby replica"
	if newPod == leaderPod {
		who = "the killed pod's restarted container"
	}
	t.Logf("handover: %s -> %s (%s) in %s (lease duration 15s)", leader, holder, who, time.Since(start).Round(time.Millisecond))
	name, _ := requestServingCert(t, ctx, w.Name, w.IP)
	c := waitIssued(t, ctx, name, time.Minute)
	if a := csrCondition(c, certv1.CertificateApproved); a.Reason != "CertReadyValidatedNodeIdentity" {
		t.Errorf("approval %+v", a)
	}
	t.Logf("the new leader approved %s %s after the kill", name, time.Since(start).Round(time.Millisecond))
	_ = cluster.Clientset().CertificatesV1().CertificateSigningRequests().Delete(ctx, name, metav1.DeleteOptions{})

	// The ledger: the killed leader's stream (ended by its death) and the
	// new leader's container's log, as an auditor is given them.
	killedLedger := leaderLog.wait(t, ctx)
	newLedger, err := cluster.Clientset().CoreV1().Pods(deploy.Namespace).GetLogs(newPod, &corev1.PodLogOptions{}).DoRaw(ctx)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	files := []string{filepath.Join(dir, "killed.log"), filepath.Join(dir, "new.log")}
	for i, data := range [][]byte{killedLedger, newLedger} {
		if err := os.WriteFile(files[i], data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	out, code := runCertready(t, ctx, append([]string{"ledger", "verify", "-o", "json"}, files...)...)
	var report struct {
		Records  int
		Findings []map[string]any
		NoLeader []struct {
			From, To       time.Time
			Before, After  string
			LostUnrecorded bool
		}
	}
	if err := json.Unmarshal([]byte(out), &report); err != nil {
		t.Fatalf("certready ledger verify -o json (exit %d): %v\n%s", code, err, out)
	}
	if code != 0 || len(report.Findings) != 0 {
		t.Errorf("ledger verify: exit %d, findings %v; want both chains whole", code, report.Findings)
	}
	found := false
	for _, iv := range report.NoLeader {
		if iv.Before == leader && iv.After == holder && iv.LostUnrecorded && iv.To.After(iv.From) {
			found = true
			t.Logf("ledger verify: no leader from %s (%s's last record) to %s (%s acquired): %s", iv.From.Format(time.RFC3339Nano), iv.Before, iv.To.Format(time.RFC3339Nano), iv.After, iv.To.Sub(iv.From))
		}
	}
	if !found {
		t.Errorf("ledger verify names no interval from %s to %s: %+v (%d records)", leader, holder, report.NoLeader, report.Records)
	}
}

// followedLog is a container's log read as it is written, until the
// container ends.
type followedLog struct {
	done chan struct{}
	data []byte
	err  error
}

// followLog follows pod's log from now to its container's end.
func followLog(t *testing.T, ctx context.Context, pod string) *followedLog {
	t.Helper()
	stream, err := cluster.Clientset().CoreV1().Pods(deploy.Namespace).GetLogs(pod, &corev1.PodLogOptions{Follow: true}).Stream(ctx)
	if err != nil {
		t.Fatalf("following %s's log: %v", pod, err)
	}
	f := &followedLog{done: make(chan struct{})}
	go func() {
		defer close(f.done)
		defer stream.Close()
		f.data, f.err = io.ReadAll(stream)
	}()
	return f
}

func (f *followedLog) wait(t *testing.T, ctx context.Context) []byte {
	t.Helper()
	select {
	case <-f.done:
	case <-ctx.Done():
		t.Fatal("the killed leader's log stream did not end")
	}
	if f.err != nil && len(f.data) == 0 {
		t.Fatalf("the killed leader's log: %v", f.err)
	}
	return f.data
}

// Approver placement with the real scheduler, in a trusted pool of two
// workers. The taint fallback keeps the soft (PreferNoSchedule) taint on a
// node whose certificate is not proven: here w, whose agent is gone and
// whose condition went stale. With only unproven nodes to run on, the
// approver still runs there and approves (a new pool must not deadlock);
// as soon as a proven node can take it, it never lands on the unproven one.
func TestApproverPlacementPrefersProvenNodes(t *testing.T) {
	ctx := ctxT(t, 8*time.Minute)
	deployed(t)
	workers := cluster.Workers()
	if len(workers) < 2 {
		t.Fatalf("%d workers, need 2", len(workers))
	}
	w, x := workers[0], workers[1]
	const soft = "readiness.k8s.io/KubeletServingCertUnproven"
	const hold = "e2e.certready.io/hold"
	kubectl := func(args ...string) {
		t.Helper()
		if out, err := cluster.Kubectl(ctx, args...); err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
	}
	// Agents heartbeat every 5 s and the approver counts 15 s as stale, so
	// that only w, whose agent leaves, goes stale within the test.
	kubectl("-n", deploy.Namespace, "patch", "daemonset", "certready-agent", "--type=json", "-p", fmt.Sprintf(
		`[{"op":"add","path":"/spec/template/spec/containers/0/args/-","value":"--heartbeat=5s"},
		  {"op":"add","path":"/spec/template/spec/affinity","value":{"nodeAffinity":{"requiredDuringSchedulingIgnoredDuringExecution":{"nodeSelectorTerms":[{"matchExpressions":[{"key":"kubernetes.io/hostname","operator":"NotIn","values":[%q]}]}]}}}}]`, w.Name))
	kubectl("-n", deploy.Namespace, "patch", "deployment", "certready-approver", "--type=json", "-p",
		`[{"op":"add","path":"/spec/template/spec/containers/0/args/-","value":"--condition-max-age=15s"}]`)
	// The approver runs only on the control plane or the trusted pool: the
	// workers join the pool, as an operator labels the nodes it trusts.
	const pool = "node-restriction.kubernetes.io/certready-approver-pool"
	kubectl("label", "node", w.Name, x.Name, pool+"=true")
	var held []string
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		for _, n := range held {
			_, _ = cluster.Kubectl(ctx, "taint", "node", n, hold+"-")
		}
		_, _ = cluster.Kubectl(ctx, "label", "node", w.Name, x.Name, pool+"-")
		_, _ = cluster.Kubectl(ctx, "-n", deploy.Namespace, "patch", "daemonset", "certready-agent", "--type=json", "-p", `[{"op":"remove","path":"/spec/template/spec/affinity"}]`)
		if _, err := cluster.Kubectl(ctx, "apply", "-k", standalone); err != nil {
			t.Error(err)
		}
		if err := deploy.WaitRollout(ctx, cluster, t.Logf); err != nil {
			t.Error(err)
		}
	})
	hasSoft := func(name string) bool {
		for _, tt := range node(t, ctx, name).Spec.Taints {
			if tt.Key == soft && tt.Effect == corev1.TaintEffectPreferNoSchedule {
				return true
			}
		}
		return false
	}
	if err := localcluster.Poll(ctx, 3*time.Minute, "the soft taint on "+w.Name+" (agent gone, condition stale) and not on "+x.Name, func() (bool, error) {
		return hasSoft(w.Name) && !hasSoft(x.Name), nil
	}); err != nil {
		t.Fatalf("%v\n%s", err, podsAndEvents(ctx))
	}
	approverNodes := func() []string {
		pods, err := cluster.Clientset().CoreV1().Pods(deploy.Namespace).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/component=approver"})
		if err != nil {
			t.Fatal(err)
		}
		var nodes []string
		for _, p := range pods.Items {
			nodes = append(nodes, p.Spec.NodeName)
		}
		return nodes
	}
	// restart rolls the approver and waits until every replica is new,
	// scheduled and ready; it returns their nodes.
	restart := func(what string) []string {
		t.Helper()
		before, err := cluster.Clientset().AppsV1().Deployments(deploy.Namespace).Get(ctx, "certready-approver", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		kubectl("-n", deploy.Namespace, "rollout", "restart", "deployment/certready-approver")
		err = localcluster.Poll(ctx, 3*time.Minute, what, func() (bool, error) {
			d, err := cluster.Clientset().AppsV1().Deployments(deploy.Namespace).Get(ctx, "certready-approver", metav1.GetOptions{})
			if err != nil || d.Generation == before.Generation {
				return false, nil
			}
			return deploy.DeploymentRolledOut(d) && d.Status.Replicas == 2 && len(approverNodes()) == 2, nil
		})
		if err != nil {
			t.Fatalf("%v\n%s", err, podsAndEvents(ctx))
		}
		return approverNodes()
	}
	// Only unproven nodes: every other node is held (a NoSchedule taint the
	// approver does not tolerate).
	for _, n := range cluster.Nodes() {
		if n.Name != w.Name {
			kubectl("taint", "node", n.Name, hold+"=placement:NoSchedule")
			held = append(held, n.Name)
		}
	}
	nodes := restart("the approver running with only the unproven " + w.Name + " to run on")
	for _, n := range nodes {
		if n != w.Name {
			t.Fatalf("approver on %v, want %s, the only node it may use", nodes, w.Name)
		}
	}
	name, _ := requestServingCert(t, ctx, x.Name, x.IP)
	waitIssued(t, ctx, name, time.Minute)
	t.Logf("only %s (unproven) available: approver ran there and approved %s", w.Name, name)
	_ = cluster.Clientset().CertificatesV1().CertificateSigningRequests().Delete(ctx, name, metav1.DeleteOptions{})

	// A proven node can take it: the approver never lands on w again.
	kubectl("taint", "node", x.Name, hold+"-")
	for i := 0; i < 2; i++ {
		nodes = restart(fmt.Sprintf("the approver rolled (%d) with %s proven and %s unproven", i+1, x.Name, w.Name))
		for _, n := range nodes {
			if n == w.Name {
				t.Fatalf("roll %d: approver on %v: it landed on the unproven %s while %s could take it", i+1, nodes, w.Name, x.Name)
			}
		}
		t.Logf("roll %d: approver on %v (not on the unproven %s)", i+1, nodes, w.Name)
	}
}
