// Package certfile owns the kubelet's serving-certificate layout on disk:
// <pki-dir>/kubelet-server-current.pem, an absolute symlink to a 0600
// kubelet-server-<timestamp>.pem holding the certificate chain and the
// private key. It turns that file into a public observation (leaf, chain,
// fingerprint) and never decodes, keeps, logs or returns the private key:
// only the bytes between CERTIFICATE markers are ever PEM-decoded, and the
// buffer holding the file is wiped before Read returns.
package certfile

import (
	"bytes"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"github.com/certready/certready/internal/fingerprint"
)

const (
	// DefaultDir is the kubelet's default --cert-dir.
	DefaultDir = "/var/lib/kubelet/pki"
	// currentName is the symlink the kubelet points at its current pair.
	currentName = "kubelet-server-current.pem"
	// ClientCurrentName is the same for the kubelet's client certificate
	// (its identity towards the API server), when the kubelet rotates it.
	ClientCurrentName = "kubelet-client-current.pem"
	// MaxSize bounds how much of the file is read: a real pair is a few KiB.
	MaxSize = 1 << 20
)

// State classifies what was found at the current path.
type State string

const (
	// Present: the file resolved and holds at least one certificate.
	Present State = "Present"
	// Missing: nothing at the path, or a symlink whose target is gone.
	Missing State = "Missing"
	// Unreadable: something is there but cannot be read as a file
	// (permissions, a directory, a symlink loop, too large).
	Unreadable State = "Unreadable"
	// Malformed: readable, but without a parseable CERTIFICATE block.
	Malformed State = "Malformed"
)

// Observation is the public part of the installed serving certificate.
type Observation struct {
	Path          string // the -current.pem path that was read
	Target        string // where the symlink resolved to, when it did
	State         State
	Detail        string // why the state is not Present
	Leaf          *x509.Certificate
	Intermediates []*x509.Certificate
	Fingerprint   fingerprint.SHA256
	ModTime       time.Time // of the resolved file
}

// CurrentPath is the -current.pem path inside dir.
func CurrentPath(dir string) string { return filepath.Join(dir, currentName) }

// ClientPath is the kubelet's client -current.pem path inside dir.
func ClientPath(dir string) string { return filepath.Join(dir, ClientCurrentName) }

// Read observes the installed serving certificate in dir. It never fails:
// every problem is an Observation with a State and a Detail that names the
// path and says what was wrong.
func Read(dir string) Observation { return ReadFile(CurrentPath(dir)) }

// ReadFile observes the certificate in the PEM file at path (a kubelet
// -current.pem: certificate and private key), as Read does: only its
// CERTIFICATE blocks are decoded, and the copy of the file is wiped.
func ReadFile(path string) Observation {
	obs := Observation{Path: path}
	if target, err := filepath.EvalSymlinks(path); err == nil {
		obs.Target = target
	}
	// O_NONBLOCK: a named pipe planted at the path must not hang the agent;
	// the mode check below then refuses it.
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return obs.fail(classify(err), describe(path, err))
	}
	defer f.Close()
	info, err := f.Stat()
	if err != nil {
		return obs.fail(Unreadable, describe(path, err))
	}
	if !info.Mode().IsRegular() {
		return obs.fail(Unreadable, fmt.Sprintf("%s resolves to %s, not a regular file", path, kind(info.Mode())))
	}
	obs.ModTime = info.ModTime()
	buf, err := io.ReadAll(io.LimitReader(f, MaxSize+1))
	// The file holds the private key: wipe our copy whatever happens next.
	defer clear(buf)
	if err != nil {
		return obs.fail(Unreadable, describe(path, err))
	}
	if len(buf) > MaxSize {
		return obs.fail(Unreadable, fmt.Sprintf("%s is larger than %d bytes; a kubelet certificate and key are a few KiB", path, MaxSize))
	}
	certs, err := ParseCertificates(buf)
	if err != nil {
		return obs.fail(Malformed, fmt.Sprintf("%s: %v", path, err))
	}
	obs.State = Present
	obs.Leaf = certs[0]
	obs.Intermediates = certs[1:]
	obs.Fingerprint = fingerprint.Of(certs[0])
	return obs
}

