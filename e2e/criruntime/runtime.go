// Package criruntime is the local cluster's container runtime: the CRI fake
// from k8s.io/cri-client for bookkeeping, plus real processes for the
// images it knows (certready's). Such a container runs the image's binary
// as a host process in a private mount namespace whose root holds only the
// binary and the kubelet-provided mounts at their container paths, so a
// mount at the wrong path fails here as it would in a real container. Its
// stdout and stderr go to the CRI log path, so `kubectl logs` works. Other
// images stay fake: "running" with no process.
package criruntime

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"google.golang.org/grpc"
	kubeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/cri-client/pkg/fake"
	"k8s.io/cri-client/pkg/util"
)

// Config configures a node's runtime.
type Config struct {
	// Binaries maps an image name prefix (e.g. "certready") to the host
	// binary its containers run.
	Binaries map[string]string
	// Paths maps the same prefixes to where the image has its binary
	// (default DefaultPath).
	Paths map[string]string
	// Files maps the same prefixes to the image's other files: path in the
	// image -> host file (certready's image holds the node build too).
	Files map[string]map[string]string
	// Launcher is the helper that builds a container's root and execs the
	// binary: <Launcher> container --root DIR --bin PATH --mount SRC:DST[:ro]... -- ARGS...
	Launcher string
	// RootDir holds the containers' tmpfs mount points.
	RootDir string
	// PodIPs hands out pod addresses for non-host-network sandboxes and
	// takes them back; nil gives every pod the node's address.
	PodIPs  func() (string, error)
	Release func(ip string)
	NodeIP  string
}

// Runtime serves the CRI on a unix socket.
type Runtime struct {
	*fake.RemoteRuntime
	cfg    Config
	server *grpc.Server

	mu      sync.Mutex
	configs map[string]*kubeapi.ContainerConfig // by container id
	logDirs map[string]string                   // sandbox id -> log directory
	ips     map[string]string                   // sandbox id -> pod ip
	procs   map[string]*container               // by container id
}

type container struct {
	cmd  *exec.Cmd
	done chan struct{}
}

// New returns a runtime; Start serves it.
func New(cfg Config) *Runtime {
	r := &Runtime{
		RemoteRuntime: fake.NewFakeRemoteRuntime(),
		cfg:           cfg,
		server:        grpc.NewServer(),
		configs:       map[string]*kubeapi.ContainerConfig{},
		logDirs:       map[string]string{},
		ips:           map[string]string{},
		procs:         map[string]*container{},
	}
	// Image id and size must be set or the kubelet refuses the image.
	r.ImageService.SetFakeImageSize(16 << 20)
	kubeapi.RegisterRuntimeServiceServer(r.server, r)
	kubeapi.RegisterImageServiceServer(r.server, r)
	return r
}

// Start listens on endpoint (unix:///path).
func (r *Runtime) Start(endpoint string) error {
	l, err := util.CreateListener(endpoint)
	if err != nil {
		return fmt.Errorf("listening on %s: %w", endpoint, err)
	}
	r.RuntimeService.FakeStatus = &kubeapi.RuntimeStatus{Conditions: []*kubeapi.RuntimeCondition{
		{Type: kubeapi.RuntimeReady, Status: true}, {Type: kubeapi.NetworkReady, Status: true},
	}}
	go func() { _ = r.server.Serve(l) }()
	return nil
}

// Stop kills every container process and stops serving.
func (r *Runtime) Stop() {
	r.mu.Lock()
	procs := make([]*container, 0, len(r.procs))
	for _, c := range r.procs {
		procs = append(procs, c)
	}
	r.mu.Unlock()
	for _, c := range procs {
		c.stop(2 * time.Second)
	}
	r.server.Stop()
}

// DefaultPath is where an image has its binary unless Config.Paths says.
const DefaultPath = "/usr/local/bin/certready"

// binaryFor returns the host binary that is the image's content, and its
// path in the image.
func (r *Runtime) binaryFor(image string) (bin, path string) {
	for prefix, bin := range r.cfg.Binaries {
		if strings.HasPrefix(image, prefix) {
			if p := r.cfg.Paths[prefix]; p != "" {
				return bin, p
			}
			return bin, DefaultPath
		}
	}
	return "", ""
}

// filesFor returns the image's other files (Config.Files).
func (r *Runtime) filesFor(image string) map[string]string {
	for prefix, files := range r.cfg.Files {
		if strings.HasPrefix(image, prefix) {
			return files
		}
	}
	return nil
}

func hostNetwork(cfg *kubeapi.PodSandboxConfig) bool {
	return cfg.GetLinux().GetSecurityContext().GetNamespaceOptions().GetNetwork() == kubeapi.NamespaceMode_NODE
}

