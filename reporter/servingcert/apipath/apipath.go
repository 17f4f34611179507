// Package apipath proves the path kubectl logs takes: the API server's own
// connection to this node's kubelet. The agent asks the API server for one
// byte of its own container's log (pods/log, through the API server, no
// nodes/proxy right); to answer, the API server dials the kubelet at the
// address its --kubelet-preferred-address-types picks and verifies it with
// its own --kubelet-certificate-authority, exactly as for kubectl logs and
// exec. An answer, even an empty log, proves that connection; the error the
// API server passes on says which part failed.
package apipath

import (
	"context"
	"errors"
	"math/rand/v2"
	"strings"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"github.com/certready/certready/internal/fingerprint"
)

// Outcome is what the API server's answer to a log request says
// about its connection to the kubelet.
type Outcome string

const (
	Proven       Outcome = "proven"
	CannotVerify Outcome = "cannot-verify"
	CannotReach  Outcome = "cannot-reach"
	// Unavailable: the request told nothing about the path (RBAC,
	// throttling, another API error): the verdict is Unknown.
	Unavailable Outcome = "unavailable"
)

// Outcomes lists them, for metrics.
var Outcomes = []Outcome{Proven, CannotVerify, CannotReach, Unavailable}

// Result is the evidence of the API server's path to the kubelet.
type Result struct {
	Outcome Outcome
	// Detail is the API server's error, or why nothing was learnt.
	Detail string
}

// Mode is --apiserver-proof.
type Mode string

const (
	// Required: the ready verdict needs the API server's path proven too.
	Required Mode = "required"
	// Observe: proven and exported as metrics, never judged.
	Observe Mode = "observe"
	// Off: never asked.
	Off Mode = "off"
)

// ParseMode reads --apiserver-proof.
func ParseMode(s string) (Mode, error) {
	switch m := Mode(s); m {
	case Required, Observe, Off:
		return m, nil
	}
	return "", errors.New("want required, observe or off")
}

// Classify names what an answer of the API server (err from the log
// request) says about its path to the kubelet. Only an error the API
// server sent (a Status) about its request to the kubelet
// (".../containerLogs/...", the URL it dialled) says the path failed;
// anything else (the agent's own connection to the API server, etcd, a
// restarting API server) tells nothing about the path.
func Classify(err error) (Outcome, string) {
	if err == nil {
		return Proven, ""
	}
	var st apierrors.APIStatus
	if !errors.As(err, &st) {
		return Unavailable, "the log request did not reach the API server: " + err.Error()
	}
	msg := st.Status().Message
	lower := strings.ToLower(msg)
	fromKubeletDial := strings.Contains(msg, "/containerLogs/")
	switch code := st.Status().Code; {
	case (code == 401 || code == 403) && strings.HasPrefix(msg, "pods "):
		return Unavailable, "the API server refused the agent's log request (" + msg + "): the agent needs get on pods/log in its namespace"
	case code == 401 || code == 403:
		// Relayed from the kubelet: the TLS connection worked, the kubelet
		// refused the API server's client (kubectl logs fails too).
		return Unavailable, "the kubelet refused the API server's request (" + msg + "): check the kubelet's authentication and authorization of the API server's client certificate"
	case code == 404:
		return Unavailable, "the agent's own pod or container was not found (" + msg + "): check --pod-name, --pod-namespace and --container-name"
	case !fromKubeletDial:
		return Unavailable, "the log request failed: " + msg
	case strings.Contains(lower, "x509:") || strings.Contains(lower, "failed to verify certificate") || strings.Contains(lower, "tls:"):
		return CannotVerify, msg
	case strings.Contains(lower, "dial tcp") || strings.Contains(lower, "connection refused") || strings.Contains(lower, "i/o timeout") ||
		strings.Contains(lower, "no route to host") || strings.Contains(lower, "network is unreachable") || strings.Contains(lower, "connection reset"):
		return CannotReach, msg
	}
	return Unavailable, "the log request failed: " + msg
}

