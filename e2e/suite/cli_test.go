package suite

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/certready/certready/e2e/localcluster"
	"github.com/certready/certready/e2e/provider"
)

// runCertready runs the certready binary built for this host (the
// operator's tools: preflight, status) and returns its standard output and
// exit code; a run that could not start or exit fails the test.
func runCertready(t *testing.T, ctx context.Context, args ...string) (string, int) {
	t.Helper()
	out, _, code := runCertreadyOutputs(t, ctx, args...)
	return out, code
}

// runCertreadyWithStderr is runCertready with what it wrote on standard
// error after its output: where a refusal says why.
func runCertreadyWithStderr(t *testing.T, ctx context.Context, args ...string) (string, int) {
	t.Helper()
	out, stderr, code := runCertreadyOutputs(t, ctx, args...)
	return out + stderr, code
}

func runCertreadyOutputs(t *testing.T, ctx context.Context, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	bin := os.Getenv("CERTREADY_BIN")
	if bin == "" {
		t.Fatal("CERTREADY_BIN (the certready binary built for this host) is not set; run the suite through make e2e or make e2e-kind")
	}
	var errBuf bytes.Buffer
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Stderr = &errBuf
	out, err := cmd.Output()
	var exit *exec.ExitError
	switch {
	case err == nil:
		return string(out), errBuf.String(), 0
	case errors.As(err, &exit):
		return string(out), errBuf.String(), exit.ExitCode()
	}
	t.Fatalf("certready %s: %v\n%s%s", args[0], err, out, errBuf.String())
	return "", "", -1
}

// The safe rollout's preflight, as an operator runs it with a kubeconfig:
// a node no agent reports on (here a Node object without a kubelet, as a
// Windows node or one with another kubelet directory looks) would stay
// tainted by a new NodeReadinessRule; labelling it out clears the way.
func TestPreflightListsNodesARuleWouldKeepTainted(t *testing.T) {
	ctx := ctxT(t, 3*time.Minute)
	deployed(t)
	kubeconfig := writeKubeconfig(t, cluster.AdminConfig())
	preflight := func() (string, int) { return runCertready(t, ctx, "preflight", "--kubeconfig="+kubeconfig) }
	for _, w := range cluster.Workers() {
		waitCondition(t, ctx, w.Name, 2*time.Minute, "ready", hasReason("KubeletServingCertReady", corev1.ConditionFalse))
	}
	out, code := preflight()
	if code != 0 || !strings.Contains(out, "safe to create now") {
		t.Fatalf("with every worker ready: exit %d\n%s", code, out)
	}
	for _, w := range cluster.Workers() {
		if !regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(w.Name) + `\s+TaintedBriefly\s`).MatchString(out) {
			t.Errorf("worker %s is not listed as tainted briefly:\n%s", w.Name, out)
		}
	}
	legacy := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "legacy-1", Labels: map[string]string{"kubernetes.io/os": "windows"}}}
	if _, err := cluster.Clientset().CoreV1().Nodes().Create(ctx, legacy, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cluster.Clientset().CoreV1().Nodes().Delete(context.Background(), legacy.Name, metav1.DeleteOptions{})
	})
	out, code = preflight()
	if code != 1 || !regexp.MustCompile(`(?m)^legacy-1\s+StaysTainted\s+no KubeletServingCertNotReady condition`).MatchString(out) ||
		!strings.Contains(out, "1 of ") {
		t.Fatalf("with a node no agent reports on: exit %d, want 1 naming legacy-1\n%s", code, out)
	}
	t.Logf("preflight with an unreported node (exit %d):\n%s", code, out)
	if _, err := cluster.Kubectl(ctx, "label", "node", legacy.Name, "certready.io/readiness-rule-opt-out=true"); err != nil {
		t.Fatal(err)
	}
	out, code = preflight()
	if code != 0 || !regexp.MustCompile(`(?m)^legacy-1\s+Excluded\s`).MatchString(out) {
		t.Fatalf("after opting legacy-1 out: exit %d\n%s", code, out)
	}
}

