//go:build unix

package kubeletconfig

import (
	"os"
	"syscall"
)

// unlinked reports whether the open file has no name left on its file
// system.
func unlinked(info os.FileInfo) bool {
	st, ok := info.Sys().(*syscall.Stat_t)
	return ok && st.Nlink == 0
}
