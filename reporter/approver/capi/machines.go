// Package capi is the approver's Cluster API mode: from the management
// cluster, it approves each workload cluster's kubelet-serving CSRs against
// what the infrastructure provider recorded on the node's Machine
// (status.addresses), not against the Node the kubelet writes itself.
//
// Objects are read with the dynamic client at these field paths of
// cluster.x-k8s.io/v1beta2 (sigs.k8s.io/cluster-api/api v1.14):
// Machine metadata.labels[cluster.x-k8s.io/cluster-name] (or spec.clusterName),
// status.nodeRef.name and status.addresses[].{type,address}; the kubeconfig
// Secret <cluster>-kubeconfig, data.value, that Cluster API keeps for each
// Cluster.
package capi

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/tools/cache"

	"github.com/certready/certready/reporter/approver/inventory"
)

// Group and version read, and the label Cluster API puts on a cluster's
// Machines and kubeconfig Secret.
var (
	ClusterGVR = schema.GroupVersionResource{Group: "cluster.x-k8s.io", Version: "v1beta2", Resource: "clusters"}
	MachineGVR = schema.GroupVersionResource{Group: "cluster.x-k8s.io", Version: "v1beta2", Resource: "machines"}
)

const (
	ClusterNameLabel = "cluster.x-k8s.io/cluster-name"
	// ControlPlaneLabel marks the Machines of a cluster's control plane
	// (set by its control-plane provider, never by the node): only their
	// nodes may have an API server address in a serving certificate.
	ControlPlaneLabel = "cluster.x-k8s.io/control-plane"
	// KubeconfigSecretType is the type Cluster API gives its Secrets.
	KubeconfigSecretType = "cluster.x-k8s.io/secret"
)

// KubeconfigSecretName is the Secret Cluster API keeps a cluster's admin
// kubeconfig in (key "value").
func KubeconfigSecretName(cluster string) string { return cluster + "-kubeconfig" }

// Machine is what the approver reads of one Machine.
type Machine struct {
	Namespace, Name string
	Cluster         string // the Cluster it belongs to, in Namespace
	Node            string // status.nodeRef.name; empty until the node joined
	IPs             []netip.Addr
	DNSNames        []string // lower case, no trailing dot
	// Problems name addresses that could not be read (kept out).
	Problems []string
}

// ParseMachine reads a Machine at the v1beta2 field paths.
func ParseMachine(u *unstructured.Unstructured) Machine {
	m := Machine{Namespace: u.GetNamespace(), Name: u.GetName(), Cluster: u.GetLabels()[ClusterNameLabel]}
	if m.Cluster == "" {
		m.Cluster, _, _ = unstructured.NestedString(u.Object, "spec", "clusterName")
	}
	m.Node, _, _ = unstructured.NestedString(u.Object, "status", "nodeRef", "name")
	addrs, _, _ := unstructured.NestedSlice(u.Object, "status", "addresses")
	for _, a := range addrs {
		am, _ := a.(map[string]any)
		typ, _ := am["type"].(string)
		val, _ := am["address"].(string)
		switch typ {
		case "InternalIP", "ExternalIP":
			ip, err := netip.ParseAddr(strings.TrimSpace(val))
			if err != nil {
				m.Problems = append(m.Problems, fmt.Sprintf("%s %q is not an IP address", typ, val))
				continue
			}
			if ip = ip.Unmap().WithZone(""); !slices.Contains(m.IPs, ip) {
				m.IPs = append(m.IPs, ip)
			}
		case "InternalDNS", "ExternalDNS", "Hostname":
			name := strings.ToLower(strings.TrimSuffix(strings.TrimSpace(val), "."))
			if name == "" {
				m.Problems = append(m.Problems, fmt.Sprintf("%s %q is empty", typ, val))
				continue
			}
			if !slices.Contains(m.DNSNames, name) {
				m.DNSNames = append(m.DNSNames, name)
			}
		default:
			m.Problems = append(m.Problems, fmt.Sprintf("address type %q is not one the approver reads", typ))
		}
	}
	return m
}

// TrimMachine keeps, of a Machine in the informer's cache, only the fields
// ParseMachine and event references read.
func TrimMachine(obj any) (any, error) {
	u, ok := obj.(*unstructured.Unstructured)
	if !ok {
		return obj, nil
	}
	out := &unstructured.Unstructured{Object: map[string]any{"apiVersion": u.GetAPIVersion(), "kind": u.GetKind()}}
	out.SetNamespace(u.GetNamespace())
	out.SetName(u.GetName())
	out.SetUID(u.GetUID())
	out.SetResourceVersion(u.GetResourceVersion())
	kept := map[string]string{}
	for _, k := range []string{ClusterNameLabel, ControlPlaneLabel} {
		if v, ok := u.GetLabels()[k]; ok {
			kept[k] = v
		}
	}
	if len(kept) > 0 {
		out.SetLabels(kept)
	}
	for _, path := range [][]string{{"spec", "clusterName"}, {"status", "nodeRef", "name"}, {"status", "addresses"}} {
		if v, found, _ := unstructured.NestedFieldNoCopy(u.Object, path...); found {
			_ = unstructured.SetNestedField(out.Object, v, path...)
		}
	}
	return out, nil
}

