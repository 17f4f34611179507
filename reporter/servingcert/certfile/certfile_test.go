package certfile_test

import (
	"bytes"
	"context"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"k8s.io/client-go/util/certificate"

	"github.com/certready/certready/internal/fingerprint"
	"github.com/certready/certready/internal/testpki"
	"github.com/certready/certready/reporter/servingcert/certfile"
)

func issue(t *testing.T) (*testpki.CA, *testpki.Pair) {
	t.Helper()
	ca, err := testpki.NewCA("test-ca")
	if err != nil {
		t.Fatal(err)
	}
	p, err := ca.Issue(testpki.Serving{Node: "worker-1", IPs: []net.IP{net.ParseIP("192.0.2.11")}})
	if err != nil {
		t.Fatal(err)
	}
	return ca, p
}

func TestRead(t *testing.T) {
	ca, pair := issue(t)
	current := func(dir string) string { return certfile.CurrentPath(dir) }
	cases := []struct {
		name       string
		setup      func(t *testing.T, dir string)
		wantState  certfile.State
		wantDetail string
		wantChain  int
	}{
		{
			name:      "kubelet layout: absolute symlink to a 0600 pair",
			setup:     func(t *testing.T, dir string) { mustInstall(t, dir, pair) },
			wantState: certfile.Present,
		},
		{
			name: "chain: leaf then intermediate",
			setup: func(t *testing.T, dir string) {
				data := append(pair.CertPEM(), ca.PEM()...)
				data = append(data, pair.KeyPEM()...)
				write(t, current(dir), data)
			},
			wantState: certfile.Present,
			wantChain: 1,
		},
		{
			name: "key block first is skipped, never decoded",
			setup: func(t *testing.T, dir string) {
				// Not valid base64: decoding it would fail the read.
				key := []byte("-----BEGIN EC PRIVATE KEY-----\n!!!not base64!!!\n-----END EC PRIVATE KEY-----\n")
				write(t, current(dir), append(key, pair.CertPEM()...))
			},
			wantState: certfile.Present,
		},
		{
			name:       "no file at all",
			setup:      func(t *testing.T, dir string) {},
			wantState:  certfile.Missing,
			wantDetail: "does not exist",
		},
		{
			name: "dangling symlink (target removed)",
			setup: func(t *testing.T, dir string) {
				target := mustInstall(t, dir, pair)
				if err := os.Remove(target); err != nil {
					t.Fatal(err)
				}
			},
			wantState:  certfile.Missing,
			wantDetail: "which does not exist",
		},
		{
			name: "symlink loop",
			setup: func(t *testing.T, dir string) {
				a := filepath.Join(dir, "loop-a")
				if err := os.Symlink(current(dir), a); err != nil {
					t.Fatal(err)
				}
				if err := os.Symlink(a, current(dir)); err != nil {
					t.Fatal(err)
				}
			},
			wantState:  certfile.Unreadable,
			wantDetail: "symlink loop",
		},
		{
			name: "directory in place of the file",
			setup: func(t *testing.T, dir string) {
				if err := os.Mkdir(current(dir), 0o700); err != nil {
					t.Fatal(err)
				}
			},
			wantState:  certfile.Unreadable,
			wantDetail: "a directory",
		},
		{
			name: "named pipe does not hang the read",
			setup: func(t *testing.T, dir string) {
				if err := syscall.Mkfifo(current(dir), 0o600); err != nil {
					t.Fatal(err)
				}
			},
			wantState:  certfile.Unreadable,
			wantDetail: "named pipe",
		},
		{
			name:       "key only",
			setup:      func(t *testing.T, dir string) { write(t, current(dir), pair.KeyPEM()) },
			wantState:  certfile.Malformed,
			wantDetail: "no CERTIFICATE block",
		},
		{
			name:       "empty file",
			setup:      func(t *testing.T, dir string) { write(t, current(dir), nil) },
			wantState:  certfile.Malformed,
			wantDetail: "no CERTIFICATE block",
		},
		{
			name: "truncated mid-write",
			setup: func(t *testing.T, dir string) {
				pem := pair.CertPEM()
				write(t, current(dir), pem[:len(pem)/2])
			},
			wantState:  certfile.Malformed,
			wantDetail: "no END line",
		},
		{
			name: "certificate block with garbage DER",
			setup: func(t *testing.T, dir string) {
				write(t, current(dir), []byte("-----BEGIN CERTIFICATE-----\naGVsbG8=\n-----END CERTIFICATE-----\n"))
			},
			wantState:  certfile.Malformed,
			wantDetail: "does not parse",
		},
		{
			name:       "oversized file",
			setup:      func(t *testing.T, dir string) { write(t, current(dir), bytes.Repeat([]byte("A"), certfile.MaxSize+10)) },
			wantState:  certfile.Unreadable,
			wantDetail: "larger than",
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			tc.setup(t, dir)
			done := make(chan certfile.Observation, 1)
			go func() { done <- certfile.Read(dir) }()
			var obs certfile.Observation
			select {
			case obs = <-done:
			case <-time.After(10 * time.Second):
				t.Fatal("Read did not return")
			}
			if obs.State != tc.wantState {
				t.Fatalf("state = %s (%s), want %s", obs.State, obs.Detail, tc.wantState)
			}
			if !strings.Contains(obs.Detail, tc.wantDetail) {
				t.Errorf("detail = %q, want it to contain %q", obs.Detail, tc.wantDetail)
			}
			if tc.wantState != certfile.Present {
				if obs.Leaf != nil || !obs.Fingerprint.IsZero() {
					t.Errorf("a failed observation carries a certificate")
				}
				if !strings.Contains(obs.Detail, obs.Path) {
					t.Errorf("detail %q does not name the path %s", obs.Detail, obs.Path)
				}
				return
			}
			if obs.Fingerprint != fingerprint.Of(pair.Cert) {
				t.Errorf("fingerprint = %s, want the installed leaf's %s", obs.Fingerprint.Short(), fingerprint.Of(pair.Cert).Short())
			}
			if len(obs.Intermediates) != tc.wantChain {
				t.Errorf("intermediates = %d, want %d", len(obs.Intermediates), tc.wantChain)
			}
		})
	}
}

