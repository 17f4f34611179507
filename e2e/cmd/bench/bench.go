package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/certready/certready/e2e/localcluster"
	"github.com/certready/certready/internal/names"
)

const (
	simNode   = "sim-0"
	simIP     = "192.0.2.50"
	condType  = names.ConditionType
	taintKey  = localcluster.ReadinessTaint
	agentUser = "certready-bench-agent"
)

type bench struct {
	c        *localcluster.Cluster
	logf     func(string, ...any)
	agent    *localcluster.Process
	approver *localcluster.Process
	pki      string
	serving  atomic.Pointer[tls.Certificate]
	pairs    [2]string // pair files laid out as the kubelet writes them
	certs    [2]*tls.Certificate
	roots    *x509.CertPool // the cluster CA, for clients made in memory
	relay    relay          // between the agent and the API server
	// approverArgs start the real approver (leader election on);
	// approverCfg is its identity, the naive approver's too.
	approverArgs []string
	approverCfg  *rest.Config
	// stormRuns names each storm's objects apart; fleetNodes is the
	// simulated fleet the API load grows, one size after the other.
	stormRuns  atomic.Int64
	fleetNodes []string
	// logReads counts the API server's log requests to the simulated
	// kubelet: each one a connection the agent's proof of the API
	// server's path costs the kubelet.
	logReads atomic.Int64
}

// benchPod is the agent's pod as the API server knows it (bound to the
// simulated node, never run): the agent proves the API server's path by
// reading its log.
const benchPod = "certready-agent-bench"

// The approver's ServiceAccount, as the shipped manifests name it.
const (
	approverNS   = "certready-system"
	approverUser = "system:serviceaccount:" + approverNS + ":certready-approver"
)

// startApprover starts the real approver and waits until it leads (its
// is_leader metric): a storm measured before that would time the election.
func (b *bench) startApprover(ctx context.Context) error {
	var err error
	if b.approver, err = b.c.StartInNS("bench-approver", b.approverArgs...); err != nil {
		return err
	}
	return localcluster.Poll(ctx, time.Minute, "the bench approver leading", func() (bool, error) {
		v, err := b.scrapeAt(ctx, approverMetrics, "certready_approver_is_leader")
		return err == nil && v == 1, nil
	})
}

// newBench sets up what every measurement shares: the agent's identity
// behind a counting relay, the approver under its shipped RBAC, the
// simulated kubelet and its two real certificates, and the agent, settled
// into the starting state (installed, served, ready).
func newBench(ctx context.Context, c *localcluster.Cluster, bins localcluster.Binaries, state, manifests string, logf func(string, ...any)) (*bench, error) {
	b := &bench{c: c, logf: logf}
	ca, _ := c.CAKeyPair()
	caPEM, err := os.ReadFile(ca)
	if err != nil {
		return nil, err
	}
	b.roots = x509.NewCertPool()
	if !b.roots.AppendCertsFromPEM(caPEM) {
		return nil, fmt.Errorf("no certificate in %s", ca)
	}
	agentKC, err := b.agentIdentity(ctx, manifests)
	if err != nil {
		return nil, err
	}
	approverKC, err := b.approverIdentity(ctx, manifests)
	if err != nil {
		return nil, err
	}
	if err := b.startKubelet(ctx); err != nil {
		return nil, err
	}
	// Inside the cluster's state folder, so that Stop removes it too.
	b.pki = filepath.Join(state, "sim-pki")
	if err := os.MkdirAll(b.pki, 0o700); err != nil {
		return nil, err
	}
	b.approverArgs = []string{bins.Certready, "approver", "--kubeconfig=" + approverKC,
		"--leader-elect-namespace=" + approverNS, "--lift-readiness-taint=" + taintKey + "=pending:NoSchedule", "--kubelet-ca-file=" + ca,
		"--metrics-addr=127.0.0.1:9731", "--health-addr=127.0.0.1:9732", "--profiling", "--metrics-secure=false"}
	if err := b.startApprover(ctx); err != nil {
		return nil, err
	}
	if err := b.issueKubeletCerts(ctx); err != nil {
		return nil, err
	}
	if err := grantAgentLogProof(ctx, b.c, manifests); err != nil {
		return nil, err
	}
	b.agent, err = c.StartInNS("bench-agent", bins.CertreadyNode, "agent", "--kubeconfig="+agentKC, "--node-name="+simNode,
		"--kubelet-pki-dir="+b.pki, "--ca-file="+ca, "--metrics-addr=127.0.0.1:9721", "--health-addr=127.0.0.1:9722", "--metrics-secure=false",
		// The API server's path is proven as in a cluster: the simulated
		// kubelet serves the log of the agent's pod (bound to it, never run).
		"--apiserver-proof=required", "--pod-name="+benchPod, "--pod-namespace="+approverNS, "--container-name=agent",
		"--apiserver-proof-interval="+proofInterval.String())
	if err != nil {
		return nil, err
	}
	// Settle into the starting state: installed, served, ready.
	b.serving.Store(b.certs[0])
	if err := b.swap(b.pairs[0]); err != nil {
		return nil, err
	}
	if err := b.waitNode(ctx, 2*time.Minute, "sim-0 ready", func(n *corev1.Node) bool { return ready(n) && !tainted(n) }); err != nil {
		return nil, err
	}
	// The agent has listed, watched and patched by now: a flow schema that
	// counted none of it would report an idle agent whatever it did.
	if k, err := dispatched(ctx, c); err != nil {
		return nil, fmt.Errorf("reading flow schema %s's count of the agent's requests: %w", agentFlow, err)
	} else if k == 0 {
		return nil, fmt.Errorf("flow schema %s counted none of the agent's requests: the API load figures would be wrong", agentFlow)
	}
	return b, nil
}

