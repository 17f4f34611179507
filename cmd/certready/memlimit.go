package main

import (
	"os"
	"path/filepath"
	"runtime/debug"
	"strconv"
	"strings"
)

// cgroupRoot is where the container's own cgroup is mounted (its cgroup
// namespace, as containerd and CRI-O give every container).
const cgroupRoot = "/sys/fs/cgroup"

// memoryLimitShare of the container's memory limit is Go's soft memory
// limit: the rest is what the runtime does not count (the binary's pages,
// about 15 MiB of the agent's RSS, and the kernel's socket buffers).
const memoryLimitShare = 0.9

// goMemoryLimit sets Go's soft memory limit from the container's memory
// limit (memoryLimitShare of it), so that garbage is collected harder near
// the limit instead of reaching it: a flood of connections then costs CPU,
// not an OOM kill. $GOMEMLIMIT, when set, wins (the runtime read it at
// start). It returns the limit set, or 0 when none was.
func goMemoryLimit(getenv func(string) (string, bool), root string) int64 {
	if _, set := getenv("GOMEMLIMIT"); set {
		return 0
	}
	limit, ok := cgroupMemoryLimit(root)
	if !ok {
		return 0
	}
	soft := int64(float64(limit) * memoryLimitShare)
	debug.SetMemoryLimit(soft)
	return soft
}

// cgroupMemoryLimit reads the memory limit of the cgroup mounted at root:
// cgroup v2's memory.max, else v1's memory/memory.limit_in_bytes. ok is
// false when there is none ("max", or v1's page-counter maximum).
func cgroupMemoryLimit(root string) (limit int64, ok bool) {
	for _, p := range []string{"memory.max", filepath.Join("memory", "memory.limit_in_bytes")} {
		b, err := os.ReadFile(filepath.Join(root, p))
		if err != nil {
			continue
		}
		s := strings.TrimSpace(string(b))
		if s == "max" {
			return 0, false
		}
		v, err := strconv.ParseInt(s, 10, 64)
		if err != nil || v <= 0 || v >= 1<<62 {
			return 0, false
		}
		return v, true
	}
	return 0, false
}
