package inventory

import (
	"context"
	"fmt"
	"strings"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"

	"github.com/certready/certready/internal/inventorydoc"
)

// Watch keeps a desired-state source current: Run reloads it on every
// change until ctx ends and calls changed after each reload (with the
// reload's error: the previous inventory is then kept). LoadedAtStart says
// whether FromSpec already loaded it (a file) or the first load is Run's
// (a ConfigMap).
type Watch struct {
	Run           func(ctx context.Context, changed func(error))
	LoadedAtStart bool
}

// FromSpec builds the source that --inventory names: "node" (nodes, the
// Node objects), "configmap:<namespace>/<name>" or "file:<path>". Watch is
// nil for the Node objects (their informer keeps them current). An error
// names the spec and the form it wants.
func FromSpec(client kubernetes.Interface, spec string, nodes Nodes) (Source, *Watch, error) {
	if spec == "" || spec == "node" {
		return nodes, nil, nil
	}
	if strings.HasPrefix(spec, "node:") {
		return nil, nil, fmt.Errorf("--inventory=%s: node takes no argument", spec)
	}
	sp, err := inventorydoc.ParseSpec(spec)
	if err != nil {
		return nil, nil, fmt.Errorf("%w (or node; Cluster API: --cluster-api)", err)
	}
	switch sp.Kind {
	case "file":
		m, err := LoadFile(sp.Path)
		if err != nil {
			return nil, nil, fmt.Errorf("--inventory=%s: %w", spec, err)
		}
		src := NewStatic(sp.Describe(), m)
		return src, &Watch{LoadedAtStart: true, Run: func(ctx context.Context, changed func(error)) {
			if err := WatchFile(ctx, sp.Path, src, changed); err != nil {
				// Never a silent freeze: without file events, poll.
				klog.FromContext(ctx).Error(err, "Cannot watch the inventory file; polling it every 10s instead", "file", sp.Path)
				PollFile(ctx, sp.Path, src, 10*time.Second, changed)
			}
		}}, nil
	default:
		src := NewStatic(sp.Describe(), map[string]Entry{})
		return src, &Watch{Run: func(ctx context.Context, changed func(error)) {
			WatchConfigMap(ctx, client, sp.Namespace, sp.Name, src, changed)
		}}, nil
	}
}
