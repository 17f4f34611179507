package main

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// dropStartPages takes this binary's read-only pages out of the process's
// resident set (the test binary's here, linked with cgo: a dynamic loader
// relocated part of it before making it read-only, which must be kept),
// and the process goes on running the code and reading the tables it
// dropped.
func TestDropStartPagesShrinksTheResidentBinary(t *testing.T) {
	before := residentBinaryKiB(t)
	advised, err := dropStartPages()
	if err != nil {
		t.Fatal(err)
	}
	after := residentBinaryKiB(t)
	if advised == 0 || after >= before {
		t.Errorf("advised %d bytes; the binary's resident read-only pages went from %d to %d KiB, want fewer", advised, before, after)
	}
	t.Logf("advised %d KiB; resident read-only pages of the binary %d -> %d KiB", advised/1024, before, after)
	for range 3 {
		runtime.GC()
		var out bytes.Buffer
		if code := reportError(&out, "certready agent", usageError(fmt.Errorf("--resync=%s: want a positive duration", -time.Second))); code != 2 || !strings.Contains(out.String(), "--resync=-1s") {
			t.Fatalf("after the drop: exit %d, %q", code, out.String())
		}
	}
}

// residentBinaryKiB sums the Rss of this binary's read-only mappings.
func residentBinaryKiB(t *testing.T) int {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.Open("/proc/self/smaps")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	total, ours := 0, false
	s := bufio.NewScanner(f)
	for s.Scan() {
		fields := strings.Fields(s.Text())
		switch {
		case len(fields) >= 6 && strings.Contains(fields[0], "-") && !strings.HasSuffix(fields[0], ":"):
			ours = fields[5] == exe && !strings.Contains(fields[1], "w")
		case ours && len(fields) == 3 && fields[0] == "Rss:":
			kb, err := strconv.Atoi(fields[1])
			if err != nil {
				t.Fatal(err)
			}
			total += kb
		}
	}
	if err := s.Err(); err != nil {
		t.Fatal(err)
	}
	return total
}

// Which mappings may be dropped, read from smaps: only the binary's
// read-only ones with no page copied on write, resident or swapped out.
func TestFileOnlyMappings(t *testing.T) {
	const exe = "/usr/local/bin/certready"
	entry := func(header string, anon, swap string) string {
		return header + "\nSize:                100 kB\nRss:                  40 kB\nAnonymous:            " + anon + " kB\nSwap:                 " + swap + " kB\n"
	}
	smaps := entry("00400000-00500000 r-xp 00000000 08:01 1234                               "+exe, "0", "0") + // code: dropped
		entry("00500000-00600000 r--p 00100000 08:01 1234                               "+exe, "0", "0") + // type data, function table: dropped
		entry("00600000-00601000 r--p 00200000 08:01 1234                               "+exe, "4", "0") + // relocated, then read-only
		entry("00601000-00602000 r--p 00201000 08:01 1234                               "+exe, "0", "4") + // relocated, swapped out
		entry("00602000-00700000 rw-p 00202000 08:01 1234                               "+exe, "0", "0") + // data
		entry("7f0000000000-7f0000100000 r--p 00000000 08:01 99                         /usr/lib/libc.so.6", "0", "0") +
		entry("7f0000100000-7f0000200000 r-xp 00000000 08:01 77                         "+exe+" (deleted)", "0", "0") +
		entry("7f0000200000-7f0000300000 r-xp 00000000 08:01 78                         /opt/my dir/certready", "0", "0") +
		entry("7f0000300000-7f0000400000 r--p 00000000 08:01 1234                       "+exe, "0", "") // Swap not read as 0: kept
	got, err := fileOnlyMappings(strings.NewReader(smaps), exe)
	if err != nil {
		t.Fatal(err)
	}
	want := []mapping{{0x400000, 0x500000}, {0x500000, 0x600000}}
	if !slices.Equal(got, want) {
		t.Errorf("mappings %x, want %x", got, want)
	}
	spaced, err := fileOnlyMappings(strings.NewReader(smaps), "/opt/my dir/certready")
	if err != nil || !slices.Equal(spaced, []mapping{{0x7f0000200000, 0x7f0000300000}}) {
		t.Errorf("a path with a space: %x, %v", spaced, err)
	}
	if _, err := fileOnlyMappings(strings.NewReader(""), exe); err == nil {
		t.Error("empty smaps: no error, want one (nothing can be judged)")
	}
}
