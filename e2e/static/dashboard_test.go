package static

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	certv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes/fake"
	"sigs.k8s.io/kustomize/api/resmap"
	"sigs.k8s.io/yaml"

	"github.com/certready/certready/internal/httpserve"
	"github.com/certready/certready/internal/names"
	"github.com/certready/certready/internal/nodeapi/nodeapitest"
	"github.com/certready/certready/internal/testpki"
	"github.com/certready/certready/reporter/agent"
	"github.com/certready/certready/reporter/approver"
)

// dashboard is what the test reads of a Grafana dashboard.
type dashboard struct {
	UID        string `json:"uid"`
	Title      string `json:"title"`
	Templating struct {
		List []struct {
			Name     string `json:"name"`
			AllValue string `json:"allValue"`
		} `json:"list"`
	} `json:"templating"`
	Panels []struct {
		Title   string `json:"title"`
		Type    string `json:"type"`
		Targets []struct {
			Expr string `json:"expr"`
		} `json:"targets"`
	} `json:"panels"`
}

// selectorOf finds each certready metric's label matchers in a query.
var selectorOf = regexp.MustCompile(`\b(certready_[a-z0-9_]+)(\{[^}]*\})?`)

// metricName finds certready's metrics in a query (every one is prefixed).
var metricName = regexp.MustCompile(`\bcertready_[a-z0-9_]+\b`)

// grafanaMacros are replaced as Grafana does before a query is sent.
var grafanaMacros = strings.NewReplacer("$__rate_interval", "5m", "$__interval", "1m", "$__range", "6h")

// TestGrafanaDashboard: the monitoring component ships the dashboard in a
// ConfigMap Grafana's sidecar picks up, every panel's PromQL parses with
// Prometheus' own parser (promtool's), and names only metrics that a
// running agent and approver serve on their /metrics.
func TestGrafanaDashboard(t *testing.T) {
	var cm *corev1.ConfigMap
	for _, obj := range decodeAll(t, buildMonitoring(t)) {
		if c, ok := obj.(*corev1.ConfigMap); ok && c.Name == "certready-grafana-dashboard" {
			cm = c
		}
	}
	if cm == nil {
		t.Fatal("the monitoring component has no ConfigMap certready-grafana-dashboard")
	}
	if cm.Labels["grafana_dashboard"] != "1" {
		t.Errorf("labels %v: Grafana's sidecar loads ConfigMaps labelled grafana_dashboard=1", cm.Labels)
	}
	if cm.Namespace != "certready-system" {
		t.Errorf("namespace %q: want the component's namespace", cm.Namespace)
	}
	raw, ok := cm.Data["certready.json"]
	if !ok {
		t.Fatalf("data keys %v: want certready.json", slices.Sorted(maps.Keys(cm.Data)))
	}
	dec := json.NewDecoder(strings.NewReader(raw))
	var d dashboard
	if err := dec.Decode(&d); err != nil {
		t.Fatalf("certready.json: %v", err)
	}
	if d.UID == "" || d.Title == "" || len(d.Panels) == 0 {
		t.Fatalf("dashboard uid %q title %q with %d panels", d.UID, d.Title, len(d.Panels))
	}

	// Prometheus' own parser, through promtool: each query becomes a
	// recording rule, and promtool check rules parses every expression.
	used := map[string][]string{} // metric name -> panels
	var rules []map[string]string
	for i, p := range d.Panels {
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		for j, target := range p.Targets {
			expr := grafanaMacros.Replace(target.Expr)
			rules = append(rules, map[string]string{"record": fmt.Sprintf("dashboard:panel%d:query%d", i, j), "expr": expr})
			for _, name := range metricName.FindAllString(expr, -1) {
				used[name] = append(used[name], p.Title)
			}
		}
	}
	promtoolCheckRules(t, rules)

	// One Prometheus may hold several clusters: every query is narrowed
	// by the cluster variable, and the agents' (per node) by the node
	// variable too; "All" matches series without the label.
	vars := map[string]string{}
	for _, v := range d.Templating.List {
		vars[v.Name] = v.AllValue
	}
	for _, name := range []string{"cluster", "node"} {
		if all, ok := vars[name]; !ok || all != ".*" {
			t.Errorf("no %s variable whose All matches every series (allValue .*): %v", name, vars)
		}
	}
	table := false
	for _, p := range d.Panels {
		table = table || (p.Type == "table" && strings.Contains(p.Targets[0].Expr, "by (cluster, node)"))
		for _, target := range p.Targets {
			for _, m := range selectorOf.FindAllStringSubmatch(target.Expr, -1) {
				if !strings.Contains(m[2], `cluster=~"$cluster"`) {
					t.Errorf("panel %q: %s is not narrowed to $cluster: %s", p.Title, m[1], target.Expr)
				}
				if strings.HasPrefix(m[1], "certready_approver_") == strings.Contains(m[2], `node=~"$node"`) {
					t.Errorf("panel %q: %s and the node variable (agents' metrics only): %s", p.Title, m[1], target.Expr)
				}
			}
		}
	}
	if !table {
		t.Error("no per-node table panel (by cluster and node)")
	}
	served := liveMetricNames(t)
	for name, panels := range used {
		family := name
		for _, suffix := range []string{"_bucket", "_sum", "_count"} {
			if base, ok := strings.CutSuffix(name, suffix); ok && served[base] {
				family = base
			}
		}
		if !served[family] {
			t.Errorf("panels %q query %s, which neither the agent nor the approver serves", panels, name)
		}
	}
	if !t.Failed() {
		t.Logf("%d panels query %d metrics, all served", len(d.Panels), len(used))
	}
}

