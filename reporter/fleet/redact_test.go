package fleet_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/certready/certready/internal/redact"
	"github.com/certready/certready/reporter/fleet"
)

func TestRedactLeavesNoNodeNameOrAddress(t *testing.T) {
	r := redact.New([]byte("0123456789abcdef0123456789abcdef"))
	rows := []fleet.NodeStatus{
		{Node: "worker-1", Status: "True", Reason: "EndpointCertificateMismatch", Message: "192.0.2.11:10250 presents 0a1b, not the installed 2c3d", Problem: "EndpointCertificateMismatch"},
		{Node: "ip-10-0-1-23.ec2.internal", NoAgent: "ip-10-0-1-23.ec2.internal is a virtual kubelet"},
		{Node: "worker-2", Ready: true, Status: "False", Message: "serving certificate 0a1b valid; presented on [2001:db8::2]:10250", CSR: "csr-x", Fingerprint: "ab"},
	}
	fleet.Redact(rows, r)
	out, _ := json.Marshal(rows)
	for _, leak := range []string{"worker-1", "worker-2", "ip-10-0-1-23", "192.0.2.11", "2001:db8"} {
		if strings.Contains(string(out), leak) {
			t.Errorf("redacted rows name %q: %s", leak, out)
		}
	}
	if rows[0].Node != r.Node("worker-1") || rows[2].CSR != "csr-x" || rows[2].Fingerprint != "ab" || rows[0].Message != "" || rows[0].Reason != "EndpointCertificateMismatch" {
		t.Errorf("redacted rows %+v: want pseudonyms, the CSR, fingerprint and reason kept, no message", rows)
	}
	before := []fleet.NodeStatus{{Node: "w"}}
	fleet.Redact(before, nil)
	if before[0].Node != "w" {
		t.Error("the nil redactor changed a row")
	}
}
