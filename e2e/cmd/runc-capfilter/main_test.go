package main

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

func TestSubcommandSkipsGlobalFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		cmd  string
		rest []string
	}{
		{[]string{"--root", "/run/x", "--log", "/l", "--log-format", "json", "create", "--bundle", "/b", "id"}, "create", []string{"--bundle", "/b", "id"}},
		{[]string{"--root=/run/x", "--systemd-cgroup", "exec", "--process", "/p.json", "id"}, "exec", []string{"--process", "/p.json", "id"}},
		{[]string{"--debug", "state", "id"}, "state", []string{"id"}},
		{[]string{"--root", "/r"}, "", nil},
	} {
		cmd, rest := subcommand(tc.args)
		if cmd != tc.cmd || !reflect.DeepEqual(rest, tc.rest) {
			t.Errorf("subcommand(%q) = %q %q, want %q %q", tc.args, cmd, rest, tc.cmd, tc.rest)
		}
	}
}

func TestFlagValueForms(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--bundle", "/b", "id"}, "/b"},
		{[]string{"--bundle=/b", "id"}, "/b"},
		{[]string{"-b", "/b", "id"}, "/b"},
		{[]string{"id"}, "."},
	} {
		if got := flagValue(tc.args, "bundle", "b", "."); got != tc.want {
			t.Errorf("flagValue(%q) = %q, want %q", tc.args, got, tc.want)
		}
	}
}

func TestBoundingSetReadsTheMask(t *testing.T) {
	dir := t.TempDir()
	status := filepath.Join(dir, "status")
	// This VM's pid 1: everything up to CAP_CHECKPOINT_RESTORE but CAP_SYS_RESOURCE (24).
	if err := os.WriteFile(status, []byte("Name:\tinit\nCapBnd:\t000001fffeffffff\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	set, err := boundingSet(status)
	if err != nil {
		t.Fatal(err)
	}
	if set["CAP_SYS_RESOURCE"] || !set["CAP_SYS_ADMIN"] || !set["CAP_CHECKPOINT_RESTORE"] || len(set) != len(capNames)-1 {
		t.Fatalf("bounding set %v: want all %d names but CAP_SYS_RESOURCE", set, len(capNames))
	}
}

// A bundle as Docker writes it for --privileged: every capability, and an
// rlimit too large for a float64.
const privilegedSpec = `{"ociVersion":"1.0.2","process":{"user":{"uid":0,"gid":0},` +
	`"capabilities":{"bounding":["CAP_CHOWN","CAP_SYS_RESOURCE","CAP_NEW_ONE"],"effective":["CAP_CHOWN","CAP_SYS_RESOURCE"],` +
	`"permitted":["CAP_SYS_RESOURCE"],"inheritable":["CAP_CHOWN"]},` +
	`"rlimits":[{"type":"RLIMIT_NOFILE","hard":18446744073709551615,"soft":18446744073709551615}]},"root":{"path":"rootfs"}}`

func TestCreateDropsWhatTheBoundingSetLacks(t *testing.T) {
	bundle := t.TempDir()
	cfg := filepath.Join(bundle, "config.json")
	if err := os.WriteFile(cfg, []byte(privilegedSpec), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := filter([]string{"--root", "/r", "create", "--bundle", bundle, "id"}, limits{caps: map[string]bool{"CAP_CHOWN": true}}); err != nil {
		t.Fatal(err)
	}
	out, err := os.ReadFile(cfg)
	if err != nil {
		t.Fatal(err)
	}
	got := string(out)
	for _, want := range []string{`"bounding":["CAP_CHOWN","CAP_NEW_ONE"]`, `"effective":["CAP_CHOWN"]`, `"permitted":[]`, `"hard":18446744073709551615`, `"path":"rootfs"`} {
		if !strings.Contains(got, want) {
			t.Errorf("rewritten spec lacks %s:\n%s", want, got)
		}
	}
	if strings.Contains(got, "CAP_SYS_RESOURCE") {
		t.Errorf("CAP_SYS_RESOURCE kept:\n%s", got)
	}
	if info, _ := os.Stat(cfg); info.Mode().Perm() != 0o600 {
		t.Errorf("mode %v, want 0600 kept", info.Mode().Perm())
	}
}

func TestExecProcessFileIsFiltered(t *testing.T) {
	p := filepath.Join(t.TempDir(), "process.json")
	if err := os.WriteFile(p, []byte(`{"capabilities":{"bounding":["CAP_CHOWN","CAP_SYS_RESOURCE"]},"args":["sh"]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := filter([]string{"--root", "/r", "exec", "--process", p, "--detach", "id"}, limits{caps: map[string]bool{"CAP_CHOWN": true}}); err != nil {
		t.Fatal(err)
	}
	if out, _ := os.ReadFile(p); strings.Contains(string(out), "CAP_SYS_RESOURCE") || !strings.Contains(string(out), `"args":["sh"]`) {
		t.Errorf("process file after filtering: %s", out)
	}
}

func TestOOMScoreAdjIsClampedWithoutSysResource(t *testing.T) {
	for _, tc := range []struct {
		name string
		min  *int
		in   string
		want string
	}{
		{"below runc's own: raised to it", ptr(0), `"oomScoreAdj":-998`, `"oomScoreAdj":0`},
		{"above: kept", ptr(-500), `"oomScoreAdj":100`, `"oomScoreAdj":100`},
		{"with CAP_SYS_RESOURCE: never touched", nil, `"oomScoreAdj":-998`, `"oomScoreAdj":-998`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			bundle := t.TempDir()
			cfg := filepath.Join(bundle, "config.json")
			if err := os.WriteFile(cfg, []byte(`{"process":{"args":["/pause"],`+tc.in+`}}`), 0o600); err != nil {
				t.Fatal(err)
			}
			if err := filter([]string{"create", "--bundle", bundle, "id"}, limits{caps: map[string]bool{}, minOOM: tc.min}); err != nil {
				t.Fatal(err)
			}
			if out, _ := os.ReadFile(cfg); !strings.Contains(string(out), tc.want) {
				t.Errorf("spec %s, want %s", out, tc.want)
			}
		})
	}
}

func ptr(v int) *int { return &v }

func TestUntouchedWhenNothingToDrop(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "process.json")
	in := `{"capabilities":{"bounding":["CAP_CHOWN"]},  "args":["sh"]}`
	if err := os.WriteFile(p, []byte(in), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := filter([]string{"exec", "--process", p, "id"}, limits{caps: map[string]bool{"CAP_CHOWN": true}}); err != nil {
		t.Fatal(err)
	}
	if out, _ := os.ReadFile(p); string(out) != in {
		t.Errorf("file rewritten although nothing was dropped: %s", out)
	}
}

// Installed as runc in front of the real one, it must not exec itself.
func TestRealRuncSkipsItself(t *testing.T) {
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	front, back := t.TempDir(), t.TempDir()
	if err := os.Symlink(self, filepath.Join(front, "runc")); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(back, "runc"), []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("CERTREADY_REAL_RUNC", "")
	t.Setenv("PATH", front+string(os.PathListSeparator)+back)
	got, err := realRunc()
	if err != nil || got != filepath.Join(back, "runc") {
		t.Fatalf("realRunc() = %q, %v; want %s", got, err, filepath.Join(back, "runc"))
	}
}
