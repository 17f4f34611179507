package static

import (
	"os"
	"regexp"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

const runbookBase = "https://github.com/certready/certready/blob/main/docs/operations.md#"

// githubSlug is the anchor GitHub gives a Markdown heading.
func githubSlug(heading string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(strings.TrimSpace(heading)) {
		switch {
		case r >= 'a' && r <= 'z', r >= '0' && r <= '9', r == '-', r == '_':
			b.WriteRune(r)
		case r == ' ':
			b.WriteRune('-')
		}
	}
	return b.String()
}

// Every alert links its runbook: a section of docs/operations.md that exists.
func TestAlertsLinkARunbookSectionThatExists(t *testing.T) {
	readme, err := os.ReadFile("../../docs/operations.md")
	if err != nil {
		t.Fatal(err)
	}
	anchors := map[string]bool{}
	for _, m := range regexp.MustCompile(`(?m)^#{1,6} (.+)$`).FindAllStringSubmatch(string(readme), -1) {
		anchors[githubSlug(m[1])] = true
	}
	data, err := os.ReadFile(root + "/components/monitoring/prometheusrule.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var rule struct {
		Spec struct {
			Groups []struct {
				Rules []struct {
					Alert       string            `json:"alert"`
					Annotations map[string]string `json:"annotations"`
				} `json:"rules"`
			} `json:"groups"`
		} `json:"spec"`
	}
	if err := yaml.Unmarshal(data, &rule); err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, g := range rule.Spec.Groups {
		for _, r := range g.Rules {
			n++
			url := r.Annotations["runbook_url"]
			anchor, ok := strings.CutPrefix(url, runbookBase)
			if !ok || !anchors[anchor] {
				t.Errorf("alert %s: runbook_url %q is not a section of docs/operations.md (#%s)", r.Alert, url, strings.ToLower(r.Alert))
			}
		}
	}
	if n < 7 {
		t.Errorf("%d alerts read, want every one", n)
	}
}

// Renamed (kustomize namespace: and namePrefix:), the ServiceMonitor still
// selects both metrics Services in its own namespace by a port they have,
// labels each target's component from the Service, and every alert on
// targets selects by that label, never by a job or namespace name.
func TestMonitoringFollowsRenames(t *testing.T) {
	for _, tc := range []struct{ name, kustomization string }{
		{"as shipped", "resources:\n- ../../overlays/standalone\ncomponents:\n- ../../components/monitoring\n"},
		{"renamed namespace and prefix", "namespace: platform-certs\nnamePrefix: acme-\nresources:\n- ../../overlays/standalone\ncomponents:\n- ../../components/monitoring\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			objs := kustomizeMaps(t, tc.kustomization, nil)
			var sm map[string]any
			var services []map[string]any
			var rules string
			for _, o := range objs {
				switch o["kind"] {
				case "ServiceMonitor":
					sm = o
				case "Service":
					services = append(services, o)
				case "PrometheusRule":
					rules = mustJSON(o["spec"])
				}
			}
			if sm == nil || rules == "" {
				t.Fatal("no ServiceMonitor or PrometheusRule built")
			}
			ns := sm["metadata"].(map[string]any)["namespace"]
			spec := sm["spec"].(map[string]any)
			if sel, ok := spec["namespaceSelector"]; ok {
				t.Errorf("namespaceSelector %v pins a namespace a rename does not follow", sel)
			}
			want := spec["selector"].(map[string]any)["matchLabels"].(map[string]any)
			port := spec["endpoints"].([]any)[0].(map[string]any)["port"]
			components := map[any]bool{}
			for _, svc := range services {
				meta := svc["metadata"].(map[string]any)
				labels, _ := meta["labels"].(map[string]any)
				matches := meta["namespace"] == ns
				for k, v := range want {
					matches = matches && labels[k] == v
				}
				hasPort := false
				for _, p := range svc["spec"].(map[string]any)["ports"].([]any) {
					hasPort = hasPort || p.(map[string]any)["name"] == port
				}
				if matches && hasPort {
					components[labels["app.kubernetes.io/component"]] = true
				}
			}
			if !components["agent"] || !components["approver"] {
				t.Errorf("the ServiceMonitor selects the metrics Services of %v, want agent and approver", components)
			}
			if !strings.Contains(mustJSON(spec), `"sourceLabels":["__meta_kubernetes_service_label_app_kubernetes_io_component"],"targetLabel":"certready_component"`) {
				t.Error("no relabeling of the Service's component label to certready_component")
			}
			for _, up := range regexp.MustCompile(`up\{[^}]*\}`).FindAllString(rules, -1) {
				if !strings.Contains(up, "certready_component=") || strings.Contains(up, "job=") || strings.Contains(up, "namespace=") {
					t.Errorf("alert selects targets by %s, not by certready_component", up)
				}
			}
		})
	}
}
