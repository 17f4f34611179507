package provider

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

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

func TestSigningDurationEditsTheStaticPodManifest(t *testing.T) {
	manifest := []byte(kcmManifest)
	for _, tc := range []struct {
		duration time.Duration
		want     string // "" : no signing duration argument
	}{
		{3 * time.Minute, "--cluster-signing-duration=3m0s"},
		{5 * time.Minute, "--cluster-signing-duration=5m0s"}, // replaces, never adds a second
		{0, ""},
	} {
		edited, err := withSigningDuration(manifest, tc.duration)
		if err != nil {
			t.Fatalf("duration %s: %v", tc.duration, err)
		}
		var pod corev1.Pod
		if err := yaml.UnmarshalStrict(edited, &pod); err != nil {
			t.Fatalf("the edited manifest no longer decodes: %v\n%s", err, edited)
		}
		cmd := pod.Spec.Containers[0].Command
		if cmd[0] != "kube-controller-manager" || len(cmd) != 5+min(len(tc.want), 1) {
			t.Fatalf("duration %s: command %q", tc.duration, cmd)
		}
		if tc.want != "" && cmd[1] != tc.want {
			t.Errorf("duration %s: command %q, want %s right after the binary", tc.duration, cmd, tc.want)
		}
		if !slices.Contains(cmd, "--cluster-signing-cert-file=/etc/kubernetes/pki/ca.crt") || !pod.Spec.HostNetwork || pod.Labels["tier"] != "control-plane" {
			t.Errorf("duration %s: lost another part of the manifest:\n%s", tc.duration, edited)
		}
		manifest = edited
	}
}

func TestSigningDurationRefusesAManifestItCannotEdit(t *testing.T) {
	for _, m := range []string{strings.ReplaceAll(kcmManifest, "- kube-controller-manager\n", "- /usr/local/bin/kcm\n"),
		strings.ReplaceAll(kcmManifest, "name: kube-controller-manager\n  hostNetwork", "name: other\n  hostNetwork"), "not: [a pod"} {
		if out, err := withSigningDuration([]byte(m), 3*time.Minute); err == nil {
			t.Errorf("edited a manifest it cannot edit:\n%s", out)
		}
	}
}

func TestReplaceScript(t *testing.T) {
	dir := t.TempDir()
	manifests := filepath.Join(dir, "manifests")
	if err := os.Mkdir(manifests, 0o700); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(manifests, "kube-controller-manager.yaml")
	if err := os.WriteFile(path, []byte("old"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := sh(t, []byte("new"), replaceScript, path, dir); err != nil {
		t.Fatal(err)
	}
	if left, _ := os.ReadDir(manifests); len(left) != 1 {
		t.Errorf("the static pod folder holds %d files, want only the manifest", len(left))
	}
	fi, err := os.Stat(path)
	if data, _ := os.ReadFile(path); err != nil || string(data) != "new" || fi.Mode().Perm() != 0o600 {
		t.Errorf("after replace: %q, %v, %v", data, fi.Mode(), err)
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
