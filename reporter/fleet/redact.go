package fleet

import "github.com/certready/certready/internal/redact"

// Redact rewrites rows for output that leaves the cluster: each node's
// name as its pseudonym under r, no message, and no node name or address
// in its problem. CSR names and fingerprints stay: they name
// no host. The nil redactor leaves rows as they are.
func Redact(rows []NodeStatus, r *redact.Redactor) {
	if r == nil {
		return
	}
	for i := range rows {
		names := []string{rows[i].Node}
		// The condition's message may quote the certificate's SANs,
		// which the row does not carry: left out (the reason stays).
		rows[i].Message = ""
		rows[i].Problem = r.Text(rows[i].Problem, names, nil)
		rows[i].NoAgent = r.Text(rows[i].NoAgent, names, nil)
		rows[i].Node = r.Node(rows[i].Node)
	}
}
