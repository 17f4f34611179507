// Package kubeletconfig reads the two settings of the kubelet's
// configuration file (KubeletConfiguration, kubelet.config.k8s.io/v1beta1)
// that decide whether its certificates are ever renewed:
// serverTLSBootstrap (the serving certificate is requested through a
// kubernetes.io/kubelet-serving CSR and rotated) and rotateCertificates (the
// client certificate is). Both default to false when the file omits them.
//
// The file is evidence, not proof: the kubelet's command line can override
// it and a kubelet reads it only when it starts. A missing, unreadable or
// foreign file is Unknown, never an error for the verdict.
package kubeletconfig

import (
	"errors"
	"fmt"
	"io"
	"os"
	"syscall"

	sigsjson "sigs.k8s.io/json"
	"sigs.k8s.io/yaml"
)

// DefaultPath is kubeadm's (and kind's) kubelet configuration file.
const DefaultPath = "/var/lib/kubelet/config.yaml"

// maxSize bounds what is read: a KubeletConfiguration is a few KiB; the
// file is written by whoever administers the node, never trusted to be
// small.
const maxSize = 1 << 20

// Settings is what the file says.
type Settings struct {
	// Path is the file read.
	Path string
	// Known: the file was read and is a KubeletConfiguration; the
	// fields below are meaningful only then.
	Known bool
	// Err says why the settings are not known (missing, unreadable, not
	// a KubeletConfiguration).
	Err error
	// ServerTLSBootstrap and RotateCertificates as the kubelet would
	// read them (false when omitted).
	ServerTLSBootstrap bool
	RotateCertificates bool
}

// file is the part of KubeletConfiguration read here (v1beta1 field names;
// YAML or JSON, as the kubelet accepts).
type file struct {
	Kind               string `json:"kind"`
	APIVersion         string `json:"apiVersion"`
	ServerTLSBootstrap *bool  `json:"serverTLSBootstrap"`
	RotateCertificates *bool  `json:"rotateCertificates"`
}

const (
	wantKind       = "KubeletConfiguration"
	wantAPIVersion = "kubelet.config.k8s.io/v1beta1"
)

// Read reads path. It never fails: a problem is Settings.Err.
func Read(path string) Settings {
	s := Settings{Path: path}
	// O_NONBLOCK: a named pipe planted at the path must not hang the
	// agent; only a regular file is read.
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		s.Err = err
		return s
	}
	defer f.Close()
	info, err := f.Stat()
	if err != nil {
		s.Err = err
		return s
	}
	if !info.Mode().IsRegular() {
		s.Err = fmt.Errorf("%s is not a regular file (%s)", path, info.Mode().Type())
		return s
	}
	if unlinked(info) {
		// A single-file mount keeps the inode it was made with: the file
		// on the host was replaced since this container started.
		s.Err = fmt.Errorf("%s was replaced on the host since the agent started (a single-file mount keeps the old one): restart the agent to read it", path)
		return s
	}
	data, err := io.ReadAll(io.LimitReader(f, maxSize+1))
	if err != nil {
		s.Err = err
		return s
	}
	if len(data) > maxSize {
		s.Err = fmt.Errorf("%s is larger than %d bytes: not a kubelet configuration", path, maxSize)
		return s
	}
	return parse(s, data)
}

func parse(s Settings, data []byte) Settings {
	// Field names match exactly, as the kubelet's decoder matches them
	// (encoding/json alone would take ServerTlsBootstrap too).
	var f file
	js, err := yaml.YAMLToJSON(data)
	if err == nil {
		err = sigsjson.UnmarshalCaseSensitivePreserveInts(js, &f)
	}
	if err != nil {
		s.Err = fmt.Errorf("%s: %w", s.Path, err)
		return s
	}
	if f.Kind != wantKind || f.APIVersion != wantAPIVersion {
		s.Err = fmt.Errorf("%s is kind %.64q apiVersion %.64q, not a %s %s", s.Path, f.Kind, f.APIVersion, wantKind, wantAPIVersion)
		return s
	}
	s.Known = true
	s.ServerTLSBootstrap = f.ServerTLSBootstrap != nil && *f.ServerTLSBootstrap
	s.RotateCertificates = f.RotateCertificates != nil && *f.RotateCertificates
	return s
}

// Missing reports whether the file does not exist (a kubelet configured
// by flags alone, or another distribution's path).
func (s Settings) Missing() bool { return errors.Is(s.Err, os.ErrNotExist) }
