package npdcheck_test

import (
	"context"
	"encoding/json"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	certv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	cpmtypes "k8s.io/node-problem-detector/pkg/custompluginmonitor/types"

	"github.com/certready/certready/internal/names"
	"github.com/certready/certready/internal/nodeapi/nodeapitest"
	"github.com/certready/certready/internal/testpki"
	"github.com/certready/certready/reporter/npdcheck"
)

func TestRun(t *testing.T) {
	ca, err := testpki.NewCA("kubelet-ca")
	if err != nil {
		t.Fatal(err)
	}
	caFile := filepath.Join(t.TempDir(), "ca.crt")
	if err := os.WriteFile(caFile, ca.PEM(), 0o644); err != nil {
		t.Fatal(err)
	}
	young, err := ca.Issue(testpki.Serving{Node: "w1", IPs: []net.IP{net.ParseIP("127.0.0.1")}, NotBefore: time.Now().Add(-time.Minute)})
	if err != nil {
		t.Fatal(err)
	}
	served := testpki.ServeTLS(t, young)
	_, portStr, _ := net.SplitHostPort(served)
	port, _ := strconv.Atoi(portStr)
	other, err := ca.Issue(testpki.Serving{Node: "w1", IPs: []net.IP{net.ParseIP("127.0.0.1")}})
	if err != nil {
		t.Fatal(err)
	}
	stale := testpki.ServeTLS(t, other)
	_, stalePortStr, _ := net.SplitHostPort(stale)
	stalePort, _ := strconv.Atoi(stalePortStr)

	pki := func(p *testpki.Pair) string {
		dir := t.TempDir()
		if p != nil {
			if _, err := testpki.Install(dir, p); err != nil {
				t.Fatal(err)
			}
		}
		return dir
	}
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "w1"}}
	node.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "127.0.0.1"}}
	node.Status.DaemonEndpoints.KubeletEndpoint.Port = int32(port)
	issuedCSR := &certv1.CertificateSigningRequest{
		ObjectMeta: metav1.ObjectMeta{Name: "csr-1", Labels: map[string]string{names.NodeLabel: "w1"}},
		Spec:       certv1.CertificateSigningRequestSpec{SignerName: names.SignerName, Username: "system:node:w1"},
		Status: certv1.CertificateSigningRequestStatus{
			Conditions:  []certv1.CertificateSigningRequestCondition{{Type: certv1.CertificateApproved, Status: corev1.ConditionTrue}},
			Certificate: young.CertPEM(),
		},
	}
	pendingCSR := issuedCSR.DeepCopy()
	pendingCSR.Status = certv1.CertificateSigningRequestStatus{}
	loop := []netip.Addr{netip.MustParseAddr("127.0.0.1")}
	// node-problem-detector started a minute ago; the node as it left the
	// condition: transition before or after that start.
	npdStart := time.Now().Add(-time.Minute)
	withCondition := func(status corev1.ConditionStatus, transition time.Time) *corev1.Node {
		n := node.DeepCopy()
		n.Status.Conditions = []corev1.NodeCondition{{Type: names.ConditionType, Status: status, LastTransitionTime: metav1.NewTime(transition.Truncate(time.Second))}}
		return n
	}

	cases := []struct {
		name     string
		opts     npdcheck.Options
		want     cpmtypes.Status
		wantLine string
	}{
		{name: "ready without API: CSR skipped", opts: npdcheck.Options{NodeIPs: loop, PKIDir: pki(young), KubeletPort: port}, want: cpmtypes.OK, wantLine: "KubeletServingCertReady"},
		{name: "ready with API: node port and CSR from the API", opts: npdcheck.Options{PKIDir: pki(young), Client: nodeapitest.FromClientset(fake.NewClientset(node, issuedCSR))}, want: cpmtypes.OK, wantLine: "KubeletServingCertReady"},
		{name: "young certificate whose CSR is pending", opts: npdcheck.Options{PKIDir: pki(young), Client: nodeapitest.FromClientset(fake.NewClientset(node, pendingCSR))}, want: cpmtypes.NonOK, wantLine: "CSRPending"},
		{name: "no certificate installed", opts: npdcheck.Options{NodeIPs: loop, PKIDir: pki(nil), KubeletPort: port}, want: cpmtypes.NonOK, wantLine: "CertificateMissing"},
		{name: "kubelet serves another certificate", opts: npdcheck.Options{NodeIPs: loop, PKIDir: pki(young), KubeletPort: stalePort}, want: cpmtypes.NonOK, wantLine: "EndpointCertificateMismatch"},
		{name: "bad CA file: unknown", opts: npdcheck.Options{NodeIPs: loop, PKIDir: pki(young), KubeletPort: port, CAFile: "/nonexistent/ca.crt"}, want: cpmtypes.Unknown, wantLine: "CAUnavailable"},
		{name: "no node IP and no API: unknown", opts: npdcheck.Options{PKIDir: pki(young)}, want: cpmtypes.Unknown, wantLine: "CheckFailed: no node IP"},
		{name: "hand-over: verified, nothing published yet: held back as Unknown", opts: npdcheck.Options{PKIDir: pki(young), Client: nodeapitest.FromClientset(fake.NewClientset(node, issuedCSR)), PublisherStart: npdStart}, want: cpmtypes.Unknown, wantLine: npdcheck.PublishPending},
		{name: "hand-over: verified, False left by an earlier NPD: held back (its heartbeat is stale)", opts: npdcheck.Options{PKIDir: pki(young), Client: nodeapitest.FromClientset(fake.NewClientset(withCondition(corev1.ConditionFalse, npdStart.Add(-time.Hour)), issuedCSR)), PublisherStart: npdStart}, want: cpmtypes.Unknown, wantLine: npdcheck.PublishPending},
		{name: "hand-over: verified, True left by an earlier NPD: held back", opts: npdcheck.Options{PKIDir: pki(young), Client: nodeapitest.FromClientset(fake.NewClientset(withCondition(corev1.ConditionTrue, npdStart.Add(-time.Hour)), issuedCSR)), PublisherStart: npdStart}, want: cpmtypes.Unknown, wantLine: npdcheck.PublishPending},
		{name: "hand-over: verified, this NPD published Unknown: OK turns it False", opts: npdcheck.Options{PKIDir: pki(young), Client: nodeapitest.FromClientset(fake.NewClientset(withCondition(corev1.ConditionUnknown, npdStart.Add(time.Second)), issuedCSR)), PublisherStart: npdStart}, want: cpmtypes.OK, wantLine: "KubeletServingCertReady"},
		{name: "hand-over: verified, this NPD published True in the second it started: OK", opts: npdcheck.Options{PKIDir: pki(young), Client: nodeapitest.FromClientset(fake.NewClientset(withCondition(corev1.ConditionTrue, npdStart), issuedCSR)), PublisherStart: npdStart}, want: cpmtypes.OK, wantLine: "KubeletServingCertReady"},
		{name: "hand-over: verified, this NPD published False: stays OK", opts: npdcheck.Options{PKIDir: pki(young), Client: nodeapitest.FromClientset(fake.NewClientset(withCondition(corev1.ConditionFalse, npdStart.Add(30*time.Second)), issuedCSR)), PublisherStart: npdStart}, want: cpmtypes.OK, wantLine: "KubeletServingCertReady"},
		{name: "hand-over: a problem is never held back", opts: npdcheck.Options{PKIDir: pki(young), Client: nodeapitest.FromClientset(fake.NewClientset(node, pendingCSR)), PublisherStart: npdStart}, want: cpmtypes.NonOK, wantLine: "CSRPending"},
		{name: "node missing from the API: unknown", opts: npdcheck.Options{PKIDir: pki(young), Client: nodeapitest.FromClientset(fake.NewClientset())}, want: cpmtypes.Unknown, wantLine: "CheckFailed: reading node w1"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			tc.opts.NodeName = "w1"
			if tc.opts.CAFile == "" {
				tc.opts.CAFile = caFile
			}
			tc.opts.Timeout = 2 * time.Second
			status, line := npdcheck.Run(context.Background(), tc.opts)
			if status != tc.want {
				t.Fatalf("status %d (%s), want %d", status, line, tc.want)
			}
			if !strings.HasPrefix(line, tc.wantLine) {
				t.Errorf("line %q, want prefix %q", line, tc.wantLine)
			}
			if len(line) > npdcheck.MaxOutput || strings.Contains(line, "\n") {
				t.Errorf("line %q is not one line of at most %d bytes", line, npdcheck.MaxOutput)
			}
		})
	}
}

