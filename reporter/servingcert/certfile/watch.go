package certfile

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"time"

	"github.com/fsnotify/fsnotify"
	"k8s.io/klog/v2"
)

// Watch calls notify whenever a kubelet serving file in dir, or one of its
// client certificate files (whose expiry the agent reports), is created,
// written, removed or renamed, until ctx ends. It watches the directory, not
// the symlink, because the kubelet replaces the symlink by rename. A missing
// directory (the kubelet has not started yet) is retried every retry; notify
// is also called when the watch is (re)established so nothing is missed in
// between.
func Watch(ctx context.Context, dir string, retry time.Duration, notify func()) error {
	logger := klog.FromContext(ctx).WithValues("dir", dir)
	for {
		err := watchOnce(ctx, dir, notify)
		if ctx.Err() != nil {
			return nil
		}
		logger.Info("Watching the kubelet pki folder failed; retrying", "err", err, "retry", retry)
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(retry):
		}
	}
}

func watchOnce(ctx context.Context, dir string, notify func()) error {
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return err
	}
	defer w.Close()
	if err := w.Add(dir); err != nil {
		return err
	}
	notify()
	for {
		select {
		case <-ctx.Done():
			return nil
		case ev, ok := <-w.Events:
			if !ok {
				return errors.New("fsnotify event channel closed")
			}
			if ev.Name == dir && ev.Has(fsnotify.Remove|fsnotify.Rename) {
				return errors.New("the folder was removed")
			}
			if isKubeletCertFile(ev.Name) {
				notify()
			}
		case err, ok := <-w.Errors:
			if !ok {
				return errors.New("fsnotify error channel closed")
			}
			return err
		}
	}
}

func isKubeletCertFile(name string) bool {
	base := filepath.Base(name)
	return strings.HasPrefix(base, "kubelet-server-") || strings.HasPrefix(base, "kubelet-client-")
}