// RunPodSandbox gives the sandbox a real address inside the cluster's
// namespace (or the node's, for host-network pods).
func (r *Runtime) RunPodSandbox(ctx context.Context, req *kubeapi.RunPodSandboxRequest) (*kubeapi.RunPodSandboxResponse, error) {
	resp, err := r.RemoteRuntime.RunPodSandbox(ctx, req)
	if err != nil {
		return nil, err
	}
	ip := r.cfg.NodeIP
	if !hostNetwork(req.Config) && r.cfg.PodIPs != nil {
		if ip, err = r.cfg.PodIPs(); err != nil {
			return nil, err
		}
	}
	r.mu.Lock()
	r.logDirs[resp.PodSandboxId] = req.Config.LogDirectory
	if ip != r.cfg.NodeIP {
		r.ips[resp.PodSandboxId] = ip
	}
	r.mu.Unlock()
	r.RuntimeService.Lock()
	if s, ok := r.RuntimeService.Sandboxes[resp.PodSandboxId]; ok {
		s.Network = &kubeapi.PodSandboxNetworkStatus{Ip: ip}
	}
	r.RuntimeService.Unlock()
	return resp, nil
}

// StopPodSandbox returns the pod's address at once, as a CNI plugin's DEL
// does when a sandbox stops: the kubelet removes stopped sandboxes only in
// its garbage collection, and a node whose pods are replaced quickly (an
// approver rolled again and again) would run out of addresses meanwhile.
func (r *Runtime) StopPodSandbox(ctx context.Context, req *kubeapi.StopPodSandboxRequest) (*kubeapi.StopPodSandboxResponse, error) {
	r.releaseIP(req.PodSandboxId)
	return r.RemoteRuntime.StopPodSandbox(ctx, req)
}

// RemovePodSandbox returns the pod's address if its stop did not.
func (r *Runtime) RemovePodSandbox(ctx context.Context, req *kubeapi.RemovePodSandboxRequest) (*kubeapi.RemovePodSandboxResponse, error) {
	r.releaseIP(req.PodSandboxId)
	r.mu.Lock()
	delete(r.logDirs, req.PodSandboxId)
	r.mu.Unlock()
	return r.RemoteRuntime.RemovePodSandbox(ctx, req)
}

func (r *Runtime) releaseIP(sandbox string) {
	r.mu.Lock()
	ip, ok := r.ips[sandbox]
	delete(r.ips, sandbox)
	r.mu.Unlock()
	if ok && r.cfg.Release != nil {
		r.cfg.Release(ip)
	}
}

// CreateContainer remembers the config and sets the CRI log path.
func (r *Runtime) CreateContainer(ctx context.Context, req *kubeapi.CreateContainerRequest) (*kubeapi.CreateContainerResponse, error) {
	resp, err := r.RemoteRuntime.CreateContainer(ctx, req)
	if err != nil {
		return nil, err
	}
	logPath := filepath.Join(req.SandboxConfig.GetLogDirectory(), req.Config.GetLogPath())
	r.mu.Lock()
	r.configs[resp.ContainerId] = req.Config
	r.mu.Unlock()
	r.RuntimeService.Lock()
	if c, ok := r.RuntimeService.Containers[resp.ContainerId]; ok {
		c.LogPath = logPath
	}
	r.RuntimeService.Unlock()
	return resp, nil
}

// StartContainer runs the real process for known images.
func (r *Runtime) StartContainer(ctx context.Context, req *kubeapi.StartContainerRequest) (*kubeapi.StartContainerResponse, error) {
	r.mu.Lock()
	cfg := r.configs[req.ContainerId]
	r.mu.Unlock()
	r.RuntimeService.Lock()
	var logPath string
	if c, ok := r.RuntimeService.Containers[req.ContainerId]; ok {
		logPath = c.LogPath
	}
	r.RuntimeService.Unlock()
	if cfg != nil {
		if bin, path := r.binaryFor(cfg.GetImage().GetImage()); bin != "" {
			if err := r.launch(req.ContainerId, bin, path, r.filesFor(cfg.GetImage().GetImage()), cfg, logPath); err != nil {
				return nil, fmt.Errorf("starting container %s: %w", cfg.GetMetadata().GetName(), err)
			}
		}
	}
	return r.RemoteRuntime.StartContainer(ctx, req)
}

// StopContainer ends the process, then records the stop.
func (r *Runtime) StopContainer(ctx context.Context, req *kubeapi.StopContainerRequest) (*kubeapi.StopContainerResponse, error) {
	r.mu.Lock()
	c := r.procs[req.ContainerId]
	r.mu.Unlock()
	if c != nil {
		grace := time.Duration(req.Timeout) * time.Second
		c.stop(max(grace, time.Second))
	}
	return r.RemoteRuntime.StopContainer(ctx, req)
}

