package main

import (
	"archive/zip"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"sigs.k8s.io/yaml"
)

// krewPlatform is one entry of a krew plugin manifest's platforms
// (krew.googlecontainertools.github.com/v1alpha2).
type krewPlatform struct {
	Selector struct {
		MatchLabels map[string]string `json:"matchLabels"`
	} `json:"selector"`
	URI    string     `json:"uri"`
	SHA256 string     `json:"sha256"`
	Bin    string     `json:"bin"`
	Files  []krewFile `json:"files"`
}

type krewFile struct {
	From string `json:"from"`
	To   string `json:"to"`
}

type krewPlugin struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Metadata   struct {
		Name string `json:"name"`
	} `json:"metadata"`
	Spec struct {
		Version          string         `json:"version"`
		Homepage         string         `json:"homepage"`
		ShortDescription string         `json:"shortDescription"`
		Description      string         `json:"description"`
		Platforms        []krewPlatform `json:"platforms"`
	} `json:"spec"`
}

// writeKrew archives each platform's CLI with the LICENSE (tar.gz, zip on
// Windows, where krew expects it), and writes certready.krew.yaml naming
// each archive under uriBase with its SHA-256. clis maps "os/arch" to the
// built kubectl-certready file. It returns the files written.
func writeKrew(dir, license string, clis map[string]string, uriBase string, o options) ([]string, error) {
	lic, err := os.ReadFile(license)
	if err != nil {
		return nil, err
	}
	created := time.Unix(o.created, 0).UTC()
	// A zip's MS-DOS dates start in 1980: an earlier time would wrap.
	zipCreated := created
	if dos := time.Date(1980, 1, 1, 0, 0, 0, 0, time.UTC); zipCreated.Before(dos) {
		zipCreated = dos
	}
	var m krewPlugin
	m.APIVersion, m.Kind, m.Metadata.Name = "krew.googlecontainertools.github.com/v1alpha2", "Plugin", "certready"
	m.Spec.Version = "v" + o.version
	m.Spec.Homepage = "https://github.com/certready/certready"
	m.Spec.ShortDescription = "Read whether each node's kubelet serves TLS"
	m.Spec.Description = "Reads the fleet's KubeletServingCertNotReady conditions, explains why a kubelet-serving\n" +
		"CSR is approved or pending, verifies certificates against a baseline, and checks a cluster\n" +
		"before the readiness taint is enforced. Needs certready's agents in the cluster.\n"
	var written []string
	for _, p := range slices.Sorted(maps.Keys(clis)) {
		goos, arch, _ := strings.Cut(p, "/")
		bin, err := os.ReadFile(clis[p])
		if err != nil {
			return nil, err
		}
		name, archive := "kubectl-certready", "kubectl-certready-"+goos+"-"+arch
		var data []byte
		if goos == "windows" {
			name += ".exe"
			archive += ".zip"
			data, err = zipOf(map[string][]byte{name: bin, "LICENSE": lic}, zipCreated, name)
		} else {
			archive += ".tar.gz"
			data, err = tarGzOf(map[string][]byte{name: bin, "LICENSE": lic}, created, name)
		}
		if err != nil {
			return nil, fmt.Errorf("%s: %w", archive, err)
		}
		if err := os.WriteFile(filepath.Join(dir, archive), data, 0o644); err != nil {
			return nil, err
		}
		sum := sha256.Sum256(data)
		e := krewPlatform{URI: strings.TrimSuffix(uriBase, "/") + "/" + archive, SHA256: hex.EncodeToString(sum[:]), Bin: name,
			Files: []krewFile{{From: name, To: "."}, {From: "LICENSE", To: "."}}}
		e.Selector.MatchLabels = map[string]string{"os": goos, "arch": arch}
		m.Spec.Platforms = append(m.Spec.Platforms, e)
		written = append(written, archive)
	}
	y, err := yaml.Marshal(m)
	if err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(dir, "certready.krew.yaml"), y, 0o644); err != nil {
		return nil, err
	}
	return append(written, "certready.krew.yaml"), nil
}

// tarGzOf is tarOf, gzipped reproducibly.
func tarGzOf(files map[string][]byte, created time.Time, exe string) ([]byte, error) {
	raw, err := tarOf(files, created, map[string]bool{exe: true})
	if err != nil {
		return nil, err
	}
	return gzipOf(raw)
}

// zipOf archives files in name order, dated created, exe marked
// executable (for unzip on Unix; Windows ignores the mode).
func zipOf(files map[string][]byte, created time.Time, exe string) ([]byte, error) {
	var buf bytes.Buffer
	zw := zip.NewWriter(&buf)
	for _, n := range slices.Sorted(maps.Keys(files)) {
		h := &zip.FileHeader{Name: n, Method: zip.Deflate, Modified: created}
		h.SetMode(0o644)
		if n == exe {
			h.SetMode(0o755)
		}
		w, err := zw.CreateHeader(h)
		if err != nil {
			return nil, err
		}
		if _, err := w.Write(files[n]); err != nil {
			return nil, err
		}
	}
	if err := zw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}
