package integration

import (
	"bytes"
	"context"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	certv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/certready/certready/e2e/localcluster"
	"github.com/certready/certready/internal/csrstate"
	"github.com/certready/certready/internal/names"
	"github.com/certready/certready/reporter/approver/taint"
)

// startApprover runs the certready binary's approver against the API
// server as system:masters, without leader election, until the test ends.
func startApprover(t *testing.T) {
	t.Helper()
	kc, err := api.Kubeconfig()
	if err != nil {
		t.Fatal(err)
	}
	runApprover(t, "--kubeconfig="+kc, "--metrics-addr=", "--health-addr=")
}

// runApprover runs the certready binary's approver with args, without
// leader election, until the test ends; its log is shown when the test
// fails.
func runApprover(t *testing.T, args ...string) {
	t.Helper()
	bin := os.Getenv("CERTREADY_BIN")
	if bin == "" {
		t.Fatal("CERTREADY_BIN is not set: run 'make -C e2e integration'")
	}
	log, err := os.Create(filepath.Join(t.TempDir(), "approver.log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, append([]string{"approver", "--leader-elect=false"}, args...)...)
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		if t.Failed() {
			out, _ := os.ReadFile(log.Name())
			t.Logf("approver log:\n%s", out)
		}
	})
}

// The approver's decision is one write through the approval subresource,
// which the API server lets carry the node label too (it resets spec and
// status but the conditions, not metadata; the fake clientset has no
// subresources); and it carries the
// resourceVersion it was computed from, so a write from a stale read is
// refused, never applied twice.
func TestApprovalIsOneWriteThroughTheApprovalSubresource(t *testing.T) {
	ctx := ctxT(t, 2*time.Minute)
	createNode(t, ctx, "appr-w1", corev1.NodeAddress{Type: corev1.NodeInternalIP, Address: "192.0.2.10"})
	_, w1 := nodeIdentity(t, "appr-w1")
	csr, _, err := localcluster.KubeletServingCSR(metav1.ObjectMeta{Name: "appr-w1-serving"}, "appr-w1", "192.0.2.10")
	if err != nil {
		t.Fatal(err)
	}
	created, err := w1.CertificatesV1().CertificateSigningRequests().Create(ctx, csr, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = api.Admin.CertificatesV1().CertificateSigningRequests().Delete(context.Background(), csr.Name, metav1.DeleteOptions{})
	})
	before, err := csrWrites(ctx)
	if err != nil {
		t.Fatal(err)
	}
	startApprover(t)
	var got *certv1.CertificateSigningRequest
	if err := localcluster.Poll(ctx, time.Minute, "the approver to approve "+csr.Name, func() (bool, error) {
		got, err = api.Admin.CertificatesV1().CertificateSigningRequests().Get(ctx, csr.Name, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		approved, _, _ := csrstate.Conditions(got)
		return approved != nil, nil
	}); err != nil {
		t.Fatal(err)
	}
	if a, _, _ := csrstate.Conditions(got); a.Reason != "CertReadyValidatedNodeIdentity" {
		t.Errorf("approved with reason %q, want CertReadyValidatedNodeIdentity", a.Reason)
	}
	if got.Labels[names.NodeLabel] != "appr-w1" {
		t.Errorf("label %s = %q, want appr-w1", names.NodeLabel, got.Labels[names.NodeLabel])
	}
	// One write: the API server counted one PUT of /approval on CSRs
	// since the approver started, and no other write to them.
	after, err := csrWrites(ctx)
	if err != nil {
		t.Fatal(err)
	}
	writes := map[string]float64{}
	for k, v := range after {
		if d := v - before[k]; d > 0 {
			writes[k] = d
		}
	}
	if want := map[string]float64{"PUT approval": 1}; !maps.Equal(writes, want) {
		t.Errorf("writes to CSRs while the approver ran: %v, want %v", writes, want)
	}
	// A decision computed from the CSR as it was before is refused.
	stale := created.DeepCopy()
	stale.Status.Conditions = append(stale.Status.Conditions, certv1.CertificateSigningRequestCondition{
		Type: certv1.CertificateDenied, Status: corev1.ConditionTrue, Reason: "Stale", LastUpdateTime: metav1.Now()})
	if _, err := api.Admin.CertificatesV1().CertificateSigningRequests().UpdateApproval(ctx, stale.Name, stale, metav1.UpdateOptions{}); !apierrors.IsConflict(err) {
		t.Errorf("an approval write from a stale read: %v, want a conflict", err)
	}
}

