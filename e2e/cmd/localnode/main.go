// Command localnode is one node of the local cluster, run by the harness
// inside the cluster's network namespace and a private mount namespace
// (nsenter --net=... unshare -m --propagation private localnode node ...):
//
//	localnode node --dir D --ip IP --cri SOCK [--bind SRC:DST]... -- kubelet ARGS...
//	  bind-mounts the node's folders at the standard paths (/var/lib/kubelet,
//	  /var/log/pods, ...), serves the CRI runtime and runs the kubelet;
//	  SIGHUP restarts the kubelet alone.
//	localnode container --root R --bin B [--mount SRC:DST[:ro]]... -- ARGS...
//	  builds a container's root (tmpfs with only the binary and the mounts),
//	  chroots into it and execs the binary. Started by the runtime in a new
//	  mount namespace.
package main

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/pflag"
	"golang.org/x/sys/unix"

	"github.com/certready/certready/e2e/criruntime"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: localnode node|container ...")
		os.Exit(2)
	}
	var err error
	switch os.Args[1] {
	case "node":
		err = node(os.Args[2:])
	case "container":
		err = containerMain(os.Args[2:])
	default:
		err = fmt.Errorf("unknown subcommand %q", os.Args[1])
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "localnode %s: %v\n", os.Args[1], err)
		os.Exit(1)
	}
}

func node(args []string) error {
	fs := pflag.NewFlagSet("node", pflag.ContinueOnError)
	dir := fs.String("dir", "", "the node's folder")
	ip := fs.String("ip", "", "the node's address")
	cri := fs.String("cri", "", "CRI socket path")
	binds := fs.StringArray("bind", nil, "SRC:DST bind mounts that make the node's folders appear at the standard paths")
	images := fs.StringArray("image", nil, "PREFIX=BINARY[=PATH]: images whose containers run BINARY, found at PATH in the image (default "+criruntime.DefaultPath+")")
	imageFiles := fs.StringArray("image-file", nil, "PREFIX=HOSTFILE=PATH: another file of those images, at PATH")
	podIPs := fs.StringSlice("pod-ips", nil, "addresses for this node's pods (added to the namespace's link on use)")
	flagsFile := fs.String("kubelet-flags-file", "", "read at each kubelet start, as kubeadm's kubeadm-flags.env: KUBELET_KUBEADM_ARGS=\"--flag=value ...\", appended to the kubelet's arguments (later flags win)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	kubelet := fs.Args()
	if len(kubelet) == 0 {
		return fmt.Errorf("no kubelet command after --")
	}
	// Nothing mounted here may propagate back to the host.
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return fmt.Errorf("making mounts private: %w", err)
	}
	for _, b := range *binds {
		src, dst, ok := strings.Cut(b, ":")
		if !ok {
			return fmt.Errorf("--bind %q: want SRC:DST", b)
		}
		if err := os.MkdirAll(src, 0o755); err != nil {
			return err
		}
		if err := unix.Mount(src, dst, "", unix.MS_BIND, ""); err != nil {
			return fmt.Errorf("bind %s on %s: %w", src, dst, err)
		}
	}
	self, err := os.Executable()
	if err != nil {
		return err
	}
	bins, paths, files := map[string]string{}, map[string]string{}, map[string]map[string]string{}
	for _, f := range *imageFiles {
		parts := strings.SplitN(f, "=", 3)
		if len(parts) != 3 || parts[0] == "" || parts[1] == "" || !strings.HasPrefix(parts[2], "/") {
			return fmt.Errorf("--image-file %q: want PREFIX=HOSTFILE=/PATH/IN/IMAGE", f)
		}
		if files[parts[0]] == nil {
			files[parts[0]] = map[string]string{}
		}
		files[parts[0]][parts[2]] = parts[1]
	}
	for _, im := range *images {
		parts := strings.SplitN(im, "=", 3)
		if len(parts) < 2 || parts[0] == "" || parts[1] == "" {
			return fmt.Errorf("--image %q: want PREFIX=BINARY[=PATH]", im)
		}
		bins[parts[0]] = parts[1]
		if len(parts) == 3 {
			if !strings.HasPrefix(parts[2], "/") {
				return fmt.Errorf("--image %q: PATH %q must be absolute", im, parts[2])
			}
			paths[parts[0]] = parts[2]
		}
	}
	pool := newIPPool(*podIPs)
	rt := criruntime.New(criruntime.Config{
		Binaries: bins,
		Paths:    paths,
		Files:    files,
		Launcher: self,
		RootDir:  filepath.Join(*dir, "containers"),
		NodeIP:   *ip,
		PodIPs:   pool.take,
		Release:  pool.give,
	})
	if err := rt.Start("unix://" + *cri); err != nil {
		return err
	}
	defer rt.Stop()

	// SIGHUP restarts the kubelet alone: the runtime and its containers
	// stay, as when a real node's kubelet service restarts.
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP)
	for {
		extra, err := kubeletFlags(*flagsFile)
		if err != nil {
			return err
		}
		k, err := startKubelet(append(slices.Clip(kubelet), extra...))
		if err != nil {
			return err
		}
		select {
		case s := <-sig:
			k.stop()
			if s != syscall.SIGHUP {
				return nil
			}
			fmt.Fprintln(os.Stderr, "localnode: SIGHUP: restarting the kubelet")
		case err := <-k.exited:
			return fmt.Errorf("the kubelet exited: %w", err)
		}
	}
}

type kubeletProc struct {
	cmd    *exec.Cmd
	exited chan error
}

// kubeletFlags reads the flags of a kubeadm-flags.env file at path ("" or
// missing: none).
func kubeletFlags(path string) ([]string, error) {
	if path == "" {
		return nil, nil
	}
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	v, ok := strings.CutPrefix(strings.TrimSpace(string(data)), "KUBELET_KUBEADM_ARGS=")
	if !ok {
		return nil, fmt.Errorf("%s: want KUBELET_KUBEADM_ARGS=\"...\"", path)
	}
	return strings.Fields(strings.Trim(v, `"`)), nil
}

func startKubelet(argv []string) (*kubeletProc, error) {
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting the kubelet: %w", err)
	}
	k := &kubeletProc{cmd: cmd, exited: make(chan error, 1)}
	go func() { k.exited <- cmd.Wait() }()
	return k, nil
}

// stop asks the kubelet to stop and kills it after 5 s.
func (k *kubeletProc) stop() {
	_ = k.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-k.exited: //nolint:errcheck // its exit status after SIGTERM says nothing
	case <-time.After(5 * time.Second):
		_ = k.cmd.Process.Kill()
		<-k.exited //nolint:errcheck // killed: its exit status says nothing
	}
}

// ipPool hands out pod addresses, adding each to the namespace's link.
type ipPool struct {
	free chan string
}

func newIPPool(ips []string) *ipPool {
	p := &ipPool{free: make(chan string, len(ips))}
	for _, ip := range ips {
		p.free <- ip
	}
	return p
}

func (p *ipPool) take() (string, error) {
	select {
	case ip := <-p.free:
		out, err := exec.Command("ip", "addr", "add", ip+"/32", "dev", "v0").CombinedOutput()
		if err != nil && !strings.Contains(string(out), "File exists") {
			return "", fmt.Errorf("adding pod address %s: %w: %s", ip, err, out)
		}
		return ip, nil
	default:
		return "", fmt.Errorf("no pod address left on this node")
	}
}

func (p *ipPool) give(ip string) {
	_ = exec.Command("ip", "addr", "del", ip+"/32", "dev", "v0").Run()
	p.free <- ip
}