// Prover asks, and remembers its answers, so that a node in steady state
// costs one request per Interval, and a moment's trouble of the control
// plane does not take back a proof of the same certificate.
type Prover struct {
	// Ask makes the log request (nodeapi.API.PodLog of the agent's own
	// container).
	Ask func(ctx context.Context) error
	// Timeout bounds one request; above the API server's own 30 s dial
	// timeout to the kubelet, so that a dropped connection is named by it.
	Timeout time.Duration
	// Interval: how long a proof of the same certificate stands (plus up
	// to a tenth of it, random, so that a fleet's proofs spread out).
	Interval time.Duration
	// Fresh: how old a proof may be when the verdict is about to become
	// ready.
	Fresh time.Duration
	// Count, when set, hears each request's outcome.
	Count func(Outcome)
	// FailureStands, when set, is how long a failed answer stands
	// (else 30 s, doubling up to Interval): for a prover whose failure is
	// the healthy answer.
	FailureStands time.Duration

	mu sync.Mutex
	// The last proof, of which certificate, when.
	provenFor fingerprint.SHA256
	provenAt  time.Time
	// The last failed answer, for which certificate, when, and how many
	// in a row.
	failed    Result
	failedFor fingerprint.SHA256
	failedAt  time.Time
	failures  int
	jitter    time.Duration
	// failJitter spreads the retries of a fleet that failed at once (an
	// API server restart): up to a tenth of the backoff, random.
	failJitter time.Duration
}

// Evidence is the proof for the certificate fp at now. A proof of fp
// stands for Interval (Fresh when becomingReady). A failed answer stands
// 30 s, doubling up to Interval (plus up to a tenth, random), before it
// is asked again. An answer that
// tells nothing (unavailable) does not take back a proof of fp younger
// than twice Interval, unless the verdict is about to become ready; a
// failure of the path itself (cannot verify, cannot reach) does.
func (p *Prover) Evidence(ctx context.Context, fp fingerprint.SHA256, now time.Time, becomingReady bool) Result {
	p.mu.Lock()
	defer p.mu.Unlock()
	proven := Result{Outcome: Proven}
	provenAge := now.Sub(p.provenAt)
	hasProof := !p.provenAt.IsZero() && fp == p.provenFor && provenAge >= 0
	stands := p.Interval + p.jitter
	if becomingReady {
		stands = min(stands, p.Fresh)
	}
	if hasProof && provenAge < stands {
		return proven
	}
	graced := func(r Result) Result {
		if r.Outcome == Unavailable && hasProof && !becomingReady && provenAge < 2*p.Interval {
			return proven
		}
		return r
	}
	if !p.failedAt.IsZero() && fp == p.failedFor {
		backoff := p.backoff() + p.failJitter
		if age := now.Sub(p.failedAt); age >= 0 && age < backoff {
			return graced(p.failed)
		}
	}
	rctx, cancel := context.WithTimeout(ctx, p.Timeout)
	defer cancel()
	err := p.Ask(rctx)
	if err != nil && ctx.Err() != nil {
		// Cut short by the caller: no answer of the API server's.
		return Result{Outcome: Unavailable, Detail: "the check was cut short"}
	}
	if err != nil && rctx.Err() != nil {
		err = errors.New("no answer within " + p.Timeout.String() + " (the API server or the kubelet log endpoint hangs)")
	}
	outcome, detail := Classify(err)
	if p.Count != nil {
		p.Count(outcome)
	}
	if outcome == Proven {
		p.provenFor, p.provenAt, p.failures, p.failedAt = fp, now, 0, time.Time{}
		if p.Interval > 0 {
			p.jitter = time.Duration(rand.Int64N(int64(p.Interval/10) + 1))
		}
		return proven
	}
	if fp != p.failedFor {
		p.failures = 0
	}
	p.failed, p.failedFor, p.failedAt = Result{Outcome: outcome, Detail: detail}, fp, now
	p.failures++
	p.failJitter = time.Duration(rand.Int64N(int64(p.backoff()/10) + 1))
	if outcome != Unavailable {
		p.provenAt = time.Time{} // the path failed: no proof stands
	}
	return graced(p.failed)
}

// backoff is how long the last failed answer stands.
func (p *Prover) backoff() time.Duration {
	if p.FailureStands > 0 {
		return p.FailureStands
	}
	return min(p.Interval, 30*time.Second<<min(max(p.failures-1, 0), 10))
}
