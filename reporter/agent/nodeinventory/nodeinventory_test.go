package nodeinventory_test

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/certready/certready/reporter/servingcert/evidence"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/certready/certready/internal/nodeapi/nodeapitest"
	"github.com/certready/certready/internal/testwait"
	"github.com/certready/certready/reporter/agent/nodeinventory"
)

func describe(inv *evidence.Inventory) string {
	if inv == nil {
		return "none"
	}
	var ips []string
	for _, ip := range inv.IPs {
		ips = append(ips, ip.String())
	}
	switch {
	case inv.Err != nil:
		return "error: " + inv.Err.Error()
	case !inv.Listed:
		return "unlisted"
	}
	return strings.Join(ips, ",")
}

func TestSpecs(t *testing.T) {
	for _, tc := range []struct {
		spec, wantErr string
		none          bool
	}{
		{spec: "", none: true},
		{spec: "node", none: true},
		{spec: "configmap:certready-system/inv"},
		{spec: "file:/etc/certready/inventory.yaml"},
		{spec: "configmap:inv", wantErr: "--inventory=configmap:inv: want configmap:<namespace>/<name>"},
		{spec: "configmap:a/b/c", wantErr: "want configmap:<namespace>/<name>"},
		{spec: "file:", wantErr: "--inventory=file:: want file:<path>"},
		{spec: "capi", wantErr: "--inventory=capi: want configmap:<namespace>/<name> or file:<path> (or node"},
	} {
		s, err := nodeinventory.New(tc.spec, "w1", nil)
		switch {
		case tc.wantErr != "":
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("%q: err %v, want %q", tc.spec, err, tc.wantErr)
			}
		case err != nil:
			t.Errorf("%q: %v", tc.spec, err)
		case (s == nil) != tc.none:
			t.Errorf("%q: source %v, want none=%v", tc.spec, s, tc.none)
		}
	}
}

// The ConfigMap is watched: a change of the node's record is a check; a
// change of other nodes' records, a broken document or a deletion is none
// (the last good document stays, as for the approver); an absent one is
// named, never a hang.
func TestTheConfigMapIsWatched(t *testing.T) {
	cs := fake.NewClientset()
	src, err := nodeinventory.New("configmap:certready-system/inv", "w1", nodeapitest.FromClientset(cs))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	// Each notification, with what Lookup says at that moment.
	notified := make(chan string, 100)
	done := make(chan struct{})
	go func() { src.Run(ctx, func() { notified <- describe(src.Lookup()) }); close(done) }()
	defer func() { cancel(); <-done }()
	if !testwait.Until(10*time.Second, src.HasSynced) {
		t.Fatal("never synced")
	}
	if got := describe(src.Lookup()); got != "error: the ConfigMap does not exist" {
		t.Errorf("absent ConfigMap: %s", got)
	}
	cms := cs.CoreV1().ConfigMaps("certready-system")
	put := func(name, doc string) {
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "certready-system"}, Data: map[string]string{"inventory.yaml": doc}}
		if _, err := cms.Update(ctx, cm, metav1.UpdateOptions{}); err != nil {
			if _, err := cms.Create(ctx, cm, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
		}
	}
	// until collects the notifications up to the one that says last: the
	// informer handles events in order, so every earlier event's
	// notification, had there been one, is among them.
	until := func(last string) []string {
		t.Helper()
		var got []string
		for {
			select {
			case n := <-notified:
				got = append(got, n)
				if n == last {
					return got
				}
			case <-time.After(10 * time.Second):
				t.Fatalf("no notification %q; got %q", last, got)
			}
		}
	}
	until("error: the ConfigMap does not exist") // at the first list
	put("inv", "nodes: {w1: {ips: [192.0.2.11, 2001:db8::11]}}")
	put("other", "nodes: {w1: {ips: [203.0.113.1]}}")
	put("inv", "nodes: {w1: {ips: [192.0.2.11, 2001:db8::11]}, w2: {ips: [192.0.2.99]}}")
	put("inv", "nodes: {w1: {ips: [not-an-ip]}}")
	put("inv", "nodes: {w1: {ips: [192.0.2.12]}}")
	if got := until("192.0.2.12"); !slices.Equal(got, []string{"192.0.2.11,2001:db8::11", "192.0.2.12"}) {
		t.Errorf("notifications %q: want one per change of w1's record (another ConfigMap, w2's entry and a broken document are none)", got)
	}
	put("inv", "nodes: {w2: {ips: [192.0.2.14]}}")
	if got := until("unlisted"); len(got) != 1 {
		t.Errorf("notifications %q: want one, w1 no longer listed", got)
	}
	if err := cms.Delete(ctx, "inv", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	put("inv", "nodes: {w1: {ips: [192.0.2.15]}}")
	if got := until("192.0.2.15"); len(got) != 1 {
		t.Errorf("notifications %q: a deletion keeps the last good document and is no change", got)
	}
}

func TestTheFileIsReadAtEachLookupAndBounded(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "inventory.yaml")
	src, err := nodeinventory.New("file:"+path, "w1", nil)
	if err != nil {
		t.Fatal(err)
	}
	if !src.HasSynced() {
		t.Error("a file source waits for nothing")
	}
	check := func(what, want string) {
		t.Helper()
		if got := describe(src.Lookup()); !strings.Contains(got, want) {
			t.Errorf("%s: %s, want %s", what, got, want)
		}
	}
	check("missing", "error: open "+path)
	if err := os.WriteFile(path, []byte("nodes: {w1: {ips: [192.0.2.11]}}"), 0o644); err != nil {
		t.Fatal(err)
	}
	check("written", "192.0.2.11")
	if err := os.WriteFile(path, []byte("nodes: {w1: {ips: [192.0.2.11], extra: 1}}"), 0o644); err != nil {
		t.Fatal(err)
	}
	check("an unknown field", "error: decoding the inventory")
	big := "nodes: {w1: {ips: [192.0.2.11]}}\n#" + strings.Repeat("x", 4<<20)
	if err := os.WriteFile(path, []byte(big), 0o644); err != nil {
		t.Fatal(err)
	}
	check("too large", "is larger than")
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(path, 0o600); err != nil {
		t.Fatal(err)
	}
	done := make(chan string)
	go func() { done <- describe(src.Lookup()) }()
	select {
	case got := <-done:
		if !strings.Contains(got, "is not a regular file") {
			t.Errorf("a FIFO: %s", got)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a FIFO at the path hangs the lookup")
	}
}
