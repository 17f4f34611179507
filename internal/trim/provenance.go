package trim

import (
	"bytes"
	"encoding/json"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// addressesKey marks, in a managed fields entry, a write of
// status.addresses; entries without it are not decoded.
var addressesKey = []byte(`"f:addresses"`)

// infrastructureTypes lists (sorted, comma-separated) the types of n's
// addresses whose address only managers in cloud wrote, according to n's
// managed fields. status.addresses is a list keyed by type: an entry owns
// the address of a type when it holds its f:address (the last writer that
// changed the value), or the element whole (duplicate keys, as dual-stack
// InternalIPs, are owned atomically), or the whole list. A type with a
// writer outside cloud, or none recorded, is the node's own word.
func infrastructureTypes(n *corev1.Node, cloud []string) string {
	if len(cloud) == 0 || len(n.ManagedFields) == 0 {
		return ""
	}
	writers := map[corev1.NodeAddressType][]string{}
	var whole []string // managers owning the whole list
	for _, e := range n.ManagedFields {
		if e.FieldsV1 == nil || !bytes.Contains(e.FieldsV1.GetRawBytes(), addressesKey) {
			continue
		}
		types, all, ok := addressWrites(e.FieldsV1)
		switch {
		case !ok:
			// Undecodable: any address may be anyone's (the empty manager
			// is no cloud controller).
			whole = append(whole, "")
		case all:
			whole = append(whole, e.Manager)
		}
		for _, t := range types {
			writers[t] = append(writers[t], e.Manager)
		}
	}
	var infra []string
	for _, a := range n.Status.Addresses {
		if slices.Contains(infra, string(a.Type)) {
			continue
		}
		w := append(slices.Clone(whole), writers[a.Type]...)
		if len(w) > 0 && !slices.ContainsFunc(w, func(m string) bool { return !slices.Contains(cloud, m) }) {
			infra = append(infra, string(a.Type))
		}
	}
	slices.Sort(infra)
	return strings.Join(infra, ",")
}

// addressWrites reads one managed fields entry: the address types whose
// address it owns, and whether it owns the whole list.
func addressWrites(f *metav1.FieldsV1) (types []corev1.NodeAddressType, all, ok bool) {
	var doc struct {
		Status struct {
			Addresses map[string]json.RawMessage `json:"f:addresses"`
		} `json:"f:status"`
	}
	if err := json.Unmarshal(f.GetRawBytes(), &doc); err != nil {
		return nil, false, false
	}
	addrs := doc.Status.Addresses
	if addrs == nil {
		return nil, false, true // f:addresses elsewhere than under f:status
	}
	if len(addrs) == 0 {
		return nil, true, true // the list as one field
	}
	for key, owned := range addrs {
		k, isKey := strings.CutPrefix(key, "k:")
		if !isKey {
			continue // ".": the list's presence, no address
		}
		var elem struct {
			Type corev1.NodeAddressType `json:"type"`
		}
		if json.Unmarshal([]byte(k), &elem) != nil || elem.Type == "" {
			return nil, false, false
		}
		if trimmed := bytes.TrimSpace(owned); bytes.Equal(trimmed, []byte("{}")) || bytes.Contains(owned, []byte(`"f:address"`)) {
			types = append(types, elem.Type)
		}
	}
	return types, false, true
}
