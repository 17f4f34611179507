//go:build !unix

package kubeletconfig

import "os"

// unlinked cannot tell on this system: never.
func unlinked(os.FileInfo) bool { return false }
