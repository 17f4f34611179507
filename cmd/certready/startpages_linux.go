package main

import (
	"bufio"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// dropStartPages unmaps this binary's read-only pages (code, and the
// type data and function table the runtime reads), so that only those
// the steady state touches again come back. Start-up runs code and reads
// tables it never needs again (flag parsing, package inits, the first
// list of each informer), and the kernel maps 64 KiB around each page
// fault: without this those pages stay in the process's RSS.
//
// Only mappings that hold nothing but the file's bytes are dropped: not
// writable, and no page of them copied on write (smaps' Anonymous: 0), as
// a dynamic loader's relocations are before it makes them read-only. The
// next touch of a dropped page maps it again from the page cache, the same
// bytes. It returns the bytes of the mappings advised.
func dropStartPages() (advised int, err error) {
	exe, err := os.Executable()
	if err != nil {
		return 0, err
	}
	maps, err := fileOnlyMappings(exe)
	if err != nil {
		return 0, err
	}
	for _, m := range maps {
		if _, _, errno := unix.Syscall(unix.SYS_MADVISE, m.start, m.end-m.start, unix.MADV_DONTNEED); errno != 0 {
			return advised, errno
		}
		advised += int(m.end - m.start)
	}
	return advised, nil
}

type mapping struct{ start, end uintptr }

// fileOnlyMappings are path's read-only mappings in this process that
// hold no anonymous (copied on write) page.
func fileOnlyMappings(path string) ([]mapping, error) {
	f, err := os.Open("/proc/self/smaps")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []mapping
	var cur *mapping // the mapping whose fields follow, when it is a candidate
	s := bufio.NewScanner(f)
	for s.Scan() {
		fields := strings.Fields(s.Text())
		if len(fields) == 0 {
			continue
		}
		if lo, hi, ok := strings.Cut(fields[0], "-"); ok && !strings.HasSuffix(fields[0], ":") {
			// start-end perms offset dev inode [path]: a new mapping.
			cur = nil
			if len(fields) < 6 || fields[5] != path || strings.Contains(fields[1], "w") {
				continue
			}
			start, err1 := strconv.ParseUint(lo, 16, 64)
			end, err2 := strconv.ParseUint(hi, 16, 64)
			if err1 != nil || err2 != nil || end <= start {
				continue
			}
			cur = &mapping{uintptr(start), uintptr(end)}
			continue
		}
		if cur != nil && fields[0] == "Anonymous:" && len(fields) >= 2 {
			if fields[1] == "0" {
				out = append(out, *cur)
			}
			cur = nil
		}
	}
	return out, s.Err()
}