func TestReadResolvesTheAbsoluteTarget(t *testing.T) {
	_, pair := issue(t)
	dir := t.TempDir()
	target := mustInstall(t, dir, pair)
	obs := certfile.Read(dir)
	if obs.Target != target {
		t.Errorf("target = %q, want %q", obs.Target, target)
	}
}

func TestWatchSeesTheRotationSequence(t *testing.T) {
	_, first := issue(t)
	_, second := issue(t)
	dir := t.TempDir()
	mustInstall(t, dir, first)

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	events := make(chan struct{}, 100)
	go func() { _ = certfile.Watch(ctx, dir, 50*time.Millisecond, func() { events <- struct{}{} }) }()
	waitEvent(t, events) // the initial notification once the watch is in place

	if _, err := testpki.Install(dir, second); err != nil {
		t.Fatal(err)
	}
	deadline := time.After(10 * time.Second)
	for {
		select {
		case <-events:
			if certfile.Read(dir).Fingerprint == fingerprint.Of(second.Cert) {
				return
			}
		case <-deadline:
			t.Fatal("no notification showed the rotated certificate")
		}
	}
}

// The kubelet's client certificate rotates by the same file store: its
// expiry is a fact of the next check, so its files notify too; other files
// in the folder do not.
func TestWatchSeesTheClientCertificate(t *testing.T) {
	_, client := issue(t)
	dir := t.TempDir()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	events := make(chan struct{}, 100)
	go func() { _ = certfile.Watch(ctx, dir, 50*time.Millisecond, func() { events <- struct{}{} }) }()
	waitEvent(t, events)

	if err := os.WriteFile(filepath.Join(dir, "ca.crt"), client.CertPEM(), 0o600); err != nil {
		t.Fatal(err)
	}
	select {
	case <-events:
		t.Fatal("notified for a file that is not the kubelet's")
	case <-time.After(100 * time.Millisecond):
	}
	store, err := certificate.NewFileStore("kubelet-client", dir, dir, "", "")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := store.Update(client.CertPEM(), client.KeyPEM()); err != nil {
		t.Fatal(err)
	}
	waitEvent(t, events)
}

func TestWatchWaitsForTheFolder(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "pki")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	events := make(chan struct{}, 100)
	go func() { _ = certfile.Watch(ctx, dir, 20*time.Millisecond, func() { events <- struct{}{} }) }()
	select {
	case <-events:
		t.Fatal("notified before the folder exists")
	case <-time.After(100 * time.Millisecond):
	}
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	waitEvent(t, events)
}

func waitEvent(t *testing.T, ch <-chan struct{}) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(10 * time.Second):
		t.Fatal("no notification")
	}
}

func mustInstall(t *testing.T, dir string, p *testpki.Pair) string {
	t.Helper()
	target, err := testpki.Install(dir, p)
	if err != nil {
		t.Fatal(err)
	}
	return target
}

func write(t *testing.T, path string, data []byte) {
	t.Helper()
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
}

func TestLoadCA(t *testing.T) {
	dir := t.TempDir()
	empty := filepath.Join(dir, "empty.crt")
	if err := os.WriteFile(empty, []byte("not a certificate\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := certfile.LoadCA(empty); err == nil || !strings.Contains(err.Error(), empty) || !strings.Contains(err.Error(), "no CERTIFICATE") {
		t.Errorf("err = %v", err)
	}
	if _, err := certfile.LoadCA(filepath.Join(dir, "absent")); err == nil || !strings.Contains(err.Error(), "absent") {
		t.Errorf("err = %v", err)
	}
}

// The kubelet's client pair is read like the serving one: its certificate,
// never its key (a block that is not valid base64 here would fail a
// decode), and a missing file is Missing, not an error.
func TestReadFileReadsTheClientCertificate(t *testing.T) {
	_, pair := issue(t)
	dir := t.TempDir()
	if obs := certfile.ReadFile(certfile.ClientPath(dir)); obs.State != certfile.Missing || !strings.Contains(obs.Detail, certfile.ClientCurrentName) {
		t.Errorf("no client file: %s %q, want Missing naming the file", obs.State, obs.Detail)
	}
	key := []byte("-----BEGIN EC PRIVATE KEY-----\n!!not base64!!\n-----END EC PRIVATE KEY-----\n")
	write(t, certfile.ClientPath(dir), append(key, pair.CertPEM()...))
	obs := certfile.ReadFile(certfile.ClientPath(dir))
	if obs.State != certfile.Present || !obs.Leaf.NotAfter.Equal(pair.Cert.NotAfter) {
		t.Errorf("client file: %s %q, want Present with NotAfter %s", obs.State, obs.Detail, pair.Cert.NotAfter)
	}
}
