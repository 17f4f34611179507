package verdict_test

import (
	"context"
	"crypto/x509"
	"errors"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/certready/certready/reporter/servingcert/evidence"

	corev1 "k8s.io/api/core/v1"

	"github.com/certready/certready/internal/fingerprint"
	"github.com/certready/certready/internal/testpki"
	"github.com/certready/certready/reporter/servingcert/apipath"
	"github.com/certready/certready/reporter/servingcert/certfile"
	"github.com/certready/certready/reporter/servingcert/csrmatch"
	"github.com/certready/certready/reporter/servingcert/kubeletconfig"
	"github.com/certready/certready/reporter/servingcert/probe"
	"github.com/certready/certready/reporter/servingcert/verdict"
)

var now = time.Now()

type fixture struct {
	ca, other *testpki.CA
	good      *testpki.Pair
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	ca, err := testpki.NewCA("kubelet-ca")
	if err != nil {
		t.Fatal(err)
	}
	other, err := testpki.NewCA("other")
	if err != nil {
		t.Fatal(err)
	}
	f := &fixture{ca: ca, other: other}
	f.good = f.issue(t, ca, testpki.Serving{})
	return f
}

func (f *fixture) issue(t *testing.T, ca *testpki.CA, s testpki.Serving) *testpki.Pair {
	t.Helper()
	if s.Node == "" {
		s.Node = "w1"
	}
	if s.IPs == nil && s.DNSNames == nil {
		s.IPs = []net.IP{net.ParseIP("192.0.2.11")}
	}
	if s.NotBefore.IsZero() {
		s.NotBefore = now.Add(-10 * time.Minute)
	}
	p, err := ca.Issue(s)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func observed(p *testpki.Pair) certfile.Observation {
	return certfile.Observation{Path: "/var/lib/kubelet/pki/kubelet-server-current.pem", State: certfile.Present, Leaf: p.Cert, Fingerprint: fingerprint.Of(p.Cert)}
}

func presented(p *testpki.Pair) *probe.Result {
	return &probe.Result{Outcome: probe.Presented, Addr: "192.0.2.11:10250", Leaf: p.Cert, Fingerprint: fingerprint.Of(p.Cert)}
}

// ready is an input that passes every check; cases change one thing.
func (f *fixture) ready() evidence.Evidence {
	return evidence.Evidence{
		Node:     evidence.Node{Name: "w1", InternalIPs: []netip.Addr{netip.MustParseAddr("192.0.2.11")}, Dial: "192.0.2.11", DialType: "InternalIP"},
		Now:      now,
		CA:       f.ca.Pool(),
		File:     observed(f.good),
		CSR:      &evidence.CSR{Match: csrmatch.Result{State: csrmatch.Issued, Name: "csr-1", Created: now.Add(-10 * time.Minute)}, Retention: time.Hour},
		Endpoint: presented(f.good),
		// As the agent runs by default (--apiserver-proof=required).
		RequireAPIPath: true,
		APIPath:        &apipath.Result{Outcome: apipath.Proven},
	}
}

func TestEvaluate(t *testing.T) {
	f := newFixture(t)
	cases := []struct {
		name       string
		mutate     func(in *evidence.Evidence)
		wantStatus corev1.ConditionStatus
		wantReason verdict.Reason
		wantText   string
	}{
		{name: "every check passes", mutate: func(*evidence.Evidence) {}, wantStatus: corev1.ConditionFalse, wantReason: verdict.Ready, wantText: "issued by CSR csr-1"},
		{name: "the API server cannot verify the kubelet (its CA, or the address it dials not in the certificate)", mutate: func(in *evidence.Evidence) {
			in.APIPath = &apipath.Result{Outcome: apipath.CannotVerify, Detail: `Get "https://192.0.2.11:10250/containerLogs/x": tls: failed to verify certificate: x509: certificate signed by unknown authority`}
		}, wantStatus: corev1.ConditionTrue, wantReason: verdict.APIServerCannotVerifyKubelet, wantText: "--kubelet-certificate-authority"},
		{name: "kubelet configured without serverTLSBootstrap: named whatever the checks met first", mutate: func(in *evidence.Evidence) {
			in.Kubelet = kubeletconfig.Settings{Path: "/var/lib/kubelet/config.yaml", Known: true, RotateCertificates: true}
			in.File = certfile.Observation{Path: in.File.Path, State: certfile.Missing, Detail: "no such file"}
		}, wantStatus: corev1.ConditionTrue, wantReason: verdict.KubeletServingBootstrapOff, wantText: "serverTLSBootstrap is not true in the kubelet's configuration /var/lib/kubelet/config.yaml"},
		{name: "the same: the kubelet presents another certificate than the installed one", mutate: func(in *evidence.Evidence) {
			in.Kubelet = kubeletconfig.Settings{Path: "/etc/kubernetes/kubelet.json", Known: true}
			in.Endpoint = presented(f.issue(t, f.other, testpki.Serving{}))
			in.Endpoint.VerifyErr = x509.UnknownAuthorityError{}
		}, wantStatus: corev1.ConditionTrue, wantReason: verdict.KubeletServingBootstrapOff, wantText: "/etc/kubernetes/kubelet.json"},
		{name: "bootstrap off in the file, an issued certificate served, the API server's path not proven yet: still Unknown", mutate: func(in *evidence.Evidence) {
			in.Kubelet = kubeletconfig.Settings{Path: "/var/lib/kubelet/config.yaml", Known: true}
			in.APIPath = nil
		}, wantStatus: corev1.ConditionUnknown, wantReason: verdict.NotChecked, wantText: "not been proven yet"},
		{name: "bootstrap off in the file, an issued certificate of the wrong node served: the evidence names the cause", mutate: func(in *evidence.Evidence) {
			in.Kubelet = kubeletconfig.Settings{Path: "/var/lib/kubelet/config.yaml", Known: true}
			w2 := f.issue(t, f.ca, testpki.Serving{Node: "w2"})
			in.File, in.Endpoint = observed(w2), presented(w2)
		}, wantStatus: corev1.ConditionTrue, wantReason: verdict.CertificateInvalid, wantText: ""},
		{name: "bootstrap off in the file but an issued certificate served: the proof stands", mutate: func(in *evidence.Evidence) {
			in.Kubelet = kubeletconfig.Settings{Path: "/var/lib/kubelet/config.yaml", Known: true}
		}, wantStatus: corev1.ConditionFalse, wantReason: verdict.Ready, wantText: "issued by CSR csr-1"},
		{name: "a configuration that is not known changes nothing", mutate: func(in *evidence.Evidence) {
			in.Kubelet = kubeletconfig.Settings{Path: "/var/lib/kubelet/config.yaml", Err: errors.New("no such file")}
			in.File = certfile.Observation{Path: in.File.Path, State: certfile.Missing, Detail: "no such file"}
			in.CSR = nil
		}, wantStatus: corev1.ConditionTrue, wantReason: verdict.CertificateMissing, wantText: "no serving certificate installed"},
		{name: "an API server that read the log over an unverifiable kubelet certificate is named, the node stays not ready", mutate: func(in *evidence.Evidence) {
			rogue := f.issue(t, f.other, testpki.Serving{})
			in.File = certfile.Observation{Path: in.File.Path, State: certfile.Missing, Detail: "no such file"}
			in.CSR = nil
			in.Endpoint = presented(rogue)
			in.Endpoint.VerifyErr, in.Endpoint.Unchained = x509.UnknownAuthorityError{}, true
			in.Unverified = &apipath.Result{Outcome: apipath.Proven}
		}, wantStatus: corev1.ConditionTrue, wantReason: verdict.CertificateMissing, wantText: "it verifies no kubelet certificate"},
		{name: "the API server cannot reach the kubelet (a firewall between control plane and node)", mutate: func(in *evidence.Evidence) {
			in.APIPath = &apipath.Result{Outcome: apipath.CannotReach, Detail: "dial tcp 192.0.2.11:10250: i/o timeout"}
		}, wantStatus: corev1.ConditionTrue, wantReason: verdict.APIServerCannotReachKubelet, wantText: "i/o timeout"},
		{name: "the log request told nothing (RBAC): Unknown, never False", mutate: func(in *evidence.Evidence) {
			in.APIPath = &apipath.Result{Outcome: apipath.Unavailable, Detail: "forbidden"}
		}, wantStatus: corev1.ConditionUnknown, wantReason: verdict.APIServerProofUnavailable, wantText: "forbidden"},
		{name: "the API server's path not asked yet: Unknown", mutate: func(in *evidence.Evidence) { in.APIPath = nil },
			wantStatus: corev1.ConditionUnknown, wantReason: verdict.NotChecked, wantText: "kubectl logs"},
		{name: "--apiserver-proof=observe: a failing path judges nothing", mutate: func(in *evidence.Evidence) {
			in.RequireAPIPath = false
			in.APIPath = &apipath.Result{Outcome: apipath.CannotReach}
		}, wantStatus: corev1.ConditionFalse, wantReason: verdict.Ready, wantText: "issued by CSR csr-1"},
		{
			name: "file missing, nothing known about CSRs",
			mutate: func(in *evidence.Evidence) {
				in.File = certfile.Observation{State: certfile.Missing, Detail: "/x does not exist"}
				in.CSR = nil
			},
			wantStatus: corev1.ConditionTrue, wantReason: verdict.CertificateMissing, wantText: "/x does not exist",
		},
		{
			name: "file missing while the node's CSR is pending: the cause is the CSR",
			mutate: func(in *evidence.Evidence) {
				in.File = certfile.Observation{State: certfile.Missing, Detail: "/x does not exist"}
				in.CSR.Match = csrmatch.Result{State: csrmatch.Pending, Name: "csr-p", Created: now}
			},
			wantStatus: corev1.ConditionTrue, wantReason: verdict.CSRPending, wantText: "csr-p pending approval",
		},
		{
			name: "file missing and no CSR at all",
			mutate: func(in *evidence.Evidence) {
				in.File = certfile.Observation{State: certfile.Missing, Detail: "/x does not exist"}
				in.CSR.Match = csrmatch.Result{State: csrmatch.None}
			},
			wantStatus: corev1.ConditionTrue, wantReason: verdict.CertificateMissing, wantText: "no kubelet-serving CSR",
		},
		{
			name: "file unreadable",
			mutate: func(in *evidence.Evidence) {
				in.File = certfile.Observation{State: certfile.Unreadable, Detail: "/x is a directory"}
			},
			wantStatus: corev1.ConditionTrue, wantReason: verdict.CertificateUnreadable, wantText: "is a directory",
		},
		{
			name: "file malformed",
			mutate: func(in *evidence.Evidence) {
				in.File = certfile.Observation{State: certfile.Malformed, Detail: "no CERTIFICATE block found"}
			},
			wantStatus: corev1.ConditionTrue, wantReason: verdict.CertificateMalformed, wantText: "no CERTIFICATE block",
		},
		{
			name:       "CA file unusable: the agent cannot check",
			mutate:     func(in *evidence.Evidence) { in.CA, in.CAErr = nil, errors.New("/ca.crt holds no certificate") },
			wantStatus: corev1.ConditionUnknown, wantReason: verdict.CAUnavailable, wantText: "/ca.crt holds no certificate",
		},
		{
			name:       "another node's certificate",
			mutate:     func(in *evidence.Evidence) { in.File = observed(f.issue(t, f.ca, testpki.Serving{Node: "w2"})) },
			wantStatus: corev1.ConditionTrue, wantReason: verdict.CertificateInvalid, wantText: `CN="system:node:w2"`,
		},
		{
			name: "wrong organization",
			mutate: func(in *evidence.Evidence) {
				in.File = observed(f.issue(t, f.ca, testpki.Serving{Orgs: []string{"system:masters"}}))
			},
			wantStatus: corev1.ConditionTrue, wantReason: verdict.CertificateInvalid, wantText: "system:masters",
		},
		{
			name: "client-auth only",
			mutate: func(in *evidence.Evidence) {
				in.File = observed(f.issue(t, f.ca, testpki.Serving{EKU: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}))
			},
			wantStatus: corev1.ConditionTrue, wantReason: verdict.CertificateInvalid, wantText: "server auth",
		},
		{
			name: "expired",
			mutate: func(in *evidence.Evidence) {
				in.File = observed(f.issue(t, f.ca, testpki.Serving{NotBefore: now.Add(-2 * time.Hour), NotAfter: now.Add(-time.Minute)}))
			},
			wantStatus: corev1.ConditionTrue, wantReason: verdict.CertificateExpired, wantText: "expired at",
		},
		{
			// The node's clock is 30 s behind: by it the certificate is still
			// valid, by the API server's it expired 10 s ago.
			name: "expired by the API server's clock, valid by a node clock behind it",
			mutate: func(in *evidence.Evidence) {
				in.File = observed(f.issue(t, f.ca, testpki.Serving{NotBefore: now.Add(-2 * time.Hour), NotAfter: now.Add(20 * time.Second)}))
				in.Clock = evidence.Clock{Known: true, Skew: -30 * time.Second, Max: time.Minute}
			},
			wantStatus: corev1.ConditionTrue, wantReason: verdict.CertificateExpired, wantText: "expired at",
		},
		{
			name: "node clock 10 minutes behind the API server",
			mutate: func(in *evidence.Evidence) {
				in.Clock = evidence.Clock{Known: true, Skew: -10 * time.Minute, Max: time.Minute}
			},
			wantStatus: corev1.ConditionTrue, wantReason: verdict.ClockSkew, wantText: "node clock is 10m0s behind the API server's",
		},
		{
			name: "node clock 2 minutes ahead of the API server",
			mutate: func(in *evidence.Evidence) {
				in.Clock = evidence.Clock{Known: true, Skew: 2 * time.Minute, Max: time.Minute}
			},
			wantStatus: corev1.ConditionTrue, wantReason: verdict.ClockSkew, wantText: "2m0s ahead of",
		},
		{
			name: "a skew within the bound passes",
			mutate: func(in *evidence.Evidence) {
				in.Clock = evidence.Clock{Known: true, Skew: -20 * time.Second, Max: time.Minute}
			},
			wantStatus: corev1.ConditionFalse, wantReason: verdict.Ready,
		},
		{
			name: "not yet valid",
			mutate: func(in *evidence.Evidence) {
				in.File = observed(f.issue(t, f.ca, testpki.Serving{NotBefore: now.Add(time.Hour)}))
			},
			wantStatus: corev1.ConditionTrue, wantReason: verdict.CertificateNotYetValid, wantText: "clock skew",
		},
		{
			name:       "signed by another CA",
			mutate:     func(in *evidence.Evidence) { in.File = observed(f.issue(t, f.other, testpki.Serving{})) },
			wantStatus: corev1.ConditionTrue, wantReason: verdict.CertificateUntrusted, wantText: "does not chain",
		},
		{
			name: "SANs miss the node's InternalIP",
			mutate: func(in *evidence.Evidence) {
				in.File = observed(f.issue(t, f.ca, testpki.Serving{IPs: []net.IP{net.ParseIP("192.0.2.99")}}))
			},
			wantStatus: corev1.ConditionTrue, wantReason: verdict.CertificateIdentityMismatch, wantText: "InternalIP 192.0.2.11",
		},
		{
			name: "dual-stack node: the IPv6 InternalIP must be covered too",
			mutate: func(in *evidence.Evidence) {
				in.Node.InternalIPs = append(in.Node.InternalIPs, netip.MustParseAddr("2001:db8::11"))
			},
			wantStatus: corev1.ConditionTrue, wantReason: verdict.CertificateIdentityMismatch, wantText: "2001:db8::11",
		},
		{
			name: "DNS-only certificate naming the node passes where the API server dials the node name",
			mutate: func(in *evidence.Evidence) {
				p := f.issue(t, f.ca, testpki.Serving{DNSNames: []string{"W1."}})
				in.File, in.Endpoint = observed(p), presented(p)
				in.Node.Dial, in.Node.DialType = "w1", "Hostname"
			},
			wantStatus: corev1.ConditionFalse, wantReason: verdict.Ready,
		},
		{
			name: "DNS-only certificate where the API server dials the InternalIP: logs and exec would fail",
			mutate: func(in *evidence.Evidence) {
				p := f.issue(t, f.ca, testpki.Serving{DNSNames: []string{"w1"}})
				in.File, in.Endpoint = observed(p), presented(p)
			},
			wantStatus: corev1.ConditionTrue, wantReason: verdict.CertificateIdentityMismatch,
			wantText: "does not cover 192.0.2.11, the InternalIP address the API server dials",
		},
		{
			name: "IP certificate where the API server dials a hostname it lacks",
			mutate: func(in *evidence.Evidence) {
				in.Node.Dial, in.Node.DialType = "w1.example.com", "Hostname"
			},
			wantStatus: corev1.ConditionTrue, wantReason: verdict.CertificateIdentityMismatch,
			wantText: "does not cover w1.example.com, the Hostname address",
		},
		{
			name: "IP certificate with the hostname the API server dials, case and dot aside",
			mutate: func(in *evidence.Evidence) {
				p := f.issue(t, f.ca, testpki.Serving{IPs: []net.IP{net.ParseIP("192.0.2.11")}, DNSNames: []string{"W1.Example.com"}})
				in.File, in.Endpoint = observed(p), presented(p)
				in.Node.Dial, in.Node.DialType = "w1.example.com.", "Hostname"
			},
			wantStatus: corev1.ConditionFalse, wantReason: verdict.Ready,
		},
		{
			name: "DNS-only certificate for another name",
			mutate: func(in *evidence.Evidence) {
				in.File = observed(f.issue(t, f.ca, testpki.Serving{DNSNames: []string{"w2"}}))
			},
			wantStatus: corev1.ConditionTrue, wantReason: verdict.CertificateIdentityMismatch, wantText: `no DNS SAN "w1"`,
		},
		{
			name:       "CSR check not run yet: never False",
			mutate:     func(in *evidence.Evidence) { in.CSR = nil },
			wantStatus: corev1.ConditionUnknown, wantReason: verdict.NotChecked,
		},
		{
			name:       "CSR check skipped on purpose (plugin without credentials)",
			mutate:     func(in *evidence.Evidence) { in.CSR, in.SkipCSR = nil, true },
			wantStatus: corev1.ConditionFalse, wantReason: verdict.Ready, wantText: "CSR not checked",
		},
		{
			name:       "CSR lookup failed",
			mutate:     func(in *evidence.Evidence) { in.CSR.LookupErr = errors.New("forbidden") },
			wantStatus: corev1.ConditionUnknown, wantReason: verdict.CSRLookupFailed, wantText: "forbidden",
		},
		{
			name: "newer CSR pending, installed one unexplained",
			mutate: func(in *evidence.Evidence) {
				in.CSR.Match = csrmatch.Result{State: csrmatch.Pending, Name: "csr-p", Created: now}
			},
			wantStatus: corev1.ConditionTrue, wantReason: verdict.CSRPending, wantText: "csr-p",
		},
		{
			name: "CSR denied",
			mutate: func(in *evidence.Evidence) {
				in.CSR.Match = csrmatch.Result{State: csrmatch.Denied, Name: "csr-d", Detail: "nope"}
			},
			wantStatus: corev1.ConditionTrue, wantReason: verdict.CSRDenied, wantText: "denied: nope",
		},
		{
			name:       "CSR failed",
			mutate:     func(in *evidence.Evidence) { in.CSR.Match = csrmatch.Result{State: csrmatch.Failed, Name: "csr-f"} },
			wantStatus: corev1.ConditionTrue, wantReason: verdict.CSRFailed, wantText: "csr-f",
		},
		{
			name:       "CSR approved, not issued",
			mutate:     func(in *evidence.Evidence) { in.CSR.Match = csrmatch.Result{State: csrmatch.NotIssued, Name: "csr-n"} },
			wantStatus: corev1.ConditionTrue, wantReason: verdict.CSRNotIssued, wantText: "csr-n",
		},
		{
			name:       "young certificate with no CSR",
			mutate:     func(in *evidence.Evidence) { in.CSR.Match = csrmatch.Result{State: csrmatch.None} },
			wantStatus: corev1.ConditionTrue, wantReason: verdict.CSRNotFound, wantText: "no kubelet-serving CSR",
		},
		{
			name: "CSR garbage-collected but verified earlier by this agent",
			mutate: func(in *evidence.Evidence) {
				in.CSR.Match = csrmatch.Result{State: csrmatch.None}
				in.CSR.Remembered = &csrmatch.Result{State: csrmatch.Issued, Name: "csr-1"}
			},
			wantStatus: corev1.ConditionFalse, wantReason: verdict.Ready, wantText: "verified earlier by this agent",
		},
		{
			name: "certificate installed yesterday, CSR long collected",
			mutate: func(in *evidence.Evidence) {
				p := f.issue(t, f.ca, testpki.Serving{NotBefore: now.Add(-24 * time.Hour)})
				in.File, in.Endpoint = observed(p), presented(p)
				in.CSR.Match = csrmatch.Result{State: csrmatch.None}
			},
			wantStatus: corev1.ConditionFalse, wantReason: verdict.Ready, wantText: "older than the 1h0m0s CSR retention",
		},
		{
			name:       "endpoint not probed yet: never False",
			mutate:     func(in *evidence.Evidence) { in.Endpoint = nil },
			wantStatus: corev1.ConditionUnknown, wantReason: verdict.NotChecked,
		},
		{
			name: "endpoint unreachable",
			mutate: func(in *evidence.Evidence) {
				in.Endpoint = &probe.Result{Outcome: probe.Unreachable, Addr: "192.0.2.11:10250", Detail: "refused"}
			},
			wantStatus: corev1.ConditionTrue, wantReason: verdict.EndpointUnreachable, wantText: "192.0.2.11:10250",
		},
		{
			name: "kubelet has no certificate to serve",
			mutate: func(in *evidence.Evidence) {
				in.Endpoint = &probe.Result{Outcome: probe.NoCertificate, Addr: "a:1", Detail: "remote error: tls: internal error"}
			},
			wantStatus: corev1.ConditionTrue, wantReason: verdict.EndpointNoCertificate, wantText: "internal error",
		},
		{
			name:       "plain HTTP on the kubelet port",
			mutate:     func(in *evidence.Evidence) { in.Endpoint = &probe.Result{Outcome: probe.NotTLS, Addr: "a:1"} },
			wantStatus: corev1.ConditionTrue, wantReason: verdict.EndpointNotTLS,
		},
		{
			name: "other handshake failure",
			mutate: func(in *evidence.Evidence) {
				in.Endpoint = &probe.Result{Outcome: probe.HandshakeFailed, Addr: "a:1", Detail: "deadline"}
			},
			wantStatus: corev1.ConditionTrue, wantReason: verdict.EndpointHandshakeFailed, wantText: "deadline",
		},
		{
			name: "kubelet still serves the previous certificate",
			mutate: func(in *evidence.Evidence) {
				in.Endpoint = presented(f.issue(t, f.ca, testpki.Serving{}))
			},
			wantStatus: corev1.ConditionTrue, wantReason: verdict.EndpointCertificateMismatch, wantText: "stale",
		},
		{
			name: "kubelet presents an untrusted certificate",
			mutate: func(in *evidence.Evidence) {
				ep := presented(f.issue(t, f.other, testpki.Serving{}))
				ep.VerifyErr = errors.New("x509: certificate signed by unknown authority")
				in.Endpoint = ep
			},
			wantStatus: corev1.ConditionTrue, wantReason: verdict.EndpointCertificateUntrusted, wantText: "unknown authority",
		},
	}
	seen := map[verdict.Reason]bool{}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			in := f.ready()
			tc.mutate(&in)
			v := verdict.Evaluate(in)
			seen[v.Reason] = true
			if v.Status != tc.wantStatus || v.Reason != tc.wantReason {
				t.Fatalf("got %s/%s (%s), want %s/%s", v.Status, v.Reason, v.Message, tc.wantStatus, tc.wantReason)
			}
			if !strings.Contains(v.Message, tc.wantText) {
				t.Errorf("message %q does not contain %q", v.Message, tc.wantText)
			}
			if len(v.Results) == 0 {
				t.Fatal("no check results")
			}
			last := v.Results[len(v.Results)-1]
			if last.Passed != v.Ready() {
				t.Errorf("last check %s passed=%v for a verdict ready=%v", last.Step, last.Passed, v.Ready())
			}
			if v.Ready() && len(v.Results) != len(verdict.Steps) && !in.SkipCSR && in.RequireAPIPath {
				t.Errorf("ready after %d checks, want all %d", len(v.Results), len(verdict.Steps))
			}
		})
	}
	for _, r := range verdict.AllReasons {
		if !seen[r] && r != verdict.CheckStalled { // Stalled's, below
			t.Errorf("no case produces reason %s", r)
		}
	}
}

