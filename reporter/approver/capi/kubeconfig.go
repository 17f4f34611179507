package capi

import (
	"crypto/x509"
	"errors"
	"fmt"
	"net/url"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// KubeconfigKey is the key of the kubeconfig in Cluster API's Secret.
const KubeconfigKey = "value"

// ErrRefused wraps every reason a kubeconfig Secret is not used.
var ErrRefused = errors.New("kubeconfig refused")

func refused(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrRefused, fmt.Sprintf(format, args...))
}

// CheckSecret says whether secret is the kubeconfig Secret Cluster API keeps
// for cluster: of its type, labelled with the cluster's name, and owned by
// the Cluster (the cluster controller's ownerReference, carrying the
// Cluster's UID) or controlled by the control plane the Cluster names in
// spec.controlPlaneRef (the KubeadmControlPlane controller adopts the
// Secret: sigs.k8s.io/cluster-api v1.14 util/kubeconfig and
// controlplane/kubeadm). Whoever may create Secrets in the namespace can
// write all of these: this keeps out Secrets that are not Cluster API's;
// the kubeconfig's content is checked on its own (RESTConfig).
func CheckSecret(secret *corev1.Secret, cluster *unstructured.Unstructured) error {
	name := cluster.GetName()
	if secret.Type != KubeconfigSecretType {
		return refused("Secret %s/%s has type %q, not %s", secret.Namespace, secret.Name, secret.Type, KubeconfigSecretType)
	}
	if got := secret.Labels[ClusterNameLabel]; got != name {
		return refused("Secret %s/%s is labelled %s=%q, not %q", secret.Namespace, secret.Name, ClusterNameLabel, got, name)
	}
	cpGroup, _, _ := unstructured.NestedString(cluster.Object, "spec", "controlPlaneRef", "apiGroup")
	cpKind, _, _ := unstructured.NestedString(cluster.Object, "spec", "controlPlaneRef", "kind")
	cpName, _, _ := unstructured.NestedString(cluster.Object, "spec", "controlPlaneRef", "name")
	for _, ref := range secret.OwnerReferences {
		gv, err := schema.ParseGroupVersion(ref.APIVersion)
		if err != nil {
			continue
		}
		if gv.Group == ClusterGVR.Group && ref.Kind == "Cluster" && ref.Name == name && ref.UID == cluster.GetUID() {
			return nil
		}
		if cpKind != "" && isController(ref) && gv.Group == cpGroup && ref.Kind == cpKind && ref.Name == cpName {
			return nil
		}
	}
	cp := "none"
	if cpKind != "" {
		cp = cpGroup + "/" + cpKind + " " + cpName
	}
	return refused("Secret %s/%s is neither owned by Cluster %s (uid %s) nor controlled by its control plane (spec.controlPlaneRef: %s)",
		secret.Namespace, secret.Name, name, cluster.GetUID(), cp)
}

func isController(ref metav1.OwnerReference) bool { return ref.Controller != nil && *ref.Controller }

// RESTConfig reads a workload cluster's kubeconfig as Cluster API writes
// it: the current context's server over https, its CA and credentials
// inline. Whatever would make the approver read its own files, run a
// command, send its requests through another host or trust any server is
// refused with the field named: a tenant who can create a Cluster and a
// Secret writes this kubeconfig, and the approver's own service account
// token and filesystem are not theirs to use. The rest.Config is built
// from those fields alone.
func RESTConfig(data []byte) (*rest.Config, error) {
	kc, err := clientcmd.Load(data)
	if err != nil {
		return nil, refused("not a kubeconfig: %v", err)
	}
	ctxName := kc.CurrentContext
	kctx := kc.Contexts[ctxName]
	if ctxName == "" || kctx == nil {
		return nil, refused("no current-context (%q)", ctxName)
	}
	cl, user := kc.Clusters[kctx.Cluster], kc.AuthInfos[kctx.AuthInfo]
	if cl == nil {
		return nil, refused("context %q names cluster %q, which the kubeconfig lacks", ctxName, kctx.Cluster)
	}
	if user == nil {
		return nil, refused("context %q names user %q, which the kubeconfig lacks", ctxName, kctx.AuthInfo)
	}
	if err := checkCluster(kctx.Cluster, cl); err != nil {
		return nil, err
	}
	if err := checkUser(kctx.AuthInfo, user); err != nil {
		return nil, err
	}
	return &rest.Config{
		Host: cl.Server,
		TLSClientConfig: rest.TLSClientConfig{
			ServerName: cl.TLSServerName,
			CAData:     cl.CertificateAuthorityData,
			CertData:   user.ClientCertificateData,
			KeyData:    user.ClientKeyData,
		},
		BearerToken: user.Token,
	}, nil
}

