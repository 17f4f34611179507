package integration

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	authnv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/certready/certready/e2e/localcluster"
)

// kubectlApply applies the shipped manifests files as the admin.
func kubectlApply(t *testing.T, ctx context.Context, files ...string) {
	t.Helper()
	kc, err := api.Kubeconfig()
	if err != nil {
		t.Fatal(err)
	}
	args := []string{"--kubeconfig=" + kc, "apply"}
	for _, f := range files {
		args = append(args, "-f", filepath.Join("..", "..", "manifests", "base", f))
	}
	if out, err := exec.CommandContext(ctx, filepath.Join(os.Getenv("CERTREADY_K8S_BIN"), "kubectl"), args...).CombinedOutput(); err != nil {
		t.Fatalf("kubectl apply: %v\n%s", err, out)
	}
}

// serviceAccountToken makes namespace/name (and its namespace) and
// returns a bound token for it from the TokenRequest API, as the kubelet
// mounts into a pod.
func serviceAccountToken(t *testing.T, ctx context.Context, namespace, name string) string {
	t.Helper()
	if _, err := api.Admin.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	if _, err := api.Admin.CoreV1().ServiceAccounts(namespace).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	tr, err := api.Admin.CoreV1().ServiceAccounts(namespace).CreateToken(ctx, name, &authnv1.TokenRequest{Spec: authnv1.TokenRequestSpec{}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return tr.Status.Token
}

// tokenKubeconfig writes a kubeconfig that authenticates with token.
func tokenKubeconfig(t *testing.T, token string) string {
	t.Helper()
	ca, err := os.ReadFile(api.AdminConfig.CAFile)
	if err != nil {
		t.Fatal(err)
	}
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["local"] = &clientcmdapi.Cluster{Server: api.URL, CertificateAuthorityData: ca}
	cfg.AuthInfos["sa"] = &clientcmdapi.AuthInfo{Token: token}
	cfg.Contexts["sa"] = &clientcmdapi.Context{Cluster: "local", AuthInfo: "sa"}
	cfg.CurrentContext = "sa"
	path := filepath.Join(t.TempDir(), "sa.kubeconfig")
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		t.Fatal(err)
	}
	return path
}

func freePort(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)
}