func TestStalledIsUnknownAndSaysSince(t *testing.T) {
	v := verdict.Stalled(now, now.Add(-4*time.Minute), "endpoint")
	if v.Status != corev1.ConditionUnknown || v.Reason != verdict.CheckStalled || v.Ready() {
		t.Fatalf("verdict %+v, want Unknown/CheckStalled", v)
	}
	for _, want := range []string{"for 4m0s", "now in endpoint"} {
		if !strings.Contains(v.Message, want) {
			t.Errorf("message %q lacks %q", v.Message, want)
		}
	}
}

// A verdict waits out the settle period when a healthy rotation can pass
// through it: a missing file whatever CSR the cache holds, a half-written
// pair, the kubelet still serving the previous certificate. Other failures
// are published at once.
func TestTransient(t *testing.T) {
	f := newFixture(t)
	missing := certfile.Observation{State: certfile.Missing, Detail: "/x does not exist"}
	for _, tc := range []struct {
		name   string
		change func(*evidence.Evidence)
		want   verdict.Reason
		wantT  bool
	}{
		{"ready", func(*evidence.Evidence) {}, verdict.Ready, false},
		{"file missing, no CSR evidence", func(in *evidence.Evidence) { in.File, in.CSR = missing, nil }, verdict.CertificateMissing, true},
		{"file missing, the new CSR still pending in the cache", func(in *evidence.Evidence) {
			in.File = missing
			in.CSR.Match = csrmatch.Result{State: csrmatch.Pending, Name: "csr-2", Created: now}
		}, verdict.CSRPending, true},
		{"file missing, the new CSR denied", func(in *evidence.Evidence) {
			in.File = missing
			in.CSR.Match = csrmatch.Result{State: csrmatch.Denied, Name: "csr-2", Created: now}
		}, verdict.CSRDenied, true},
		{"file present, CSR pending", func(in *evidence.Evidence) {
			in.CSR.Match = csrmatch.Result{State: csrmatch.Pending, Name: "csr-2", Created: now}
		}, verdict.CSRPending, false},
		{"file malformed", func(in *evidence.Evidence) {
			in.File = certfile.Observation{State: certfile.Malformed, Detail: "no PEM block"}
		}, verdict.CertificateMalformed, true},
		{"file unreadable", func(in *evidence.Evidence) {
			in.File = certfile.Observation{State: certfile.Unreadable, Detail: "permission denied"}
		}, verdict.CertificateUnreadable, false},
		{"stale certificate served", func(in *evidence.Evidence) {
			in.Endpoint = presented(f.issue(t, f.ca, testpki.Serving{}))
		}, verdict.EndpointCertificateMismatch, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := f.ready()
			tc.change(&in)
			v := verdict.Evaluate(in)
			if v.Reason != tc.want || v.Transient() != tc.wantT {
				t.Errorf("verdict %s (transient %v), want %s (transient %v): %s", v.Reason, v.Transient(), tc.want, tc.wantT, v.Message)
			}
		})
	}
}

