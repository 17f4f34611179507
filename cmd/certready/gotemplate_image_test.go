//go:build !nodeonly && nogotemplate

package main

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/certready/certready/reporter/fleet"
	"github.com/certready/certready/reporter/fleet/maintenance"
)

// The image's build refuses -o go-template before the cluster is read,
// pointing at jsonpath and the release CLI; jsonpath works the same.
func TestTheImageBuildRefusesGoTemplates(t *testing.T) {
	tmpl := filepath.Join(t.TempDir(), "nodes.tmpl")
	if err := os.WriteFile(tmpl, []byte("{{.nodes}}"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, output := range []string{"go-template={{.nodes}}", "go-template-file=" + tmpl} {
		if err := checkListOutput(output); !errors.Is(err, errNoGoTemplate) || !strings.Contains(err.Error(), "--output=go-template") {
			t.Errorf("-o %s: err %v, want the refusal naming the output", output, err)
		}
		if _, _, err := statusPrinter(output, false); !errors.Is(err, errNoGoTemplate) {
			t.Errorf("status -o %s: err %v, want the refusal", output, err)
		}
	}
	p, _, err := statusPrinter("jsonpath={.nodes[*].node}", false)
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if err := p(&out, maintenance.StatusDocument{Nodes: []fleet.NodeStatus{{Node: "w1"}}}); err != nil || out.String() != "w1" {
		t.Errorf("jsonpath: %q, %v", out.String(), err)
	}
}
