package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
)

// Laptops are the operator platforms the CLI is released for beside Linux:
// only certready (kubectl-certready), not the node build, which runs in the
// image.
var Laptops = []string{"darwin/amd64", "darwin/arm64", "windows/amd64", "windows/arm64"}

// selectLaptops checks --laptops: each entry one of Laptops, none twice.
func selectLaptops(want []string) ([]string, error) {
	var out []string
	for _, p := range want {
		p = strings.TrimSpace(p)
		if !slices.Contains(Laptops, p) {
			return nil, fmt.Errorf("--laptops %q: want some of %s", p, strings.Join(Laptops, ","))
		}
		if slices.Contains(out, p) {
			return nil, fmt.Errorf("--laptops %q: given twice", p)
		}
		out = append(out, p)
	}
	return out, nil
}

// exeName is the file name of certready's CLI for a platform: Windows runs
// only files named .exe.
func exeName(base, goos, arch string) string {
	name := base + "-" + goos + "-" + arch
	if goos == "windows" {
		name += ".exe"
	}
	return name
}

// buildLaptopCLIs cross-compiles certready for each laptop platform as
// kubectl-certready-<os>-<arch>[.exe] and returns the files by platform.
// The Linux CLIs come from buildBinaries.
func buildLaptopCLIs(repo, dir string, platforms []string, o options) (map[string]string, error) {
	out := map[string]string{}
	ldflags := fmt.Sprintf("-s -w -X main.version=%s -X main.commit=%s", o.version, o.commit)
	for _, p := range platforms {
		goos, arch, _ := strings.Cut(p, "/")
		file := filepath.Join(dir, exeName("kubectl-certready", goos, arch))
		args := []string{"build", "-trimpath", "-ldflags", ldflags, "-o", file, "./cmd/certready"}
		cmd := exec.Command("go", args...)
		cmd.Dir = repo
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS="+goos, "GOARCH="+arch)
		if b, err := cmd.CombinedOutput(); err != nil {
			return nil, fmt.Errorf("go %v (GOOS=%s GOARCH=%s): %w\n%s", args, goos, arch, err, b)
		}
		fmt.Printf("  CLI %s\n", p)
		out[p] = file
	}
	return out, nil
}
