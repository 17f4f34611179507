//go:build unix

package ledger

import (
	"cmp"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// backupTimeFormat names a rotated file, <name>-<time><ext>, as lumberjack
// did before: backups an earlier version left count against the bound.
const backupTimeFormat = "2006-01-02T15-04-05.000"

// fileSink is the ledger's file: appended to, rotated by size, keeping at
// most maxBackups rotated files beside it.
//
// Whoever can write to a directory on the path could replace the file or a
// folder by a symlink and have the ledger truncate or append to a file of
// their choice (as root, in the agent). So nothing here follows a symlink:
// the folder is reached one component at a time from "/", each opened with
// O_NOFOLLOW (missing ones created 0700), and is kept open; the file and its
// backups are opened, renamed and removed relative to it, the file with
// O_NOFOLLOW and only when it is a regular file with no other hard link.
// A folder swapped after the start changes nothing: the sink keeps writing
// into the one it opened.
type fileSink struct {
	path       string // for errors
	dir        *os.File
	base       string // the file's name, and of its backups: prefix, ext
	prefix     string
	ext        string
	maxSize    int64
	maxBackups int
	now        func() time.Time

	mu   sync.Mutex
	f    *os.File
	size int64
}

func openFileSink(path string, maxSize int64, maxBackups int) (*fileSink, error) {
	dir, err := openDirNoFollow(filepath.Dir(path))
	if err != nil {
		return nil, err
	}
	base := filepath.Base(path)
	ext := filepath.Ext(base)
	s := &fileSink{path: path, dir: dir, base: base, prefix: strings.TrimSuffix(base, ext) + "-", ext: ext,
		maxSize: maxSize, maxBackups: maxBackups, now: time.Now}
	if err := s.open(); err != nil {
		_ = dir.Close()
		return nil, err
	}
	// A lower bound than the last run's holds from the start.
	if err := s.prune(); err != nil {
		_ = s.Close()
		return nil, err
	}
	return s, nil
}

// openDirNoFollow opens the absolute directory path without following a
// symlink in any of its components, creating the missing ones 0700.
func openDirNoFollow(path string) (*os.File, error) {
	fd, err := unix.Open("/", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("--ledger: file sink folder %s: opening /: %w", path, err)
	}
	walked := "/"
	for _, name := range strings.Split(strings.Trim(filepath.Clean(path), "/"), "/") {
		if name == "" {
			continue
		}
		walked = filepath.Join(walked, name)
		next, err := unix.Openat(fd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if errors.Is(err, unix.ENOENT) {
			if err = unix.Mkdirat(fd, name, 0o700); err == nil || errors.Is(err, unix.EEXIST) {
				next, err = unix.Openat(fd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
			}
		}
		_ = unix.Close(fd)
		if err != nil {
			if errors.Is(err, unix.ELOOP) || errors.Is(err, unix.ENOTDIR) {
				return nil, fmt.Errorf("--ledger: file sink folder %s: %s is a symlink or no folder, and the ledger follows no symlink: name the folder by its real path: %w", path, walked, err)
			}
			return nil, fmt.Errorf("--ledger: file sink folder %s: %s: %w", path, walked, err)
		}
		fd = next
	}
	return os.NewFile(uintptr(fd), path), nil
}

// open opens (or creates, 0600) the file in the folder, refusing anything
// but a regular file of its own: a symlink, a FIFO (which would block the
// writer), a hard link to another file.
func (s *fileSink) open() error {
	fd, err := unix.Openat(int(s.dir.Fd()), s.base,
		unix.O_WRONLY|unix.O_APPEND|unix.O_CREAT|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0o600)
	if err != nil {
		switch {
		case errors.Is(err, unix.ELOOP):
			return fmt.Errorf("--ledger: file sink %s is a symlink, and the ledger follows no symlink: remove it, or name the real file: %w", s.path, err)
		case errors.Is(err, unix.ENXIO): // a FIFO nobody reads
			return fmt.Errorf("--ledger: file sink %s is not a regular file: remove it, or name another path: %w", s.path, err)
		}
		return fmt.Errorf("--ledger: file sink %s: %w", s.path, err)
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		_ = unix.Close(fd)
		return fmt.Errorf("--ledger: file sink %s: %w", s.path, err)
	}
	switch {
	case st.Mode&unix.S_IFMT != unix.S_IFREG:
		_ = unix.Close(fd)
		return fmt.Errorf("--ledger: file sink %s is not a regular file: remove it, or name another path", s.path)
	case st.Nlink > 1:
		_ = unix.Close(fd)
		return fmt.Errorf("--ledger: file sink %s has %d hard links: the ledger writes only a file of its own; remove it, or name another path", s.path, st.Nlink)
	}
	if err := unix.SetNonblock(fd, false); err != nil { // O_NONBLOCK was for a FIFO's open only
		_ = unix.Close(fd)
		return fmt.Errorf("--ledger: file sink %s: %w", s.path, err)
	}
	f := os.NewFile(uintptr(fd), s.path)
	if st.Mode&0o077 != 0 {
		if err := f.Chmod(0o600); err != nil {
			_ = f.Close()
			return fmt.Errorf("--ledger: file sink %s is open to others and cannot be made 0600: %w", s.path, err)
		}
	}
	s.f, s.size = f, st.Size
	return nil
}

// Write appends one whole line, rotating first when it would take the file
// over its size. A line that failed half-way is cut off again: no partial
// record stays in the file.
func (s *fileSink) Write(line []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.f == nil {
		if err := s.open(); err != nil { // the last rotation failed to reopen
			return 0, err
		}
	}
	if s.size > 0 && s.size+int64(len(line)) > s.maxSize {
		if err := s.rotate(); err != nil {
			return 0, err
		}
	}
	n, err := s.f.Write(line)
	if err != nil {
		_ = s.f.Truncate(s.size)
		return 0, fmt.Errorf("--ledger: file sink %s: %w", s.path, err)
	}
	s.size += int64(n)
	return n, nil
}

// rotate renames the file to <name>-<time><ext> beside it, opens a new one
// and removes the oldest backups beyond the bound.
func (s *fileSink) rotate() error {
	if err := s.f.Close(); err != nil {
		return fmt.Errorf("--ledger: file sink %s: closing before rotation: %w", s.path, err)
	}
	s.f = nil
	dirfd := int(s.dir.Fd())
	stamp := s.now().UTC().Format(backupTimeFormat)
	backup := s.prefix + stamp + s.ext
	existing, err := s.backups()
	if err != nil {
		return err
	}
	// Rotations within one millisecond are numbered after the newest of
	// them, so that the oldest-first order holds and pruning removes the
	// oldest.
	n := -1
	for _, b := range existing {
		if b.stamp == stamp {
			n = max(n, b.n)
		}
	}
	if n >= 0 {
		backup = fmt.Sprintf("%s%s.%d%s", s.prefix, stamp, n+1, s.ext)
	}
	if err := unix.Renameat(dirfd, s.base, dirfd, backup); err != nil {
		return fmt.Errorf("--ledger: file sink %s: rotating to %s: %w", s.path, backup, err)
	}
	if err := s.open(); err != nil {
		return err
	}
	return s.prune()
}

// backup is a rotated file: its name, time stamp and counter (rotations
// within one millisecond).
type backup struct {
	name, stamp string
	n           int
}

// backups lists the rotated files, oldest first.
func (s *fileSink) backups() ([]backup, error) {
	if _, err := s.dir.Seek(0, 0); err != nil {
		return nil, fmt.Errorf("--ledger: file sink %s: listing backups: %w", s.path, err)
	}
	names, err := s.dir.Readdirnames(-1)
	if err != nil {
		return nil, fmt.Errorf("--ledger: file sink %s: listing backups: %w", s.path, err)
	}
	var found []backup
	for _, name := range names {
		rest, hasPrefix := strings.CutPrefix(name, s.prefix)
		rest, hasExt := strings.CutSuffix(rest, s.ext)
		if !hasPrefix || !hasExt || name == s.base || len(rest) < len(backupTimeFormat) {
			continue
		}
		stamp, tail := rest[:len(backupTimeFormat)], rest[len(backupTimeFormat):]
		if _, err := time.Parse(backupTimeFormat, stamp); err != nil {
			continue
		}
		b := backup{name: name, stamp: stamp}
		if tail != "" {
			if n, err := strconv.Atoi(strings.TrimPrefix(tail, ".")); err != nil || tail[0] != '.' || n < 1 {
				continue
			} else {
				b.n = n
			}
		}
		found = append(found, b)
	}
	slices.SortFunc(found, func(a, b backup) int { // time stamps sort as text
		return cmp.Or(strings.Compare(a.stamp, b.stamp), cmp.Compare(a.n, b.n))
	})
	return found, nil
}

// prune removes the oldest backups beyond maxBackups.
func (s *fileSink) prune() error {
	backups, err := s.backups()
	if err != nil {
		return err
	}
	for len(backups) > s.maxBackups {
		if err := unix.Unlinkat(int(s.dir.Fd()), backups[0].name, 0); err != nil && !errors.Is(err, unix.ENOENT) {
			return fmt.Errorf("--ledger: file sink %s: removing the old backup %s: %w", s.path, backups[0].name, err)
		}
		backups = backups[1:]
	}
	return nil
}

func (s *fileSink) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	var err error
	if s.f != nil {
		err = s.f.Close()
		s.f = nil
	}
	return errors.Join(err, s.dir.Close())
}
