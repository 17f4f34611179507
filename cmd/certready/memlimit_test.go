package main

import (
	"os"
	"path/filepath"
	"runtime/debug"
	"testing"
)

func TestCgroupMemoryLimit(t *testing.T) {
	for _, tc := range []struct {
		name, file, content string
		want                int64
		ok                  bool
	}{
		{"v2 limit", "memory.max", "100663296\n", 96 << 20, true},
		{"v2 unlimited", "memory.max", "max\n", 0, false},
		{"v1 limit", "memory/memory.limit_in_bytes", "100663296\n", 96 << 20, true},
		{"v1 unlimited", "memory/memory.limit_in_bytes", "9223372036854771712\n", 0, false},
		{"no cgroup", "", "", 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			if tc.file != "" {
				if err := os.MkdirAll(filepath.Dir(filepath.Join(root, tc.file)), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(filepath.Join(root, tc.file), []byte(tc.content), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			if got, ok := cgroupMemoryLimit(root); got != tc.want || ok != tc.ok {
				t.Errorf("cgroupMemoryLimit = %d, %v; want %d, %v", got, ok, tc.want, tc.ok)
			}
		})
	}
}

// The container's limit becomes 90% of it as Go's soft limit, unless
// $GOMEMLIMIT says otherwise.
func TestGoMemoryLimitFromTheContainer(t *testing.T) {
	before := debug.SetMemoryLimit(-1)
	t.Cleanup(func() { debug.SetMemoryLimit(before) })
	root := t.TempDir()
	if err := os.WriteFile(filepath.Join(root, "memory.max"), []byte("100663296\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	noEnv := func(string) (string, bool) { return "", false }
	if got, want := goMemoryLimit(noEnv, root), int64(100663296*9/10); got != want || debug.SetMemoryLimit(-1) != want {
		t.Errorf("soft limit %d (runtime: %d), want %d", got, debug.SetMemoryLimit(-1), want)
	}
	debug.SetMemoryLimit(before)
	env := func(k string) (string, bool) { return "64MiB", k == "GOMEMLIMIT" }
	if got := goMemoryLimit(env, root); got != 0 || debug.SetMemoryLimit(-1) != before {
		t.Errorf("with $GOMEMLIMIT set: set %d, runtime %d; want it left alone", got, debug.SetMemoryLimit(-1))
	}
}
