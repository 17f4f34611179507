package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
)

// runCopyBinary copies the running executable to --to, through a temporary
// file renamed into place, so that a reader (node-problem-detector running
// the plugin) never sees half a binary. The image is FROM scratch: there is
// no cp in it.
func runCopyBinary(_ context.Context, args []string) int {
	fs := newFlagSet("copy-binary", "Copy this binary to --to, mode 0755 (for node-problem-detector's init container).")
	to := fs.String("to", "", "Destination path, e.g. /opt/certready/certready (its folder must exist).")
	if code := parseOrExit(fs, args); code >= 0 {
		return code
	}
	if *to == "" || !filepath.IsAbs(*to) {
		fmt.Fprintf(os.Stderr, "certready copy-binary: --to %q: want an absolute path, e.g. --to=/opt/certready/certready\n", *to)
		return 2
	}
	if err := copySelf(*to); err != nil {
		fmt.Fprintf(os.Stderr, "certready copy-binary: %v\n", err)
		return 1
	}
	fmt.Printf("copied certready %s to %s\n", version, *to)
	return 0
}

func copySelf(to string) error {
	self, err := os.Executable()
	if err != nil {
		return err
	}
	src, err := os.Open(self)
	if err != nil {
		return err
	}
	defer src.Close()
	tmp, err := os.CreateTemp(filepath.Dir(to), ".certready-*")
	if err != nil {
		return fmt.Errorf("--to %s: %w", to, err)
	}
	defer os.Remove(tmp.Name())
	if _, err := io.Copy(tmp, src); err != nil {
		tmp.Close()
		return fmt.Errorf("writing %s: %w", tmp.Name(), err)
	}
	if err := tmp.Chmod(0o755); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), to)
}