// promtoolCheckRules writes rules as one rule group and runs promtool
// check rules on it: Prometheus' parser reads every expression.
func promtoolCheckRules(t *testing.T, rules []map[string]string) {
	t.Helper()
	if _, err := exec.LookPath("promtool"); err != nil {
		t.Fatal("promtool not found: install the Debian package prometheus (.ci/run does)")
	}
	data, err := yaml.Marshal(map[string]any{"groups": []any{map[string]any{"name": "dashboard", "rules": rules}}})
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "dashboard-queries.yaml")
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("promtool", "check", "rules", path).CombinedOutput(); err != nil {
		t.Errorf("promtool check rules on the dashboard's queries: %v\n%s", err, out)
	}
}

func buildMonitoring(t *testing.T) resmap.ResMap {
	t.Helper()
	// kustomize takes only relative paths: a throw-away overlay inside
	// manifests/, removed afterwards.
	dir, err := os.MkdirTemp(filepath.Join(root, "overlays"), ".monitoring-test-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	k := "resources:\n- ../../base\ncomponents:\n- ../../components/monitoring\n"
	if err := os.WriteFile(filepath.Join(dir, "kustomization.yaml"), []byte(k), 0o644); err != nil {
		t.Fatal(err)
	}
	return build(t, filepath.Base(filepath.Dir(dir))+"/"+filepath.Base(dir))
}

// liveMetricNames runs an agent (its node's certificate not installed yet)
// and an approver (approving one real CSR) on a fake API, each with its
// registry served over HTTP as the binaries serve it, and returns the
// metric families their /metrics pages hold once each has acted.
func liveMetricNames(t *testing.T) map[string]bool {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	const node = "w1"
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node, UID: "uid-w1"},
		Status: corev1.NodeStatus{Addresses: []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "127.0.0.1"}}}}
	csrPEM, _, err := testpki.NewCSR(testpki.Request{Node: node, IPs: []net.IP{net.ParseIP("127.0.0.1")}})
	if err != nil {
		t.Fatal(err)
	}
	csr := &certv1.CertificateSigningRequest{
		ObjectMeta: metav1.ObjectMeta{Name: "csr-w1", CreationTimestamp: metav1.Now()},
		Spec: certv1.CertificateSigningRequestSpec{Request: csrPEM, SignerName: names.SignerName, Username: names.NodeUser(node),
			Groups: []string{names.NodesGroup, "system:authenticated"}, Usages: []certv1.KeyUsage{certv1.UsageDigitalSignature, certv1.UsageServerAuth}},
	}
	cs := fake.NewClientset(n, csr)

	ca, err := testpki.NewCA("kubelet-ca")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	caFile := filepath.Join(dir, "ca.crt")
	if err := os.WriteFile(caFile, ca.PEM(), 0o644); err != nil {
		t.Fatal(err)
	}
	agentReg, approverReg := prometheus.NewRegistry(), prometheus.NewRegistry()
	a, err := agent.New(agent.Config{NodeName: node, PKIDir: filepath.Join(dir, "pki"), CAFile: caFile, Settle: time.Millisecond}, nodeapitest.FromClientset(cs), agentReg, httpserve.NewReadiness("starting"))
	if err != nil {
		t.Fatal(err)
	}
	errs := make(chan error, 2)
	go func() { errs <- a.Run(ctx) }()
	go func() {
		errs <- approver.Run(ctx, cs, approverReg, httpserve.NewReadiness("starting"), approver.Options{InventorySpec: "node", EventClient: cs})
	}()

	scrape := func(reg *prometheus.Registry) map[string]bool {
		srv := httptest.NewServer(promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
		defer srv.Close()
		resp, err := http.Get(srv.URL)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		text := expfmt.NewTextParser(model.UTF8Validation)
		families, err := text.TextToMetricFamilies(resp.Body)
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]bool{}
		for name := range families {
			out[name] = true
		}
		return out
	}
	// Both have acted once the agent published a transition and the
	// approver decided the CSR.
	var served map[string]bool
	err = wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		select {
		case err := <-errs:
			return false, fmt.Errorf("agent or approver stopped: %w", err)
		default:
		}
		served = scrape(agentReg)
		for k := range scrape(approverReg) {
			served[k] = true
		}
		return served["certready_condition_transitions_total"] && served["certready_approver_decisions_total"], nil
	})
	if err != nil {
		t.Fatalf("%v: the agent and approver serve only %v", err, slices.Sorted(maps.Keys(served)))
	}
	return served
}
