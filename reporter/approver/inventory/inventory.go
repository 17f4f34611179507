// Package inventory says which addresses and DNS names belong to which node:
// the evidence the approver's policy checks a CSR's SANs against. Sources:
// the Node objects (self-reported by the kubelet: evidence, not proof), or a
// desired-state mapping the node cannot write, from a ConfigMap or a file.
package inventory

import (
	"encoding/json"
	"fmt"
	"net/netip"
	"sort"
	"strings"

	"sigs.k8s.io/yaml"
)

// Entry is what one node owns.
type Entry struct {
	IPs      []netip.Addr `json:"ips"`
	DNSNames []string     `json:"dnsNames,omitempty"`
	// SelfReported are those of IPs that the node wrote about itself: in
	// the Node objects, every address but those a cloud controller wrote
	// (trim.InfrastructureAddressTypes). Empty for desired-state sources
	// (a ConfigMap, a file, Machines), which the node cannot write.
	SelfReported []netip.Addr `json:"-"`
	// Registered are the addresses the node first reported, as this
	// process saw it (Networks): a self-reported address among them is in
	// the node's own network.
	Registered []netip.Addr `json:"-"`
}

// Source answers lookups. Implementations are safe for concurrent use.
type Source interface {
	// Lookup returns the node's entry; ok is false when the node is unknown.
	Lookup(node string) (e Entry, ok bool)
	// Size is the number of nodes known, for the flood guard's default.
	Size() int
	// Describe names the source in messages ("node objects", "ConfigMap ns/name").
	Describe() string
}

// Claims is implemented by sources in which several nodes may report the
// same address or name (the Node objects, the Machines): the policy
// refuses an address or name that another node claims too.
type Claims interface {
	// Claimants returns every node that reports ip (in O(1) of the fleet).
	Claimants(ip netip.Addr) []string
	// NameClaimants returns every node that is named name or reports it as
	// a DNS or host name (name normalized: lower case, no trailing dot).
	NameClaimants(name string) []string
}

// Mapping is the desired-state document of the file and ConfigMap sources:
//
//	nodes:
//	  worker-1:
//	    ips: ["192.0.2.11", "2001:db8::11"]
//	    dnsNames: ["worker-1.example.com"]
type Mapping struct {
	Nodes map[string]Entry `json:"nodes"`
}

// Parse decodes a mapping strictly (YAML or JSON): unknown fields, bad IPs
// and empty node names are errors that name the node and the value.
func Parse(data []byte) (map[string]Entry, error) {
	jsonData, err := yaml.YAMLToJSON(data)
	if err != nil {
		return nil, fmt.Errorf("not YAML or JSON: %w", err)
	}
	var raw struct {
		Nodes map[string]struct {
			IPs      []string `json:"ips"`
			DNSNames []string `json:"dnsNames"`
		} `json:"nodes"`
	}
	dec := json.NewDecoder(strings.NewReader(string(jsonData)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&raw); err != nil {
		return nil, fmt.Errorf("decoding the inventory: %w (want {nodes: {<name>: {ips: [...], dnsNames: [...]}}})", err)
	}
	out := make(map[string]Entry, len(raw.Nodes))
	names := make([]string, 0, len(raw.Nodes))
	for name := range raw.Nodes {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		if strings.TrimSpace(name) == "" {
			return nil, fmt.Errorf("an inventory entry has an empty node name")
		}
		r := raw.Nodes[name]
		var e Entry
		for _, s := range r.IPs {
			ip, err := netip.ParseAddr(s)
			if err != nil {
				return nil, fmt.Errorf("node %s: ip %q: %w", name, s, err)
			}
			e.IPs = append(e.IPs, ip)
		}
		for _, d := range r.DNSNames {
			if strings.TrimSpace(d) == "" {
				return nil, fmt.Errorf("node %s: empty DNS name", name)
			}
			e.DNSNames = append(e.DNSNames, d)
		}
		out[name] = e
	}
	return out, nil
}
