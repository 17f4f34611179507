package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path"
	"sort"
	"time"
)

// OCI media types (image-spec v1.1).
const (
	mediaIndex    = "application/vnd.oci.image.index.v1+json"
	mediaManifest = "application/vnd.oci.image.manifest.v1+json"
	mediaConfig   = "application/vnd.oci.image.config.v1+json"
	mediaLayer    = "application/vnd.oci.image.layer.v1.tar+gzip"
	refName       = "org.opencontainers.image.ref.name"
)

type descriptor struct {
	MediaType   string            `json:"mediaType"`
	Digest      string            `json:"digest"`
	Size        int64             `json:"size"`
	Platform    *platform         `json:"platform,omitempty"`
	Annotations map[string]string `json:"annotations,omitempty"`
}

type platform struct {
	Architecture string `json:"architecture"`
	OS           string `json:"os"`
}

type index struct {
	SchemaVersion int          `json:"schemaVersion"`
	MediaType     string       `json:"mediaType"`
	Manifests     []descriptor `json:"manifests"`
}

type manifest struct {
	SchemaVersion int          `json:"schemaVersion"`
	MediaType     string       `json:"mediaType"`
	Config        descriptor   `json:"config"`
	Layers        []descriptor `json:"layers"`
}

type imageConfig struct {
	Created      string `json:"created"`
	Architecture string `json:"architecture"`
	OS           string `json:"os"`
	Config       struct {
		User       string            `json:"User"`
		Entrypoint []string          `json:"Entrypoint"`
		Labels     map[string]string `json:"Labels"`
	} `json:"config"`
	RootFS struct {
		Type    string   `json:"type"`
		DiffIDs []string `json:"diff_ids"`
	} `json:"rootfs"`
}

// layout is an OCI image layout being assembled in memory: its blobs by
// digest.
type layout struct{ blobs map[string][]byte }

func (l *layout) add(media string, data []byte) descriptor {
	sum := sha256.Sum256(data)
	d := "sha256:" + hex.EncodeToString(sum[:])
	l.blobs[d] = data
	return descriptor{MediaType: media, Digest: d, Size: int64(len(data))}
}

func (l *layout) addJSON(media string, v any) (descriptor, error) {
	data, err := json.Marshal(v)
	if err != nil {
		return descriptor{}, err
	}
	return l.add(media, data), nil
}

// writeImage writes the image as an OCI image layout in a tar archive: an
// index of one manifest per platform, each one layer on scratch (the two
// binaries, passwd and group entries for root and nonroot, the build
// host's CA bundle when it has one), user 65532, entrypoint certready, as
// the Dockerfile's. Its ref name is the version; load it with
// 'skopeo copy oci-archive:<file>:<version> …' or 'docker load'.
func writeImage(file string, bins map[string]binaries, o options) error {
	l := &layout{blobs: map[string][]byte{}}
	created := time.Unix(o.created, 0).UTC()
	var platforms []descriptor
	for _, arch := range Arches {
		layer, diffID, err := imageLayer(bins[arch], created)
		if err != nil {
			return err
		}
		ld := l.add(mediaLayer, layer)
		var cfg imageConfig
		cfg.Created, cfg.Architecture, cfg.OS = created.Format(time.RFC3339), arch, "linux"
		cfg.Config.User, cfg.Config.Entrypoint = "65532:65532", []string{"/usr/local/bin/certready"}
		cfg.Config.Labels = map[string]string{
			"org.opencontainers.image.title":    "certready",
			"org.opencontainers.image.source":   "https://github.com/certready/certready",
			"org.opencontainers.image.version":  o.version,
			"org.opencontainers.image.revision": o.commit,
			"org.opencontainers.image.licenses": "Apache-2.0",
		}
		cfg.RootFS.Type, cfg.RootFS.DiffIDs = "layers", []string{diffID}
		cd, err := l.addJSON(mediaConfig, cfg)
		if err != nil {
			return err
		}
		md, err := l.addJSON(mediaManifest, manifest{SchemaVersion: 2, MediaType: mediaManifest, Config: cd, Layers: []descriptor{ld}})
		if err != nil {
			return err
		}
		md.Platform = &platform{Architecture: arch, OS: "linux"}
		platforms = append(platforms, md)
	}
	id, err := l.addJSON(mediaIndex, index{SchemaVersion: 2, MediaType: mediaIndex, Manifests: platforms})
	if err != nil {
		return err
	}
	id.Annotations = map[string]string{refName: o.version}
	top, err := json.Marshal(index{SchemaVersion: 2, MediaType: mediaIndex, Manifests: []descriptor{id}})
	if err != nil {
		return err
	}
	files := map[string][]byte{"oci-layout": []byte(`{"imageLayoutVersion":"1.0.0"}`), "index.json": top}
	for d, data := range l.blobs {
		files["blobs/sha256/"+d[len("sha256:"):]] = data
	}
	archive, err := tarOf(files, created, nil)
	if err != nil {
		return err
	}
	fmt.Printf("  image %s (%s)\n", path.Base(file), mib(len(archive)))
	return os.WriteFile(file, archive, 0o644)
}

