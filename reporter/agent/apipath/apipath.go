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
	"github.com/certready/certready/reporter/agent/verdict"
)

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
// request) says about its path to the kubelet.
func Classify(err error) (verdict.APIPathOutcome, string) {
	if err == nil {
		return verdict.APIPathProven, ""
	}
	msg := err.Error()
	var st apierrors.APIStatus
	if errors.As(err, &st) {
		msg = st.Status().Message
		switch st.Status().Code {
		case 401, 403:
			return verdict.APIPathUnavailable, "the API server refused the agent's log request (" + msg + "): the agent needs get on pods/log in its namespace"
		case 404:
			return verdict.APIPathUnavailable, "the agent's own pod was not found (" + msg + "): check --pod-name and --pod-namespace"
		case 429:
			return verdict.APIPathUnavailable, "the API server throttled the log request: " + msg
		}
	}
	lower := strings.ToLower(msg)
	switch {
	case strings.Contains(lower, "x509:") || strings.Contains(lower, "failed to verify certificate") ||
		strings.Contains(lower, "certificate is valid for") || strings.Contains(lower, "certificate signed by unknown authority"):
		return verdict.APIPathCannotVerify, msg
	case strings.Contains(lower, "remote error: tls") || strings.Contains(lower, "tls: "):
		return verdict.APIPathCannotVerify, msg
	case strings.Contains(lower, "dial tcp") || strings.Contains(lower, "connection refused") || strings.Contains(lower, "i/o timeout") ||
		strings.Contains(lower, "no route to host") || strings.Contains(lower, "network is unreachable") || strings.Contains(lower, "connection reset"):
		return verdict.APIPathCannotReach, msg
	}
	return verdict.APIPathUnavailable, "the log request failed: " + msg
}

// Prover asks, and remembers its last answer, so that a node in steady
// state costs one request per Interval.
type Prover struct {
	// Ask makes the log request (nodeapi.API.PodLog of the agent's own
	// container).
	Ask func(ctx context.Context) error
	// Timeout bounds one request (a hanging log endpoint).
	Timeout time.Duration
	// Interval: how long a proof of the same certificate stands (plus up
	// to a tenth of it, random, so that a fleet's proofs spread out).
	Interval time.Duration
	// Fresh: how old a proof may be when the verdict is about to become
	// ready.
	Fresh time.Duration
	// Count, when set, hears each request's outcome.
	Count func(verdict.APIPathOutcome)

	mu       sync.Mutex
	last     verdict.APIPath
	lastFor  fingerprint.SHA256
	lastAt   time.Time
	failures int
	jitter   time.Duration
}

// Evidence is the proof for the certificate fp at now: the last answer
// while it stands, else a new one. It stands while it is for fp, younger
// than Interval (Fresh when becomingReady), and was a success; a failure
// is asked again after 30 s, doubling to Interval.
func (p *Prover) Evidence(ctx context.Context, fp fingerprint.SHA256, now time.Time, becomingReady bool) verdict.APIPath {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.lastAt.IsZero() && fp == p.lastFor {
		age := now.Sub(p.lastAt)
		stands := p.Interval + p.jitter
		if becomingReady {
			stands = min(stands, p.Fresh)
		}
		if p.last.Outcome != verdict.APIPathProven {
			stands = min(p.Interval, 30*time.Second<<min(p.failures-1, 10))
		}
		if age >= 0 && age < stands {
			return p.last
		}
	}
	rctx, cancel := context.WithTimeout(ctx, p.Timeout)
	defer cancel()
	err := p.Ask(rctx)
	if err != nil && ctx.Err() != nil {
		// Cut short by the caller: no answer of the API server's.
		return verdict.APIPath{Outcome: verdict.APIPathUnavailable, Detail: "the check was cut short"}
	}
	if err != nil && rctx.Err() != nil {
		err = errors.New("no answer within " + p.Timeout.String() + " (the API server or the kubelet log endpoint hangs)")
	}
	outcome, detail := Classify(err)
	if p.Count != nil {
		p.Count(outcome)
	}
	p.last, p.lastFor, p.lastAt = verdict.APIPath{Outcome: outcome, Detail: detail}, fp, now
	p.jitter = time.Duration(rand.Int64N(int64(p.Interval/10) + 1))
	if outcome == verdict.APIPathProven {
		p.failures = 0
	} else {
		p.failures++
	}
	return p.last
}
