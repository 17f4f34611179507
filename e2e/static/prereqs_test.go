package static

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestPrereqsNameWhatIsMissing runs hack/prereqs.sh (report-only) with a
// PATH that holds exactly the given programs, as a fresh machine would.
func TestPrereqsNameWhatIsMissing(t *testing.T) {
	shell := []string{"bash", "env", "id", "dirname", "sed"}
	all := []string{"go", "git", "kubectl", "iptables", "ip", "nsenter", "unshare", "openssl", "promtool", "prometheus", "docker", "debootstrap", "gcc", "jq"}
	for _, tc := range []struct {
		name, goal  string
		drop        []string
		wantOK      bool
		wantMention []string
	}{
		{"everything present", "test", nil, true, []string{"all present"}},
		{"no promtool fails make test before any long step", "test", []string{"promtool"}, false, []string{"promtool", "prometheus"}},
		{"no Prometheus server fails make test (the suite evaluates the alerts)", "test", []string{"prometheus"}, false, []string{"missing prometheus"}},
		{"the demo needs no promtool", "demo", []string{"promtool"}, true, nil},
		{"no iptables fails the demo", "demo", []string{"iptables"}, false, []string{"iptables"}},
		{"unit tests need no cluster tools", "unit", []string{"kubectl", "iptables", "ip", "promtool"}, true, nil},
		{"kind's offline node image needs debootstrap", "kind", []string{"debootstrap"}, false, []string{"debootstrap"}},
		{"kind needs no local-cluster tools", "kind", []string{"iptables", "nsenter", "promtool"}, true, nil},
		{"kind's suite needs the Prometheus server", "kind", []string{"prometheus"}, false, []string{"prometheus"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			for _, p := range append(shell, all...) {
				if strings.Contains(" "+strings.Join(tc.drop, " ")+" ", " "+p+" ") {
					continue
				}
				path, err := exec.LookPath(p)
				if err != nil {
					// A stand-in: the script only asks whether the name exists.
					path = "/bin/true"
				}
				if err := os.Symlink(path, filepath.Join(dir, p)); err != nil {
					t.Fatal(err)
				}
			}
			cmd := exec.Command("bash", "../../hack/prereqs.sh", tc.goal)
			cmd.Env = []string{"PATH=" + dir, "PREREQS_CHECK_ONLY=1"}
			out, err := cmd.CombinedOutput()
			if ok := err == nil; ok != tc.wantOK {
				t.Fatalf("exit ok=%v, want %v:\n%s", ok, tc.wantOK, out)
			}
			for _, m := range tc.wantMention {
				if !strings.Contains(string(out), m) {
					t.Errorf("output does not name %q:\n%s", m, out)
				}
			}
		})
	}
}