// agentIdentity gives the agent its client certificate, the shipped
// ClusterRole and a FlowSchema of its own (the API load is read from it),
// and a kubeconfig that reaches the API server through a relay counting
// what it receives.
func (b *bench) agentIdentity(ctx context.Context, manifests string) (kubeconfig string, err error) {
	kc, _, err := b.c.ClientCert("bench-agent", agentUser, agentGroup)
	if err != nil {
		return "", err
	}
	if err := grantAgentRole(ctx, b.c, manifests); err != nil {
		return "", err
	}
	if err := createAgentFlowSchema(ctx, b.c); err != nil {
		return "", err
	}
	if err := b.relay.start(b.c); err != nil {
		return "", err
	}
	return kc, pointAt(kc, agentRelayAddr)
}

// approverIdentity: the approver runs as its ServiceAccount would, under the
// shipped RBAC and FlowSchema: its requests are rate-limited, authorized
// and queued by API Priority and Fairness as in a cluster, not exempt as
// system:masters would be.
func (b *bench) approverIdentity(ctx context.Context, manifests string) (kubeconfig string, err error) {
	kc, cfg, err := b.c.ClientCert("bench-approver", approverUser, "system:serviceaccounts", "system:serviceaccounts:"+approverNS)
	if err != nil {
		return "", err
	}
	b.approverCfg = cfg
	for _, f := range []string{"base/namespace.yaml", "base/approver-rbac.yaml", "base/approver-flowschema.yaml", "overlays/standalone/taint-rbac.yaml"} {
		if out, err := b.c.Kubectl(ctx, "apply", "-f", filepath.Join(manifests, f)); err != nil {
			return "", fmt.Errorf("applying %s: %w: %s", f, err, out)
		}
	}
	return kc, nil
}

// startKubelet creates the simulated node (tainted) and its kubelet port: it
// serves whatever certificate it holds, or fails the handshake with
// internal_error when it holds none.
func (b *bench) startKubelet(ctx context.Context) error {
	if err := b.createNode(ctx, b.c.Client, simNode, simIP, true); err != nil {
		return err
	}
	if err := b.c.AddAddress(simIP); err != nil {
		return err
	}
	ln, err := b.c.ListenInNS(net.JoinHostPort(simIP, "10250"))
	if err != nil {
		return err
	}
	// Its port serves what a kubelet serves the API server for a log
	// request (one byte); the agent's own probe is a bare handshake.
	mux := http.NewServeMux()
	mux.HandleFunc("/containerLogs/", func(w http.ResponseWriter, _ *http.Request) {
		b.logReads.Add(1)
		_, _ = io.WriteString(w, "x")
	})
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second, ErrorLog: log.New(io.Discard, "", 0),
		TLSConfig: &tls.Config{GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) {
			if c := b.serving.Load(); c != nil {
				return c, nil
			}
			return nil, fmt.Errorf("no serving certificate available for the kubelet")
		}}}
	go func() { _ = srv.ServeTLS(ln, "", "") }()
	return nil
}