func checkCluster(name string, c *clientcmdapi.Cluster) error {
	u, err := url.Parse(c.Server)
	switch {
	case err != nil || u.Host == "":
		return refused("cluster %q: server %q is not a URL", name, c.Server)
	case u.Scheme != "https":
		return refused("cluster %q: server %q is not https", name, c.Server)
	case u.User != nil:
		return refused("cluster %q: server URL carries credentials", name)
	case c.InsecureSkipTLSVerify:
		return refused("cluster %q: insecure-skip-tls-verify is set (the server must be verified against certificate-authority-data)", name)
	case c.CertificateAuthority != "":
		return refused("cluster %q: certificate-authority is a file path (%s); only inline certificate-authority-data is read", name, c.CertificateAuthority)
	case len(c.CertificateAuthorityData) == 0:
		return refused("cluster %q: no certificate-authority-data (the server would be trusted by the approver's system roots)", name)
	case !x509.NewCertPool().AppendCertsFromPEM(c.CertificateAuthorityData):
		return refused("cluster %q: certificate-authority-data holds no PEM certificate", name)
	case c.ProxyURL != "":
		return refused("cluster %q: proxy-url is set (%s); the approver connects to the server directly", name, c.ProxyURL)
	}
	return nil
}

func checkUser(name string, u *clientcmdapi.AuthInfo) error {
	var bad []string
	if u.ClientCertificate != "" || u.ClientKey != "" {
		bad = append(bad, "client-certificate/client-key file paths")
	}
	if u.TokenFile != "" {
		bad = append(bad, "tokenFile "+u.TokenFile)
	}
	if u.Exec != nil {
		bad = append(bad, "exec plugin "+u.Exec.Command)
	}
	if u.AuthProvider != nil {
		bad = append(bad, "auth-provider "+u.AuthProvider.Name)
	}
	if u.Impersonate != "" || u.ImpersonateUID != "" || len(u.ImpersonateGroups) > 0 || len(u.ImpersonateUserExtra) > 0 {
		bad = append(bad, "impersonation")
	}
	if u.Username != "" || u.Password != "" {
		bad = append(bad, "basic auth")
	}
	if len(bad) > 0 {
		return refused("user %q: %s (only inline client-certificate-data/client-key-data or token are used)", name, strings.Join(bad, ", "))
	}
	cert := len(u.ClientCertificateData) > 0 && len(u.ClientKeyData) > 0
	if !cert && u.Token == "" {
		return refused("user %q: no inline credentials (client-certificate-data with client-key-data, or token)", name)
	}
	return nil
}

// TrimSecret keeps, of a Secret in the informer's cache, what reconcile
// reads: its identity, type, owners and cluster label, and the kubeconfig
// of a <cluster>-kubeconfig Secret only. Cluster API's other Secrets carry
// the same type and label (the cluster's CA, etcd, service account and
// proxy keys): their data never stays in memory.
func TrimSecret(obj any) (any, error) {
	s, ok := obj.(*corev1.Secret)
	if !ok {
		return obj, nil
	}
	cluster := s.Labels[ClusterNameLabel]
	out := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: s.Namespace, Name: s.Name, UID: s.UID, ResourceVersion: s.ResourceVersion,
			OwnerReferences: s.OwnerReferences,
		},
		Type: s.Type,
	}
	if cluster != "" {
		out.Labels = map[string]string{ClusterNameLabel: cluster}
	}
	if cluster != "" && s.Name == KubeconfigSecretName(cluster) {
		if v, ok := s.Data[KubeconfigKey]; ok {
			out.Data = map[string][]byte{KubeconfigKey: v}
		}
	}
	return out, nil
}

// WorkloadConfig is the connection to cluster's workload cluster through
// its kubeconfig Secret, made as the approver makes its own: refused when
// the Secret is not Cluster API's or its kubeconfig holds anything the
// approver refuses (RESTConfig), and every answer read through the bounds
// (zero Limits: the defaults). For the operator's commands that look at a
// workload cluster from the management cluster (certready status
// --cluster-api): a tenant writes that kubeconfig and runs that server.
func WorkloadConfig(secret *corev1.Secret, cluster *unstructured.Unstructured, l Limits) (*rest.Config, error) {
	cfg, err := checkedConfig(secret, cluster)
	if err != nil {
		return nil, err
	}
	bound(cfg, clusterKey(cluster.GetNamespace(), cluster.GetName()), l.withDefaults(), nil)
	return cfg, nil
}
