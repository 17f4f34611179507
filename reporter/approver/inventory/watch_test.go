package inventory_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/certready/certready/internal/testwait"
	"github.com/certready/certready/reporter/approver/inventory"
)

// reloads collects what onReload received.
type reloads struct {
	mu   sync.Mutex
	errs []error
}

func (r *reloads) add(err error) { r.mu.Lock(); r.errs = append(r.errs, err); r.mu.Unlock() }

func (r *reloads) waitFor(t *testing.T, what string, ok func(error) bool) {
	t.Helper()
	if !testwait.Until(10*time.Second, func() bool {
		r.mu.Lock()
		defer r.mu.Unlock()
		return slices.ContainsFunc(r.errs, ok)
	}) {
		r.mu.Lock()
		defer r.mu.Unlock()
		t.Fatalf("no reload %s; got %v", what, r.errs)
	}
}

func TestConfigMapDeletedKeepsTheLastGoodInventoryAndSaysSo(t *testing.T) {
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "certready-system", Name: "inv"},
		Data: map[string]string{inventory.ConfigMapKey: "nodes: {w1: {ips: [192.0.2.11]}}"}}
	cs := fake.NewClientset(cm)
	s := inventory.NewStatic("ConfigMap certready-system/inv", nil)
	var r reloads
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go inventory.WatchConfigMap(ctx, cs, "certready-system", "inv", s, r.add)
	r.waitFor(t, "loaded", func(err error) bool { return err == nil })
	if _, ok := s.Lookup("w1"); !ok {
		t.Fatal("w1 not loaded")
	}
	if err := cs.CoreV1().ConfigMaps("certready-system").Delete(ctx, "inv", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	r.waitFor(t, "saying the ConfigMap is gone", func(err error) bool { return errors.Is(err, inventory.ErrConfigMapGone) })
	if _, ok := s.Lookup("w1"); !ok {
		t.Error("the last good inventory was dropped with the ConfigMap")
	}
}

func TestConfigMapMissingAtStartIsReported(t *testing.T) {
	s := inventory.NewStatic("ConfigMap certready-system/inv", nil)
	var r reloads
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go inventory.WatchConfigMap(ctx, fake.NewClientset(), "certready-system", "inv", s, r.add)
	r.waitFor(t, "saying the ConfigMap is missing", func(err error) bool { return errors.Is(err, inventory.ErrConfigMapGone) })
}

func TestPollFileReloadsChangesAndKeepsTheLastGoodOnErrors(t *testing.T) {
	path := filepath.Join(t.TempDir(), "inventory.yaml")
	write := func(s string) {
		if err := os.WriteFile(path, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("nodes: {w1: {ips: [192.0.2.11]}}")
	s := inventory.NewStatic("file", nil)
	var r reloads
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go inventory.PollFile(ctx, path, s, 20*time.Millisecond, r.add)
	r.waitFor(t, "loaded", func(err error) bool { return err == nil })
	write("nodes: {w2: {ips: [192.0.2.12]}}")
	if !testwait.Until(10*time.Second, func() bool { _, ok := s.Lookup("w2"); return ok }) {
		t.Fatal("a change was not reloaded without file events")
	}
	write("nodes: {w3: {ips: [not-an-ip]}}")
	r.waitFor(t, "rejecting the broken file", func(err error) bool { return err != nil })
	if _, ok := s.Lookup("w2"); !ok {
		t.Error("a broken file replaced the last good inventory")
	}
}
