package observe_test

import (
	"context"
	"net"
	"strconv"
	"testing"
	"time"

	"github.com/certready/certready/reporter/servingcert/evidence"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/certready/certready/internal/testpki"
	"github.com/certready/certready/reporter/servingcert/certfile"
	"github.com/certready/certready/reporter/servingcert/observe"
	"github.com/certready/certready/reporter/servingcert/probe"
	"github.com/certready/certready/reporter/servingcert/verdict"
)

// TestIPv6AndDualStackNodes runs the observation path (installed file,
// probe target, real TLS handshake) and the verdict for nodes whose
// InternalIP is IPv6, and for dual-stack nodes in either order.
func TestIPv6AndDualStackNodes(t *testing.T) {
	ca, err := testpki.NewCA("kubelet-ca")
	if err != nil {
		t.Fatal(err)
	}
	v6, v4 := net.ParseIP("::1"), net.ParseIP("127.0.0.1")
	for _, tc := range []struct {
		name      string
		addrs     []string // the Node's InternalIPs, in order
		sans      []net.IP
		listen    string
		wantReady bool
		wantAddr  string
	}{
		{"IPv6 only", []string{"::1"}, []net.IP{v6}, "[::1]:0", true, "[::1]"},
		{"dual-stack, IPv6 first", []string{"::1", "127.0.0.1"}, []net.IP{v4, v6}, "[::1]:0", true, "[::1]"},
		{"dual-stack, IPv4 first", []string{"127.0.0.1", "::1"}, []net.IP{v6, v4}, "127.0.0.1:0", true, "127.0.0.1"},
		{"IPv6 node, certificate lacks its address", []string{"::1"}, []net.IP{v4}, "[::1]:0", false, "[::1]"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pair, err := ca.Issue(testpki.Serving{Node: "w6", IPs: tc.sans})
			if err != nil {
				t.Fatal(err)
			}
			_, portText, err := net.SplitHostPort(testpki.ServeTLSOn(t, tc.listen, pair))
			if err != nil {
				t.Fatal(err)
			}
			port, _ := strconv.Atoi(portText)
			dir := t.TempDir()
			if _, err := testpki.Install(dir, pair); err != nil {
				t.Fatal(err)
			}
			node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "w6"}}
			for _, a := range tc.addrs {
				node.Status.Addresses = append(node.Status.Addresses, corev1.NodeAddress{Type: corev1.NodeInternalIP, Address: a})
			}
			in := evidence.Evidence{Node: observe.NodeInfo(node, nil), Now: time.Now(), CA: ca.Pool(), File: certfile.Read(dir), SkipCSR: true}
			target := observe.EndpointTarget(in, port, 5*time.Second)
			if want := tc.wantAddr + ":" + strconv.Itoa(port); target.Addr != want {
				t.Fatalf("probe dials %s, want %s", target.Addr, want)
			}
			res := probe.Probe(context.Background(), target)
			if res.Outcome != probe.Presented {
				t.Fatalf("probe of %s: %s", target.Addr, res.Describe())
			}
			in.Endpoint = &res
			v := verdict.Evaluate(in)
			if v.Ready() != tc.wantReady {
				t.Errorf("verdict %s %s: %s, want ready=%v", v.Status, v.Reason, v.Message, tc.wantReady)
			}
		})
	}
}
