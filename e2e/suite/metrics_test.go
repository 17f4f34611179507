package suite

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/certready/certready/e2e/deploy"
	"github.com/certready/certready/e2e/localcluster"
)

// Every agent serves its metrics on its node's address as shipped: over
// TLS, to a ServiceAccount token bound to certready-metrics-reader (as
// Prometheus scrapes with the shipped ServiceMonitor), and to no other
// token, to no caller without one, never as plain HTTP.
func TestAgentMetricsOnlyForAuthorizedScrapers(t *testing.T) {
	ctx := ctxT(t, 6*time.Minute)
	deployed(t)
	scraper, nosy := saToken(t, ctx, "e2e-prometheus"), saToken(t, ctx, "e2e-nosy")
	bindMetricsReader(t, ctx, "e2e-prometheus")
	caPEM := metricsCA(t, ctx)
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(caPEM) {
		t.Fatalf("ca.crt holds no certificate: %.200q", caPEM)
	}
	client := &http.Client{Timeout: 15 * time.Second, Transport: &http.Transport{DialContext: cluster.DialContext,
		TLSClientConfig: &tls.Config{RootCAs: roots, ServerName: "certready-metrics", MinVersion: tls.VersionTLS12}}}
	get := func(url, bearer string) (int, string, error) {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if bearer != "" {
			req.Header.Set("Authorization", "Bearer "+bearer)
		}
		resp, err := client.Do(req)
		if err != nil {
			return 0, "", err
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body), err
	}
	for _, n := range cluster.Nodes() {
		addr := net.JoinHostPort(n.IP, "9721")
		url := "https://" + addr + "/metrics"
		// RBAC bindings reach the authorizer's cache within moments; the
		// Secret reaches the agents' volumes at the kubelet's next sync of
		// the pod (up to a minute and a half).
		err := localcluster.Poll(ctx, 3*time.Minute, n.Name+": the scraper's page, over verified TLS", func() (bool, error) {
			code, body, err := get(url, scraper)
			return err == nil && code == http.StatusOK && strings.Contains(body, "certready_kubelet_serving_cert_ready 1"), nil
		})
		if err != nil {
			code, body, gerr := get(url, scraper)
			t.Fatalf("%v: last answer %d %.300q %v", err, code, body, gerr)
		}
		for _, tc := range []struct {
			who, token string
			code       int
		}{{"a token without the binding", nosy, http.StatusForbidden}, {"no token", "", http.StatusUnauthorized}} {
			if code, body, err := get(url, tc.token); err != nil || code != tc.code || strings.Contains(body, "certready_") {
				t.Errorf("%s, %s: %d %.200q %v, want %d without the page", n.Name, tc.who, code, body, err, tc.code)
			}
		}
		plain := &http.Client{Timeout: 15 * time.Second, Transport: &http.Transport{DialContext: cluster.DialContext}}
		if resp, err := plain.Get("http://" + addr + "/metrics"); err == nil {
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if strings.Contains(string(body), "certready_") {
				t.Errorf("%s: plain HTTP served the page (%d)", n.Name, resp.StatusCode)
			}
		}
		t.Logf("%s: %s served to the bound scraper only", n.Name, url)
	}
}

// saToken is a ten-minute token of ServiceAccount sa in default, made for
// the test and deleted after it.
func saToken(t *testing.T, ctx context.Context, sa string) string {
	t.Helper()
	cs := cluster.Clientset()
	if _, err := cs.CoreV1().ServiceAccounts("default").Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: sa}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cs.CoreV1().ServiceAccounts("default").Delete(context.Background(), sa, metav1.DeleteOptions{})
	})
	out, err := cluster.Kubectl(ctx, "-n", "default", "create", "token", sa, "--duration=10m")
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	return strings.TrimSpace(out)
}

// bindMetricsReader binds ServiceAccount default/sa to the shipped
// certready-metrics-reader ClusterRole, as a Prometheus is bound.
func bindMetricsReader(t *testing.T, ctx context.Context, sa string) {
	t.Helper()
	cs := cluster.Clientset()
	name := sa + "-certready-metrics"
	if _, err := cs.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "certready-metrics-reader"},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: sa, Namespace: "default"}},
	}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cs.RbacV1().ClusterRoleBindings().Delete(context.Background(), name, metav1.DeleteOptions{})
	})
}

// metricsCA is the CA the shipped ServiceMonitor verifies the metrics
// endpoints with: ca.crt of the certready-metrics-tls Secret the approver
// fills.
func metricsCA(t *testing.T, ctx context.Context) []byte {
	t.Helper()
	var caPEM []byte
	if err := localcluster.Poll(ctx, 3*time.Minute, "the approver fills certready-metrics-tls", func() (bool, error) {
		s, err := cluster.Clientset().CoreV1().Secrets(deploy.Namespace).Get(ctx, "certready-metrics-tls", metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		caPEM = s.Data["ca.crt"]
		return len(caPEM) > 0 && len(s.Data["tls.crt"]) > 0, nil
	}); err != nil {
		t.Fatal(err)
	}
	return caPEM
}
