//go:build !unix

package ledger

import (
	"fmt"
	"io"
	"runtime"
)

// openFileSink refuses: the file sink's guarantees (no symlink followed on
// the path, one hard link, rotation relative to an open folder) rest on
// openat(2) and O_NOFOLLOW. The CLI built for an operator's laptop never
// writes a ledger; the agent and the approver run on Linux.
func openFileSink(path string, _ int64, _ int) (io.WriteCloser, error) {
	return nil, fmt.Errorf("ledger sink %q: the file sink needs a Unix system, this build is for %s; use the stdout sink", SinkFile+":"+path, runtime.GOOS)
}
