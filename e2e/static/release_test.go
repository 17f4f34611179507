package static

import (
	"archive/tar"
	"bufio"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"helm.sh/helm/v3/pkg/chart/loader"
)

// make release, from this checkout into a temporary folder, offline: every
// artifact is there, SHA256SUMS holds, the binaries carry the version, the
// OCI archive is a valid two-platform image layout whose blobs match their
// digests, and the chart and the manifests reference the image the archive
// holds.
func TestReleaseProducesEveryArtifact(t *testing.T) {
	const version = "0.0.0-test.1"
	out := t.TempDir()
	cmd := exec.Command("go", "run", "./cmd/release", "--version", version, "--out", out, "--repo", "..", "--commit", "abc1234",
		"--laptops", "windows/amd64", "--krew-uri-base", "https://example.com/certready/v{version}")
	cmd.Dir = ".."
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("release: %v\n%s", err, b)
	}
	dir := filepath.Join(out, version)
	want := []string{"SHA256SUMS", "certready-" + version + ".tgz", "certready-" + version + "-image.oci.tar"}
	for _, arch := range []string{"amd64", "arm64"} {
		want = append(want, "certready-linux-"+arch, "certready-node-linux-"+arch, "kubectl-certready-linux-"+arch)
	}
	for _, o := range []string{"standalone", "nrc", "capi-management"} {
		want = append(want, "certready-"+version+"-"+o+".yaml")
	}
	want = append(want, "kubectl-certready-windows-amd64.exe", "certready.krew.yaml",
		"kubectl-certready-linux-amd64.tar.gz", "kubectl-certready-linux-arm64.tar.gz", "kubectl-certready-windows-amd64.zip")
	for _, f := range want {
		if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
			t.Errorf("artifact %s: %v", f, err)
		}
	}
	checkSums(t, dir, len(want)-1)
	if runtime.GOARCH == "amd64" {
		b, err := exec.Command(filepath.Join(dir, "kubectl-certready-linux-amd64"), "version").CombinedOutput()
		if err != nil || !strings.Contains(string(b), "certready "+version+" (commit abc1234") || strings.Contains(string(b), "no go-template") {
			t.Errorf("kubectl-certready version: %v %s; want the operator's CLI, with every output", err, b)
		}
		// The image's certready leaves -o go-template out (the approver's
		// memory, docs/benchmarks.md); the operator's CLI keeps it.
		b, err = exec.Command(filepath.Join(dir, "certready-linux-amd64"), "version").CombinedOutput()
		if err != nil || !strings.Contains(string(b), "no go-template") {
			t.Errorf("certready-linux-amd64 (the image's) version: %v %s; want the build without go-template", err, b)
		}
	}
	checkImage(t, filepath.Join(dir, "certready-"+version+"-image.oci.tar"), version)
	if exe, err := os.ReadFile(filepath.Join(dir, "kubectl-certready-windows-amd64.exe")); err != nil || !bytes.HasPrefix(exe, []byte("MZ")) {
		t.Errorf("kubectl-certready-windows-amd64.exe is not a Windows executable: %v", err)
	}
	krew, err := os.ReadFile(filepath.Join(dir, "certready.krew.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{"version: v" + version, "uri: https://example.com/certready/v" + version + "/kubectl-certready-windows-amd64.zip", "bin: kubectl-certready.exe", "os: linux"} {
		if !bytes.Contains(krew, []byte(s)) {
			t.Errorf("certready.krew.yaml lacks %q:\n%s", s, krew)
		}
	}

	ch, err := loader.Load(filepath.Join(dir, "certready-"+version+".tgz"))
	if err != nil {
		t.Fatal(err)
	}
	if ch.Metadata.Version != version || ch.Metadata.AppVersion != version {
		t.Errorf("chart version %s, appVersion %s; want %s for both", ch.Metadata.Version, ch.Metadata.AppVersion, version)
	}
	for _, o := range []string{"standalone", "nrc", "capi-management"} {
		data, err := os.ReadFile(filepath.Join(dir, "certready-"+version+"-"+o+".yaml"))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Contains(data, []byte("image: certready:"+version+"\n")) || bytes.Contains(data, []byte("certready:dev")) {
			t.Errorf("manifests %s do not reference certready:%s only", o, version)
		}
	}
}

