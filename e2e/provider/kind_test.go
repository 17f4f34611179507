package provider

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"
)

// The scripts Kind runs inside node containers, run here on real files
// with the host's sh, sed and coreutils (a kind node has the same).

func sh(t *testing.T, stdin []byte, script string, args ...string) error {
	t.Helper()
	cmd := exec.Command("sh", append([]string{"-c", script, "sh"}, args...)...)
	if stdin != nil {
		cmd.Stdin = bytes.NewReader(stdin)
	}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Logf("%s", out)
	}
	return err
}

// As kubeadm writes it (trimmed).
const kcmManifest = `apiVersion: v1
kind: Pod
metadata:
  labels:
    component: kube-controller-manager
    tier: control-plane
  name: kube-controller-manager
  namespace: kube-system
spec:
  containers:
  - command:
    - kube-controller-manager
    - --allocate-node-cidrs=true
    - --cluster-signing-cert-file=/etc/kubernetes/pki/ca.crt
    - --cluster-signing-key-file=/etc/kubernetes/pki/ca.key
    - --use-service-account-credentials=true
    image: registry.k8s.io/kube-controller-manager:v1.37.2
    name: kube-controller-manager
  hostNetwork: true
`

func TestSigningScriptEditsTheStaticPodManifest(t *testing.T) {
	path := filepath.Join(t.TempDir(), "kube-controller-manager.yaml")
	if err := os.WriteFile(path, []byte(kcmManifest), 0o600); err != nil {
		t.Fatal(err)
	}
	command := func() []string {
		t.Helper()
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		var pod corev1.Pod
		if err := yaml.UnmarshalStrict(data, &pod); err != nil {
			t.Fatalf("the edited manifest no longer decodes: %v\n%s", err, data)
		}
		return pod.Spec.Containers[0].Command
	}
	for _, tc := range []struct {
		duration string
		want     string // "" : no signing duration argument
	}{
		{"3m0s", "--cluster-signing-duration=3m0s"},
		{"5m0s", "--cluster-signing-duration=5m0s"}, // replaces, never adds a second
		{"", ""},
	} {
		if err := sh(t, nil, signingScript, tc.duration, path); err != nil {
			t.Fatalf("duration %q: %v", tc.duration, err)
		}
		cmd := command()
		if cmd[0] != "kube-controller-manager" || len(cmd) != 5+min(len(tc.want), 1) {
			t.Fatalf("duration %q: command %q", tc.duration, cmd)
		}
		if tc.want != "" && cmd[1] != tc.want {
			t.Errorf("duration %q: command %q, want %s right after the binary", tc.duration, cmd, tc.want)
		}
		if !slices.Contains(cmd, "--cluster-signing-cert-file=/etc/kubernetes/pki/ca.crt") {
			t.Errorf("duration %q: lost another argument: %q", tc.duration, cmd)
		}
	}
}

func TestSigningScriptFailsOnAManifestItCannotEdit(t *testing.T) {
	path := filepath.Join(t.TempDir(), "kube-controller-manager.yaml")
	if err := os.WriteFile(path, []byte(strings.ReplaceAll(kcmManifest, "- kube-controller-manager\n", "- /usr/local/bin/kcm\n")), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := sh(t, nil, signingScript, "3m0s", path); err == nil {
		t.Fatal("the script reported success without setting the duration")
	}
}

func TestWriteAndSwapScripts(t *testing.T) {
	dir := t.TempDir()
	old, renewed := filepath.Join(dir, "kubelet-server-old.pem"), filepath.Join(dir, "kubelet-server-new.pem")
	current := filepath.Join(dir, "kubelet-server-current.pem")
	for _, f := range []string{old, renewed} {
		if err := sh(t, []byte("pair of "+f), writeScript, f); err != nil {
			t.Fatal(err)
		}
		fi, err := os.Stat(f)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Perm() != 0o600 {
			t.Errorf("%s: mode %v, want 0600 as the kubelet writes it", f, fi.Mode().Perm())
		}
		if data, _ := os.ReadFile(f); string(data) != "pair of "+f {
			t.Errorf("%s holds %q", f, data)
		}
	}
	if err := os.Symlink(old, current); err != nil {
		t.Fatal(err)
	}
	for _, target := range []string{renewed, old} {
		if err := sh(t, nil, swapScript, target, current); err != nil {
			t.Fatal(err)
		}
		if got, err := os.Readlink(current); err != nil || got != target {
			t.Errorf("current -> %q (%v), want %q", got, err, target)
		}
	}
	if _, err := os.Lstat(current + ".e2e"); !os.IsNotExist(err) {
		t.Errorf("the temporary link was left behind: %v", err)
	}
}
