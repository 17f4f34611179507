package main

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"time"

	"github.com/prometheus/procfs"
	"github.com/spf13/pflag"
	cpmtypes "k8s.io/node-problem-detector/pkg/custompluginmonitor/types"

	"github.com/certready/certready/internal/nodeapi"
	"github.com/certready/certready/reporter/npdcheck"
	"github.com/certready/certready/reporter/servingcert/certfile"
)

const checkLong = "Run the agent's checks once, as a node-problem-detector custom plugin: print one line\n" +
	"(at most 80 bytes) and exit 0 when the serving certificate is ready, 1 when it is not, 2 when\n" +
	"the check itself could not run. Without API credentials the CSR check is skipped and the\n" +
	"node IP must be given with --node-ip."

// checkOptions are the node-problem-detector plugin's.
type checkOptions struct {
	o                npdcheck.Options
	ips              []string
	useAPI, handOver bool
	kf               kubeFlags
}

func (c *checkOptions) AddFlags(fs *pflag.FlagSet) {
	o := &c.o
	fs.StringVar(&o.NodeName, "node-name", downwardAPI("NODE_NAME", ""), "This node's name (default: $NODE_NAME).")
	fs.StringSliceVar(&c.ips, "node-ip", nil, "The node's InternalIP(s), comma-separated. Empty: read from the Node object (needs --use-api).")
	fs.StringVar(&o.PKIDir, "kubelet-pki-dir", certfile.DefaultDir, "The kubelet's --cert-dir.")
	fs.StringVar(&o.CAFile, "ca-file", serviceAccountCA, "PEM bundle of the CA that signs kubelet serving certificates.")
	fs.IntVar(&o.KubeletPort, "kubelet-port", 0, "Kubelet port to probe. 0: from the Node object when --use-api, else 10250.")
	fs.DurationVar(&o.Timeout, "probe-timeout", 5*time.Second, "Timeout of the TLS handshake (as the agent's --probe-timeout).")
	fs.DurationVar(&o.CSRRetention, "csr-retention", time.Hour, "How long issued CSRs are kept; an older certificate needs no CSR.")
	fs.BoolVar(&c.useAPI, "use-api", false, "Also read the Node and the CSRs from the API (kubeconfig or in-cluster credentials).")
	fs.BoolVar(&c.handOver, "npd-hand-over", true, "With --use-api: report a verified certificate as Unknown until the node-problem-detector\n"+
		"process running this check (the parent process) has published the condition since it started, so\n"+
		"that its next OK is published as False (NPD starts believing False and publishes only changes).")
	c.kf.add(fs, 5, 10)
}

func (c *checkOptions) Complete(*envFill) error {
	for _, s := range c.ips {
		ip, err := netip.ParseAddr(s)
		if err != nil {
			return fmt.Errorf("--node-ip %q is not an IP address", s)
		}
		c.o.NodeIPs = append(c.o.NodeIPs, ip.Unmap())
	}
	if !c.useAPI {
		return nil
	}
	cfg, err := c.kf.config("certready-check/" + version)
	if err == nil {
		c.o.Client, err = nodeapi.New(cfg)
	}
	if err != nil {
		return err
	}
	if c.handOver {
		if c.o.PublisherStart, err = parentStart(); err != nil {
			return fmt.Errorf("start of node-problem-detector (parent): %w", err)
		}
	}
	return nil
}

func (c *checkOptions) Validate() error { return nil }

// Run prints the check's one line; its exit status is the verdict's.
func (c *checkOptions) Run(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 2*c.o.Timeout+10*time.Second)
	defer cancel()
	status, line := npdcheck.Run(ctx, c.o)
	fmt.Println(line)
	if status != cpmtypes.OK {
		return exitWith(int(status), nil)
	}
	return nil
}

// ReportFailure prints why the check could not run as node-problem-detector
// reads it, one line on standard output, and exits Unknown.
func (c *checkOptions) ReportFailure(err error) int {
	fmt.Println(npdcheck.Line("CheckFailed: " + escapeError(err.Error())))
	return int(cpmtypes.Unknown)
}

func parentStart() (time.Time, error) {
	fs, err := procfs.NewDefaultFS()
	if err != nil {
		return time.Time{}, err
	}
	p, err := fs.Proc(os.Getppid())
	if err != nil {
		return time.Time{}, err
	}
	st, err := p.Stat()
	if err != nil {
		return time.Time{}, err
	}
	secs, err := st.StartTime()
	if err != nil {
		return time.Time{}, err
	}
	return time.Unix(0, int64(secs*float64(time.Second))), nil
}