func checkSums(t *testing.T, dir string, n int) {
	t.Helper()
	f, err := os.Open(filepath.Join(dir, "SHA256SUMS"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	lines := 0
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		sum, name, ok := strings.Cut(sc.Text(), "  ")
		data, err := os.ReadFile(filepath.Join(dir, name))
		if !ok || err != nil {
			t.Errorf("SHA256SUMS line %q: %v", sc.Text(), err)
			continue
		}
		got := sha256.Sum256(data)
		if hex.EncodeToString(got[:]) != sum {
			t.Errorf("SHA256SUMS: %s does not match", name)
		}
		lines++
	}
	if lines != n {
		t.Errorf("SHA256SUMS has %d lines, want %d", lines, n)
	}
}

// checkImage reads the OCI layout: index -> image index named version ->
// one manifest per platform -> config and layer, every blob matching its
// digest; the layer holds both binaries, executable, and the config runs
// certready as 65532.
func checkImage(t *testing.T, file, version string) {
	t.Helper()
	f, err := os.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	blobs := map[string][]byte{}
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		data, _ := io.ReadAll(tr)
		blobs[h.Name] = data
	}
	if string(blobs["oci-layout"]) != `{"imageLayoutVersion":"1.0.0"}` {
		t.Errorf("oci-layout = %q", blobs["oci-layout"])
	}
	type desc struct {
		MediaType, Digest string
		Size              int
		Platform          struct{ Architecture, OS string }
		Annotations       map[string]string
	}
	blob := func(d desc) []byte {
		data, ok := blobs["blobs/sha256/"+strings.TrimPrefix(d.Digest, "sha256:")]
		sum := sha256.Sum256(data)
		if !ok || "sha256:"+hex.EncodeToString(sum[:]) != d.Digest || len(data) != d.Size {
			t.Fatalf("blob %s missing or not matching its digest and size", d.Digest)
		}
		return data
	}
	var top, idx struct{ Manifests []desc }
	if err := json.Unmarshal(blobs["index.json"], &top); err != nil || len(top.Manifests) != 1 || top.Manifests[0].Annotations["org.opencontainers.image.ref.name"] != version {
		t.Fatalf("index.json: %v %s", err, blobs["index.json"])
	}
	if err := json.Unmarshal(blob(top.Manifests[0]), &idx); err != nil {
		t.Fatal(err)
	}
	arches := map[string]bool{}
	for _, m := range idx.Manifests {
		arches[m.Platform.OS+"/"+m.Platform.Architecture] = true
		var man struct {
			Config desc
			Layers []desc
		}
		if err := json.Unmarshal(blob(m), &man); err != nil || len(man.Layers) != 1 {
			t.Fatalf("manifest %s: %v", m.Digest, err)
		}
		var cfg struct {
			Architecture string
			Config       struct {
				User       string
				Entrypoint []string
			}
		}
		if err := json.Unmarshal(blob(man.Config), &cfg); err != nil || cfg.Architecture != m.Platform.Architecture ||
			cfg.Config.User != "65532:65532" || strings.Join(cfg.Config.Entrypoint, " ") != "/usr/local/bin/certready" {
			t.Errorf("config of %s: %+v %v", m.Platform.Architecture, cfg, err)
		}
		mode := layerModes(t, blob(man.Layers[0]))
		for _, bin := range []string{"usr/local/bin/certready", "usr/local/bin/certready-node"} {
			if mode[bin] != 0o755 {
				t.Errorf("%s layer: %s mode %o, want 755", m.Platform.Architecture, bin, mode[bin])
			}
		}
	}
	if !arches["linux/amd64"] || !arches["linux/arm64"] || len(arches) != 2 {
		t.Errorf("platforms %v, want linux/amd64 and linux/arm64", arches)
	}
}

func layerModes(t *testing.T, gz []byte) map[string]int64 {
	t.Helper()
	zr, err := gzip.NewReader(bytes.NewReader(gz))
	if err != nil {
		t.Fatal(err)
	}
	modes := map[string]int64{}
	tr := tar.NewReader(zr)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return modes
		}
		if err != nil {
			t.Fatal(err)
		}
		modes[h.Name] = h.Mode
	}
}