func TestLine(t *testing.T) {
	long := strings.Repeat("é", 60) // 120 bytes
	got := npdcheck.Line(long)
	if len(got) > npdcheck.MaxOutput || !strings.HasSuffix(got, "...") || !strings.HasPrefix(got, "éé") {
		t.Errorf("Line(%d bytes) = %q (%d bytes)", len(long), got, len(got))
	}
	if got := npdcheck.Line("a\nb\tc"); got != "a b c" {
		t.Errorf("newlines survive: %q", got)
	}
}

// The shipped plugin configuration must be one node-problem-detector accepts,
// and must not publish a start-up status before the first real check.
func TestShippedPluginConfig(t *testing.T) {
	data, err := os.ReadFile("../../manifests/components/npd/certready-plugin-monitor.json")
	if err != nil {
		t.Fatal(err)
	}
	dec := json.NewDecoder(strings.NewReader(string(data)))
	dec.DisallowUnknownFields()
	var cfg cpmtypes.CustomPluginConfig
	if err := dec.Decode(&cfg); err != nil {
		t.Fatalf("decode: %v", err)
	}
	if err := cfg.ApplyConfiguration(); err != nil {
		t.Fatalf("apply: %v", err)
	}
	// Validate stats the plugin path on this machine: point it at a file
	// that exists here, after checking the shipped one is absolute.
	for _, r := range cfg.Rules {
		if !filepath.IsAbs(r.Path) {
			t.Errorf("rule path %q is not absolute", r.Path)
		}
		r.Path = os.Args[0]
	}
	if err := cfg.Validate(); err != nil {
		t.Fatalf("validate: %v", err)
	}
	if cfg.PluginGlobalConfig.SkipInitialStatus == nil || !*cfg.PluginGlobalConfig.SkipInitialStatus {
		t.Error("skip_initial_status must be true: NPD's default start-up status False would lift the taint unchecked")
	}
	if *cfg.PluginGlobalConfig.MaxOutputLength < npdcheck.MaxOutput {
		t.Errorf("max_output_length %d cuts the check's line", *cfg.PluginGlobalConfig.MaxOutputLength)
	}
	if len(cfg.Rules) != 1 || cfg.Rules[0].Condition != "KubeletServingCertNotReady" || cfg.Rules[0].Args[0] != "check" {
		t.Errorf("rule %+v", cfg.Rules[0])
	}
	// NPD shows the default condition's reason and message when the check
	// passes: they must say what the agent says then.
	if len(cfg.DefaultConditions) != 1 || cfg.DefaultConditions[0].Reason != "KubeletServingCertReady" {
		t.Errorf("default condition %+v: its reason is what a ready node shows; want KubeletServingCertReady", cfg.DefaultConditions)
	}
	// Without the API the check cannot hand over to NPD (package comment).
	if !slices.Contains(cfg.Rules[0].Args, "--use-api") || slices.ContainsFunc(cfg.Rules[0].Args, func(a string) bool { return strings.HasPrefix(a, "--npd-hand-over") }) {
		t.Errorf("rule args %q: want --use-api, and the hand-over left on", cfg.Rules[0].Args)
	}
}
