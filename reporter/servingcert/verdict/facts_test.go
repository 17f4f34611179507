package verdict_test

import (
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/certready/certready/internal/fingerprint"
	"github.com/certready/certready/internal/names"
	"github.com/certready/certready/internal/stamp"
	"github.com/certready/certready/reporter/servingcert/verdict"
)

// trailer is the form release-candidate agents ended a ready message with.
func trailer(f verdict.Facts) string {
	s := " [notAfter=" + stamp.Format(f.NotAfter)
	if f.CSR != "" {
		s += " csr=" + f.CSR
	}
	s += " sha256=" + f.Fingerprint.String()
	if !f.CA.IsZero() {
		s += " ca=" + f.CA.String() + " caNotAfter=" + stamp.Format(f.CANotAfter)
	}
	if !f.ClientNotAfter.IsZero() {
		s += " clientNotAfter=" + stamp.Format(f.ClientNotAfter)
	}
	if f.Agent != "" {
		s += " agent=" + f.Agent
	}
	return s + "]"
}

func TestFactsAnnotationRoundTrip(t *testing.T) {
	fp := fingerprint.SHA256{0xab, 0xcd, 31: 0xef}
	at := time.Date(2027, 12, 1, 12, 0, 0, 0, time.UTC)
	for _, f := range []verdict.Facts{
		{NotAfter: at, Fingerprint: fp},
		{NotAfter: at, CSR: "node-csr.with.dots-1", Fingerprint: fp},
		{NotAfter: at, CSR: "csr-abc12", Fingerprint: fp, CA: fingerprint.SHA256{0x01, 31: 0x02}, CANotAfter: at.AddDate(10, 0, 0),
			ClientNotAfter: at.AddDate(0, -1, 0), Agent: "dev build [x]"},
		{NotBefore: at.AddDate(-1, 0, 0), NotAfter: at, Fingerprint: fp},
	} {
		value := f.Annotation()
		got, ok := verdict.ParseAnnotation(value)
		if !ok || !got.NotBefore.Equal(f.NotBefore) || !got.NotAfter.Equal(f.NotAfter) || got.CSR != f.CSR || got.Fingerprint != f.Fingerprint || got.CA != f.CA ||
			!got.CANotAfter.Equal(f.CANotAfter) || !got.ClientNotAfter.Equal(f.ClientNotAfter) || got.Agent != f.Agent {
			t.Errorf("ParseAnnotation(%s) = %+v, %v; want %+v", value, got, ok, f)
		}
	}
}

func TestParseAnnotationRefusesWhatItDidNotWrite(t *testing.T) {
	fp := fingerprint.SHA256{0xab, 31: 0xef}.String()
	for _, value := range []string{
		"",
		"notAfter=2027-12-01T12:00:00Z sha256=" + fp,
		`{"notAfter":"2027-12-01T12:00:00Z"}`,                                      // no fingerprint
		`{"sha256":"` + fp + `"}`,                                                  // no expiry
		`{"notAfter":"tomorrow","sha256":"` + fp + `"}`,                            // not a time
		`{"notAfter":"2027-12-01T12:00:00Z","sha256":"abcd"}`,                      // a short fingerprint
		`{"notAfter":"2027-12-01T12:00:00Z","sha256":"` + fp + `","ca":"12"}`,      // a short CA fingerprint
		`{"notAfter":"2027-12-01T12:00:00Z","sha256":"` + fp + `","caNotAfter":1}`, // not a string
		`{"notAfter":"2027-12-01T12:00:00Z","sha256":"` + fp + `","clientNotAfter":"soon"}`,
		`[1,2]`,
	} {
		if got, ok := verdict.ParseAnnotation(value); ok {
			t.Errorf("ParseAnnotation(%q) = %+v, want none", value, got)
		}
	}
	// Keys it does not know are skipped.
	if got, ok := verdict.ParseAnnotation(`{"notAfter":"2027-12-01T12:00:00Z","sha256":"` + fp + `","future":{"x":1}}`); !ok || got.Fingerprint.String() != fp {
		t.Errorf("unknown key: %+v, %v; want the known facts read", got, ok)
	}
}

// NodeFacts is what every reader of the Node uses: facts only for a ready
// condition, the message's trailer over the annotation (the trailer is as
// current as its message, an annotation may outlive a switch to the
// node-problem-detector plugin), the annotation otherwise.
func TestNodeFactsPrefersTheTrailerAndNeedsReady(t *testing.T) {
	at := time.Date(2027, 12, 1, 12, 0, 0, 0, time.UTC)
	fromAnno := verdict.Facts{NotAfter: at, CSR: "csr-anno", Fingerprint: fingerprint.SHA256{0x01, 31: 0x01}}
	fromTrailer := verdict.Facts{NotAfter: at, CSR: "csr-trailer", Fingerprint: fingerprint.SHA256{0x02, 31: 0x02}}
	node := func(anno string) *corev1.Node {
		n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "w1"}}
		if anno != "" {
			n.Annotations = map[string]string{names.FactsAnnotation: anno}
		}
		return n
	}
	ready := func(msg string) *corev1.NodeCondition {
		return &corev1.NodeCondition{Type: names.ConditionType, Status: corev1.ConditionFalse, Message: msg}
	}
	for _, tc := range []struct {
		name    string
		node    *corev1.Node
		cond    *corev1.NodeCondition
		wantCSR string // "": no facts
	}{
		{"the agent's annotation", node(fromAnno.Annotation()), ready("serving certificate ok"), "csr-anno"},
		{"a release candidate's trailer", node(""), ready("ok" + trailer(fromTrailer)), "csr-trailer"},
		{"a trailer over an annotation left behind", node(fromAnno.Annotation()), ready("ok" + trailer(fromTrailer)), "csr-trailer"},
		{"not ready: none, whatever the node shows", node(fromAnno.Annotation()),
			&corev1.NodeCondition{Status: corev1.ConditionTrue, Message: "CSR pending" + trailer(fromTrailer)}, ""},
		{"unknown: none", node(fromAnno.Annotation()), &corev1.NodeCondition{Status: corev1.ConditionUnknown}, ""},
		{"no condition", node(fromAnno.Annotation()), nil, ""},
		{"a broken annotation", node(strings.TrimSuffix(fromAnno.Annotation(), "}")), ready("ok"), ""},
		{"ready, no facts anywhere", node(""), ready("ok"), ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := verdict.NodeFacts(tc.node, tc.cond)
			if ok != (tc.wantCSR != "") || got.CSR != tc.wantCSR {
				t.Errorf("NodeFacts = %+v, %v; want csr %q", got, ok, tc.wantCSR)
			}
		})
	}
}
