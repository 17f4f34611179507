//go:build !nodeonly

package main

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/certready/certready/reporter/fleet"
)

// Hostile text from the cluster, in every field a table or text shows: an
// ANSI colour, a carriage return that overwrites the row, a newline that
// fakes the next one, a backspace, a bidirectional override.
const (
	hostileSAN = "evil.example\x1b[31m\rworker-1"
	hostileMsg = "refused\nworker-2   true   False   KubeletServingCertReady\b\b\u202e"
)

// Tables and text print no control character from cluster data (CVE-2021-25743):
// each row is one line, and the hostile text shows escaped.
func TestTablesPrintNoControlCharactersFromTheCluster(t *testing.T) {
	now := time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)
	csrRow := fleet.CSRRow{Name: "csr-a", UID: "uid\x1b]0;title\x07", Requester: "system:node:w1\r", Node: "w1\x1b[2J", Created: now,
		Stage: fleet.StagePending, Rule: "IPSANNotInInventory\x1b[0m", Message: hostileMsg,
		Certificate: &fleet.IssuedCert{Fingerprint: "ab", Subject: "CN=\x1b[1mroot", DNSNames: []string{hostileSAN}, IPAddresses: []string{"192.0.2.1"}}}
	check := func(name string, print func(*bytes.Buffer) error, wantLines int) {
		t.Helper()
		var out bytes.Buffer
		if err := print(&out); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		s := out.String()
		for i, c := range []byte(s) {
			if (c < 0x20 && c != '\n') || c == 0x7f {
				t.Errorf("%s: control character %#x at %d in\n%s", name, c, i, s)
				break
			}
		}
		if strings.Contains(s, "\u202e") {
			t.Errorf("%s: a bidirectional override reached the terminal:\n%s", name, s)
		}
		if got := strings.Count(s, "\n"); got != wantLines {
			t.Errorf("%s: %d lines, want %d (a row faked or lost):\n%s", name, got, wantLines, s)
		}
		if !strings.Contains(s, "^[") && !strings.Contains(s, `\n`) && !strings.Contains(s, `\r`) {
			t.Errorf("%s: the hostile text is not shown escaped:\n%s", name, s)
		}
	}

	check("csr", func(b *bytes.Buffer) error { return printCSRs(b, "", false, []fleet.CSRRow{csrRow}, now) }, 2)
	ex := Explanation{CSR: csrRow, Request: &RequestView{Subject: "CN=system:node:w1\x1b[8m", DNSNames: []string{hostileSAN},
		EmailAddresses: []string{"a@b\n"}, URIs: []string{"spiffe://x\r"}, Key: "ECDSA P-256", Usages: []string{"server auth\x1b"}, Groups: []string{"system:nodes\n"}},
		Decision: DecisionView{Rule: "SANDenied", Message: "SANDenied: " + hostileSAN + " " + hostileMsg}, ApproverConfig: "ns/approver"}
	check("csr explain", func(b *bytes.Buffer) error { return printExplanation(b, ex, now) }, 23)
	var explained bytes.Buffer
	if err := printExplanation(&explained, ex, now); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(explained.String(), `evil.example^[[31m\rworker-1`) || !strings.Contains(explained.String(), `refused\nworker-2`) {
		t.Errorf("csr explain does not show the SAN and message escaped as kubectl would:\n%s", explained.String())
	}

	st := []fleet.NodeStatus{{Node: "w1", Status: corev1.ConditionTrue, Reason: "CSRPending\x1b[32m", Message: hostileMsg, CSR: "csr-a\r",
		Problem: "x\ny", Completed: []string{"a\x1b"}}}
	check("status", func(b *bytes.Buffer) error { return printStatus(b, "table", st, now, false) }, 2)
	check("status -o wide", func(b *bytes.Buffer) error { return printStatus(b, "wide", st, now, false) }, 2)
	check("verify", func(b *bytes.Buffer) error {
		return printVerify(b, "", false, []fleet.Verification{{Node: "w1", Reason: "not ready now: " + hostileMsg,
			After: &fleet.Cert{Fingerprint: "ab\x1b[31m", NotAfter: "2027\r"}}})
	}, 4)
	check("preflight", func(b *bytes.Buffer) error {
		return printPreflight(b, "", false, fleet.Rule{Name: "rule\x1b[31m", Taint: corev1.Taint{Key: "k", Effect: corev1.TaintEffectNoSchedule}},
			[]fleet.Row{{Node: "w1", Outcome: fleet.Stays, Why: hostileMsg}}, 1,
			preflightExtras{findings: []fleet.Finding{{Name: "APIServerVerifiesNoKubelet", Nodes: []string{"w1\x1b[31m", hostileMsg}, LastSeen: now, Message: "m"}},
				install: []fleet.InstallProblem{{Object: "Deployment ns/a\x1b[31m", Problem: fleet.NoEligibleNode, Message: "m"}}})
	}, 9)

	// json and yaml carry the data itself, escaped by their encoders.
	for _, output := range []string{"json", "yaml"} {
		var doc bytes.Buffer
		if err := printCSRs(&doc, output, false, []fleet.CSRRow{csrRow}, now); err != nil {
			t.Fatal(err)
		}
		for i, c := range doc.Bytes() {
			if c < 0x20 && c != '\n' {
				t.Errorf("-o %s: control character %#x at %d", output, c, i)
				break
			}
		}
		if output == "json" {
			var back struct{ CSRs []fleet.CSRRow }
			if err := json.Unmarshal(doc.Bytes(), &back); err != nil || len(back.CSRs) != 1 || back.CSRs[0].Message != hostileMsg ||
				back.CSRs[0].Certificate.DNSNames[0] != hostileSAN {
				t.Errorf("-o json does not carry the data itself: %v %+v", err, back)
			}
		}
	}
}