// The taint fallback's patch carries the Node's resourceVersion: when
// another writer changed the Node after the read it was computed from, the
// API server refuses it (the fake clientset would apply it and drop the
// other writer's taint); computed again from a fresh read it lifts only
// the readiness taint.
func TestTaintPatchIsRefusedAfterAConcurrentChange(t *testing.T) {
	ctx := ctxT(t, time.Minute)
	startup := corev1.Taint{Key: "readiness.k8s.io/KubeletServingCertNotReady", Value: "pending", Effect: corev1.TaintEffectNoSchedule}
	cfg := taint.Config{Taint: startup, ConditionType: "KubeletServingCertNotReady", MaxConditionAge: time.Minute}
	n := createNode(t, ctx, "patch-w1")
	n.Spec.Taints = []corev1.Taint{startup}
	n, err := api.Admin.CoreV1().Nodes().Update(ctx, n, metav1.UpdateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	n.Status.Conditions = []corev1.NodeCondition{{Type: cfg.ConditionType, Status: corev1.ConditionFalse, Reason: "KubeletServingCertReady",
		LastHeartbeatTime: metav1.Now(), LastTransitionTime: metav1.Now()}}
	read, err := api.Admin.CoreV1().Nodes().UpdateStatus(ctx, n, metav1.UpdateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	patch, ok, err := taint.Patch(read, cfg, time.Now(), nil)
	if err != nil || !ok {
		t.Fatalf("Patch on a proven node: ok=%v err=%v, want a patch lifting the taint", ok, err)
	}
	// Another writer, after the read.
	other := corev1.Taint{Key: "example.com/maintenance", Value: "true", Effect: corev1.TaintEffectNoSchedule}
	changed := read.DeepCopy()
	changed.Spec.Taints = append(changed.Spec.Taints, other)
	if _, err := api.Admin.CoreV1().Nodes().Update(ctx, changed, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := api.Admin.CoreV1().Nodes().Patch(ctx, "patch-w1", types.MergePatchType, patch, metav1.PatchOptions{}); !apierrors.IsConflict(err) {
		t.Fatalf("the patch computed before another writer's change: %v, want a conflict", err)
	}
	fresh, err := api.Admin.CoreV1().Nodes().Get(ctx, "patch-w1", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if patch, ok, err = taint.Patch(fresh, cfg, time.Now(), nil); err != nil || !ok {
		t.Fatalf("Patch on the fresh node: ok=%v err=%v", ok, err)
	}
	after, err := api.Admin.CoreV1().Nodes().Patch(ctx, "patch-w1", types.MergePatchType, patch, metav1.PatchOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(after.Spec.Taints) != 1 || after.Spec.Taints[0].Key != other.Key {
		t.Errorf("taints after the lift: %v, want only the other writer's %s", after.Spec.Taints, other.Key)
	}
	if after.Annotations[taint.CompletedAnnotation] == "" {
		t.Errorf("no %s annotation after the lift", taint.CompletedAnnotation)
	}
}

// csrWrites counts the API server's writes to CSRs (apiserver_request_total
// of PUT, PATCH and DELETE on certificatesigningrequests), by "verb
// subresource".
func csrWrites(ctx context.Context) (map[string]float64, error) {
	raw, err := api.Admin.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		return nil, err
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(bytes.NewReader(raw))
	if err != nil {
		return nil, err
	}
	out := map[string]float64{}
	for _, m := range families["apiserver_request_total"].GetMetric() {
		l := map[string]string{}
		for _, p := range m.GetLabel() {
			l[p.GetName()] = p.GetValue()
		}
		if l["resource"] != "certificatesigningrequests" || (l["verb"] != "PUT" && l["verb"] != "PATCH" && l["verb"] != "DELETE") {
			continue
		}
		out[strings.TrimSpace(l["verb"]+" "+l["subresource"])] += m.GetCounter().GetValue()
	}
	return out, nil
}
