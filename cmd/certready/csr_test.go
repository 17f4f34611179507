//go:build !nodeonly

package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/spf13/cobra"
	appsv1 "k8s.io/api/apps/v1"
	certv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/klog/v2"

	"github.com/certready/certready/reporter/fleet"
)

// explain configures the policy from the approver's Deployment: its
// container's arguments and literal CERTREADY_ variables, through the
// approver's own flag parsing; the taint fallback's settings (and its CA
// file, in the approver's pod) are left out.
func TestExplainReadsTheApproversFlagsFromItsDeployment(t *testing.T) {
	dep := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: "certready-system", Name: "certready-approver"}}
	dep.Spec.Template.Spec.Containers = []corev1.Container{
		{Name: "sidecar", Args: []string{"serve"}},
		{Name: "approver", Args: []string{"approver", "--metrics-addr=[$(POD_IP)]:9731", "--max-sans=7", "-v=9", "--vmodule=policy=9",
			"--lift-readiness-taint=readiness.k8s.io/KubeletServingCertNotReady=pending:NoSchedule", "--kubelet-ca-file=/in/the/pod/ca.crt"},
			Env: []corev1.EnvVar{
				{Name: "CERTREADY_DENY_CIDRS", Value: "10.96.0.0/12"},
				{Name: "CERTREADY_INVENTORY", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.name"}}},
				{Name: "OTHER", Value: "--max-sans=1"},
			}},
	}
	client := fake.NewClientset(dep)
	o, err := deploymentApproverOptions(context.Background(), client, "certready-system/certready-approver", "")
	if err != nil {
		t.Fatal(err)
	}
	if klog.V(9).Enabled() {
		t.Error("the approver's -v=9 became this process's klog verbosity")
	}
	if o.Controller.Policy.MaxSANs != 7 {
		t.Errorf("--max-sans from the args: %d, want 7", o.Controller.Policy.MaxSANs)
	}
	if p := o.Controller.Policy.DenyCIDRs; len(p) != 1 || p[0] != netip.MustParsePrefix("10.96.0.0/12") {
		t.Errorf("--deny-cidrs from CERTREADY_DENY_CIDRS: %v", p)
	}
	if o.InventorySpec != "node" {
		t.Errorf("inventory %q: a variable from a fieldRef is no literal and must not be read", o.InventorySpec)
	}
	if o.LiftReadinessTaint.Key != "" || o.Prover != nil {
		t.Errorf("the taint fallback was configured: %+v", o.LiftReadinessTaint)
	}

	defaults, err := deploymentApproverOptions(context.Background(), client, "", "")
	if err != nil || defaults.Controller.Policy.MaxSANs != 100 {
		t.Errorf("--approver='': %v, max SANs %d, want the default 100", err, defaults.Controller.Policy.MaxSANs)
	}
	for ref, want := range map[string]string{
		"certready-approver":         "want <namespace>/<name>",
		"certready-system/missing":   `"missing" not found`,
		"certready-system/sidecar-x": "not found",
	} {
		if _, err := deploymentApproverOptions(context.Background(), client, ref, ""); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("--approver=%s: error %v, want one with %q", ref, err, want)
		}
	}
	bad := dep.DeepCopy()
	bad.Name = "bad"
	bad.Spec.Template.Spec.Containers[1].Args = []string{"approver", "--max-sans=many"}
	if _, err := client.AppsV1().Deployments("certready-system").Create(context.Background(), bad, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := deploymentApproverOptions(context.Background(), client, "certready-system/bad", ""); err == nil || !strings.Contains(err.Error(), "max-sans") {
		t.Errorf("a flag the approver would refuse: %v", err)
	}
}

