package kubeletconfig_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/certready/certready/reporter/servingcert/kubeletconfig"
)

func TestReadNamesWhatTheKubeletWouldDo(t *testing.T) {
	const head = "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n"
	cases := []struct {
		name, content string // content "": no file; "<dir>": a folder
		wantKnown     bool
		wantServing   bool
		wantClient    bool
		wantMissing   bool
		wantErr       string
	}{
		{name: "kubeadm", content: head + "serverTLSBootstrap: true\nrotateCertificates: true\n", wantKnown: true, wantServing: true, wantClient: true},
		{name: "omitted means off", content: head + "address: 192.0.2.11\n", wantKnown: true},
		{name: "serving off", content: head + "serverTLSBootstrap: false\nrotateCertificates: true\n", wantKnown: true, wantClient: true},
		{name: "json as some distributions write it", content: `{"kind":"KubeletConfiguration","apiVersion":"kubelet.config.k8s.io/v1beta1","serverTLSBootstrap":true}`, wantKnown: true, wantServing: true},
		{name: "missing", wantMissing: true, wantErr: "no such file"},
		{name: "a folder", content: "<dir>", wantErr: "not a regular file"},
		{name: "a named pipe nobody writes to", content: "<fifo>", wantErr: "not a regular file"},
		{name: "another kind", content: "apiVersion: v1\nkind: ConfigMap\nserverTLSBootstrap: true\n", wantErr: `not a KubeletConfiguration`},
		{name: "a field name in the wrong case, which the kubelet ignores", content: head + "ServerTLSBootstrap: true\n", wantKnown: true},
		{name: "not yaml", content: head + "serverTLSBootstrap: [\n", wantErr: "config.yaml"},
		{name: "a string where a bool goes", content: head + "serverTLSBootstrap: \"yes\"\n", wantErr: "config.yaml"},
		{name: "huge", content: head + "# " + strings.Repeat("x", 1<<20) + "\n", wantErr: "larger than"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "config.yaml")
			switch c.content {
			case "":
			case "<dir>":
				if err := os.Mkdir(path, 0o755); err != nil {
					t.Fatal(err)
				}
			case "<fifo>":
				if err := syscall.Mkfifo(path, 0o644); err != nil {
					t.Fatal(err)
				}
			default:
				if err := os.WriteFile(path, []byte(c.content), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			s := kubeletconfig.Read(path)
			if s.Path != path || s.Known != c.wantKnown || s.ServerTLSBootstrap != c.wantServing || s.RotateCertificates != c.wantClient || s.Missing() != c.wantMissing {
				t.Errorf("Read = %+v, want known %v serving %v client %v missing %v", s, c.wantKnown, c.wantServing, c.wantClient, c.wantMissing)
			}
			if c.wantErr == "" && s.Err != nil || c.wantErr != "" && (s.Err == nil || !strings.Contains(s.Err.Error(), c.wantErr)) {
				t.Errorf("error %v, want one containing %q", s.Err, c.wantErr)
			}
		})
	}
}

// A single-file mount holds the inode it was made with; a file replaced on
// the host leaves it without a name.
func TestAReplacedFileIsNotKnown(t *testing.T) {
	path := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(path, []byte("apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\nserverTLSBootstrap: true\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	// /proc/self/fd of an open, then removed, file is what the mount is.
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	s := kubeletconfig.Read(fmt.Sprintf("/proc/self/fd/%d", f.Fd()))
	if s.Known || s.Err == nil || !strings.Contains(s.Err.Error(), "replaced on the host") {
		t.Errorf("Read of a file without a name = %+v, want not known, naming the replacement", s)
	}
}
