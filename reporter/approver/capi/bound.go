package capi

import (
	"context"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
)

// Limits bound what one workload cluster's API server can make the
// approver hold or wait for. A tenant who writes the kubeconfig Secret
// chooses that server, and the approver serves every tenant in one
// process: what one server answers must cost a bounded share of it.
type Limits struct {
	// MaxResponseBytes bounds the body of one response that is not a
	// watch (a list, a get, the answer to a write), after any
	// Content-Encoding is undone: client-go reads it whole before
	// decoding it.
	MaxResponseBytes int64
	// MaxEventBytes bounds one event of a watch: client-go's JSON framer
	// holds an event whole before decoding it.
	MaxEventBytes int64
	// MaxObjects bounds the items of one list response, the events of one
	// watch connection (twice this: the initial events of a streamed list,
	// then changes), and the kubelet-serving CSRs cached for the cluster.
	// A response also holds at most containersPerObject times as many JSON
	// objects and arrays at any depth: empty ones ([{},{},...] in a field)
	// decode to far more than their bytes.
	MaxObjects int
	// Timeout bounds a request that is not a watch (headers and body),
	// the wait for a watch's headers, and each watch event once its first
	// byte has arrived. An idle watch stays open: the reflector asks the
	// server to end it within 10 minutes and opens the next.
	Timeout time.Duration
}

// Default bounds. An honest workload cluster stays inside them: the API
// server stores no object above 1.5 MiB (about 2 MiB as JSON, under
// MaxEventBytes); a kubelet-serving CSR lists as 2 to 4 KiB and the
// controller manager deletes decided CSRs after an hour, so a cluster holds
// about one or two per node: MaxObjects is four times that for 5,000 nodes,
// and MaxResponseBytes lists 8,000 or more (an API server that streams
// lists, WatchListClient, sends them as watch events instead). A response
// read up to MaxResponseBytes costs about three times that in heap while
// client-go's io.ReadAll grows its buffer (measured: 189 MiB at 64 MiB, in
// TestAHostileWorkloadClusterCannotStarveTheOthers): 32 MiB keeps two
// hostile tenants at once inside the approver's 256 MiB limit.
const (
	// containersPerObject: a kubelet-serving CSR as listed, managedFields
	// included, holds about 70 JSON objects and arrays.
	containersPerObject     = 64
	defaultMaxResponseBytes = 32 << 20
	defaultMaxEventBytes    = 4 << 20
	defaultMaxObjects       = 20000
	DefaultTimeout          = time.Minute
)

func (l Limits) withDefaults() Limits {
	if l.MaxResponseBytes <= 0 {
		l.MaxResponseBytes = defaultMaxResponseBytes
	}
	if l.MaxEventBytes <= 0 {
		l.MaxEventBytes = defaultMaxEventBytes
	}
	if l.MaxObjects <= 0 {
		l.MaxObjects = defaultMaxObjects
	}
	if l.Timeout <= 0 {
		l.Timeout = DefaultTimeout
	}
	return l
}

// ErrBound wraps every error of a response that went past a Limit.
var ErrBound = errors.New("past the bound on a workload cluster's answers")

// bound sets cfg up for a workload cluster's API server: JSON both ways
// (the watch events are then framed in a way the transport can measure),
// and every response read through boundedTransport. cluster names the
// Cluster in the errors; onBound (may be nil) is told of each bound a
// response went past.
func bound(cfg *rest.Config, cluster string, l Limits, onBound func(error)) {
	if onBound == nil {
		onBound = func(error) {}
	}
	cfg.ContentType = runtime.ContentTypeJSON
	cfg.AcceptContentTypes = runtime.ContentTypeJSON
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper {
		return &boundedTransport{next: rt, cluster: cluster, l: l, onBound: onBound}
	})
}

// boundedTransport enforces Limits on each response of one workload
// cluster: the body fails its read past a bound, with an error naming the
// cluster, the request and the bound, and the request is cancelled.
type boundedTransport struct {
	next    http.RoundTripper
	cluster string
	l       Limits
	onBound func(error)
}

