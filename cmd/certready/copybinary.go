package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/spf13/pflag"
)

// runCopyBinary copies the running executable to --to, through a temporary
// file renamed into place, so that a reader (node-problem-detector running
// the plugin) never sees half a binary. The image is FROM scratch: there is
// no cp in it.
const copyBinaryLong = "Copy this binary to --to, mode 0755 (for node-problem-detector's init container)."

// copyBinaryOptions copy this binary into a volume.
type copyBinaryOptions struct{ to string }

func (o *copyBinaryOptions) AddFlags(fs *pflag.FlagSet) {
	fs.StringVar(&o.to, "to", "", "Destination path, e.g. /opt/certready/certready (its folder must exist).")
}

func (o *copyBinaryOptions) Complete(*envFill) error { return nil }

func (o *copyBinaryOptions) Validate() error {
	if o.to == "" || !filepath.IsAbs(o.to) {
		return fmt.Errorf("--to %q: want an absolute path, e.g. --to=/opt/certready/certready", o.to)
	}
	return nil
}

func (o *copyBinaryOptions) Run(context.Context) error {
	if err := copySelf(o.to); err != nil {
		return exitWith(1, err)
	}
	fmt.Printf("copied certready %s to %s\n", version, o.to)
	return nil
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
