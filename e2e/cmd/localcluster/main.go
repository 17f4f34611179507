// Command localcluster runs the local cluster for the demo:
//
//	localcluster up    start it, deploy certready, show the result, stay up (foreground)
//	localcluster down  stop a running one (by its pid file)
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/pflag"

	"github.com/certready/certready/e2e/deploy"
	"github.com/certready/certready/e2e/localcluster"
	"github.com/certready/certready/e2e/provider"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: localcluster up|down [--state DIR]")
		os.Exit(2)
	}
	fs := pflag.NewFlagSet(os.Args[1], pflag.ExitOnError)
	state := fs.String("state", "/tmp/certready-demo", "state folder (kubeconfig, logs, pid file)")
	workers := fs.Int("workers", 2, "worker nodes")
	manifests := fs.String("manifests", "../manifests", "the repository's manifests folder")
	_ = fs.Parse(os.Args[2:])
	var err error
	switch os.Args[1] {
	case "up":
		err = up(*state, *workers, *manifests)
	case "down":
		err = down(*state)
	default:
		err = fmt.Errorf("unknown command %q", os.Args[1])
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "localcluster %s: %v\n", os.Args[1], err)
		os.Exit(1)
	}
}

func pidFile(state string) string { return state + ".pid" }

func up(state string, workers int, manifests string) error {
	if data, err := os.ReadFile(pidFile(state)); err == nil {
		if pid, _ := strconv.Atoi(strings.TrimSpace(string(data))); pid > 0 && syscall.Kill(pid, 0) == nil {
			return fmt.Errorf("a demo cluster is already running (pid %d); run 'make demo-down' first", pid)
		}
	}
	bins, err := localcluster.BinariesFromEnv()
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if err := os.WriteFile(pidFile(state), []byte(strconv.Itoa(os.Getpid())), 0o644); err != nil {
		return err
	}
	defer os.Remove(pidFile(state))
	logf := func(format string, args ...any) {
		fmt.Printf("%s  %s\n", time.Now().Format("15:04:05"), fmt.Sprintf(format, args...))
	}
	c, err := localcluster.Start(ctx, localcluster.Config{Binaries: bins, StateDir: state, Netns: "certready-demo", Workers: workers, Logf: logf})
	if err != nil {
		return err
	}
	defer c.Stop()
	if err := deploy.Certready(ctx, provider.Local{C: c}, filepath.Join(manifests, "overlays/standalone"), logf); err != nil {
		return err
	}
	if err := deploy.Showcase(ctx, provider.Local{C: c}, os.Stdout, logf); err != nil {
		return err
	}
	fmt.Printf("\nThe cluster stays up. From this machine:\n  export KUBECONFIG=%s\n  kubectl get nodes\n  kubectl describe node worker-1\nStop it with: make demo-down\nDEMO READY\n", c.Kubeconfig)
	<-ctx.Done()
	logf("stopping the cluster")
	return nil
}

func down(state string) error {
	data, err := os.ReadFile(pidFile(state))
	if errors.Is(err, os.ErrNotExist) {
		fmt.Println("no demo cluster is running")
		return nil
	}
	if err != nil {
		return err
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(data)))
	if err != nil {
		return fmt.Errorf("pid file %s: %w", pidFile(state), err)
	}
	if err := syscall.Kill(pid, syscall.SIGTERM); err != nil {
		os.Remove(pidFile(state))
		fmt.Println("no demo cluster is running")
		return nil
	}
	deadline := time.Now().Add(60 * time.Second)
	for syscall.Kill(pid, 0) == nil {
		if time.Now().After(deadline) {
			return fmt.Errorf("pid %d did not stop", pid)
		}
		time.Sleep(200 * time.Millisecond)
	}
	fmt.Println("demo cluster stopped; nothing left behind")
	return nil
}
