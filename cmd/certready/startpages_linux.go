package main

import (
	"bufio"
	"errors"
	"io"
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
// writable, and no page of them copied on write, in memory or swapped out
// (smaps' Anonymous: 0 and Swap: 0), as a dynamic loader's relocations
// are before it makes them read-only. The next touch of a dropped page
// maps it again from the page cache, the same bytes, as after the
// kernel's own reclaim of a clean page. It returns the bytes of the
// mappings advised.
func dropStartPages() (advised int, err error) {
	exe, err := os.Executable()
	if err != nil {
		return 0, err
	}
	f, err := os.Open("/proc/self/smaps")
	if err != nil {
		return 0, err
	}
	maps, err := fileOnlyMappings(f, exe)
	f.Close()
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

// fileOnlyMappings reads smaps (the format of /proc/<pid>/smaps) for
// path's read-only mappings that hold no anonymous page, resident or
// swapped out.
func fileOnlyMappings(smaps io.Reader, path string) ([]mapping, error) {
	var out []mapping
	var cur *mapping // the mapping whose fields follow, while still a candidate
	var anon, swap, seen bool
	flush := func() {
		if cur != nil && anon && swap {
			out = append(out, *cur)
		}
		cur, anon, swap = nil, false, false
	}
	s := bufio.NewScanner(smaps)
	for s.Scan() {
		line := s.Text()
		fields := strings.Fields(line)
		if len(fields) == 0 {
			continue
		}
		if lo, hi, ok := strings.Cut(fields[0], "-"); ok && !strings.HasSuffix(fields[0], ":") {
			// start-end perms offset dev inode [path]: a new mapping. The
			// path is the rest of the line (it may hold spaces).
			flush()
			seen = true
			if len(fields) < 6 || strings.Contains(fields[1], "w") || mappedPath(line) != path {
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
		if cur == nil || len(fields) < 2 {
			continue
		}
		switch fields[0] {
		case "Anonymous:":
			anon = fields[1] == "0"
			if !anon {
				cur = nil
			}
		case "Swap:":
			swap = fields[1] == "0"
			if !swap {
				cur = nil
			}
		}
	}
	flush()
	if err := s.Err(); err != nil {
		return nil, err
	}
	if !seen {
		return nil, errors.New("no mapping in smaps")
	}
	return out, nil
}

// mappedPath is the path of a maps header line: what follows its fifth
// field (inode), leading spaces removed.
func mappedPath(line string) string {
	rest := line
	for range 5 {
		rest = strings.TrimLeft(rest, " ")
		i := strings.IndexByte(rest, ' ')
		if i < 0 {
			return ""
		}
		rest = rest[i:]
	}
	return strings.TrimLeft(rest, " ")
}
