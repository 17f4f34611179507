package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
)

// binaries are one platform's built files: certready and its node build.
type binaries struct {
	certready, node string
}

// buildBinaries cross-compiles, for each of Arches, static and stamped with
// the version: certready for the image (-tags nogotemplate: the approver's
// binary without text/template, docs/benchmarks.md), certready-node
// (-tags nodeonly), and kubectl-certready, the operator's CLI with every
// output (kubectl finds plugins by name).
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
		}{{b.certready, []string{"-tags", "nogotemplate"}}, {b.node, []string{"-tags", "nodeonly"}}, {filepath.Join(dir, "kubectl-certready-linux-"+arch), nil}} {
			args := append([]string{"build", "-trimpath", "-ldflags", ldflags}, build.tags...)
			args = append(args, "-o", build.path, "./cmd/certready")
			cmd := exec.Command("go", args...)
			cmd.Dir = repo
			cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH="+arch)
			if out, err := cmd.CombinedOutput(); err != nil {
				return nil, fmt.Errorf("go %v (GOARCH=%s): %w\n%s", args, arch, err, out)
			}
		}
		fmt.Printf("  binaries linux/%s\n", arch)
		out[arch] = b
	}
	return out, nil
}