// The installed certificate travels through a real TLS handshake into the
// verdict: the probe and the verdict agree on identity.
func TestEvaluateWithARealProbe(t *testing.T) {
	f := newFixture(t)
	p := f.issue(t, f.ca, testpki.Serving{IPs: []net.IP{net.ParseIP("127.0.0.1")}})
	addr := testpki.ServeTLS(t, p)
	in := f.ready()
	in.Node.InternalIPs = []netip.Addr{netip.MustParseAddr("127.0.0.1")}
	in.Node.Dial = "127.0.0.1"
	in.File = observed(p)
	res := probe.Probe(context.Background(), probe.Target{Addr: addr, ServerName: "127.0.0.1", Roots: f.ca.Pool()})
	in.Endpoint = &res
	if v := verdict.Evaluate(in); !v.Ready() {
		t.Fatalf("verdict %s: %s", v.Reason, v.Message)
	}
}

func TestNeedsEndpoint(t *testing.T) {
	f := newFixture(t)
	in := f.ready()
	in.Endpoint = nil
	if !verdict.NeedsEndpoint(in) {
		t.Error("a passing file/certificate/CSR should need the endpoint probe")
	}
	in.CSR.Match = csrmatch.Result{State: csrmatch.Pending}
	if verdict.NeedsEndpoint(in) {
		t.Error("a failing CSR check decides without the endpoint")
	}
}

