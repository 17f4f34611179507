package localcluster

import (
	"context"
	"errors"
	"io"
	"net"
	"path/filepath"
	"sync/atomic"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
)

// startForwarder exposes the API server on the host's loopback.
func (c *Cluster) startForwarder() error {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	c.forwarder = ln
	go func() {
		for {
			conn, err := ln.Accept()
			if errors.Is(err, net.ErrClosed) {
				return
			}
			if err != nil {
				// Out of file descriptors under a storm, say: wait, go on.
				time.Sleep(50 * time.Millisecond)
				continue
			}
			go c.RelayToAPIServer(conn, nil)
		}
	}()
	server := "https://" + ln.Addr().String()
	c.Kubeconfig = filepath.Join(c.cfg.StateDir, "kubeconfig")
	if err := c.pki.kubeconfig(c.Kubeconfig, server, "admin"); err != nil {
		return err
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", c.Kubeconfig)
	if err != nil {
		return err
	}
	cfg.QPS, cfg.Burst = 200, 400
	c.RESTConfig = cfg
	c.Client, err = kubernetes.NewForConfig(cfg)
	return err
}

// RelayToAPIServer connects conn to the API server inside the namespace
// and copies both ways until either side ends, then closes both. When
// received is not nil, it counts the bytes sent to conn.
func (c *Cluster) RelayToAPIServer(conn net.Conn, received *atomic.Int64) {
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	up, err := c.dial.DialContext(ctx, "tcp", APIServerIP+":6443")
	cancel()
	if err != nil {
		return
	}
	defer up.Close()
	var toConn io.Writer = conn
	if received != nil {
		toConn = countingWriter{conn, received}
	}
	done := make(chan struct{}, 2)
	go func() { _, _ = io.Copy(up, conn); done <- struct{}{} }()
	go func() { _, _ = io.Copy(toConn, up); done <- struct{}{} }()
	<-done
}

type countingWriter struct {
	w io.Writer
	n *atomic.Int64
}

func (cw countingWriter) Write(p []byte) (int, error) {
	n, err := cw.w.Write(p)
	cw.n.Add(int64(n))
	return n, err
}
