// Command runc-capfilter is an OCI runtime for Docker that runs runc after
// removing, from the container's capability sets, every capability the
// host's own bounding set lacks.
//
// Why: on a host whose capability bounding set is reduced (some VMs drop
// CAP_SYS_RESOURCE from pid 1), Docker still asks runc for every
// capability it knows for a --privileged container, and runc fails with
// "unable to apply caps: operation not permitted". kind always runs its
// nodes --privileged, and inside a node the kubelet asks for privileged
// pods (kube-proxy) and for negative oom_score_adj values, which need
// CAP_SYS_RESOURCE too. A process cannot hold a capability outside its
// bounding set anyway, so dropping those from the request changes nothing
// the container could have had; an oom_score_adj below runc's own is
// raised to it, as containerd's restrict_oom_score_adj does.
//
// Docker registers it as a runtime (daemon.json "runtimes"; the script
// kind/docker-runtime.sh does that), and the offline kind node image
// installs it as /usr/local/sbin/runc in front of Debian's /usr/bin/runc.
// It edits the bundle's config.json on "create" and "run" and the process
// file of "exec", then execs the real runc ($CERTREADY_REAL_RUNC, else the
// next runc on PATH) with the same arguments. Where the host lacks
// nothing, it changes nothing.
// "runc-capfilter probe" exits 0: the smallest program a probe container
// can run.
package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

func main() {
	if len(os.Args) == 2 && os.Args[1] == "probe" {
		return
	}
	l, err := hostLimits()
	if err == nil {
		err = filter(os.Args[1:], l)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "runc-capfilter: %v\n", err)
		os.Exit(1)
	}
	runc, err := realRunc()
	if err != nil {
		fmt.Fprintf(os.Stderr, "runc-capfilter: %v\n", err)
		os.Exit(1)
	}
	err = syscall.Exec(runc, append([]string{runc}, os.Args[1:]...), os.Environ())
	fmt.Fprintf(os.Stderr, "runc-capfilter: exec %s: %v\n", runc, err)
	os.Exit(1)
}

// limits is what a process of this host cannot ask for: capabilities
// outside caps, and (without CAP_SYS_RESOURCE) an oom_score_adj below
// minOOM, its own, which the kernel refuses to lower (EACCES) and runc
// then dies of ("can't get final child's PID from pipe"), as containerd's
// restrict_oom_score_adj would clamp it.
type limits struct {
	caps   map[string]bool
	minOOM *int
}

// hostLimits reads the limits of the calling process.
func hostLimits() (limits, error) {
	caps, err := boundingSet("/proc/self/status")
	if err != nil {
		return limits{}, err
	}
	l := limits{caps: caps}
	if !caps["CAP_SYS_RESOURCE"] {
		raw, err := os.ReadFile("/proc/self/oom_score_adj")
		if err != nil {
			return limits{}, err
		}
		v, err := strconv.Atoi(strings.TrimSpace(string(raw)))
		if err != nil {
			return limits{}, fmt.Errorf("/proc/self/oom_score_adj: %w", err)
		}
		l.minOOM = &v
	}
	return l, nil
}

// filter rewrites the spec file that args (runc's arguments) name, if
// any, to what l allows.
func filter(args []string, l limits) error {
	cmd, rest := subcommand(args)
	var file string
	var process func(map[string]any) map[string]any
	switch cmd {
	case "create", "run":
		file = filepath.Join(flagValue(rest, "bundle", "b", "."), "config.json")
		process = func(spec map[string]any) map[string]any {
			p, _ := spec["process"].(map[string]any)
			return p
		}
	case "exec":
		file = flagValue(rest, "process", "p", "")
		process = func(p map[string]any) map[string]any { return p }
	}
	if file == "" {
		return nil
	}
	return rewrite(file, process, l)
}