// The API server's path is asked only when every node-local check passed.
func TestNeedsAPIPath(t *testing.T) {
	f := newFixture(t)
	in := f.ready()
	in.APIPath = nil
	if !verdict.NeedsAPIPath(in) {
		t.Error("a node that passes every node-local check should need the API server's path")
	}
	in.Endpoint = nil
	if verdict.NeedsAPIPath(in) {
		t.Error("an endpoint not probed decides without the API server's path")
	}
}

// The fleet view reads the expiry, the CSR and the fingerprint back from
// a ready verdict's facts as the agent writes them (the annotation), for
// every kind of proof; the message itself stays a sentence.
func TestParseFactsReadsWhatEvaluateWrites(t *testing.T) {
	f := newFixture(t)
	clientNotAfter := time.Date(2027, 3, 4, 5, 6, 7, 0, time.UTC)
	for _, tc := range []struct {
		name    string
		mutate  func(in *evidence.Evidence)
		wantCSR string
	}{
		{"issued by a CSR in the cache", func(*evidence.Evidence) {}, "csr-1"},
		{"verified earlier, CSR since deleted", func(in *evidence.Evidence) {
			in.CSR = &evidence.CSR{Match: csrmatch.Result{State: csrmatch.None}, Remembered: &csrmatch.Result{State: csrmatch.Issued, Name: "csr-gone.1"}, Retention: time.Hour}
		}, "csr-gone.1"},
		{"no CSR checked", func(in *evidence.Evidence) { in.CSR, in.SkipCSR = nil, true }, ""},
		{"with the kubelet's client certificate", func(in *evidence.Evidence) { in.ClientNotAfter = clientNotAfter }, "csr-1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := f.ready()
			tc.mutate(&in)
			v := verdict.Evaluate(in)
			if v.Reason != verdict.Ready {
				t.Fatalf("verdict %s: %s", v.Reason, v.Message)
			}
			if v.Facts == nil {
				t.Fatalf("a ready verdict without facts: %q", v.Message)
			}
			if strings.Contains(v.Message, "[") || strings.Contains(v.Message, "sha256=") {
				t.Errorf("message %q carries machine facts", v.Message)
			}
			want := verdict.Facts{NotBefore: f.good.Cert.NotBefore.Truncate(time.Second), NotAfter: f.good.Cert.NotAfter.Truncate(time.Second), CSR: tc.wantCSR, Fingerprint: in.File.Fingerprint,
				CA: fingerprint.Of(f.ca.Cert), CANotAfter: f.ca.Cert.NotAfter.Truncate(time.Second), ClientNotAfter: in.ClientNotAfter}
			same := func(facts verdict.Facts) bool {
				return facts.NotBefore.Equal(want.NotBefore) && facts.NotAfter.Equal(want.NotAfter) && facts.CSR == want.CSR && facts.Fingerprint == want.Fingerprint &&
					facts.CA == want.CA && facts.CANotAfter.Equal(want.CANotAfter) && facts.ClientNotAfter.Equal(want.ClientNotAfter)
			}
			if facts, ok := verdict.ParseAnnotation(v.Facts.Annotation()); !ok || !same(facts) {
				t.Errorf("ParseAnnotation(%s) = %+v, %v; want %+v", v.Facts.Annotation(), facts, ok, want)
			}
		})
	}
}

