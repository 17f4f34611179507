// Command release builds certready's release artifacts offline (no network
// but the Go module proxy, no registry, no Docker): static binaries for
// linux/amd64 and linux/arm64 (also as kubectl-certready), the CLI for
// macOS and Windows, krew archives of every CLI with the plugin manifest,
// the image as a multi-platform OCI archive, the Helm chart packaged with
// the same version, the overlays rendered with the image reference set,
// and SHA256SUMS over all of them.
//
//	go run ./cmd/release --version 1.2.3 --out ../dist
package main

import (
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"

	"github.com/spf13/pflag"
)

// semver is what --version accepts: MAJOR.MINOR.PATCH with an optional
// pre-release, no leading v (the tag is v<version>).
var semver = regexp.MustCompile(`^(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)(-[0-9A-Za-z.-]+)?$`)

// Arches are the platforms released.
var Arches = []string{"amd64", "arm64"}

type options struct {
	version, out, repo, imageRepo, commit string
	created                               int64 // seconds since the epoch, for reproducible archives
	laptops                               []string
	krewURIBase                           string
}

func main() {
	var o options
	pflag.StringVar(&o.version, "version", "", "release version, MAJOR.MINOR.PATCH[-pre] (no leading v)")
	pflag.StringVar(&o.out, "out", "../dist", "folder for the artifacts (a subfolder per version is made)")
	pflag.StringVar(&o.repo, "repo", "..", "the certready repository")
	pflag.StringVar(&o.imageRepo, "image-repo", "certready", "image repository the chart and the manifests reference (the OCI archive's ref name is its tag)")
	pflag.StringVar(&o.commit, "commit", "unknown", "commit stamped into the binaries and the image")
	pflag.StringSliceVar(&o.laptops, "laptops", Laptops, "operator platforms the CLI is built for beside linux, os/arch, comma-separated (some of "+strings.Join(Laptops, ",")+")")
	pflag.StringVar(&o.krewURIBase, "krew-uri-base", "https://github.com/certready/certready/releases/download/v{version}", "where the krew archives are published; {version} is replaced by the version")
	pflag.Int64Var(&o.created, "source-date-epoch", 0, "timestamp of every file in the archives (0: $SOURCE_DATE_EPOCH, else 0)")
	pflag.Parse()
	if o.created == 0 {
		if v, err := strconv.ParseInt(os.Getenv("SOURCE_DATE_EPOCH"), 10, 64); err == nil {
			o.created = v
		}
	}
	if err := release(o); err != nil {
		fmt.Fprintln(os.Stderr, "release:", err)
		os.Exit(1)
	}
}

func release(o options) error {
	if !semver.MatchString(o.version) {
		return fmt.Errorf("--version %q: want MAJOR.MINOR.PATCH[-pre], e.g. 1.2.3 (no leading v)", o.version)
	}
	laptops, err := selectLaptops(o.laptops)
	if err != nil {
		return err
	}
	uriBase := strings.ReplaceAll(o.krewURIBase, "{version}", o.version)
	if u, err := url.Parse(uriBase); err != nil || (u.Scheme != "https" && u.Scheme != "http" && u.Scheme != "file") || u.Path == "" {
		return fmt.Errorf("--krew-uri-base %q: want an absolute URL of the folder the archives are published in, e.g. https://example.com/certready/v{version}", o.krewURIBase)
	}
	repo, err := filepath.Abs(o.repo)
	if err != nil {
		return err
	}
	dir, err := filepath.Abs(filepath.Join(o.out, o.version))
	if err != nil {
		return err
	}
	if err := os.RemoveAll(dir); err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	fmt.Printf("certready %s -> %s (Go %s)\n", o.version, dir, runtime.Version())
	bins, err := buildBinaries(repo, dir, o)
	if err != nil {
		return err
	}
	clis, err := buildLaptopCLIs(repo, dir, laptops, o)
	if err != nil {
		return err
	}
	for _, arch := range Arches {
		clis["linux/"+arch] = filepath.Join(dir, "kubectl-certready-linux-"+arch)
	}
	if _, err := writeKrew(dir, filepath.Join(repo, "LICENSE"), clis, uriBase, o); err != nil {
		return fmt.Errorf("krew: %w", err)
	}
	if err := writeImage(filepath.Join(dir, "certready-"+o.version+"-image.oci.tar"), bins, o); err != nil {
		return fmt.Errorf("image: %w", err)
	}
	if err := packageChart(filepath.Join(repo, "charts", "certready"), dir, o); err != nil {
		return fmt.Errorf("chart: %w", err)
	}
	if err := renderManifests(filepath.Join(repo, "manifests"), dir, o); err != nil {
		return fmt.Errorf("manifests: %w", err)
	}
	sums, err := writeChecksums(dir)
	if err != nil {
		return err
	}
	fmt.Printf("%d artifacts, SHA256SUMS written\n", sums)
	return nil
}