// The metrics endpoint as shipped: the approver runs as its own
// ServiceAccount with the shipped RBAC (certready-metrics-auth lets it
// review tokens and access; its Role lets it fill the two metrics Secrets
// the manifests create, and create none); the endpoint serves the
// certificate it wrote, verified with ca.crt for certready-metrics as the
// ServiceMonitor does; a scraper whose ServiceAccount is bound to the
// shipped certready-metrics-reader gets the page over TLS; any other
// token, a forged one, none, or plain HTTP gets nothing.
func TestMetricsEndpointServesOnlyAuthorizedScrapers(t *testing.T) {
	ctx := ctxT(t, 3*time.Minute)
	kubectlApply(t, ctx, "namespace.yaml", "approver-rbac.yaml", "metrics-rbac.yaml", "metrics-tls-secrets.yaml")
	approverToken := serviceAccountToken(t, ctx, "certready-system", "certready-approver")
	approverKC := tokenKubeconfig(t, approverToken)
	prometheus := serviceAccountToken(t, ctx, "monitoring", "prometheus")
	nosy := serviceAccountToken(t, ctx, "default", "nosy")
	if _, err := api.Admin.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "prometheus-certready-metrics"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "certready-metrics-reader"},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: "prometheus", Namespace: "monitoring"}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	metricsAddr, healthAddr := "127.0.0.1:"+freePort(t), "127.0.0.1:"+freePort(t)
	certDir := t.TempDir() // the Secret volume, empty until the Secret is filled
	runApprover(t, "--kubeconfig="+approverKC, "--metrics-addr="+metricsAddr, "--health-addr="+healthAddr, "--metrics-cert-dir="+certDir)
	// Health is plain HTTP (the kubelet's probes), unauthenticated.
	if err := localcluster.Poll(ctx, time.Minute, "the approver ready", func() (bool, error) {
		resp, err := http.Get("http://" + healthAddr + "/readyz")
		if err != nil {
			return false, nil
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK, nil
	}); err != nil {
		t.Fatal(err)
	}

	// The approver fills the Secrets with its own credentials.
	var served *corev1.Secret
	if err := localcluster.Poll(ctx, time.Minute, "certready-metrics-tls filled", func() (bool, error) {
		var err error
		served, err = api.Admin.CoreV1().Secrets("certready-system").Get(ctx, "certready-metrics-tls", metav1.GetOptions{})
		return err == nil && len(served.Data["tls.crt"]) > 0 && len(served.Data["ca.crt"]) > 0, nil
	}); err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(served.Data["ca.crt"]) {
		t.Fatal("ca.crt holds no certificate")
	}
	verified := &tls.Config{RootCAs: roots, ServerName: "certready-metrics", MinVersion: tls.VersionTLS12}
	// Until the volume holds it, the endpoint's self-signed certificate
	// fails Prometheus' verification: no token is sent.
	if c, err := tls.Dial("tcp", metricsAddr, verified); err == nil {
		c.Close()
		t.Fatal("the self-signed fallback verified with the installation's CA")
	}
	for _, f := range []string{"tls.crt", "tls.key"} {
		if err := os.WriteFile(filepath.Join(certDir, f), served.Data[f], 0o600); err != nil {
			t.Fatal(err)
		}
	}
	// Its rights stop at those two Secrets.
	asApprover := kubernetes.NewForConfigOrDie(&rest.Config{Host: api.URL, BearerToken: approverToken, TLSClientConfig: rest.TLSClientConfig{CAFile: api.AdminConfig.CAFile}})
	if _, err := asApprover.CoreV1().Secrets("certready-system").Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "minted"}, Type: corev1.SecretTypeServiceAccountToken}, metav1.CreateOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("the approver created a Secret: %v, want forbidden (a token Secret would mint any ServiceAccount's token)", err)
	}
	if _, err := asApprover.CoreV1().Secrets("certready-system").List(ctx, metav1.ListOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("the approver listed Secrets: %v, want forbidden", err)
	}

	// Prometheus' tlsConfig as shipped: ca.crt and the server name.
	client := &http.Client{Timeout: 20 * time.Second, Transport: &http.Transport{TLSClientConfig: verified}}
	scrape := func(token string) (int, string) {
		t.Helper()
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "https://"+metricsAddr+"/metrics", nil)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body)
	}
	forged := prometheus[:len(prometheus)-4] + "AAAA" // the signature no longer matches
	for _, tc := range []struct {
		name, token string
		code        int
		body        string
	}{
		{"Prometheus, bound to certready-metrics-reader", prometheus, http.StatusOK, "certready_build_info"},
		{"a ServiceAccount without the binding", nosy, http.StatusForbidden, "system:serviceaccount:default:nosy may not get /metrics"},
		{"a forged token", forged, http.StatusUnauthorized, "does not accept"},
		{"no token", "", http.StatusUnauthorized, "bearer token"},
	} {
		code, body := scrape(tc.token)
		if code != tc.code || !strings.Contains(body, tc.body) {
			t.Errorf("%s: %d %.300q, want %d with %q", tc.name, code, body, tc.code, tc.body)
		} else {
			t.Logf("%s: %d", tc.name, code)
		}
	}
	_, body := scrape(prometheus) // the second allowed request: counted before its page is written
	for _, want := range []string{`certready_metrics_requests_total{result="allowed"} 2`, `certready_metrics_requests_total{result="forbidden"} 1`, `certready_metrics_requests_total{result="unauthenticated"} 2`} {
		if !strings.Contains(body, want) {
			t.Errorf("the page lacks %s", want)
		}
	}
	// Plain HTTP to the TLS port: no page.
	if resp, err := http.Get("http://" + metricsAddr + "/metrics"); err == nil {
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if strings.Contains(string(b), "certready_") {
			t.Errorf("plain HTTP got the page: %d", resp.StatusCode)
		}
	}
}
