package localcluster

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"runtime"
	"strings"

	"golang.org/x/sys/unix"
)

// Addresses inside the cluster's own network namespace (TEST-NET-1: never
// routed anywhere; nothing leaves the namespace).
const (
	APIServerIP  = "192.0.2.1"
	ServiceIP    = "10.0.0.1"
	ServiceRange = "10.0.0.0/24"
	linkName     = "v0"
	peerName     = "v1"
)

// netns is a named network namespace with one veth pair inside it.
type netns struct {
	name string
	path string
}

func run(name string, args ...string) error {
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

func (n *netns) exec(args ...string) error {
	return run("nsenter", append([]string{"--net=" + n.path, "--"}, args...)...)
}

func createNetns(name string) (*netns, error) {
	if out, err := exec.Command("ip", "netns", "pids", name).Output(); err == nil && len(strings.TrimSpace(string(out))) > 0 {
		return nil, fmt.Errorf("network namespace %s is in use by pids %s: another local cluster is running (make demo-down, or wait for the other run)",
			name, strings.Join(strings.Fields(string(out)), ","))
	}
	_ = run("ip", "netns", "del", name) // an empty leftover of a killed run
	if err := run("ip", "netns", "add", name); err != nil {
		return nil, err
	}
	n := &netns{name: name, path: "/run/netns/" + name}
	steps := [][]string{
		{"ip", "link", "set", "lo", "up"},
		{"ip", "link", "add", linkName, "type", "veth", "peer", "name", peerName},
		{"ip", "link", "set", linkName, "up"},
		{"ip", "link", "set", peerName, "up"},
		{"ip", "addr", "add", APIServerIP + "/24", "dev", linkName},
		// No kube-proxy: the kubernetes Service address is one DNAT rule.
		{"ip", "route", "add", ServiceRange, "dev", linkName},
		{"iptables", "-t", "nat", "-A", "OUTPUT", "-d", ServiceIP, "-p", "tcp", "--dport", "443", "-j", "DNAT", "--to-destination", APIServerIP + ":6443"},
	}
	for _, s := range steps {
		if err := n.exec(s...); err != nil {
			n.delete()
			return nil, err
		}
	}
	return n, nil
}

func (n *netns) addAddress(ip string) error {
	return n.exec("ip", "addr", "add", ip+"/24", "dev", linkName)
}

func (n *netns) delete() {
	_ = run("ip", "netns", "del", n.name)
}

// dialer opens TCP connections from inside the namespace. Each worker's OS
// thread enters the namespace and never leaves it: Go forbids returning such a
// thread to the scheduler, so it stays locked until the dialer is closed,
// and then dies with its goroutine.
type dialer struct {
	reqs chan dialReq
}

type dialReq struct {
	ctx    context.Context
	addr   string
	listen bool
	resp   chan dialResp
}

type dialResp struct {
	conn net.Conn
	ln   net.Listener
	err  error
}

// dialWorkers is how many threads dial at once: a connection that is slow
// to set up (a full accept queue under a storm) must not hold up the rest.
const dialWorkers = 32

func newDialer(nsPath string) (*dialer, error) {
	d := &dialer{reqs: make(chan dialReq)}
	for i := 0; i < dialWorkers; i++ {
		if err := d.startWorker(nsPath); err != nil {
			return nil, err
		}
	}
	return d, nil
}

func (d *dialer) startWorker(nsPath string) error {
	ready := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread is discarded
		f, err := os.Open(nsPath)
		if err != nil {
			ready <- err
			return
		}
		err = unix.Setns(int(f.Fd()), unix.CLONE_NEWNET)
		f.Close()
		ready <- err
		if err != nil {
			return
		}
		for r := range d.reqs {
			if r.listen {
				ln, err := net.Listen("tcp", r.addr)
				r.resp <- dialResp{ln: ln, err: err}
				continue
			}
			c, err := (&net.Dialer{}).DialContext(r.ctx, "tcp", r.addr)
			r.resp <- dialResp{conn: c, err: err}
		}
	}()
	if err := <-ready; err != nil {
		return fmt.Errorf("entering %s: %w", nsPath, err)
	}
	return nil
}

// DialContext dials addr inside the namespace.
func (d *dialer) DialContext(ctx context.Context, _, addr string) (net.Conn, error) {
	r := dialReq{ctx: ctx, addr: addr, resp: make(chan dialResp, 1)}
	select {
	case d.reqs <- r:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	res := <-r.resp
	return res.conn, res.err
}

// listen opens a listener inside the namespace; accepting on it works from
// any thread, since the socket belongs to the namespace it was made in.
func (d *dialer) listen(addr string) (net.Listener, error) {
	r := dialReq{ctx: context.Background(), addr: addr, listen: true, resp: make(chan dialResp, 1)}
	d.reqs <- r
	res := <-r.resp
	return res.ln, res.err
}

func (d *dialer) close() { close(d.reqs) }
