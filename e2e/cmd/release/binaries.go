package main

import (
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
)

// binaries are one platform's built files: certready and its node build.
type binaries struct {
	certready, node string
}

// buildBinaries cross-compiles certready (every command) and certready-node
// (-tags nodeonly) for each of Arches, static and stamped with the version,
// and copies certready as kubectl-certready (kubectl finds plugins by
// name).
func buildBinaries(repo, dir string, o options) (map[string]binaries, error) {
	out := map[string]binaries{}
	ldflags := fmt.Sprintf("-s -w -X main.version=%s -X main.commit=%s", o.version, o.commit)
	for _, arch := range Arches {
		b := binaries{
			certready: filepath.Join(dir, "certready-linux-"+arch),
			node:      filepath.Join(dir, "certready-node-linux-"+arch),
		}
		for _, build := range []struct {
			path string
			tags []string
		}{{b.certready, nil}, {b.node, []string{"-tags", "nodeonly"}}} {
			args := append([]string{"build", "-trimpath", "-ldflags", ldflags}, build.tags...)
			args = append(args, "-o", build.path, "./cmd/certready")
			cmd := exec.Command("go", args...)
			cmd.Dir = repo
			cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH="+arch)
			if out, err := cmd.CombinedOutput(); err != nil {
				return nil, fmt.Errorf("go %v (GOARCH=%s): %w\n%s", args, arch, err, out)
			}
		}
		if err := copyFile(b.certready, filepath.Join(dir, "kubectl-certready-linux-"+arch)); err != nil {
			return nil, err
		}
		fmt.Printf("  binaries linux/%s\n", arch)
		out[arch] = b
	}
	return out, nil
}

func copyFile(from, to string) error {
	in, err := os.Open(from)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(to, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o755)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}
