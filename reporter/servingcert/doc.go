// Package servingcert is the proof that a kubelet serves a certificate
// its cluster trusts, shared by every part that needs it: the agent (on
// every event), the approver's readiness-taint fallback (its own look at
// the kubelet), node-problem-detector's check and the fleet view.
//
// Its packages are the proof's data path, each importing only those below
// it:
//
//	condition     the verdict as the node condition: written, found, fresh
//	observe       one check's evidence, gathered in one order
//	verdict       evidence -> status, reason, message (pure)
//	apipath       the API server's own path to the kubelet (a pod log, classified)
//	probe         a TLS handshake with the kubelet port -> the presented certificate
//	csrlookup     the one way a node's CSRs are found: selector, predicates, sources
//	csrmatch      which kubelet-serving CSR explains a fingerprint (pure)
//	certfile      the installed file -> leaf, chain, fingerprint; never the key
//	kubeletconfig the kubelet's configuration file -> rotation settings
//
// Nothing here runs a loop, serves metrics or holds a process's state:
// that is the caller's (reporter/agent, reporter/approver/taint,
// reporter/npdcheck, reporter/fleet).
package servingcert