// rewrite applies l to the process in file. Numbers are kept as written
// (rlimits can exceed float64).
func rewrite(file string, process func(map[string]any) map[string]any, l limits) error {
	raw, err := os.ReadFile(file)
	if err != nil {
		return err
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var spec map[string]any
	if err := dec.Decode(&spec); err != nil {
		return fmt.Errorf("%s: %w", file, err)
	}
	p := process(spec)
	if p == nil {
		return nil
	}
	changed := false
	c, _ := p["capabilities"].(map[string]any)
	for set, v := range c {
		list, ok := v.([]any)
		if !ok {
			continue
		}
		kept := list[:0:0]
		for _, name := range list {
			if s, _ := name.(string); l.caps[s] || !known(s) {
				kept = append(kept, name)
			}
		}
		if len(kept) != len(list) {
			c[set], changed = kept, true
		}
	}
	if n, ok := p["oomScoreAdj"].(json.Number); ok && l.minOOM != nil {
		if v, err := n.Int64(); err == nil && v < int64(*l.minOOM) {
			p["oomScoreAdj"], changed = *l.minOOM, true
		}
	}
	if !changed {
		return nil
	}
	out, err := json.Marshal(spec)
	if err != nil {
		return err
	}
	info, err := os.Stat(file)
	if err != nil {
		return err
	}
	return os.WriteFile(file, out, info.Mode().Perm())
}

// realRunc is $CERTREADY_REAL_RUNC, else the first runc on PATH that is
// not this program (it may be installed as runc in front of the real one).
func realRunc() (string, error) {
	if r := os.Getenv("CERTREADY_REAL_RUNC"); r != "" {
		return r, nil
	}
	self, err := os.Stat("/proc/self/exe")
	if err != nil {
		return "", err
	}
	for _, dir := range filepath.SplitList(os.Getenv("PATH")) {
		p := filepath.Join(dir, "runc")
		if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0 && !os.SameFile(fi, self) {
			return p, nil
		}
	}
	return "", fmt.Errorf("no runc on PATH but this program (set CERTREADY_REAL_RUNC)")
}

// runcValueFlags are runc's global flags that take a value.
var runcValueFlags = map[string]bool{"root": true, "log": true, "log-format": true, "criu": true, "rootless": true}

// subcommand splits runc's arguments into the subcommand and what follows.
func subcommand(args []string) (string, []string) {
	for i := 0; i < len(args); i++ {
		a := args[i]
		if !strings.HasPrefix(a, "-") {
			return a, args[i+1:]
		}
		name := strings.TrimLeft(a, "-")
		if !strings.Contains(name, "=") && runcValueFlags[name] {
			i++
		}
	}
	return "", nil
}

// flagValue finds --long/-short with a value (as the next argument or
// after "=") in args; def when absent.
func flagValue(args []string, long, short, def string) string {
	for i, a := range args {
		for _, n := range []string{"--" + long, "-" + long, "-" + short} {
			if a == n && i+1 < len(args) {
				return args[i+1]
			}
			if v, ok := strings.CutPrefix(a, n+"="); ok {
				return v
			}
		}
	}
	return def
}

// capNames are the Linux capabilities by number (capability.h).
var capNames = []string{
	"CAP_CHOWN", "CAP_DAC_OVERRIDE", "CAP_DAC_READ_SEARCH", "CAP_FOWNER", "CAP_FSETID",
	"CAP_KILL", "CAP_SETGID", "CAP_SETUID", "CAP_SETPCAP", "CAP_LINUX_IMMUTABLE",
	"CAP_NET_BIND_SERVICE", "CAP_NET_BROADCAST", "CAP_NET_ADMIN", "CAP_NET_RAW", "CAP_IPC_LOCK",
	"CAP_IPC_OWNER", "CAP_SYS_MODULE", "CAP_SYS_RAWIO", "CAP_SYS_CHROOT", "CAP_SYS_PTRACE",
	"CAP_SYS_PACCT", "CAP_SYS_ADMIN", "CAP_SYS_BOOT", "CAP_SYS_NICE", "CAP_SYS_RESOURCE",
	"CAP_SYS_TIME", "CAP_SYS_TTY_CONFIG", "CAP_MKNOD", "CAP_LEASE", "CAP_AUDIT_WRITE",
	"CAP_AUDIT_CONTROL", "CAP_SETFCAP", "CAP_MAC_OVERRIDE", "CAP_MAC_ADMIN", "CAP_SYSLOG",
	"CAP_WAKE_ALARM", "CAP_BLOCK_SUSPEND", "CAP_AUDIT_READ", "CAP_PERFMON", "CAP_BPF",
	"CAP_CHECKPOINT_RESTORE",
}

// known: a name this table holds. Unknown names pass through untouched:
// runc decides about those.
func known(name string) bool {
	for _, n := range capNames {
		if n == name {
			return true
		}
	}
	return false
}

// boundingSet reads CapBnd from a /proc/<pid>/status file as names.
func boundingSet(status string) (map[string]bool, error) {
	f, err := os.Open(status)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		hex, ok := strings.CutPrefix(sc.Text(), "CapBnd:")
		if !ok {
			continue
		}
		mask, err := strconv.ParseUint(strings.TrimSpace(hex), 16, 64)
		if err != nil {
			return nil, fmt.Errorf("%s: CapBnd %q: %w", status, hex, err)
		}
		set := map[string]bool{}
		for i, n := range capNames {
			if mask&(1<<uint(i)) != 0 {
				set[n] = true
			}
		}
		return set, nil
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	return nil, fmt.Errorf("%s: no CapBnd line", status)
}