func TestFactsRoundTrip(t *testing.T) {
	fp := fingerprint.SHA256{0xab, 0xcd, 31: 0xef}
	at := time.Date(2027, 12, 1, 12, 0, 0, 0, time.UTC)
	for _, f := range []verdict.Facts{
		{NotAfter: at, CSR: "csr-abc12", Fingerprint: fp},
		{NotAfter: at, Fingerprint: fp},
		{NotAfter: at, CSR: "node-csr.with.dots-1", Fingerprint: fp},
		{NotAfter: at, CSR: "csr-abc12", Fingerprint: fp, CA: fingerprint.SHA256{0x01, 31: 0x02}, CANotAfter: at.AddDate(10, 0, 0), Agent: "v0.9.0-3-gabcdef0-dirty"},
		{NotAfter: at, Fingerprint: fp, CA: fingerprint.SHA256{0x01, 31: 0x02}, CANotAfter: at.AddDate(10, 0, 0), ClientNotAfter: at.AddDate(0, 0, -3), Agent: "v1"},
	} {
		// Whatever prose comes before the trailer, brackets included.
		for _, prose := range []string{"", "serving certificate abcd valid until then, issued by CSR x [not facts]; presented on [2001:db8::1]:10250"} {
			got, ok := verdict.ParseFacts(prose + trailer(f))
			if !ok || !got.NotAfter.Equal(f.NotAfter) || got.CSR != f.CSR || got.Fingerprint != f.Fingerprint || got.CA != f.CA || !got.CANotAfter.Equal(f.CANotAfter) || got.Agent != f.Agent ||
				!got.ClientNotAfter.Equal(f.ClientNotAfter) {
				t.Errorf("ParseFacts(%q) = %+v, %v; want %+v", prose+trailer(f), got, ok, f)
			}
		}
	}
	for _, msg := range []string{
		"CSR csr-x pending approval since 2026-12-01T00:00:00Z",
		"serving certificate 0123456789abcdef valid until 2027-12-01T12:00:00Z, issued by CSR csr-w1; presented on 192.0.2.11:10250",
		" [notAfter=2027-12-01T12:00:00Z csr=c]",                            // no fingerprint
		" [notAfter=yesterday sha256=" + fp.String() + "]",                  // not a time
		" [notAfter=2027-12-01T12:00:00Z sha256=abcd]",                      // a short fingerprint
		" [notAfter=2027-12-01T12:00:00Z sha256=" + fp.String() + " ca=12]", // a short CA fingerprint
		" [notAfter=2027-12-01T12:00:00Z sha256=" + fp.String() + "] trailing",
		" [notAfter=2027-12-01T12:00:00Z sha256=" + fp.String() + " clientNotAfter=soon]", // not a time
		" [notAfter=2027-12-01T12:00:00Z sha256=" + fp.String() + " caNotAfter=later]",    // not a time
	} {
		if got, ok := verdict.ParseFacts(msg); ok {
			t.Errorf("ParseFacts(%q) = %+v, want none", msg, got)
		}
	}
}