func (t *boundedTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	ctx, cancel := context.WithCancelCause(req.Context())
	q := req.URL.Query().Get("watch")
	watching := q == "true" || q == "1"
	what := req.Method + " " + req.URL.Path
	if watching {
		what = "watch " + req.URL.Path
	}
	fail := func(format string, args ...any) error {
		err := fmt.Errorf("workload cluster %s: %s: %w: %s", t.cluster, what, ErrBound, fmt.Sprintf(format, args...))
		t.onBound(err)
		return err
	}
	timer := time.AfterFunc(t.l.Timeout, func() { cancel(fail("no answer within %s", t.l.Timeout)) })
	resp, err := t.next.RoundTrip(req.WithContext(ctx))
	if err != nil {
		timer.Stop()
		if c := context.Cause(ctx); errors.Is(c, ErrBound) {
			err = c
		}
		cancel(nil)
		return nil, err
	}
	b := &boundedBody{body: resp.Body, ctx: ctx, cancel: cancel, timer: timer, fail: fail, l: t.l, watching: watching}
	// Only JSON is measured: a successful answer in any other format (a
	// protobuf list would be decoded uncounted) is refused.
	if mt, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type")); resp.StatusCode == http.StatusOK && mt != runtime.ContentTypeJSON {
		timer.Stop()
		resp.Body.Close()
		cancel(nil)
		return nil, fail("answered with Content-Type %q, not the %s asked for", resp.Header.Get("Content-Type"), runtime.ContentTypeJSON)
	}
	if watching {
		timer.Stop() // headers arrived; each event starts its own
	}
	resp.Body = b
	resp.ContentLength = -1
	return resp, nil
}

// boundedBody reads a response through a JSON scanner that measures what
// client-go will hold: the whole body of a response, each event of a watch,
// and the items of a list. The scanner only follows nesting and strings, a
// few operations a byte; it never keeps what it reads.
type boundedBody struct {
	body     io.ReadCloser
	ctx      context.Context
	cancel   context.CancelCauseFunc
	timer    *time.Timer
	fail     func(format string, args ...any) error
	l        Limits
	watching bool

	mu         sync.Mutex
	err        error // sticky: the bound this body went past
	n          int64 // bytes read
	depth      int   // nesting of the JSON value being read
	inString   bool
	escaped    bool
	start      int64 // offset after the last complete watch event: what follows is the next event's
	objects    int   // list items, or watch events, seen
	containers int   // JSON objects and arrays of a response, at any depth
}

func (b *boundedBody) Read(p []byte) (int, error) {
	b.mu.Lock()
	if b.err != nil {
		b.mu.Unlock()
		return 0, b.err
	}
	b.mu.Unlock()
	n, err := b.body.Read(p)
	b.mu.Lock()
	defer b.mu.Unlock()
	if berr := b.scan(p[:n]); berr != nil {
		b.err = berr
		b.cancel(berr)
		return 0, berr
	}
	if err != nil {
		if c := context.Cause(b.ctx); errors.Is(c, ErrBound) {
			b.err = c
			return n, c
		}
	}
	return n, err
}

// scan follows p through the JSON being read and returns the bound it
// goes past, if any.
func (b *boundedBody) scan(p []byte) error {
	if !b.watching && b.n+int64(len(p)) > b.l.MaxResponseBytes {
		return b.fail("the response is larger than %d MiB", b.l.MaxResponseBytes>>20)
	}
	for i, c := range p {
		if b.inString {
			switch {
			case b.escaped:
				b.escaped = false
			case c == '\\':
				b.escaped = true
			case c == '"':
				b.inString = false
			}
			continue
		}
		switch c {
		case '"':
			b.inString = true
		case '{', '[':
			if b.watching && b.depth == 0 {
				b.timer.Reset(b.l.Timeout)
			}
			if !b.watching {
				b.containers++
				if b.containers > containersPerObject*b.l.MaxObjects {
					return b.fail("the response holds more than %d JSON objects and arrays", containersPerObject*b.l.MaxObjects)
				}
			}
			// A list's items open at depth 2: {"items":[{...
			if !b.watching && b.depth == 2 && c == '{' {
				b.objects++
				if b.objects > b.l.MaxObjects {
					return b.fail("the list holds more than %d objects", b.l.MaxObjects)
				}
			}
			b.depth++
		case '}', ']':
			if b.depth > 0 {
				b.depth--
			}
			if b.watching && b.depth == 0 {
				b.timer.Stop()
				if b.n+int64(i)+1-b.start > b.l.MaxEventBytes {
					return b.eventTooLarge()
				}
				b.start = b.n + int64(i) + 1
				b.objects++
				if b.objects > 2*b.l.MaxObjects {
					return b.fail("the watch sent more than %d events", 2*b.l.MaxObjects)
				}
			}
		}
	}
	b.n += int64(len(p))
	// Whatever the depth: a value at the top (an endless string or number
	// instead of an object) is held by the framer as whole as an event.
	if b.watching && b.n-b.start > b.l.MaxEventBytes {
		return b.eventTooLarge()
	}
	return nil
}

func (b *boundedBody) eventTooLarge() error {
	return b.fail("a watch event is larger than %d MiB", b.l.MaxEventBytes>>20)
}

func (b *boundedBody) Close() error {
	b.timer.Stop()
	err := b.body.Close()
	b.cancel(nil)
	return err
}
