package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/spf13/pflag"
	"golang.org/x/sys/unix"
)

// containerMain builds the container's root and execs its binary. It runs
// in a fresh mount namespace (the runtime cloned it with CLONE_NEWNS).
func containerMain(args []string) error {
	fs := pflag.NewFlagSet("container", pflag.ContinueOnError)
	root := fs.String("root", "", "an empty folder to build the root in")
	bin := fs.String("bin", "", "the host binary that is the image's content")
	image := fs.String("bin-path", "/usr/local/bin/certready", "where the image has that binary")
	mounts := fs.StringArray("mount", nil, "SRC:DST[:ro] kubelet-provided mounts")
	workdir := fs.String("workdir", "/", "working directory")
	uid := fs.Int("uid", 0, "user to run as (the container's runAsUser)")
	gid := fs.Int("gid", 0, "group to run as (runAsGroup; default 0, as for an image without a passwd entry)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	argv := fs.Args()
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return fmt.Errorf("making mounts private: %w", err)
	}
	if err := unix.Mount("tmpfs", *root, "tmpfs", 0, "mode=0755,size=16m"); err != nil {
		return fmt.Errorf("tmpfs root: %w", err)
	}
	if err := bind(*bin, filepath.Join(*root, *image), true); err != nil {
		return err
	}
	for _, m := range *mounts {
		parts := strings.Split(m, ":")
		if len(parts) < 2 {
			return fmt.Errorf("--mount %q: want SRC:DST[:ro]", m)
		}
		ro := len(parts) > 2 && parts[2] == "ro"
		if err := bind(parts[0], filepath.Join(*root, parts[1]), ro); err != nil {
			return err
		}
	}
	if err := os.MkdirAll(filepath.Join(*root, "proc"), 0o555); err != nil {
		return err
	}
	if err := unix.Mount("proc", filepath.Join(*root, "proc"), "proc", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, ""); err != nil {
		return fmt.Errorf("mounting /proc: %w", err)
	}
	for _, d := range []string{"tmp", "dev"} {
		if err := os.MkdirAll(filepath.Join(*root, d), 0o1777); err != nil {
			return err
		}
	}
	if err := unix.Mount("/dev/null", touch(filepath.Join(*root, "dev/null")), "", unix.MS_BIND, ""); err != nil {
		return fmt.Errorf("binding /dev/null: %w", err)
	}
	// The root itself is read-only, as with readOnlyRootFilesystem.
	if err := unix.Mount("", *root, "", unix.MS_REMOUNT|unix.MS_RDONLY|unix.MS_BIND, ""); err != nil {
		return fmt.Errorf("read-only root: %w", err)
	}
	if err := unix.Chroot(*root); err != nil {
		return fmt.Errorf("chroot: %w", err)
	}
	if err := os.Chdir(*workdir); err != nil {
		_ = os.Chdir("/")
	}
	// syscall's (not x/sys/unix's) set the credentials of every thread,
	// whichever one then calls exec.
	if *uid != 0 || *gid != 0 {
		if err := syscall.Setgroups([]int{*gid}); err != nil {
			return fmt.Errorf("setgroups: %w", err)
		}
		if err := syscall.Setgid(*gid); err != nil {
			return fmt.Errorf("setgid %d: %w", *gid, err)
		}
		if err := syscall.Setuid(*uid); err != nil {
			return fmt.Errorf("setuid %d: %w", *uid, err)
		}
	}
	if len(argv) == 0 {
		argv = []string{*image}
	}
	path := argv[0]
	if !strings.HasPrefix(path, "/") {
		// An image's entrypoint with args only: the binary is the entrypoint.
		path = *image
		argv = append([]string{*image}, argv...)
	}
	return syscall.Exec(path, argv, os.Environ())
}

// bind mounts src at dst, a file or a folder like src.
func bind(src, dst string, ro bool) error {
	info, err := os.Stat(src)
	if err != nil {
		return fmt.Errorf("mount source: %w", err)
	}
	if info.IsDir() {
		if err := os.MkdirAll(dst, 0o755); err != nil {
			return err
		}
	} else {
		touch(dst)
	}
	if err := unix.Mount(src, dst, "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
		return fmt.Errorf("bind %s on %s: %w", src, dst, err)
	}
	if ro {
		if err := unix.Mount("", dst, "", unix.MS_REMOUNT|unix.MS_BIND|unix.MS_RDONLY, ""); err != nil {
			return fmt.Errorf("read-only %s: %w", dst, err)
		}
	}
	return nil
}

func touch(path string) string {
	_ = os.MkdirAll(filepath.Dir(path), 0o755)
	if f, err := os.OpenFile(path, os.O_CREATE, 0o644); err == nil {
		f.Close()
	}
	return path
}
