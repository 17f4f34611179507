package apipath_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"

	"github.com/certready/certready/internal/fingerprint"
	"github.com/certready/certready/internal/nodeapi"
	"github.com/certready/certready/reporter/servingcert/apipath"
)

// apiServer answers pods/log as the API server does: the log as text, or
// a Status with the code and message it passes on from its dial of the
// kubelet.
func apiServer(t *testing.T, code int, message string) *rest.Config {
	t.Helper()
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/api/v1/namespaces/certready-system/pods/certready-agent-x1/log" || r.URL.Query().Get("limitBytes") != "1" || r.URL.Query().Get("container") != "agent" {
			t.Errorf("request %s", r.URL)
		}
		if code == http.StatusOK {
			w.Header().Set("Content-Type", "text/plain")
			_, _ = w.Write([]byte("I"))
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(code)
		_ = json.NewEncoder(w).Encode(metav1.Status{TypeMeta: metav1.TypeMeta{Kind: "Status", APIVersion: "v1"}, Status: metav1.StatusFailure, Code: int32(code), Message: message})
	}))
	t.Cleanup(srv.Close)
	return &rest.Config{Host: srv.URL, TLSClientConfig: rest.TLSClientConfig{Insecure: true}}
}

// The agent's own connection to the API server failing says nothing about
// the API server's path to the kubelet.
func TestClassifyTheAgentsOwnErrorsAsUnavailable(t *testing.T) {
	for _, err := range []error{
		errors.New(`Get "https://10.96.0.1:443/api/v1/namespaces/certready-system/pods/x/log": dial tcp 10.96.0.1:443: connect: connection refused`),
		errors.New(`Get "https://10.96.0.1:443/api/v1/namespaces/certready-system/pods/x/log": tls: failed to verify certificate: x509: certificate has expired`),
	} {
		if got, _ := apipath.Classify(err); got != apipath.Unavailable {
			t.Errorf("%v: %s, want unavailable", err, got)
		}
	}
}

// What the API server answers, as it answers it on the wire (the messages
// are those kube-apiserver passes on from its dial of the kubelet).
func TestClassifyTheAPIServersAnswers(t *testing.T) {
	for _, tc := range []struct {
		name    string
		code    int
		message string
		want    apipath.Outcome
	}{
		{"a log, even of one byte", http.StatusOK, "", apipath.Proven},
		{"the API server does not trust the kubelet's CA", http.StatusInternalServerError,
			`Get "https://192.0.2.11:10250/containerLogs/certready-system/certready-agent-x1/agent?limitBytes=1": tls: failed to verify certificate: x509: certificate signed by unknown authority`, apipath.CannotVerify},
		{"the address it dials is not in the certificate", http.StatusInternalServerError,
			`Get "https://198.51.100.7:10250/containerLogs/x": tls: failed to verify certificate: x509: certificate is valid for 192.0.2.11, not 198.51.100.7`, apipath.CannotVerify},
		{"the kubelet has no serving certificate", http.StatusInternalServerError,
			`Get "https://192.0.2.11:10250/containerLogs/x": remote error: tls: internal error`, apipath.CannotVerify},
		{"a firewall drops the connection", http.StatusInternalServerError,
			`Get "https://192.0.2.11:10250/containerLogs/x": dial tcp 192.0.2.11:10250: i/o timeout`, apipath.CannotReach},
		{"nothing listens", http.StatusInternalServerError, `Get "https://192.0.2.11:10250/containerLogs/x": dial tcp 192.0.2.11:10250: connect: connection refused`, apipath.CannotReach},
		{"the kubelet refuses the API server's client (relayed)", http.StatusForbidden, `Forbidden (user=kube-apiserver-kubelet-client, verb=get, resource=nodes, subresource=proxy)`, apipath.Unavailable},
		{"etcd away: a dial, but not the kubelet's", http.StatusInternalServerError, `rpc error: code = Unavailable desc = connection error: desc = "transport: Error while dialing: dial tcp 10.0.0.10:2379: connect: connection refused"`, apipath.Unavailable},
		{"no right to read the log", http.StatusForbidden, `pods "certready-agent-x1" is forbidden: User "system:serviceaccount:certready-system:certready-agent" cannot get resource "pods/log"`, apipath.Unavailable},
		{"the pod is not found", http.StatusNotFound, `pods "certready-agent-x1" not found`, apipath.Unavailable},
		{"throttled", http.StatusTooManyRequests, `too many requests`, apipath.Unavailable},
		{"another server error", http.StatusInternalServerError, `etcdserver: request timed out`, apipath.Unavailable},
	} {
		t.Run(tc.name, func(t *testing.T) {
			api, err := nodeapi.New(apiServer(t, tc.code, tc.message))
			if err != nil {
				t.Fatal(err)
			}
			got, detail := apipath.Classify(api.PodLog(context.Background(), "certready-system", "certready-agent-x1", "agent"))
			if got != tc.want {
				t.Errorf("outcome %s (%s), want %s", got, detail, tc.want)
			}
			if tc.code != http.StatusOK && !strings.Contains(detail, strings.SplitN(tc.message, ":", 2)[0]) {
				t.Errorf("detail %q does not carry the API server's message %q", detail, tc.message)
			}
		})
	}
}

