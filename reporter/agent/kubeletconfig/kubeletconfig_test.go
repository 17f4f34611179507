package kubeletconfig_test

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/certready/certready/reporter/agent/kubeletconfig"
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
