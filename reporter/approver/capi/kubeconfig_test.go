package capi_test

import (
	"errors"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/certready/certready/reporter/approver/capi"
)

// A tenant who can create a Cluster and a Secret writes the kubeconfig:
// everything that would make the approver send its own token, read its
// own files, run a command, go through another host or trust any server
// is refused, naming the field.
func TestRESTConfigRefusesWhatATenantCouldTurnAgainstTheApprover(t *testing.T) {
	const sa = "/var/run/secrets/kubernetes.io/serviceaccount/token"
	user := func(f func(*clientcmdapi.AuthInfo)) func(*clientcmdapi.Config) {
		return func(c *clientcmdapi.Config) { f(c.AuthInfos["admin"]) }
	}
	server := func(f func(*clientcmdapi.Cluster)) func(*clientcmdapi.Config) {
		return func(c *clientcmdapi.Config) { f(c.Clusters["prod"]) }
	}
	for _, tc := range []struct {
		name string
		edit func(*clientcmdapi.Config)
		want string // "" accepted
	}{
		{"Cluster API's own: inline CA and token", nil, ""},
		{"inline client certificate", user(func(u *clientcmdapi.AuthInfo) {
			u.Token, u.ClientCertificateData, u.ClientKeyData = "", []byte("cert"), []byte("key")
		}), ""},
		{"the approver's own token file", user(func(u *clientcmdapi.AuthInfo) { u.Token, u.TokenFile = "", sa }), "tokenFile " + sa},
		{"an exec plugin", user(func(u *clientcmdapi.AuthInfo) {
			u.Exec = &clientcmdapi.ExecConfig{Command: "/bin/sh", Args: []string{"-c", "cat " + sa}}
		}), "exec plugin /bin/sh"},
		{"an auth provider", user(func(u *clientcmdapi.AuthInfo) { u.AuthProvider = &clientcmdapi.AuthProviderConfig{Name: "oidc"} }), "auth-provider oidc"},
		{"client certificate files", user(func(u *clientcmdapi.AuthInfo) {
			u.ClientCertificate, u.ClientKey = "/etc/kubernetes/pki/admin.crt", "/etc/kubernetes/pki/admin.key"
		}), "file paths"},
		{"impersonation", user(func(u *clientcmdapi.AuthInfo) { u.Impersonate = "system:admin" }), "impersonation"},
		{"basic auth", user(func(u *clientcmdapi.AuthInfo) { u.Username, u.Password = "admin", "admin" }), "basic auth"},
		{"no credentials", user(func(u *clientcmdapi.AuthInfo) { u.Token = "" }), "no inline credentials"},
		{"insecure-skip-tls-verify", server(func(c *clientcmdapi.Cluster) { c.InsecureSkipTLSVerify = true }), "insecure-skip-tls-verify"},
		{"a CA file path", server(func(c *clientcmdapi.Cluster) {
			c.CertificateAuthorityData, c.CertificateAuthority = nil, "/var/run/secrets/kubernetes.io/serviceaccount/ca.crt"
		}), "certificate-authority is a file path"},
		{"no CA: the system roots would vouch for any server", server(func(c *clientcmdapi.Cluster) { c.CertificateAuthorityData = nil }), "no certificate-authority-data"},
		{"a CA that is no certificate", server(func(c *clientcmdapi.Cluster) { c.CertificateAuthorityData = []byte("nope") }), "holds no PEM certificate"},
		{"a proxy", server(func(c *clientcmdapi.Cluster) { c.ProxyURL = "http://tenant-proxy.example:3128" }), "proxy-url"},
		{"plain http", server(func(c *clientcmdapi.Cluster) { c.Server = "http://their-host:6443" }), "is not https"},
		{"credentials in the URL", server(func(c *clientcmdapi.Cluster) { c.Server = "https://u:p@their-host:6443" }), "carries credentials"},
		{"no current context", func(c *clientcmdapi.Config) { c.CurrentContext = "" }, "no current-context"},
		{"a context naming a missing user", func(c *clientcmdapi.Config) { c.Contexts["admin@prod"].AuthInfo = "ghost" }, `names user "ghost"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := capi.RESTConfig(kubeconfig(t, "prod", "https://their-host:6443", tc.edit))
			if tc.want == "" {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				if cfg.Host != "https://their-host:6443" || len(cfg.CAData) == 0 || cfg.BearerTokenFile != "" || cfg.ExecProvider != nil || cfg.Insecure {
					t.Errorf("config %+v", cfg)
				}
				return
			}
			if err == nil || !errors.Is(err, capi.ErrRefused) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err %v, want a refusal naming %q", err, tc.want)
			}
		})
	}
	if _, err := capi.RESTConfig([]byte("not: [yaml")); !errors.Is(err, capi.ErrRefused) {
		t.Errorf("garbage: %v", err)
	}
}

func TestCheckSecretWantsClusterAPIsOwn(t *testing.T) {
	cluster := clusterObj("tenant-a", "prod", nil)
	withCP := clusterObj("tenant-a", "prod", nil)
	_ = unstructured.SetNestedMap(withCP.Object, map[string]any{"apiGroup": "controlplane.cluster.x-k8s.io", "kind": "KubeadmControlPlane", "name": "prod-cp"}, "spec", "controlPlaneRef")
	yes := true
	kcp := metav1.OwnerReference{APIVersion: "controlplane.cluster.x-k8s.io/v1beta2", Kind: "KubeadmControlPlane", Name: "prod-cp", UID: "kcp", Controller: &yes}
	for _, tc := range []struct {
		name    string
		cluster *unstructured.Unstructured
		edit    func(*corev1.Secret)
		want    string
	}{
		{"owned by the Cluster (cluster controller)", cluster, nil, ""},
		{"adopted by the control plane the Cluster names (KubeadmControlPlane)", withCP, func(s *corev1.Secret) { s.OwnerReferences = []metav1.OwnerReference{kcp} }, ""},
		{"another type", cluster, func(s *corev1.Secret) { s.Type = corev1.SecretTypeOpaque }, `type "Opaque"`},
		{"another cluster's label", cluster, func(s *corev1.Secret) { s.Labels[capi.ClusterNameLabel] = "staging" }, `labelled cluster.x-k8s.io/cluster-name="staging"`},
		{"no owner", cluster, func(s *corev1.Secret) { s.OwnerReferences = nil }, "neither owned by Cluster prod"},
		{"owned by a Cluster of the same name that was deleted (another UID)", cluster, func(s *corev1.Secret) { s.OwnerReferences[0].UID = "old" }, "neither owned"},
		{"a control plane the Cluster does not name", cluster, func(s *corev1.Secret) { s.OwnerReferences = []metav1.OwnerReference{kcp} }, "spec.controlPlaneRef: none"},
		{"the named control plane, but not as controller", withCP, func(s *corev1.Secret) {
			k := kcp
			k.Controller = nil
			s.OwnerReferences = []metav1.OwnerReference{k}
		}, "neither owned"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := kubeconfigSecret(t, "tenant-a", "prod", "https://their-host:6443")
			if tc.edit != nil {
				tc.edit(s)
			}
			err := capi.CheckSecret(s, tc.cluster)
			if (err == nil) != (tc.want == "") || (err != nil && !strings.Contains(err.Error(), tc.want)) {
				t.Errorf("err %v, want %q", err, tc.want)
			}
		})
	}
}

// Cluster API keeps a cluster's CA, etcd, service-account and proxy keys
// in Secrets of the same type and label: none of their data is cached.
func TestTrimSecretKeepsOnlyTheKubeconfig(t *testing.T) {
	kc := kubeconfigSecret(t, "tenant-a", "prod", "https://their-host:6443")
	kc.Data["extra"] = []byte("x")
	kc.Annotations = map[string]string{"big": "x"}
	ca := kubeconfigSecret(t, "tenant-a", "prod", "https://their-host:6443")
	ca.Name, ca.Data = "prod-ca", map[string][]byte{"tls.key": []byte("-----BEGIN EC PRIVATE KEY-----")}
	for _, tc := range []struct {
		in   *corev1.Secret
		keys []string
	}{{kc, []string{"value"}}, {ca, nil}} {
		out, err := capi.TrimSecret(tc.in)
		if err != nil {
			t.Fatal(err)
		}
		s := out.(*corev1.Secret)
		var keys []string
		for k := range s.Data {
			keys = append(keys, k)
		}
		if strings.Join(keys, ",") != strings.Join(tc.keys, ",") || s.Annotations != nil {
			t.Errorf("%s: kept %v %v, want only %v", tc.in.Name, keys, s.Annotations, tc.keys)
		}
		if s.Type != tc.in.Type || s.Labels[capi.ClusterNameLabel] != "prod" || len(s.OwnerReferences) != 1 {
			t.Errorf("%s: what reconcile reads was lost: %+v", tc.in.Name, s)
		}
	}
}