// imageLayer is the gzipped tar of one platform's root file system, and the
// digest of the uncompressed tar (the config's diff ID).
func imageLayer(b binaries, created time.Time) (layer []byte, diffID string, err error) {
	files := map[string][]byte{
		"etc/passwd": []byte("root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n"),
		"etc/group":  []byte("root:x:0:\nnonroot:x:65532:\n"),
	}
	exec := map[string]bool{}
	for name, p := range map[string]string{"usr/local/bin/certready": b.certready, "usr/local/bin/certready-node": b.node} {
		if files[name], err = os.ReadFile(p); err != nil {
			return nil, "", err
		}
		exec[name] = true
	}
	if ca, err := os.ReadFile("/etc/ssl/certs/ca-certificates.crt"); err == nil {
		files["etc/ssl/certs/ca-certificates.crt"] = ca
	}
	raw, err := tarOf(files, created, exec)
	if err != nil {
		return nil, "", err
	}
	sum := sha256.Sum256(raw)
	gz, err := gzipOf(raw)
	if err != nil {
		return nil, "", err
	}
	return gz, "sha256:" + hex.EncodeToString(sum[:]), nil
}

// gzipOf compresses data with no name and no time in the header: the same
// input gives the same bytes.
func gzipOf(data []byte) ([]byte, error) {
	var gz bytes.Buffer
	w := gzip.NewWriter(&gz)
	if _, err := w.Write(data); err != nil {
		return nil, err
	}
	if err := w.Close(); err != nil {
		return nil, err
	}
	return gz.Bytes(), nil
}

// tarOf archives files (and their parent folders) in name order, every
// entry owned by root and dated created; exec marks the executables.
func tarOf(files map[string][]byte, created time.Time, exec map[string]bool) ([]byte, error) {
	dirs := map[string]bool{}
	var names []string
	for name := range files {
		names = append(names, name)
		for d := path.Dir(name); d != "."; d = path.Dir(d) {
			dirs[d+"/"] = true
		}
	}
	for d := range dirs {
		names = append(names, d)
	}
	sort.Strings(names)
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, name := range names {
		h := &tar.Header{Name: name, ModTime: created, Uname: "root", Gname: "root", Format: tar.FormatPAX}
		data, isFile := files[name]
		switch {
		case !isFile:
			h.Typeflag, h.Mode = tar.TypeDir, 0o755
		case exec[name]:
			h.Typeflag, h.Mode, h.Size = tar.TypeReg, 0o755, int64(len(data))
		default:
			h.Typeflag, h.Mode, h.Size = tar.TypeReg, 0o644, int64(len(data))
		}
		if err := tw.WriteHeader(h); err != nil {
			return nil, err
		}
		if isFile {
			if _, err := tw.Write(data); err != nil {
				return nil, err
			}
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

func mib(n int) string { return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20)) }
