package suite

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"

	"github.com/certready/certready/e2e/localcluster"
)

// The shipped alert rules, loaded by a real Prometheus server (the Debian
// package's, installed beside promtool) that scrapes the agents' real
// /metrics over the verified TLS and with the token a Prometheus bound to
// certready-metrics-reader has: every rule loads and evaluates cleanly,
// CertReadyKubeletServingCertNotReady is silent on a healthy cluster, and
// a node made not ready turns it pending for that node alone. The node IPs
// live in the cluster's network namespace: a loopback relay per node
// carries the bytes (TLS is verified by the relay, as Prometheus would,
// for the ServiceMonitor's serverName) and adds the node and component
// labels the ServiceMonitor's relabelling adds.
func TestShippedAlertsOnARealPrometheus(t *testing.T) {
	bin, err := exec.LookPath("prometheus")
	if err != nil {
		t.Fatal("prometheus not found: install the Debian package prometheus (hack/prereqs.sh test does)")
	}
	ctx := ctxT(t, 8*time.Minute)
	deployed(t)
	token := saToken(t, ctx, "e2e-real-prometheus")
	bindMetricsReader(t, ctx, "e2e-real-prometheus")
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(metricsCA(t, ctx)) {
		t.Fatal("ca.crt holds no certificate")
	}
	transport := &http.Transport{DialContext: cluster.DialContext,
		TLSClientConfig: &tls.Config{RootCAs: roots, ServerName: "certready-metrics", MinVersion: tls.VersionTLS12}}

	dir := t.TempDir()
	type staticConfig struct {
		Targets []string          `json:"targets"`
		Labels  map[string]string `json:"labels"`
	}
	var targets []staticConfig
	for _, n := range cluster.Nodes() {
		upstream := &url.URL{Scheme: "https", Host: net.JoinHostPort(n.IP, "9721")}
		relay := &httputil.ReverseProxy{Transport: transport, Rewrite: func(r *httputil.ProxyRequest) {
			r.SetURL(upstream)
			r.Out.Header.Set("Authorization", "Bearer "+token)
		}}
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		srv := &http.Server{Handler: relay, ReadHeaderTimeout: 10 * time.Second}
		go func() { _ = srv.Serve(ln) }() // ends when closed at cleanup
		t.Cleanup(func() { srv.Close() })
		targets = append(targets, staticConfig{Targets: []string{ln.Addr().String()}, Labels: map[string]string{"node": n.Name, "certready_component": "agent"}})
	}

	// The PrometheusRule's groups are a Prometheus rule file as they are.
	raw, err := os.ReadFile("../../manifests/components/monitoring/prometheusrule.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var rule struct {
		Spec map[string]any `json:"spec"`
	}
	if err := yaml.Unmarshal(raw, &rule); err != nil {
		t.Fatal(err)
	}
	writeYAML(t, filepath.Join(dir, "rules.yaml"), rule.Spec)
	writeYAML(t, filepath.Join(dir, "prometheus.yml"), map[string]any{
		"global":         map[string]any{"scrape_interval": "2s", "evaluation_interval": "2s"},
		"rule_files":     []string{filepath.Join(dir, "rules.yaml")},
		"scrape_configs": []any{map[string]any{"job_name": "certready-agent", "static_configs": targets}},
	})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	web := ln.Addr().String()
	ln.Close()
	cmd := exec.Command(bin, "--config.file="+filepath.Join(dir, "prometheus.yml"), "--storage.tsdb.path="+filepath.Join(dir, "data"),
		"--web.listen-address="+web, "--log.level=warn")
	logf, err := os.Create(filepath.Join(dir, "prometheus.log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		if t.Failed() {
			out, _ := os.ReadFile(filepath.Join(dir, "prometheus.log"))
			t.Logf("prometheus log:\n%s", out)
		}
	})
	api := func(path string, into any) error {
		resp, err := http.Get("http://" + web + path)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		if err != nil {
			return err
		}
		var env struct {
			Status string          `json:"status"`
			Data   json.RawMessage `json:"data"`
		}
		if err := json.Unmarshal(body, &env); err != nil {
			return fmt.Errorf("%s: %w %.300s", path, err, body)
		}
		if env.Status != "success" {
			return fmt.Errorf("%s: status %q %.300s", path, env.Status, body)
		}
		return json.Unmarshal(env.Data, into)
	}

	// Every agent scraped through the shipped RBAC and TLS.
	err = localcluster.Poll(ctx, 2*time.Minute, "prometheus to scrape every agent", func() (bool, error) {
		var tg struct {
			Active []struct {
				Health    string            `json:"health"`
				Labels    map[string]string `json:"labels"`
				LastError string            `json:"lastError"`
			} `json:"activeTargets"`
		}
		if err := api("/api/v1/targets", &tg); err != nil {
			return false, nil
		}
		up := 0
		for _, a := range tg.Active {
			if a.Health == "up" {
				up++
			}
		}
		return up == len(cluster.Nodes()), nil
	})
	if err != nil {
		t.Fatal(err)
	}
	// Every shipped rule loaded and evaluated without an error.
	type promRule struct {
		Name           string `json:"name"`
		Health         string `json:"health"`
		LastError      string `json:"lastError"`
		LastEvaluation string `json:"lastEvaluation"`
	}
	var rules []promRule
	err = localcluster.Poll(ctx, time.Minute, "every rule evaluated", func() (bool, error) {
		var rs struct {
			Groups []struct {
				Rules []promRule `json:"rules"`
			} `json:"groups"`
		}
		if err := api("/api/v1/rules", &rs); err != nil {
			return false, nil
		}
		rules = nil
		for _, g := range rs.Groups {
			rules = append(rules, g.Rules...)
		}
		for _, r := range rules {
			if r.Health != "ok" || strings.HasPrefix(r.LastEvaluation, "0001") {
				return false, nil
			}
		}
		return len(rules) >= 15, nil
	})
	if err != nil {
		t.Fatalf("%v: %+v", err, rules)
	}
	type alert struct {
		Labels map[string]string `json:"labels"`
		State  string            `json:"state"`
	}
	alerts := func() []alert {
		t.Helper()
		var as struct {
			Alerts []alert `json:"alerts"`
		}
		if err := api("/api/v1/alerts", &as); err != nil {
			t.Fatal(err)
		}
		return as.Alerts
	}
	notReady := func(as []alert) map[string]string {
		out := map[string]string{}
		for _, a := range as {
			if a.Labels["alertname"] == "CertReadyKubeletServingCertNotReady" {
				out[a.Labels["node"]] = a.State
			}
		}
		return out
	}
	healthy := alerts()
	if got := notReady(healthy); len(got) > 0 {
		t.Errorf("CertReadyKubeletServingCertNotReady on a healthy cluster: %v", got)
	}
	t.Logf("%d rules loaded and evaluated by Prometheus, over %d agents; alerts on the healthy cluster: %v", len(rules), len(cluster.Nodes()), healthy)

	// A worker made not ready: its kubelet keeps serving the old
	// certificate while the file on disk is a newly issued one.
	w := cluster.Workers()[0]
	restore := serveStaleEndpoint(t, ctx, w.Name, w.IP)
	t.Cleanup(func() {
		restore()
		waitCondition(t, context.Background(), w.Name, 2*time.Minute, "ready again", hasReason("KubeletServingCertReady", corev1.ConditionFalse))
	})
	waitCondition(t, ctx, w.Name, time.Minute, "EndpointCertificateMismatch", hasReason("EndpointCertificateMismatch", corev1.ConditionTrue))
	var got map[string]string
	err = localcluster.Poll(ctx, 2*time.Minute, "CertReadyKubeletServingCertNotReady pending for "+w.Name, func() (bool, error) {
		got = notReady(alerts())
		return got[w.Name] == "pending", nil
	})
	if err != nil {
		t.Fatalf("%v: %v", err, got)
	}
	if len(got) != 1 {
		t.Errorf("CertReadyKubeletServingCertNotReady for %v, want %s alone", got, w.Name)
	}
	t.Logf("not ready %s: CertReadyKubeletServingCertNotReady %v (for: 15m before it fires)", w.Name, got)
}

func writeYAML(t *testing.T, path string, v any) {
	t.Helper()
	data, err := yaml.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
}
