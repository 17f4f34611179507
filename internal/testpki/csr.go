package testpki

import (
	"time"

	certv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/certready/certready/internal/names"
)

// CSROption shapes a KubeletCSR.
type CSROption func(*certv1.CertificateSigningRequest)

// KubeletCSR is the CertificateSigningRequest a kubelet creates for its
// serving certificate, as the API server stores it: the kubelet-serving
// signer, requested by system:node:<node> in system:nodes, with the
// kubelet's usages, pending. The options shape the variants tests need;
// the one fixture for CSR objects in every package's tests. Each has a
// UID of its own ("uid-<name>"), as the API server gives every object:
// code that keys on UIDs must not see two CSRs as one.
func KubeletCSR(name, node string, opts ...CSROption) *certv1.CertificateSigningRequest {
	c := &certv1.CertificateSigningRequest{
		ObjectMeta: metav1.ObjectMeta{Name: name, UID: types.UID("uid-" + name)},
		Spec: certv1.CertificateSigningRequestSpec{
			SignerName: names.SignerName,
			Usages:     []certv1.KeyUsage{certv1.UsageDigitalSignature, certv1.UsageServerAuth},
			Username:   names.NodeUser(node),
			Groups:     []string{names.NodesGroup, "system:authenticated"},
		},
	}
	for _, o := range opts {
		o(c)
	}
	return c
}

// WithRequest sets spec.request (NewCSR's PEM).
func WithRequest(pemBytes []byte) CSROption {
	return func(c *certv1.CertificateSigningRequest) { c.Spec.Request = pemBytes }
}

// Created sets the creation time.
func Created(t time.Time) CSROption {
	return func(c *certv1.CertificateSigningRequest) { c.CreationTimestamp = metav1.NewTime(t) }
}

// WithUID sets the UID.
func WithUID(uid string) CSROption {
	return func(c *certv1.CertificateSigningRequest) { c.UID = types.UID(uid) }
}

// Requester sets spec.username as it is (any identity, not only a node's).
func Requester(user string) CSROption {
	return func(c *certv1.CertificateSigningRequest) { c.Spec.Username = user }
}

// Signer sets spec.signerName.
func Signer(s string) CSROption {
	return func(c *certv1.CertificateSigningRequest) { c.Spec.SignerName = s }
}

// Labelled sets the certready.io/node label to node, as the approver does.
func Labelled(node string) CSROption {
	return func(c *certv1.CertificateSigningRequest) {
		if c.Labels == nil {
			c.Labels = map[string]string{}
		}
		c.Labels[names.NodeLabel] = node
	}
}

// Condition adds a True condition of type t with msg.
func Condition(t certv1.RequestConditionType, msg string) CSROption {
	return func(c *certv1.CertificateSigningRequest) {
		c.Status.Conditions = append(c.Status.Conditions, certv1.CertificateSigningRequestCondition{Type: t, Status: corev1.ConditionTrue, Message: msg})
	}
}

// Certificate sets status.certificate (without adding a condition).
func Certificate(certPEM []byte) CSROption {
	return func(c *certv1.CertificateSigningRequest) { c.Status.Certificate = certPEM }
}

// Issued approves the request and sets its certificate, as the approver and
// the signer leave it.
func Issued(certPEM []byte) CSROption {
	return func(c *certv1.CertificateSigningRequest) {
		Condition(certv1.CertificateApproved, "")(c)
		c.Status.Certificate = certPEM
	}
}