// issueKubeletCerts gets the simulated node two real certificates, issued
// through the approver and the real signer, and lays them out in its pki
// folder as the kubelet does.
func (b *bench) issueKubeletCerts(ctx context.Context) error {
	_, nodeCfg, err := b.c.ClientCert("node-"+simNode, names.NodeUser(simNode), names.NodesGroup)
	if err != nil {
		return err
	}
	nodeClient, err := kubernetes.NewForConfig(nodeCfg)
	if err != nil {
		return err
	}
	for i := range b.pairs {
		cert, keyPEM, err := requestCert(ctx, b.c.Client, nodeClient, simNode, simIP)
		if err != nil {
			return err
		}
		b.pairs[i] = filepath.Join(b.pki, fmt.Sprintf("kubelet-server-2026-bench-%d.pem", i))
		if err := os.WriteFile(b.pairs[i], append(cert, keyPEM...), 0o600); err != nil {
			return err
		}
		pair, err := tls.X509KeyPair(cert, keyPEM)
		if err != nil {
			return err
		}
		b.certs[i] = &pair
	}
	return nil
}

func (b *bench) createNode(ctx context.Context, cs kubernetes.Interface, name, ip string, taint bool) error {
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"certready.io/bench": "true"}}}
	if taint {
		n.Spec.Taints = []corev1.Taint{{Key: taintKey, Value: "pending", Effect: corev1.TaintEffectNoSchedule}}
	}
	if _, err := cs.CoreV1().Nodes().Create(ctx, n, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("creating node %s: %w", name, err)
	}
	// A patch, not an update: the node lifecycle controller writes to new
	// nodes too, and the addresses must not lose that race.
	patch := fmt.Sprintf(`{"status":{"addresses":[{"type":"InternalIP","address":%q},{"type":"Hostname","address":%q}],"daemonEndpoints":{"kubeletEndpoint":{"Port":10250}}}}`, ip, name)
	_, err := cs.CoreV1().Nodes().PatchStatus(ctx, name, []byte(patch))
	return err
}

// requestCert makes a real kubelet-serving CSR as the node and waits for
// the approver and the signer.
func requestCert(ctx context.Context, admin, node kubernetes.Interface, name, ip string) (certPEM, keyPEM []byte, err error) {
	req, key, err := localcluster.KubeletServingCSR(metav1.ObjectMeta{GenerateName: "bench-" + name + "-"}, name, ip)
	if err != nil {
		return nil, nil, err
	}
	csr, err := node.CertificatesV1().CertificateSigningRequests().Create(ctx, req, metav1.CreateOptions{})
	if err != nil {
		return nil, nil, err
	}
	err = localcluster.Poll(ctx, 2*time.Minute, "CSR "+csr.Name+" issued", func() (bool, error) {
		got, err := admin.CertificatesV1().CertificateSigningRequests().Get(ctx, csr.Name, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		certPEM = got.Status.Certificate
		return len(certPEM) > 0, nil
	})
	if err != nil {
		return nil, nil, err
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, nil, err
	}
	return certPEM, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}), nil
}

// swap points kubelet-server-current.pem at target as the kubelet does.
func (b *bench) swap(target string) error {
	return localcluster.SwapSymlink(filepath.Join(b.pki, "kubelet-server-current.pem"), target)
}

func cond(n *corev1.Node) *corev1.NodeCondition { return localcluster.NodeCondition(n, condType) }

func ready(n *corev1.Node) bool {
	c := cond(n)
	return c != nil && c.Status == corev1.ConditionFalse
}

func tainted(n *corev1.Node) bool {
	for _, t := range n.Spec.Taints {
		if t.Key == taintKey {
			return true
		}
	}
	return false
}

func (b *bench) waitNode(ctx context.Context, timeout time.Duration, what string, ok func(*corev1.Node) bool) error {
	return localcluster.Poll(ctx, timeout, what, func() (bool, error) {
		n, err := b.c.Client.CoreV1().Nodes().Get(ctx, simNode, metav1.GetOptions{})
		return err == nil && ok(n), nil
	})
}
