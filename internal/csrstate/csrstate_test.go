package csrstate_test

import (
	"testing"

	certv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"

	"github.com/certready/certready/internal/csrstate"

	"github.com/certready/certready/internal/names"
)

func cond(t certv1.RequestConditionType, s corev1.ConditionStatus) certv1.CertificateSigningRequestCondition {
	return certv1.CertificateSigningRequestCondition{Type: t, Status: s, Message: string(t) + " message"}
}

func TestOfGivesOneAnswerForEveryPart(t *testing.T) {
	cert := []byte("-----BEGIN CERTIFICATE-----\n")
	approved := cond(certv1.CertificateApproved, corev1.ConditionTrue)
	denied := cond(certv1.CertificateDenied, corev1.ConditionTrue)
	failed := cond(certv1.CertificateFailed, corev1.ConditionTrue)
	for _, tc := range []struct {
		name       string
		conditions []certv1.CertificateSigningRequestCondition
		cert       []byte
		want       csrstate.State
	}{
		{name: "no condition", want: csrstate.Pending},
		{name: "approved, not signed", conditions: []certv1.CertificateSigningRequestCondition{approved}, want: csrstate.Approved},
		{name: "approved and signed", conditions: []certv1.CertificateSigningRequestCondition{approved}, cert: cert, want: csrstate.Issued},
		{name: "denied", conditions: []certv1.CertificateSigningRequestCondition{denied}, want: csrstate.Denied},
		{name: "approved, then the signer failed", conditions: []certv1.CertificateSigningRequestCondition{approved, failed}, want: csrstate.Failed},
		{name: "approved and denied: denied wins", conditions: []certv1.CertificateSigningRequestCondition{approved, denied}, want: csrstate.Denied},
		{name: "a condition not True does not count", conditions: []certv1.CertificateSigningRequestCondition{cond(certv1.CertificateFailed, corev1.ConditionFalse)}, want: csrstate.Pending},
		{name: "a certificate without approval is no issue", cert: cert, want: csrstate.Pending},
		{name: "an unknown condition type", conditions: []certv1.CertificateSigningRequestCondition{cond("Reviewed", corev1.ConditionTrue)}, want: csrstate.Pending},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := &certv1.CertificateSigningRequest{Status: certv1.CertificateSigningRequestStatus{Conditions: tc.conditions, Certificate: tc.cert}}
			if got := csrstate.Of(c); got != tc.want {
				t.Errorf("Of = %s, want %s", got, tc.want)
			}
			if got := csrstate.IsPending(c); got != (tc.want == csrstate.Pending) {
				t.Errorf("IsPending = %v with state %s", got, tc.want)
			}
		})
	}
}

func TestConditionsReturnsOnlyTrueOnes(t *testing.T) {
	c := &certv1.CertificateSigningRequest{Status: certv1.CertificateSigningRequestStatus{Conditions: []certv1.CertificateSigningRequestCondition{
		cond(certv1.CertificateApproved, corev1.ConditionTrue),
		cond(certv1.CertificateFailed, corev1.ConditionFalse),
		cond(certv1.CertificateDenied, corev1.ConditionUnknown),
	}}}
	a, d, f := csrstate.Conditions(c)
	if a == nil || a.Message != "Approved message" || d != nil || f != nil {
		t.Errorf("Conditions = %v, %v, %v", a, d, f)
	}
}

// The issued mark a trimmed cache leaves stands for the dropped certificate
// of an approved request, and for nothing else: a pending or denied
// request (whose requester may have put the key in its extra) stays so.
func TestTheIssuedMarkCountsOnlyOnAnApprovedRequest(t *testing.T) {
	marked := func(conds ...certv1.CertificateSigningRequestCondition) *certv1.CertificateSigningRequest {
		c := &certv1.CertificateSigningRequest{}
		c.Spec.Extra = map[string]certv1.ExtraValue{names.IssuedKey: {"true"}}
		c.Status.Conditions = conds
		return c
	}
	for _, tc := range []struct {
		c     *certv1.CertificateSigningRequest
		want  csrstate.State
		stage string
	}{
		{marked(), csrstate.Pending, "pending"},
		{marked(cond(certv1.CertificateApproved, corev1.ConditionTrue)), csrstate.Issued, "issued"},
		{marked(cond(certv1.CertificateDenied, corev1.ConditionTrue)), csrstate.Denied, "denied"},
		{&certv1.CertificateSigningRequest{Status: certv1.CertificateSigningRequestStatus{Conditions: []certv1.CertificateSigningRequestCondition{cond(certv1.CertificateApproved, corev1.ConditionTrue)}}}, csrstate.Approved, "approved-not-issued"},
	} {
		if got := csrstate.Of(tc.c); got != tc.want || got.Stage() != tc.stage {
			t.Errorf("Of = %s (stage %s), want %s (%s)", got, got.Stage(), tc.want, tc.stage)
		}
	}
}
