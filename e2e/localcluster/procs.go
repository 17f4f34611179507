package localcluster

import (
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"sync"
	"syscall"
	"time"
)

// supervisor starts and stops the cluster's processes. Every child gets
// Pdeathsig=SIGKILL, so nothing outlives the harness even when it is killed.
// Pdeathsig fires when the forking *thread* exits, so every fork happens on
// one locked thread that lives as long as the supervisor.
type supervisor struct {
	forks chan fork
	mu    sync.Mutex
	procs []*proc
}

type fork struct {
	cmd  *exec.Cmd
	done chan error
}

type proc struct {
	name string
	cmd  *exec.Cmd
	exit chan struct{}
	err  error
}

func newSupervisor() *supervisor {
	s := &supervisor{forks: make(chan fork)}
	go func() {
		runtime.LockOSThread() // never unlocked: see the type's comment
		for f := range s.forks {
			f.done <- f.cmd.Start()
		}
	}()
	return s
}

// start runs name with args, output appended to logPath.
func (s *supervisor) start(name, logPath string, args []string, env []string) (*proc, error) {
	return s.startAs(name, logPath, args, env, nil)
}

// startAs is start with the process's credentials (nil: the harness's).
func (s *supervisor) startAs(name, logPath string, args []string, env []string, cred *syscall.Credential) (*proc, error) {
	log, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Stdout, cmd.Stderr = log, log
	cmd.Env = append(os.Environ(), env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true, Credential: cred}
	done := make(chan error, 1)
	s.forks <- fork{cmd: cmd, done: done}
	if err := <-done; err != nil {
		log.Close()
		return nil, fmt.Errorf("starting %s: %w", name, err)
	}
	p := &proc{name: name, cmd: cmd, exit: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		log.Close()
		close(p.exit)
	}()
	s.mu.Lock()
	s.procs = append(s.procs, p)
	s.mu.Unlock()
	return p, nil
}

// stop ends p's process group: SIGTERM, then SIGKILL after grace.
func (p *proc) stop(grace time.Duration) {
	select {
	case <-p.exit:
		return
	default:
	}
	_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGTERM)
	select {
	case <-p.exit:
	case <-time.After(grace):
		_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
		<-p.exit
	}
}

func (p *proc) running() bool {
	select {
	case <-p.exit:
		return false
	default:
		return true
	}
}

// stopAll stops every process, newest first.
func (s *supervisor) stopAll(grace time.Duration) {
	s.mu.Lock()
	procs := s.procs
	s.procs = nil
	s.mu.Unlock()
	for i := len(procs) - 1; i >= 0; i-- {
		procs[i].stop(grace)
	}
}
