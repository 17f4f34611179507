package integration

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/certready/certready/e2e/localcluster"
)

// A leader whose Lease another replica takes (an API server away longer
// than the renew deadline, then a standby first) must stop and exit, so
// that its container restarts and stands again. A lost Lease does not end
// the process's context: anything tied to it (the informers, whose
// shutdown waits for them) would keep the replica neither leading nor
// exiting, and with both replicas so, no approver at all.
func TestApproverExitsWhenItLosesTheLease(t *testing.T) {
	ctx := ctxT(t, 2*time.Minute)
	bin := os.Getenv("CERTREADY_BIN")
	if bin == "" {
		t.Fatal("CERTREADY_BIN is not set: run 'make -C e2e integration'")
	}
	kc, err := api.Kubeconfig()
	if err != nil {
		t.Fatal(err)
	}
	const ns, lease = "leader-lost", "certready-approver"
	if _, err := api.Admin.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	logPath := filepath.Join(t.TempDir(), "approver.log")
	log, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "approver", "--kubeconfig="+kc, "--metrics-addr=", "--health-addr=",
		"--metrics-ca-secret=", "--metrics-tls-secret=",
		"--leader-elect-namespace="+ns, "--leader-elect-identity=replica-a",
		"--leader-elect-lease-duration=4s", "--leader-elect-renew-deadline=3s", "--leader-elect-retry-period=500ms")
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		if t.Failed() {
			out, _ := os.ReadFile(logPath)
			t.Logf("approver log:\n%s", out)
		}
	})
	var held *coordinationv1.Lease
	err = localcluster.Poll(ctx, time.Minute, "the approver to lead", func() (bool, error) {
		l, err := api.Admin.CoordinationV1().Leases(ns).Get(ctx, lease, metav1.GetOptions{})
		held = l
		return err == nil && l.Spec.HolderIdentity != nil && *l.Spec.HolderIdentity != "", nil
	})
	if err != nil {
		t.Fatal(err)
	}
	// Another replica takes the Lease, as a standby does once it expired.
	other := "replica-b"
	now := metav1.NewMicroTime(time.Now())
	held.Spec.HolderIdentity, held.Spec.AcquireTime, held.Spec.RenewTime = &other, &now, &now
	duration := int32(60)
	held.Spec.LeaseDurationSeconds = &duration
	if _, err := api.Admin.CoordinationV1().Leases(ns).Update(ctx, held, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-exited:
		var ee *exec.ExitError
		if err == nil || !errors.As(err, &ee) {
			t.Errorf("the approver ended with %v after losing its Lease: want a non-zero exit", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the approver did not exit within 30 s of losing its Lease: it hangs, neither leading nor standing again")
	}
}