// One request per interval for a certificate once proven; a new
// certificate, and a verdict about to become ready with a proof older than
// Fresh, ask again; a failure is asked again after 30 s, not at every
// check; a request that hangs ends at the timeout as unavailable.
func TestProverAsksOnlyWhenTheProofNoLongerStands(t *testing.T) {
	var asked atomic.Int32
	var answer error // the prover calls Ask on the test's goroutine
	p := &apipath.Prover{
		Ask: func(context.Context) error {
			asked.Add(1)
			return answer
		},
		Timeout: time.Second, Interval: 10 * time.Minute, Fresh: time.Minute,
	}
	ctx := context.Background()
	t0 := time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC)
	a, b := fingerprint.SHA256{1}, fingerprint.SHA256{2}
	steps := []struct {
		name          string
		fp            fingerprint.SHA256
		at            time.Duration
		becomingReady bool
		wantAsks      int32
	}{
		{"first", a, 0, true, 1},
		{"a check a minute later, steady", a, time.Minute, false, 1},
		{"nine minutes later", a, 9 * time.Minute, false, 1},
		{"about to become ready, proof 9 minutes old", a, 9*time.Minute + time.Second, true, 2},
		{"eleven minutes after that: the interval is over", a, 21 * time.Minute, false, 3},
		{"a new certificate", b, 21*time.Minute + time.Second, false, 4},
	}
	for _, s := range steps {
		p.Evidence(ctx, s.fp, t0.Add(s.at), s.becomingReady)
		if got := asked.Load(); got != s.wantAsks {
			t.Fatalf("%s: %d requests, want %d", s.name, got, s.wantAsks)
		}
	}
	answer = apierrors.NewInternalError(errors.New(`Get "https://192.0.2.11:10250/containerLogs/x": dial tcp 192.0.2.11:10250: i/o timeout`))
	base := t0.Add(time.Hour)
	if r := p.Evidence(ctx, a, base, false); r.Outcome != apipath.CannotReach || asked.Load() != 5 {
		t.Fatalf("a failure: %+v after %d requests", r, asked.Load())
	}
	if p.Evidence(ctx, a, base.Add(10*time.Second), false); asked.Load() != 5 {
		t.Error("a failure asked again 10 s later: want 30 s")
	}
	if p.Evidence(ctx, a, base.Add(30*time.Second+3*time.Second+time.Millisecond), false); asked.Load() != 6 {
		t.Error("a failure not asked again after 30 s plus at most a tenth")
	}
	// The next failure waits 60 s, plus up to 6 s.
	if p.Evidence(ctx, a, base.Add(33*time.Second+59*time.Second), false); asked.Load() != 6 {
		t.Error("a second failure asked again within 60 s: the backoff does not double")
	}
	if p.Evidence(ctx, a, base.Add(33*time.Second+66*time.Second+time.Millisecond), false); asked.Load() != 7 {
		t.Error("a second failure not asked again after 66 s")
	}

	// A proof of the same certificate survives an answer that tells
	// nothing (the API server restarting), for up to twice the interval,
	// except when the verdict is about to become ready.
	answer = nil
	p2 := &apipath.Prover{Ask: func(context.Context) error { asked.Add(1); return answer }, Timeout: time.Second, Interval: 10 * time.Minute, Fresh: time.Minute}
	p2.Evidence(ctx, a, t0, true)
	answer = apierrors.NewServiceUnavailable("the API server is shutting down")
	if r := p2.Evidence(ctx, a, t0.Add(12*time.Minute), false); r.Outcome != apipath.Proven {
		t.Errorf("an unavailable answer 12 minutes after a proof: %+v, want the proof kept", r)
	}
	if r := p2.Evidence(ctx, a, t0.Add(12*time.Minute+time.Second), true); r.Outcome != apipath.Unavailable {
		t.Errorf("about to become ready on an unavailable answer: %+v, want unavailable", r)
	}
	if r := p2.Evidence(ctx, a, t0.Add(25*time.Minute), false); r.Outcome != apipath.Unavailable {
		t.Errorf("unavailable 25 minutes after the proof: %+v, want unavailable", r)
	}

	hang := &apipath.Prover{Ask: func(ctx context.Context) error { <-ctx.Done(); return ctx.Err() }, Timeout: 50 * time.Millisecond, Interval: time.Minute, Fresh: time.Minute}
	if r := hang.Evidence(ctx, a, t0, true); r.Outcome != apipath.Unavailable || !strings.Contains(r.Detail, "no answer within") {
		t.Errorf("a hanging log endpoint: %+v, want unavailable naming the timeout", r)
	}
}
