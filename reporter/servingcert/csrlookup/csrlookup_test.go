package csrlookup_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"sort"
	"strings"
	"testing"
	"time"

	certv1 "k8s.io/api/certificates/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/certready/certready/internal/fingerprint"
	"github.com/certready/certready/internal/names"
	"github.com/certready/certready/internal/nodeapi/nodeapitest"
	"github.com/certready/certready/internal/testpki"
	"github.com/certready/certready/reporter/servingcert/csrlookup"
	"github.com/certready/certready/reporter/servingcert/csrmatch"
)

func csrFor(name, node string, labelled bool, certPEM []byte) *certv1.CertificateSigningRequest {
	opts := []testpki.CSROption{testpki.Created(time.Now())}
	if labelled {
		opts = append(opts, testpki.Labelled(node))
	}
	if certPEM != nil {
		opts = append(opts, testpki.Issued(certPEM))
	}
	return testpki.KubeletCSR(name, node, opts...)
}

// TestEvidenceRule is the one rule the agent and check share: labelled
// CSRs first, the signer-wide list only when they explain nothing.
func TestEvidenceRule(t *testing.T) {
	ca, err := testpki.NewCA("ca")
	if err != nil {
		t.Fatal(err)
	}
	installed, err := ca.Issue(testpki.Serving{Node: "w1", IPs: []net.IP{net.ParseIP("192.0.2.11")}})
	if err != nil {
		t.Fatal(err)
	}
	older, err := ca.Issue(testpki.Serving{Node: "w1", IPs: []net.IP{net.ParseIP("192.0.2.11")}})
	if err != nil {
		t.Fatal(err)
	}
	fp := fingerprint.Of(installed.Cert)
	explains := csrFor("csr-installed", "w1", true, installed.CertPEM())
	stale := csrFor("csr-older", "w1", true, older.CertPEM())
	unlabelled := csrFor("csr-installed", "w1", false, installed.CertPEM())
	foreign := csrFor("csr-foreign", "w1", true, installed.CertPEM())
	foreign.Labels[names.NodeLabel] = "w2" // in the cache though labelled for w2
	otherSigner := csrFor("csr-signer", "w1", true, installed.CertPEM())
	otherSigner.Spec.SignerName = "example.com/other"
	listErr := errors.New("listing kubelet-serving CSRs: forbidden")

	for _, tc := range []struct {
		name        string
		labelled    []*certv1.CertificateSigningRequest
		proven      bool
		fallback    []*certv1.CertificateSigningRequest
		fallbackErr error
		wantListed  bool
		wantState   csrmatch.State
		wantCSR     string
		wantErr     bool
	}{
		{"a labelled CSR explains it: no list", []*certv1.CertificateSigningRequest{stale, explains}, false, nil, nil, false, csrmatch.Issued, "csr-installed", false},
		{"proven earlier: no list", []*certv1.CertificateSigningRequest{stale}, true, nil, nil, false, csrmatch.None, "csr-older", false},
		{"labelled ones explain nothing: the signer's list does", []*certv1.CertificateSigningRequest{stale}, false, []*certv1.CertificateSigningRequest{unlabelled}, nil, true, csrmatch.Issued, "csr-installed", false},
		{"none labelled: the signer's list", nil, false, []*certv1.CertificateSigningRequest{unlabelled}, nil, true, csrmatch.Issued, "csr-installed", false},
		{"a CSR labelled for another node is not this node's labelled evidence", []*certv1.CertificateSigningRequest{foreign, otherSigner}, false, nil, nil, true, csrmatch.None, "", false},
		{"list fails, labelled ones known: they are the evidence", []*certv1.CertificateSigningRequest{stale}, false, nil, listErr, true, csrmatch.None, "csr-older", false},
		{"list fails, nothing labelled: the lookup failed", nil, false, nil, listErr, true, "", "", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			listed := false
			res, err := csrlookup.Evidence(tc.labelled, "w1", fp, tc.proven, func() ([]*certv1.CertificateSigningRequest, error) {
				listed = true
				return tc.fallback, tc.fallbackErr
			})
			if listed != tc.wantListed {
				t.Errorf("signer-wide list called %v, want %v", listed, tc.wantListed)
			}
			if (err != nil) != tc.wantErr {
				t.Fatalf("err = %v, want error %v", err, tc.wantErr)
			}
			if tc.wantErr {
				return
			}
			if res.State != tc.wantState || res.Name != tc.wantCSR && tc.wantCSR != "" {
				t.Errorf("result %+v, want state %s CSR %q", res, tc.wantState, tc.wantCSR)
			}
		})
	}
}

// ListBySigner returns the node's CSRs only, without their requests, from a
// signer-wide read that others can fill with large requests.
func TestListBySignerKeepsOnlyTheNodesCSRsWithoutRequests(t *testing.T) {
	big := bytes.Repeat([]byte("A"), 1<<20)
	var objs []runtime.Object
	for i, node := range []string{"w1", "flood", "flood", "w1"} {
		c := csrFor(fmt.Sprintf("csr-%d", i), node, false, []byte("-----BEGIN CERTIFICATE-----"))
		c.Spec.Request = big
		objs = append(objs, c)
	}
	other := csrFor("csr-other-signer", "w1", false, nil)
	other.Spec.SignerName = "example.com/other"
	objs = append(objs, other)
	cs := fake.NewClientset(objs...)
	got, err := csrlookup.ListBySigner(context.Background(), nodeapitest.FromClientset(cs), "w1")
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, c := range got {
		names = append(names, c.Name)
		if len(c.Spec.Request) != 0 || len(c.Status.Certificate) == 0 {
			t.Errorf("%s: request of %d bytes kept, certificate %d bytes", c.Name, len(c.Spec.Request), len(c.Status.Certificate))
		}
	}
	sort.Strings(names)
	if strings.Join(names, ",") != "csr-0,csr-3" {
		t.Errorf("listed %v, want w1's kubelet-serving CSRs csr-0 and csr-3", names)
	}
}
