// Package integration tests certready's reads and writes against the real
// API server binary (etcd and kube-apiserver on loopback ports, no node, no
// root): what the fake clientset does not do, field and label selectors,
// the approval subresource, and patch preconditions.
package integration

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/certready/certready/e2e/localcluster"
	"github.com/certready/certready/internal/names"
)

var api *localcluster.APIServer

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	dir := os.Getenv("CERTREADY_K8S_BIN")
	if dir == "" {
		fmt.Fprintln(os.Stderr, "integration: CERTREADY_K8S_BIN is not set: run 'make -C e2e integration' (it builds etcd and kube-apiserver first)")
		return 1
	}
	state, err := os.MkdirTemp("", "crint-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(state)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	api, err = localcluster.StartAPIServer(ctx, dir, state)
	if err != nil {
		fmt.Fprintln(os.Stderr, "integration: starting etcd and kube-apiserver:", err)
		return 1
	}
	defer api.Stop()
	return m.Run()
}

func ctxT(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// nodeIdentity is a client as node's kubelet: system:node:<node> in
// system:nodes, authorized by the Node authorizer.
func nodeIdentity(t *testing.T, node string) (*rest.Config, kubernetes.Interface) {
	t.Helper()
	cfg, err := api.ClientConfig(names.NodeUser(node), "system:nodes")
	if err != nil {
		t.Fatal(err)
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return cfg, cs
}
