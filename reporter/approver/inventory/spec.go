package inventory

import (
	"context"
	"fmt"
	"strings"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"
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
	kind, arg, _ := strings.Cut(spec, ":")
	switch kind {
	case "", "node":
		if arg != "" {
			return nil, nil, fmt.Errorf("--inventory=%s: node takes no argument", spec)
		}
		return nodes, nil, nil
	case "file":
		if arg == "" {
			return nil, nil, fmt.Errorf("--inventory=%s: want file:<path>", spec)
		}
		m, err := LoadFile(arg)
		if err != nil {
			return nil, nil, fmt.Errorf("--inventory=%s: %w", spec, err)
		}
		src := NewStatic("file "+arg, m)
		return src, &Watch{LoadedAtStart: true, Run: func(ctx context.Context, changed func(error)) {
			if err := WatchFile(ctx, arg, src, changed); err != nil {
				// Never a silent freeze: without file events, poll.
				klog.FromContext(ctx).Error(err, "Cannot watch the inventory file; polling it every 10s instead", "file", arg)
				PollFile(ctx, arg, src, 10*time.Second, changed)
			}
		}}, nil
	case "configmap":
		ns, name, ok := strings.Cut(arg, "/")
		if !ok || ns == "" || name == "" {
			return nil, nil, fmt.Errorf("--inventory=%s: want configmap:<namespace>/<name>", spec)
		}
		src := NewStatic("ConfigMap "+arg, map[string]Entry{})
		return src, &Watch{Run: func(ctx context.Context, changed func(error)) {
			WatchConfigMap(ctx, client, ns, name, src, changed)
		}}, nil
	}
	return nil, nil, fmt.Errorf("--inventory=%s: want node, configmap:<namespace>/<name> or file:<path> (Cluster API: --cluster-api)", spec)
}
