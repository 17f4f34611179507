package main

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"time"

	"github.com/prometheus/procfs"
	cpmtypes "k8s.io/node-problem-detector/pkg/custompluginmonitor/types"

	"github.com/certready/certready/internal/nodeapi"
	"github.com/certready/certready/reporter/npdcheck"
	"github.com/certready/certready/reporter/servingcert/certfile"
)

func runCheck(ctx context.Context, args []string) int {
	fs := newFlagSet("check", "Run the agent's checks once, as a node-problem-detector custom plugin: print one line\n"+
		"(at most 80 bytes) and exit 0 when the serving certificate is ready, 1 when it is not, 2 when\n"+
		"the check itself could not run. Without API credentials the CSR check is skipped and the\n"+
		"node IP must be given with --node-ip.")
	var o npdcheck.Options
	var ips []string
	var useAPI bool
	var kf kubeFlags
	fs.StringVar(&o.NodeName, "node-name", os.Getenv("NODE_NAME"), "This node's name (default: $NODE_NAME).")
	fs.StringSliceVar(&ips, "node-ip", nil, "The node's InternalIP(s), comma-separated. Empty: read from the Node object (needs --use-api).")
	fs.StringVar(&o.PKIDir, "kubelet-pki-dir", certfile.DefaultDir, "The kubelet's --cert-dir.")
	fs.StringVar(&o.CAFile, "ca-file", serviceAccountCA, "PEM bundle of the CA that signs kubelet serving certificates.")
	fs.IntVar(&o.KubeletPort, "kubelet-port", 0, "Kubelet port to probe. 0: from the Node object when --use-api, else 10250.")
	fs.DurationVar(&o.Timeout, "probe-timeout", 5*time.Second, "Timeout of the TLS handshake (as the agent's --probe-timeout).")
	fs.DurationVar(&o.CSRRetention, "csr-retention", time.Hour, "How long issued CSRs are kept; an older certificate needs no CSR.")
	fs.BoolVar(&useAPI, "use-api", false, "Also read the Node and the CSRs from the API (kubeconfig or in-cluster credentials).")
	var handOver bool
	fs.BoolVar(&handOver, "npd-hand-over", true, "With --use-api: report a verified certificate as Unknown until the node-problem-detector\n"+
		"process running this check (the parent process) has published the condition since it started, so\n"+
		"that its next OK is published as False (NPD starts believing False and publishes only changes).")
	kf.add(fs, 5, 10)
	if code := parseOrExit(fs, args); code >= 0 {
		if code == 2 {
			return int(cpmtypes.Unknown)
		}
		return code
	}
	for _, s := range ips {
		ip, err := netip.ParseAddr(s)
		if err != nil {
			fmt.Println(npdcheck.Line(fmt.Sprintf("CheckFailed: --node-ip %q is not an IP address", s)))
			return int(cpmtypes.Unknown)
		}
		o.NodeIPs = append(o.NodeIPs, ip.Unmap())
	}
	if useAPI {
		cfg, err := kf.config("certready-check/" + version)
		if err == nil {
			o.Client, err = nodeapi.New(cfg)
		}
		if err != nil {
			fmt.Println(npdcheck.Line("CheckFailed: " + err.Error()))
			return int(cpmtypes.Unknown)
		}
		if handOver {
			if o.PublisherStart, err = parentStart(); err != nil {
				fmt.Println(npdcheck.Line("CheckFailed: start of node-problem-detector (parent): " + err.Error()))
				return int(cpmtypes.Unknown)
			}
		}
	}
	ctx, cancel := context.WithTimeout(ctx, 2*o.Timeout+10*time.Second)
	defer cancel()
	status, line := npdcheck.Run(ctx, o)
	fmt.Println(line)
	return int(status)
}

// parentStart is when the parent process (node-problem-detector) started.
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