// RemoveContainer forgets the container.
func (r *Runtime) RemoveContainer(ctx context.Context, req *kubeapi.RemoveContainerRequest) (*kubeapi.RemoveContainerResponse, error) {
	r.mu.Lock()
	c := r.procs[req.ContainerId]
	delete(r.procs, req.ContainerId)
	delete(r.configs, req.ContainerId)
	r.mu.Unlock()
	if c != nil {
		c.stop(time.Second)
	}
	return r.RemoteRuntime.RemoveContainer(ctx, req)
}

func (r *Runtime) launch(id, bin, path string, files map[string]string, cfg *kubeapi.ContainerConfig, logPath string) error {
	root := filepath.Join(r.cfg.RootDir, id)
	if err := os.MkdirAll(root, 0o755); err != nil {
		return err
	}
	args := []string{"container", "--root", root, "--bin", bin, "--bin-path", path}
	for dst, src := range files {
		args = append(args, "--mount", src+":"+dst+":ro")
	}
	for _, m := range cfg.Mounts {
		spec := m.HostPath + ":" + m.ContainerPath
		if m.Readonly {
			spec += ":ro"
		}
		args = append(args, "--mount", spec)
	}
	if cfg.WorkingDir != "" {
		args = append(args, "--workdir", cfg.WorkingDir)
	}
	// The user the kubelet asks for (securityContext runAsUser/runAsGroup):
	// it owns the projected token, and with fs.protected_symlinks even root
	// cannot follow the token's symlink in the kubelet's sticky tmpfs.
	if sc := cfg.GetLinux().GetSecurityContext(); sc != nil {
		if u := sc.GetRunAsUser(); u != nil {
			args = append(args, "--uid", strconv.FormatInt(u.GetValue(), 10))
		}
		if g := sc.GetRunAsGroup(); g != nil {
			args = append(args, "--gid", strconv.FormatInt(g.GetValue(), 10))
		}
	}
	args = append(args, "--")
	args = append(args, cfg.Command...)
	args = append(args, cfg.Args...)
	cmd := exec.Command(r.cfg.Launcher, args...)
	cmd.Env = []string{"PATH=/usr/local/bin:/usr/bin:/bin"}
	for _, e := range cfg.Envs {
		cmd.Env = append(cmd.Env, e.Key+"="+string(e.Value))
	}
	// A new mount namespace per container; the launcher makes it private.
	cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWNS, Setpgid: true, Pdeathsig: syscall.SIGKILL}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(logPath), 0o755); err != nil {
		return err
	}
	logFile, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o640)
	if err != nil {
		return err
	}
	if err := cmd.Start(); err != nil {
		logFile.Close()
		return err
	}
	c := &container{cmd: cmd, done: make(chan struct{})}
	r.mu.Lock()
	r.procs[id] = c
	r.mu.Unlock()
	var wmu sync.Mutex
	var copies sync.WaitGroup
	for stream, rd := range map[string]io.Reader{"stdout": stdout, "stderr": stderr} {
		copies.Add(1)
		go func() {
			defer copies.Done()
			criLog(logFile, &wmu, stream, rd)
		}()
	}
	go func() {
		copies.Wait()
		err := cmd.Wait()
		logFile.Close()
		os.RemoveAll(root)
		code := int32(0)
		if err != nil {
			code = 1
			if ee := (*exec.ExitError)(nil); errors.As(err, &ee) {
				code = int32(ee.ExitCode())
				if code < 0 {
					code = 137
				}
			}
		}
		r.RuntimeService.Lock()
		if fc, ok := r.RuntimeService.Containers[id]; ok && fc.State == kubeapi.ContainerState_CONTAINER_RUNNING {
			fc.State = kubeapi.ContainerState_CONTAINER_EXITED
			fc.FinishedAt = time.Now().UnixNano()
			fc.ExitCode = code
			fc.Reason = "Completed"
			if code != 0 {
				fc.Reason = "Error"
			}
		}
		r.RuntimeService.Unlock()
		close(c.done)
	}()
	return nil
}

// criLog writes rd line by line in the CRI log format the kubelet reads:
// "<RFC3339Nano> <stream> F <line>".
func criLog(w io.Writer, mu *sync.Mutex, stream string, rd io.Reader) {
	sc := bufio.NewScanner(rd)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		mu.Lock()
		fmt.Fprintf(w, "%s %s F %s\n", time.Now().UTC().Format(time.RFC3339Nano), stream, sc.Text())
		mu.Unlock()
	}
}

func (c *container) stop(grace time.Duration) {
	select {
	case <-c.done:
		return
	default:
	}
	_ = syscall.Kill(-c.cmd.Process.Pid, syscall.SIGTERM)
	select {
	case <-c.done:
	case <-time.After(grace):
		_ = syscall.Kill(-c.cmd.Process.Pid, syscall.SIGKILL)
		<-c.done
	}
}
