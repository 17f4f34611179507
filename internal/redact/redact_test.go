package redact_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/certready/certready/internal/redact"
)

func TestNodePseudonymsAreStableUnderAKeyOnly(t *testing.T) {
	key := []byte("0123456789abcdef0123456789abcdef")
	a, b := redact.New(key), redact.New(key)
	if a.Node("worker-1") != b.Node("worker-1") {
		t.Error("one key, two pseudonyms for one name")
	}
	if a.Node("worker-1") == a.Node("worker-2") {
		t.Error("two names, one pseudonym")
	}
	if other := redact.New([]byte("another key, another key, anoth")); other.Node("worker-1") == a.Node("worker-1") {
		t.Error("two keys, one pseudonym: the pseudonym does not depend on the key")
	}
	if p := a.Node("worker-1"); !strings.HasPrefix(p, "node-") || strings.Contains(p, "worker") {
		t.Errorf("pseudonym %q", p)
	}
	if !redact.HasPseudonym("kubernetes.io/hostname="+a.Node("worker-1")) || redact.HasPseudonym("kubernetes.io/hostname=worker-1") {
		t.Error("HasPseudonym does not tell a redacted selector from a plain one")
	}
	var none *redact.Redactor
	if none.Node("worker-1") != "worker-1" || none.Text("10.0.0.1", nil, nil) != "10.0.0.1" {
		t.Error("the nil redactor changed something")
	}
}

func TestTextLeavesOutNamesSANsAndAddresses(t *testing.T) {
	r := redact.New([]byte("0123456789abcdef0123456789abcdef"))
	p := r.Node("worker-1")
	for _, tc := range []struct {
		in, want    string
		nodes, sans []string
	}{
		{"IPSANNotInInventory: 10.9.9.9 not recorded for worker-1 (left pending)", "IPSANNotInInventory: <ip> not recorded for " + p + " (left pending)", []string{"worker-1"}, []string{"worker-1", "10.9.9.9"}},
		{"presented on 192.0.2.11:10250.", "presented on <ip>:10250.", nil, nil},
		{"presented on [2001:db8::11]:10250 and fe80::1", "presented on [<ip>]:10250 and <ip>", nil, nil},
		{"DNS SAN worker-1.example.com is not the node's", "DNS SAN <san> is not the node's", []string{"worker-1"}, []string{"worker-1.example.com"}},
		{"valid until 2027-12-01T12:00:00Z, sha256 0a1b2c3d", "valid until 2027-12-01T12:00:00Z, sha256 0a1b2c3d", nil, nil},
		{"system:node:worker-1 asked", "system:node:" + p + " asked", []string{"worker-1"}, nil},
		{"SANs IP Address:10.0.0.7, IP:fd00::7 and refused:10.0.0.8:443", "SANs IP Address:<ip>, IP:<ip> and refused:<ip>:443", nil, nil},
		{"Get \"https://api.tenant.example:6443/api/v1/nodes\": dial tcp 10.1.1.1:6443: refused", "Get \"<url>\": dial tcp <ip>:6443: refused", nil, nil},
	} {
		if got := r.Text(tc.in, tc.nodes, tc.sans); got != tc.want {
			t.Errorf("Text(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

func TestLoadKey(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "key")
	if _, err := redact.LoadKey(path, false); err == nil {
		t.Error("a missing key file was accepted without create")
	}
	made, err := redact.LoadKey(path, true)
	if err != nil || len(made) != redact.KeySize {
		t.Fatalf("LoadKey(create) = %d bytes, %v", len(made), err)
	}
	if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("key file mode %v, %v; want 0600", fi.Mode(), err)
	}
	again, err := redact.LoadKey(path, true)
	if err != nil || string(again) != string(made) {
		t.Fatalf("the key read back differs (%v): a second run would give other pseudonyms", err)
	}
	short := filepath.Join(dir, "short")
	if err := os.WriteFile(short, []byte("abc\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := redact.LoadKey(short, false); err == nil || !strings.Contains(err.Error(), "at least 16") {
		t.Errorf("a 4-byte key: %v", err)
	}
}
