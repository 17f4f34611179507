package deploy

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// NPDDeployment copies node-problem-detector's own deployment/ folder (its
// DaemonSet, ServiceAccount, ConfigMap and RBAC, as upstream ships them)
// into dst, from the version the root module's plugin protocol comes from.
// repo is the repository's root, whose go.mod requires that module.
func NPDDeployment(repo, dst string) error {
	cmd := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", "k8s.io/node-problem-detector")
	cmd.Dir = repo
	out, err := cmd.Output()
	if err != nil {
		return fmt.Errorf("go list -m k8s.io/node-problem-detector in %s: %w", repo, err)
	}
	dir := strings.TrimSpace(string(out))
	if dir == "" {
		return fmt.Errorf("k8s.io/node-problem-detector is not downloaded (go mod download in %s)", repo)
	}
	return os.CopyFS(dst, os.DirFS(filepath.Join(dir, "deployment")))
}
