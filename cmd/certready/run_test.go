package main

import (
	"bytes"
	"errors"
	"io"
	"os"
	"strings"
	"testing"
)

// runCommand runs the process name of the command table as main does and
// returns its exit status and what it printed to standard error.
func runCommand(t *testing.T, name string, args ...string) (int, string) {
	t.Helper()
	for _, c := range commands() {
		if c.name == name {
			var stderr bytes.Buffer
			code := reportError(&stderr, "certready "+name, runProcess(t.Context(), c, args))
			return code, stderr.String()
		}
	}
	t.Fatalf("no command %s in the table", name)
	return 0, ""
}

// captureStdout runs f with os.Stdout redirected and returns what f wrote.
func captureStdout(t *testing.T, f func()) string {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	saved := os.Stdout
	os.Stdout = w
	done := make(chan []byte)
	go func() { b, _ := io.ReadAll(r); done <- b }()
	defer func() { os.Stdout = saved }()
	f()
	w.Close()
	return string(<-done)
}

// Every command ends through reportError: what it prints and the status it
// returns for each kind of ending.
func TestReportError(t *testing.T) {
	for _, tc := range []struct {
		name string
		err  error
		code int
		want []string // parts of the output; nil: nothing printed
		not  []string
	}{
		{"success", nil, 0, nil, nil},
		{"a usage error names --help", usageError(errors.New(`--to "x": want an absolute path`)), 2, []string{`certready copy-binary: --to "x": want an absolute path`, "Run 'certready copy-binary --help' for usage."}, nil},
		{"an exit the output already explained", exitWith(1, nil), 1, nil, nil},
		{"a failure with its own status", exitWith(1, errors.New("cannot listen")), 1, []string{"certready copy-binary: cannot listen"}, []string{"--help"}},
		{"any other error exits 2", errors.New("reading the cluster"), 2, []string{"certready copy-binary: reading the cluster"}, []string{"--help"}},
		{"control characters are escaped", errors.New("bad value \x1b]0;owned\x07"), 2, []string{"bad value"}, []string{"\x1b", "\x07"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out bytes.Buffer
			if code := reportError(&out, "certready copy-binary", tc.err); code != tc.code {
				t.Errorf("exit %d, want %d", code, tc.code)
			}
			if tc.want == nil && out.Len() != 0 {
				t.Errorf("printed %q, want nothing", out.String())
			}
			for _, w := range tc.want {
				if !strings.Contains(out.String(), w) {
					t.Errorf("printed %q, want %q in it", out.String(), w)
				}
			}
			for _, n := range tc.not {
				if strings.Contains(out.String(), n) {
					t.Errorf("printed %q, want no %q", out.String(), n)
				}
			}
		})
	}
}

// The processes' mistakes reach the one printer with the flag or variable
// named, and --help is success on standard output.
func TestProcessesEndThroughOnePrinter(t *testing.T) {
	t.Setenv("CERTREADY_SETTLE", "")
	for _, tc := range []struct {
		name string
		env  string
		args []string
		code int
		want []string
		not  []string
	}{
		{"copy-binary", "", []string{"--to=relative"}, 2, []string{"certready copy-binary: --to \"relative\"", "--help"}, nil},
		{"agent", "", []string{"--apiserver-proof=maybe", "--kubeconfig=/nonexistent"}, 2, []string{"certready agent: --apiserver-proof=maybe"}, nil},
		{"agent", "CERTREADY_SETTLE", []string{"--kubeconfig=/nonexistent"}, 2, []string{"certready agent: environment variable CERTREADY_SETTLE", "--settle"}, nil},
		{"agent", "", []string{"--bogus"}, 2, []string{"certready agent: unknown flag: --bogus", "Run 'certready agent --help'"}, nil},
		{"version", "", []string{"extra"}, 2, []string{"certready version: unexpected argument \"extra\""}, nil},
		// A failure of Run is no usage error: the command line was fine.
		{"copy-binary", "", []string{"--to=/nonexistent-folder/certready"}, 1, []string{"certready copy-binary: ", "nonexistent-folder"}, []string{"--help"}},
	} {
		t.Run(strings.Join(append([]string{tc.name}, tc.args...), " "), func(t *testing.T) {
			if tc.env != "" {
				t.Setenv(tc.env, "1s")
			}
			code, stderr := runCommand(t, tc.name, tc.args...)
			if code != tc.code {
				t.Errorf("exit %d, want %d; stderr %q", code, tc.code, stderr)
			}
			for _, w := range tc.want {
				if !strings.Contains(stderr, w) {
					t.Errorf("stderr %q, want %q in it", stderr, w)
				}
			}
			for _, n := range tc.not {
				if strings.Contains(stderr, n) {
					t.Errorf("stderr %q, want no %q", stderr, n)
				}
			}
		})
	}
	var code int
	var stderr string
	help := captureStdout(t, func() { code, stderr = runCommand(t, "agent", "--help") })
	if code != 0 || stderr != "" || !strings.Contains(help, "Usage: certready agent [flags]") || !strings.Contains(help, "--kubelet-pki-dir") || !strings.Contains(help, commandLineOnlyNote) {
		t.Errorf("agent --help: exit %d, stderr %q, stdout:\n%s", code, stderr, help)
	}
}

// check speaks node-problem-detector's protocol even when it cannot run:
// one line on standard output and Unknown (2), nothing on standard error
// that the plugin's message would lose.
func TestCheckReportsItsFailuresAsAPluginLine(t *testing.T) {
	var code int
	var stderr string
	out := captureStdout(t, func() { code, stderr = runCommand(t, "check", "--node-ip=not-an-ip") })
	if code != 2 || stderr != "" {
		t.Errorf("exit %d, stderr %q; want 2 (Unknown) and nothing on stderr", code, stderr)
	}
	if line := strings.TrimSuffix(out, "\n"); !strings.HasPrefix(line, "CheckFailed: --node-ip \"not-an-ip\"") || strings.Contains(line, "\n") {
		t.Errorf("stdout %q, want one CheckFailed line naming --node-ip", out)
	}
}