// writeKubeconfig writes cfg as a kubeconfig file, as an operator has one.
func writeKubeconfig(t *testing.T, cfg *rest.Config) string {
	t.Helper()
	caData, certData, keyData := cfg.CAData, cfg.CertData, cfg.KeyData
	read := func(data []byte, file string) []byte {
		if len(data) > 0 || file == "" {
			return data
		}
		b, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	kc := clientcmdapi.NewConfig()
	kc.Clusters["e2e"] = &clientcmdapi.Cluster{Server: cfg.Host, CertificateAuthorityData: read(caData, cfg.CAFile)}
	kc.AuthInfos["admin"] = &clientcmdapi.AuthInfo{ClientCertificateData: read(certData, cfg.CertFile), ClientKeyData: read(keyData, cfg.KeyFile), Token: cfg.BearerToken}
	kc.Contexts["e2e"] = &clientcmdapi.Context{Cluster: "e2e", AuthInfo: "admin"}
	kc.CurrentContext = "e2e"
	path := filepath.Join(t.TempDir(), "kubeconfig")
	if err := clientcmd.WriteToFile(*kc, path); err != nil {
		t.Fatal(err)
	}
	return path
}

// The fleet view (certready status, also kubectl certready) on the real
// cluster: every node ready with its certificate's expiry and CSR, exit 0;
// a node no agent reports on is listed by --problems, exit 1.
func TestStatusShowsEveryNodeAndItsProblems(t *testing.T) {
	ctx := ctxT(t, 3*time.Minute)
	deployed(t)
	kubeconfig := writeKubeconfig(t, cluster.AdminConfig())
	type row struct {
		Node      string     `json:"node"`
		Ready     bool       `json:"ready"`
		CSR       string     `json:"csr"`
		NotAfter  *time.Time `json:"notAfter"`
		Tainted   bool       `json:"tainted"`
		Completed []string   `json:"bootstrapCompletedBy"`
		Problem   string     `json:"problem"`
		NoAgent   string     `json:"noAgent"`
		Client    *time.Time `json:"clientCertNotAfter"`
	}
	status := func(args ...string) ([]row, int, string) {
		out, code := runCertready(t, ctx, append([]string{"status", "--kubeconfig=" + kubeconfig, "-o", "json"}, args...)...)
		var doc struct{ Nodes []row }
		if err := json.Unmarshal([]byte(out), &doc); err != nil {
			t.Fatalf("certready status -o json: %v\n%s", err, out)
		}
		return doc.Nodes, code, out
	}
	var rows []row
	err := localcluster.Poll(ctx, 2*time.Minute, "certready status to report every node ready", func() (bool, error) {
		var code int
		rows, code, _ = status()
		return code == 0 && len(rows) == len(cluster.Nodes()), nil
	})
	if err != nil {
		t.Fatalf("%v: %+v", err, rows)
	}
	for _, r := range rows {
		if !r.Ready || r.Tainted || r.NotAfter == nil || r.NotAfter.Before(time.Now()) {
			t.Errorf("node %s: %+v", r.Node, r)
		}
	}
	_, local := cluster.(provider.Local)
	for _, w := range cluster.Workers() {
		for _, r := range rows {
			if r.Node == w.Name && (r.CSR == "" || len(r.Completed) == 0) {
				t.Errorf("worker %s: no issuing CSR or no bootstrap completion mark: %+v", w.Name, r)
			}
			// kind's kubelets bootstrap their client certificate through a
			// CSR and rotate it (kubelet-client-current.pem); the local
			// cluster's use a static one, which has no such file.
			if r.Node == w.Name && !local && (r.Client == nil || r.Client.Before(time.Now())) {
				t.Errorf("worker %s: kubelet client certificate expiry %v, want one stated and in the future", w.Name, r.Client)
			}
			if r.Node == w.Name && r.Client != nil {
				t.Logf("worker %s: kubelet client certificate valid until %s", w.Name, r.Client.UTC().Format(time.RFC3339))
			}
		}
	}
	// A Windows node runs no agent by design (the agent DaemonSet selects
	// Linux nodes): listed as such, not a problem, exit still 0.
	windows := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "windows-1", Labels: map[string]string{corev1.LabelOSStable: "windows"}}}
	unreported := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "unreported-1", Labels: map[string]string{corev1.LabelOSStable: "linux"}}}
	for _, n := range []*corev1.Node{windows, unreported} {
		t.Cleanup(func() {
			_ = cluster.Clientset().CoreV1().Nodes().Delete(context.Background(), n.Name, metav1.DeleteOptions{})
		})
	}
	if _, err := cluster.Clientset().CoreV1().Nodes().Create(ctx, windows, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	all, code, out := status()
	noAgent := 0
	for _, r := range all {
		if r.Node == windows.Name {
			noAgent++
			if r.Ready || r.Problem != "" || !strings.Contains(r.NoAgent, "nodeSelector or required node affinity excludes the node") {
				t.Errorf("%s: %+v, want it listed as running no agent by design", windows.Name, r)
			}
		}
	}
	if code != 0 || noAgent != 1 {
		t.Fatalf("with %s: exit %d, want 0 and it listed once\n%s", windows.Name, code, out)
	}
	table, _ := runCertready(t, ctx, "status", "--kubeconfig="+kubeconfig)
	if !strings.Contains(table, "NoAgentByDesign") || !strings.Contains(table, "1 more node runs no agent by design") {
		t.Errorf("the table does not name the Windows node's design:\n%s", table)
	}
	t.Logf("certready status with a Windows node:\n%s", table)
	// A Linux node no agent reports on is a problem.
	if _, err := cluster.Clientset().CoreV1().Nodes().Create(ctx, unreported, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	problems, code, out := status("--problems")
	if code != 1 || len(problems) != 1 || problems[0].Node != unreported.Name || !strings.Contains(problems[0].Problem, "no certready agent reports on this node") {
		t.Fatalf("with %s: exit %d, want 1 and only it listed\n%s", unreported.Name, code, out)
	}
	t.Logf("certready status --problems (exit %d): %s", code, out)
}

// As a kubectl plugin, the way an operator runs it: kubectl-certready on
// PATH, kubectl's loading rules (a colon-separated $KUBECONFIG whose first
// file's current context is not this cluster's) and --context, flags
// without a command meaning status; help on stdout; a bad output format
// named with exit 2.
func TestKubectlPluginIsTheFleetView(t *testing.T) {
	ctx := ctxT(t, 2*time.Minute)
	deployed(t)
	bin := os.Getenv("CERTREADY_BIN")
	kubectl := "kubectl"
	if dir := os.Getenv("CERTREADY_K8S_BIN"); dir != "" {
		if _, err := os.Stat(filepath.Join(dir, "kubectl")); err == nil {
			kubectl = filepath.Join(dir, "kubectl")
		}
	}
	plugins := t.TempDir()
	if err := os.Symlink(bin, filepath.Join(plugins, "kubectl-certready")); err != nil {
		t.Fatal(err)
	}
	// First in $KUBECONFIG: a context pointing nowhere, current. The real
	// cluster's context ("e2e") comes from the second file.
	decoy := clientcmdapi.NewConfig()
	decoy.Clusters["nowhere"] = &clientcmdapi.Cluster{Server: "https://127.0.0.1:1"}
	decoy.AuthInfos["nobody"] = &clientcmdapi.AuthInfo{Token: "x"}
	decoy.Contexts["decoy"] = &clientcmdapi.Context{Cluster: "nowhere", AuthInfo: "nobody"}
	decoy.CurrentContext = "decoy"
	decoyPath := filepath.Join(t.TempDir(), "decoy")
	if err := clientcmd.WriteToFile(*decoy, decoyPath); err != nil {
		t.Fatal(err)
	}
	env := append(os.Environ(), "PATH="+plugins+string(os.PathListSeparator)+os.Getenv("PATH"),
		"KUBECONFIG="+decoyPath+string(os.PathListSeparator)+writeKubeconfig(t, cluster.AdminConfig()))
	run := func(args ...string) (stdout, stderr string, code int) {
		var out, errb bytes.Buffer
		cmd := exec.CommandContext(ctx, kubectl, args...)
		cmd.Env, cmd.Stdout, cmd.Stderr = env, &out, &errb
		err := cmd.Run()
		var exit *exec.ExitError
		switch {
		case err == nil:
		case errors.As(err, &exit):
			code = exit.ExitCode()
		default:
			t.Fatalf("kubectl %v: %v", args, err)
		}
		return out.String(), errb.String(), code
	}
	var out, errs string
	var code int
	if err := localcluster.Poll(ctx, time.Minute, "kubectl certready --context e2e -o wide to exit 0", func() (bool, error) {
		out, errs, code = run("certready", "--context", "e2e", "-o", "wide")
		return code == 0, nil
	}); err != nil {
		t.Fatalf("%v: exit %d\n%s%s", err, code, out, errs)
	}
	for _, n := range cluster.Nodes() {
		if !strings.Contains(out, n.Name) {
			t.Errorf("kubectl certready -o wide does not list %s:\n%s", n.Name, out)
		}
	}
	if !strings.Contains(out, "PROBLEM") || !strings.Contains(out, "nodes ready.") {
		t.Errorf("not the wide table:\n%s", out)
	}
	if out, _, code = run("certready", "status", "--context", "e2e", "-o", "name"); code != 0 || !strings.Contains(out, "node/"+cluster.Workers()[0].Name+"\n") {
		t.Errorf("-o name: exit %d\n%s", code, out)
	}
	w := cluster.Workers()[0].Name
	if out, _, code = run("certready", "--context", "e2e", "-o", "jsonpath={.nodes[?(@.node==\""+w+"\")].ready}"); code != 0 || out != "true" {
		t.Errorf("-o jsonpath: exit %d, %q, want true", code, out)
	}
	// The decoy context is current: without --context it is the one used.
	if _, errs, code = run("certready"); code != 2 || !strings.Contains(errs, "127.0.0.1:1") {
		t.Errorf("with the decoy context current: exit %d, want 2 naming its server\n%s", code, errs)
	}
	if out, _, code = run("certready", "--help"); code != 0 || !strings.Contains(out, "Operator commands") {
		t.Errorf("kubectl certready --help: exit %d, not on stdout\n%s", code, out)
	}
	if _, errs, code = run("certready", "--context", "e2e", "-o", "chart"); code != 2 || !strings.Contains(errs, "--output=chart") {
		t.Errorf("-o chart: exit %d, want 2 naming the flag\n%s", code, errs)
	}
}
