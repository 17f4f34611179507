// Package inventorydoc reads the desired-state inventory as an operator
// writes it (a ConfigMap's key or a file): which addresses and DNS names
// each node owns. The approver checks CSRs against it; the agent dials the
// address it records and names the drift of the Node's own addresses from
// it. Parsing only: no API access, no watching.
//
//	nodes:
//	  worker-1:
//	    ips: ["192.0.2.11", "2001:db8::11"]
//	    dnsNames: ["worker-1.example.com"]
package inventorydoc

import (
	"encoding/json"
	"fmt"
	"net/netip"
	"sort"
	"strings"

	"sigs.k8s.io/yaml"
)

// ConfigMapKey is the key of the document in an inventory ConfigMap.
const ConfigMapKey = "inventory.yaml"

// MaxBytes bounds a document read from a file: an inventory of 5000 nodes
// with two addresses and a name each is under 1 MiB.
const MaxBytes = 4 << 20

// Record is what the document says one node owns.
type Record struct {
	IPs      []netip.Addr
	DNSNames []string
}

// Parse decodes a document strictly (YAML or JSON): unknown fields, bad IPs
// and empty node names are errors that name the node and the value.
func Parse(data []byte) (map[string]Record, error) {
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
	out := make(map[string]Record, len(raw.Nodes))
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
		var rec Record
		for _, s := range r.IPs {
			ip, err := netip.ParseAddr(s)
			if err != nil {
				return nil, fmt.Errorf("node %s: ip %q: %w", name, s, err)
			}
			if ip.Zone() != "" {
				return nil, fmt.Errorf("node %s: ip %q: an IPv6 zone is no address a certificate or an API server uses", name, s)
			}
			rec.IPs = append(rec.IPs, ip)
		}
		for _, d := range r.DNSNames {
			if strings.TrimSpace(d) == "" {
				return nil, fmt.Errorf("node %s: empty DNS name", name)
			}
			rec.DNSNames = append(rec.DNSNames, d)
		}
		out[name] = rec
	}
	return out, nil
}

// Spec is a parsed --inventory value of a desired-state source.
type Spec struct {
	// Kind is "configmap" or "file".
	Kind string
	// Namespace and Name of a ConfigMap; Path of a file.
	Namespace, Name, Path string
}

// String is the spec as the flag takes it.
func (s Spec) String() string {
	if s.Kind == "file" {
		return "file:" + s.Path
	}
	return "configmap:" + s.Namespace + "/" + s.Name
}

// Describe names the source in messages: "ConfigMap ns/name", "file path".
func (s Spec) Describe() string {
	if s.Kind == "file" {
		return "file " + s.Path
	}
	return "ConfigMap " + s.Namespace + "/" + s.Name
}

// ParseSpec reads "configmap:<namespace>/<name>" or "file:<path>"; the
// error names the value and the forms it wants.
func ParseSpec(spec string) (Spec, error) {
	kind, arg, _ := strings.Cut(spec, ":")
	switch kind {
	case "file":
		if arg == "" {
			return Spec{}, fmt.Errorf("--inventory=%s: want file:<path>", spec)
		}
		return Spec{Kind: kind, Path: arg}, nil
	case "configmap":
		ns, name, ok := strings.Cut(arg, "/")
		if !ok || ns == "" || name == "" || strings.Contains(name, "/") {
			return Spec{}, fmt.Errorf("--inventory=%s: want configmap:<namespace>/<name>", spec)
		}
		return Spec{Kind: kind, Namespace: ns, Name: name}, nil
	}
	return Spec{}, fmt.Errorf("--inventory=%s: want configmap:<namespace>/<name> or file:<path>", spec)
}
