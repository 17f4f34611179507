package main

import (
	"archive/tar"
	"archive/zip"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

// The krew manifest names one archive per platform with its real
// SHA-256; each archive holds the executable (mode 755, .exe in a zip on
// Windows) and the LICENSE; the same input gives the same bytes.
func TestWriteKrew(t *testing.T) {
	dir := t.TempDir()
	license := filepath.Join(dir, "LICENSE")
	if err := os.WriteFile(license, []byte("license text\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	clis := map[string]string{}
	for _, p := range []string{"linux/amd64", "darwin/arm64", "windows/amd64"} {
		f := filepath.Join(dir, "cli-"+strings.ReplaceAll(p, "/", "-"))
		if err := os.WriteFile(f, []byte("binary for "+p), 0o755); err != nil {
			t.Fatal(err)
		}
		clis[p] = f
	}
	o := options{version: "1.2.3", created: 1700000000}
	files, err := writeKrew(dir, license, clis, "https://example.com/v1.2.3/", o)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"kubectl-certready-darwin-arm64.tar.gz", "kubectl-certready-linux-amd64.tar.gz", "kubectl-certready-windows-amd64.zip", "certready.krew.yaml"}
	if strings.Join(files, " ") != strings.Join(want, " ") {
		t.Fatalf("files %v, want %v", files, want)
	}
	var m krewPlugin
	y, err := os.ReadFile(filepath.Join(dir, "certready.krew.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.UnmarshalStrict(y, &m); err != nil {
		t.Fatal(err)
	}
	if m.Kind != "Plugin" || m.Metadata.Name != "certready" || m.Spec.Version != "v1.2.3" || len(m.Spec.Platforms) != 3 {
		t.Fatalf("manifest %+v", m)
	}
	for _, p := range m.Spec.Platforms {
		goos, arch := p.Selector.MatchLabels["os"], p.Selector.MatchLabels["arch"]
		archive := filepath.Base(p.URI)
		if p.URI != "https://example.com/v1.2.3/"+archive || !strings.HasPrefix(archive, "kubectl-certready-"+goos+"-"+arch+".") {
			t.Errorf("%s/%s: uri %s", goos, arch, p.URI)
		}
		data, err := os.ReadFile(filepath.Join(dir, archive))
		if err != nil {
			t.Fatal(err)
		}
		sum := sha256.Sum256(data)
		if p.SHA256 != hex.EncodeToString(sum[:]) {
			t.Errorf("%s: sha256 %s does not match the archive", archive, p.SHA256)
		}
		wantBin := "kubectl-certready"
		if goos == "windows" {
			wantBin += ".exe"
		}
		if p.Bin != wantBin || len(p.Files) != 2 || p.Files[0].From != wantBin || p.Files[1].From != "LICENSE" {
			t.Errorf("%s: bin %q files %+v", archive, p.Bin, p.Files)
		}
		entries := archiveEntries(t, archive, data)
		if e := entries[wantBin]; e.body != "binary for "+goos+"/"+arch || e.mode&0o111 == 0 {
			t.Errorf("%s: %s = %q mode %o", archive, wantBin, e.body, e.mode)
		}
		if entries["LICENSE"].body != "license text\n" || len(entries) != 2 {
			t.Errorf("%s: entries %v", archive, entries)
		}
	}
	again := t.TempDir()
	if _, err := writeKrew(again, license, clis, "https://example.com/v1.2.3/", o); err != nil {
		t.Fatal(err)
	}
	for _, f := range want {
		a, _ := os.ReadFile(filepath.Join(dir, f))
		b, _ := os.ReadFile(filepath.Join(again, f))
		if !bytes.Equal(a, b) {
			t.Errorf("%s differs between two runs over the same input", f)
		}
	}
}

type entry struct {
	body string
	mode os.FileMode
}

func archiveEntries(t *testing.T, name string, data []byte) map[string]entry {
	t.Helper()
	out := map[string]entry{}
	if strings.HasSuffix(name, ".zip") {
		zr, err := zip.NewReader(bytes.NewReader(data), int64(len(data)))
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range zr.File {
			rc, err := f.Open()
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(rc)
			rc.Close()
			out[f.Name] = entry{string(b), f.Mode()}
		}
		return out
	}
	zr, err := gzip.NewReader(bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(zr)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(tr)
		out[h.Name] = entry{string(b), os.FileMode(h.Mode)}
	}
}

func TestSelectLaptops(t *testing.T) {
	for _, tc := range []struct {
		in      []string
		want    string
		wantErr string
	}{
		{in: Laptops, want: strings.Join(Laptops, " ")},
		{in: []string{"windows/amd64"}, want: "windows/amd64"},
		{in: nil, want: ""},
		{in: []string{"plan9/amd64"}, wantErr: `--laptops "plan9/amd64": want some of darwin/amd64`},
		{in: []string{"darwin/arm64", "darwin/arm64"}, wantErr: "given twice"},
	} {
		got, err := selectLaptops(tc.in)
		if tc.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("selectLaptops(%v) error %v, want %q", tc.in, err, tc.wantErr)
			}
			continue
		}
		if err != nil || strings.Join(got, " ") != tc.want {
			t.Errorf("selectLaptops(%v) = %v, %v; want %s", tc.in, got, err, tc.want)
		}
	}
}
