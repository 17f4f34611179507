package main

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
)

func TestCopyBinary(t *testing.T) {
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	want, err := os.ReadFile(self)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	to := filepath.Join(dir, "certready")
	if err := os.WriteFile(to, []byte("an older binary"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		args []string
		code int
	}{
		{"replaces the file in place", []string{"--to=" + to}, 0},
		{"relative destination refused", []string{"--to=certready"}, 2},
		{"no destination refused", nil, 2},
		{"missing folder", []string{"--to=" + filepath.Join(dir, "absent", "certready")}, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if code, _ := runCommand(t, "copy-binary", tc.args...); code != tc.code {
				t.Fatalf("exit %d, want %d", code, tc.code)
			}
		})
	}
	got, err := os.ReadFile(to)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("copied %d bytes, not the %d of the running binary", len(got), len(want))
	}
	if info, _ := os.Stat(to); info.Mode().Perm() != 0o755 {
		t.Errorf("mode %v, want 0755", info.Mode().Perm())
	}
	if left, _ := filepath.Glob(filepath.Join(dir, ".certready-*")); len(left) != 0 {
		t.Errorf("temporary files left behind: %v", left)
	}
}
