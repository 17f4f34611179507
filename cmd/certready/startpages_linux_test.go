package main

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"runtime"
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
