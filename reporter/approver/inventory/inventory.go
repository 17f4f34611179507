// Package inventory says which addresses and DNS names belong to which node:
// the evidence the approver's policy checks a CSR's SANs against. Sources:
// the Node objects (self-reported by the kubelet: evidence, not proof), or a
// desired-state mapping the node cannot write, from a ConfigMap or a file.
package inventory

import (
	"net/netip"

	"github.com/certready/certready/internal/inventorydoc"
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

// Parse decodes a desired-state document (inventorydoc.Parse) into
// entries.
func Parse(data []byte) (map[string]Entry, error) {
	recs, err := inventorydoc.Parse(data)
	if err != nil {
		return nil, err
	}
	out := make(map[string]Entry, len(recs))
	for name, r := range recs {
		out[name] = Entry{IPs: r.IPs, DNSNames: r.DNSNames}
	}
	return out, nil
}