// A newer agent may state facts this reader does not know: they are
// skipped, the known ones still read.
func TestParseFactsSkipsFactsItDoesNotKnow(t *testing.T) {
	fp := fingerprint.SHA256{0xab, 31: 0xef}
	got, ok := verdict.ParseFacts(" [notAfter=2027-12-01T12:00:00Z csr=c1 sha256=" + fp.String() + " agent=v9.9.9 kubeletClientNotAfter=2027-01-01T00:00:00Z]")
	if !ok || got.CSR != "c1" || got.Fingerprint != fp {
		t.Errorf("ParseFacts = %+v, %v; want the known facts read", got, ok)
	}
}

func TestTheClusterFindingNeedsAnUnverifiableCertificateAndAnAnswer(t *testing.T) {
	f := newFixture(t)
	rogue := f.issue(t, f.other, testpki.Serving{})
	untrusted := presented(rogue)
	untrusted.VerifyErr, untrusted.Unchained = x509.HostnameError{Certificate: rogue.Cert, Host: "192.0.2.11"}, true
	otherName := presented(f.good)
	otherName.VerifyErr = x509.HostnameError{Certificate: f.good.Cert, Host: "w1.example"}
	cases := []struct {
		name                     string
		endpoint                 *probe.Result
		caErr                    error
		unverified               *apipath.Result
		wantUnverifiable, wantOK bool
	}{
		{name: "self-signed certificate, the API server answered", endpoint: untrusted, unverified: &apipath.Result{Outcome: apipath.Proven}, wantUnverifiable: true, wantOK: true},
		{name: "self-signed certificate, the API server refused it", endpoint: untrusted, unverified: &apipath.Result{Outcome: apipath.CannotVerify}, wantUnverifiable: true},
		{name: "self-signed certificate, the answer told nothing", endpoint: untrusted, unverified: &apipath.Result{Outcome: apipath.Unavailable}, wantUnverifiable: true},
		{name: "not asked", endpoint: untrusted, wantUnverifiable: true},
		{name: "a verified certificate", endpoint: presented(f.good), unverified: &apipath.Result{Outcome: apipath.Proven}},
		{name: "the CA's certificate for another name (the API server may dial one it covers)", endpoint: otherName, unverified: &apipath.Result{Outcome: apipath.Proven}},
		{name: "no certificate at all", endpoint: &probe.Result{Outcome: probe.NoCertificate}, unverified: &apipath.Result{Outcome: apipath.Proven}},
		{name: "no CA to judge with", endpoint: untrusted, caErr: errors.New("unreadable"), unverified: &apipath.Result{Outcome: apipath.Proven}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			in := f.ready()
			in.Endpoint, in.CAErr, in.Unverified = c.endpoint, c.caErr, c.unverified
			if got := verdict.Unverifiable(in); got != c.wantUnverifiable {
				t.Errorf("Unverifiable = %v, want %v", got, c.wantUnverifiable)
			}
			if got := verdict.APIServerVerifiesNoKubelet(in); got != c.wantOK {
				t.Errorf("APIServerVerifiesNoKubelet = %v, want %v", got, c.wantOK)
			}
		})
	}
}