// Index names of the Machine informer.
const (
	byClusterNode    = "capi-cluster-node"
	byClusterAddress = "capi-cluster-address"
	byClusterName    = "capi-cluster-name"
	byCluster        = "capi-cluster"
)

func clusterKey(namespace, cluster string) string { return namespace + "/" + cluster }

// Indexers index Machines by cluster, by cluster and node, by cluster and
// IP address, and by cluster and name (the node's, and the DNS and host
// names on the Machine).
var Indexers = cache.Indexers{
	byCluster: func(obj any) ([]string, error) {
		m := ParseMachine(obj.(*unstructured.Unstructured))
		return []string{clusterKey(m.Namespace, m.Cluster)}, nil
	},
	byClusterNode: func(obj any) ([]string, error) {
		m := ParseMachine(obj.(*unstructured.Unstructured))
		if m.Node == "" {
			return nil, nil
		}
		return []string{clusterKey(m.Namespace, m.Cluster) + "/" + m.Node}, nil
	},
	byClusterAddress: func(obj any) ([]string, error) {
		m := ParseMachine(obj.(*unstructured.Unstructured))
		keys := make([]string, 0, len(m.IPs))
		for _, ip := range m.IPs {
			keys = append(keys, clusterKey(m.Namespace, m.Cluster)+"/"+ip.String())
		}
		return keys, nil
	},
	byClusterName: func(obj any) ([]string, error) {
		m := ParseMachine(obj.(*unstructured.Unstructured))
		var keys []string
		for _, n := range append([]string{strings.ToLower(m.Node)}, m.DNSNames...) {
			if k := clusterKey(m.Namespace, m.Cluster) + "/" + n; n != "" && !slices.Contains(keys, k) {
				keys = append(keys, k)
			}
		}
		return keys, nil
	},
}

// Inventory is one workload cluster's Machines as the approver's
// inventory: a node owns the addresses and names on the Machine whose
// status.nodeRef names it, and an address on two Machines is claimed by
// both (inventory.Claims), so neither gets it.
type Inventory struct {
	Indexer   cache.Indexer // the Machine informer's, with Indexers
	Namespace string        // the Cluster's
	Cluster   string
}

var (
	_ inventory.Source = Inventory{}
	_ inventory.Claims = Inventory{}
)

// Machines returns the Machines whose nodeRef names node.
func (i Inventory) Machines(node string) []*unstructured.Unstructured {
	objs, _ := i.Indexer.ByIndex(byClusterNode, clusterKey(i.Namespace, i.Cluster)+"/"+node)
	out := make([]*unstructured.Unstructured, 0, len(objs))
	for _, o := range objs {
		out = append(out, o.(*unstructured.Unstructured))
	}
	return out
}

// Lookup returns the node's Machine's addresses; a node that two Machines
// name is unknown (which one is its server cannot be told).
func (i Inventory) Lookup(node string) (inventory.Entry, bool) {
	ms := i.Machines(node)
	if len(ms) != 1 {
		return inventory.Entry{}, false
	}
	m := ParseMachine(ms[0])
	return inventory.Entry{IPs: m.IPs, DNSNames: m.DNSNames}, true
}

// Claimants returns, for each Machine of the cluster with ip, its node, or
// "Machine <name>" while it has none: an address on a Machine that has not
// joined is still that server's.
func (i Inventory) Claimants(ip netip.Addr) []string {
	objs, _ := i.Indexer.ByIndex(byClusterAddress, clusterKey(i.Namespace, i.Cluster)+"/"+ip.Unmap().String())
	return claimants(objs)
}

// NameClaimants returns, for each Machine of the cluster whose node is
// named name or that carries name as a DNS or host name, its node (or
// "Machine <name>" while it has none).
func (i Inventory) NameClaimants(name string) []string {
	objs, _ := i.Indexer.ByIndex(byClusterName, clusterKey(i.Namespace, i.Cluster)+"/"+strings.ToLower(strings.TrimSuffix(name, ".")))
	return claimants(objs)
}

func claimants(objs []any) []string {
	out := make([]string, 0, len(objs))
	for _, o := range objs {
		m := ParseMachine(o.(*unstructured.Unstructured))
		if m.Node == "" {
			out = append(out, "Machine "+m.Name)
			continue
		}
		out = append(out, m.Node)
	}
	return out
}

// Size is the number of the cluster's Machines.
func (i Inventory) Size() int {
	objs, _ := i.Indexer.ByIndex(byCluster, clusterKey(i.Namespace, i.Cluster))
	return len(objs)
}

// HostsAPIServer says whether node's Machine is a control-plane Machine
// (policy.Evidence.APIServerHost).
func (i Inventory) HostsAPIServer(node string) bool {
	ms := i.Machines(node)
	if len(ms) != 1 {
		return false
	}
	_, ok := ms[0].GetLabels()[ControlPlaneLabel]
	return ok
}

// Describe names the source in decisions and events.
func (i Inventory) Describe() string {
	return "the Machines of Cluster " + clusterKey(i.Namespace, i.Cluster)
}