// The approver's Deployment is cluster data, and explain runs on an
// operator's machine: a path it names (the file inventory, a kubeconfig, a
// CA bundle, a ledger file) is never opened there. The file inventory,
// which the policy needs, is refused with what to do instead.
func TestExplainNeverOpensFilesTheDeploymentNames(t *testing.T) {
	dir := t.TempDir()
	const marker = "MARKER-4f1c-only-in-the-local-file"
	secret := filepath.Join(dir, "inventory.yaml")
	if err := os.WriteFile(secret, []byte("worker-1:\n  addresses: [\""+marker+"\"]\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	ledgerDir := filepath.Join(dir, "ledger")
	dep := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: "certready-system", Name: "certready-approver"}}
	dep.Spec.Template.Spec.Containers = []corev1.Container{{Name: "approver", Args: []string{"approver",
		"--inventory=file:" + secret, "--kubeconfig=" + secret, "--kubelet-ca-file=" + secret,
		"--lift-readiness-taint=readiness.k8s.io/KubeletServingCertNotReady=pending:NoSchedule",
		"--ledger=file:" + filepath.Join(ledgerDir, "ledger.jsonl")}}}
	client := fake.NewClientset(dep)

	_, err := deploymentApproverOptions(context.Background(), client, "certready-system/certready-approver", "")
	if err == nil {
		t.Fatal("a Deployment's --inventory=file: was accepted: explain would open the operator's local file of that name")
	}
	for _, want := range []string{"--inventory=file:" + secret, "never opens a local file", "kubectl exec", "--inventory=file:./inventory.yaml"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q lacks %q", err, want)
		}
	}
	if strings.Contains(err.Error(), marker) {
		t.Errorf("the local file was read: its content is in the error %q", err)
	}
	if _, err := os.Stat(ledgerDir); !os.IsNotExist(err) {
		t.Errorf("the Deployment's --ledger made explain create %s (%v)", ledgerDir, err)
	}

	// --inventory on the command line is the operator's own choice.
	o, err := deploymentApproverOptions(context.Background(), client, "certready-system/certready-approver", "node")
	if err != nil || o.InventorySpec != "node" {
		t.Errorf("--inventory=node on the command line: %v, inventory %q", err, o.InventorySpec)
	}
	if o.Prover != nil {
		t.Error("the taint fallback (and its --kubelet-ca-file) was configured")
	}
}

// A hung API server costs explain at most --timeout, whichever request
// hangs: here every one but the CSR's read (discovery takes no context).
func TestExplainEndsWithinItsTimeout(t *testing.T) {
	csr := certv1.CertificateSigningRequest{TypeMeta: metav1.TypeMeta{APIVersion: "certificates.k8s.io/v1", Kind: "CertificateSigningRequest"},
		ObjectMeta: metav1.ObjectMeta{Name: "csr-x", UID: "uid-x"},
		Spec:       certv1.CertificateSigningRequestSpec{SignerName: certv1.KubeletServingSignerName, Username: "system:node:worker-1"}}
	body, err := json.Marshal(csr)
	if err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/apis/certificates.k8s.io/v1/certificatesigningrequests/csr-x" {
			w.Header().Set("Content-Type", "application/json")
			_, _ = w.Write(body)
			return
		}
		select { // hang
		case <-r.Context().Done():
		case <-stop:
		}
	}))
	defer srv.Close()
	defer close(stop)
	t.Setenv("KUBECONFIG", filepath.Join(t.TempDir(), "none"))
	flags := newFleetFlags(&cobra.Command{})
	*flags.config.APIServer = srv.URL

	const timeout = time.Second
	type result struct {
		err  error
		took time.Duration
	}
	done := make(chan result, 1)
	go func() {
		start := time.Now()
		_, _, err := explain(context.Background(), flags, "csr-x", "defaults", "", "", timeout, "")
		done <- result{err, time.Since(start)}
	}()
	select {
	case r := <-done:
		if r.err == nil || !strings.Contains(r.err.Error(), "--timeout=1s") {
			t.Errorf("error %v, want one naming --timeout=1s", r.err)
		}
		if r.took > timeout+3*time.Second {
			t.Errorf("explain took %v against a hung API server, over its --timeout=%v", r.took, timeout)
		}
	case <-time.After(timeout + 10*time.Second):
		t.Fatalf("explain still waits on a hung API server %v after its --timeout=%v", timeout+10*time.Second, timeout)
	}
}

func TestPrintCSRsAndExplanation(t *testing.T) {
	now := time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)
	notAfter := now.Add(365 * 24 * time.Hour)
	rows := []fleet.CSRRow{
		{Name: "csr-a", Node: "w1", Created: now.Add(-5 * time.Minute), Stage: fleet.StagePending, Rule: "IPSANNotInInventory", Message: "IPSANNotInInventory: 192.0.2.99 not recorded for w1 (left pending)"},
		{Name: "csr-b", Node: "w1", Created: now.Add(-3 * time.Hour), Stage: fleet.StageIssued, Rule: "CertReadyValidatedNodeIdentity",
			Certificate: &fleet.IssuedCert{Fingerprint: strings.Repeat("ab", 32), NotBefore: now.Add(-3 * time.Hour), NotAfter: notAfter, Subject: "CN=system:node:w1,O=system:nodes", IPAddresses: []string{"192.0.2.11"}}},
	}
	var table bytes.Buffer
	if err := printCSRs(&table, "", false, rows, now); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(table.String()), "\n")
	if len(lines) != 3 || !strings.Contains(lines[1], "5m") || !strings.Contains(lines[1], "IPSANNotInInventory") ||
		!strings.Contains(lines[2], "issued") || !strings.Contains(lines[2], "2027-12-02T12:00:00Z") {
		t.Errorf("table:\n%s", table.String())
	}
	var text bytes.Buffer
	ex := Explanation{CSR: rows[1], Request: &RequestView{Subject: "CN=system:node:w1,O=system:nodes", IPAddresses: []string{"192.0.2.11"}, Key: "ECDSA P-256",
		Usages: []string{"digital signature", "server auth"}, Groups: []string{"system:nodes"}},
		Decision: DecisionView{Approve: false, Rule: "IPSANNotInInventory", Message: "IPSANNotInInventory: 192.0.2.11 not recorded for w1"}, ApproverConfig: "certready-system/certready-approver"}
	if err := printExplanation(&text, ex, now); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"REFUSE (IPSANNotInInventory)", "ECDSA P-256", "192.0.2.11", strings.Repeat("ab", 32), "decides pending requests only", "certready-system/certready-approver"} {
		if !strings.Contains(text.String(), want) {
			t.Errorf("explanation lacks %q:\n%s", want, text.String())
		}
	}
}