func (o Observation) fail(s State, detail string) Observation {
	o.State = s
	o.Detail = detail
	return o
}

var (
	beginCert = []byte("-----BEGIN CERTIFICATE-----")
	endCert   = []byte("-----END CERTIFICATE-----")
)

// ParseCertificates returns the certificates in data, leaf first. Only the
// text between CERTIFICATE markers is decoded, so a private key block in
// the same data is never base64-decoded or parsed.
func ParseCertificates(data []byte) ([]*x509.Certificate, error) {
	var certs []*x509.Certificate
	rest := data
	for {
		start := bytes.Index(rest, beginCert)
		if start < 0 {
			break
		}
		end := bytes.Index(rest[start:], endCert)
		if end < 0 {
			return nil, fmt.Errorf("CERTIFICATE block %d has no END line (truncated file?)", len(certs)+1)
		}
		end += start + len(endCert)
		block, _ := pem.Decode(rest[start:end])
		if block == nil {
			return nil, fmt.Errorf("CERTIFICATE block %d is not valid PEM", len(certs)+1)
		}
		cert, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			return nil, fmt.Errorf("CERTIFICATE block %d does not parse: %w", len(certs)+1, err)
		}
		certs = append(certs, cert)
		rest = rest[end:]
	}
	if len(certs) == 0 {
		return nil, errors.New("no CERTIFICATE block found")
	}
	return certs, nil
}

func classify(err error) State {
	if errors.Is(err, os.ErrNotExist) {
		return Missing
	}
	return Unreadable
}

func describe(path string, err error) string {
	switch {
	case errors.Is(err, os.ErrNotExist):
		if target, lerr := os.Readlink(path); lerr == nil {
			return fmt.Sprintf("%s is a symlink to %s, which does not exist", path, target)
		}
		return fmt.Sprintf("%s does not exist", path)
	case errors.Is(err, syscall.ELOOP):
		return fmt.Sprintf("%s: symlink loop", path)
	case errors.Is(err, syscall.EISDIR):
		return fmt.Sprintf("%s is a directory", path)
	case errors.Is(err, os.ErrPermission):
		return fmt.Sprintf("%s: permission denied (the agent must run as root to read the kubelet's 0600 file)", path)
	}
	var pe *os.PathError
	if errors.As(err, &pe) {
		return fmt.Sprintf("%s: %v", path, pe.Err)
	}
	return fmt.Sprintf("%s: %v", path, err)
}

func kind(m os.FileMode) string {
	switch {
	case m.IsDir():
		return "a directory"
	case m&os.ModeNamedPipe != 0:
		return "a named pipe"
	case m&os.ModeSocket != 0:
		return "a socket"
	case m&os.ModeDevice != 0:
		return "a device"
	}
	return "a " + m.Type().String() + " file"
}

// Verify checks that leaf chains to roots for server auth and carries name
// (an IP literal is checked against IP SANs), and returns the root it
// chains to (the first chain's).
func Verify(leaf *x509.Certificate, intermediates []*x509.Certificate, roots *x509.CertPool, name string, now time.Time) (*x509.Certificate, error) {
	if roots == nil {
		return nil, errors.New("no CA to verify against")
	}
	pool := x509.NewCertPool()
	for _, c := range intermediates {
		pool.AddCert(c)
	}
	chains, err := leaf.Verify(x509.VerifyOptions{
		DNSName:       name,
		Roots:         roots,
		Intermediates: pool,
		CurrentTime:   now,
		KeyUsages:     []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	})
	if err != nil {
		return nil, err
	}
	chain := chains[0]
	return chain[len(chain)-1], nil
}

// LoadCA reads a PEM bundle; an error names the file and what is wrong.
func LoadCA(path string) (*x509.CertPool, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("CA file %s: %w", path, err)
	}
	certs, err := ParseCertificates(data)
	if err != nil {
		return nil, fmt.Errorf("CA file %s: %w", path, err)
	}
	pool := x509.NewCertPool()
	for _, c := range certs {
		pool.AddCert(c)
	}
	return pool, nil
}