// csr explain finds the approver by its labels, whatever the release's
// namespace and name; -n narrows the search; none or several is an error
// that says how to choose.
func TestFindApproverByItsLabels(t *testing.T) {
	approverDep := func(ns, name string, labels map[string]string, args ...string) *appsv1.Deployment {
		d := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: labels}}
		d.Spec.Template.Spec.Containers = []corev1.Container{{Name: "c", Args: args}}
		return d
	}
	labels := map[string]string{"app.kubernetes.io/name": "certready", "app.kubernetes.io/component": "approver"}
	one := fake.NewClientset(
		approverDep("platform", "acme-certready-approver", labels, "approver", "--max-sans=3"),
		approverDep("platform", "unlabelled", nil, "approver"),
		approverDep("other", "labelled-but-no-approver", labels, "serve"),
	)
	two := fake.NewClientset(
		approverDep("platform", "acme-certready-approver", labels, "approver"),
		approverDep("staging", "certready-approver", labels, "approver"),
	)
	for _, tc := range []struct {
		name            string
		client          *fake.Clientset
		ref, ns         string
		want, wantError string
	}{
		{name: "found in any namespace", client: one, want: "platform/acme-certready-approver"},
		{name: "found in -n", client: one, ns: "platform", want: "platform/acme-certready-approver"},
		{name: "none in -n", client: one, ns: "other", wantError: "no approver Deployment (app.kubernetes.io/name=certready,app.kubernetes.io/component=approver) in namespace other: name it with --approver"},
		{name: "two", client: two, wantError: "2 approver Deployments in any namespace (platform/acme-certready-approver, staging/certready-approver): choose one"},
		{name: "two, -n chooses", client: two, ns: "staging", want: "staging/certready-approver"},
		{name: "defaults", client: two, ref: "defaults", want: ""},
		{name: "named", client: two, ref: "x/y", want: "x/y"},
		{name: "named against -n", client: two, ref: "x/y", ns: "staging", wantError: "--approver=x/y and -n staging name two namespaces"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := findApprover(context.Background(), tc.client, tc.ref, tc.ns)
			if tc.wantError != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantError) {
					t.Errorf("error %v, want %q", err, tc.wantError)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Errorf("findApprover = %q, %v; want %q", got, err, tc.want)
			}
		})
	}
}

// The commands that read only Nodes and CSRs refuse -n rather than ignore
// it: the output would look namespaced and is not. The refusal comes
// before any request (the kubeconfig points nowhere).
func TestClusterScopedCommandsRefuseNamespace(t *testing.T) {
	for _, args := range [][]string{
		{"status", "-n", "team-a"},
		{"status", "--namespace=team-a"},
		{"csr", "-n", "team-a"},
		{"preflight", "-n", "team-a"},
		{"verify", "--baseline=/nonexistent", "-n", "team-a"},
	} {
		t.Run(strings.Join(args, " "), func(t *testing.T) {
			var code int
			stderr := captureStderr(t, func() {
				code = execute(context.Background(), append(args, "--kubeconfig=/nonexistent"))
			})
			if code != 2 || !strings.Contains(stderr, "-n/--namespace=team-a") || !strings.Contains(stderr, "which have no namespace") {
				t.Errorf("exit %d, stderr %q; want 2 and -n refused", code, stderr)
			}
		})
	}
}

// captureStderr runs f with os.Stderr read into the returned string.
func captureStderr(t *testing.T, f func()) string {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	saved := os.Stderr
	os.Stderr = w
	done := make(chan string)
	go func() {
		b, _ := io.ReadAll(r)
		done <- string(b)
	}()
	f()
	os.Stderr = saved
	w.Close()
	return <-done
}
