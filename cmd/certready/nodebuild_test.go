package main

import (
	"os/exec"
	"strings"
	"testing"
)

// TestTheNodeBuildLinksNoClusterCode: the agent's binary (-tags nodeonly)
// must not link client-go's clientset, which registers every API group at
// start-up (the pages it touches are most of an agent's memory on every
// node), nor its event recorder (strategic merge patches, which bring the
// OpenAPI models), nor the approver, the fleet commands, the dynamic
// client, or the operator CLI's cobra and cli-runtime.
func TestTheNodeBuildLinksNoClusterCode(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "-tags", "nodeonly", ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	apis := 0
	for _, pkg := range strings.Fields(string(out)) {
		switch {
		case pkg == "k8s.io/client-go/kubernetes", strings.HasPrefix(pkg, "k8s.io/client-go/kubernetes/"),
			strings.HasPrefix(pkg, "k8s.io/client-go/informers"), strings.HasPrefix(pkg, "k8s.io/client-go/dynamic"),
			pkg == "k8s.io/client-go/tools/record", pkg == "k8s.io/apimachinery/pkg/util/strategicpatch", strings.HasPrefix(pkg, "github.com/google/gnostic-models"),
			strings.HasPrefix(pkg, "github.com/certready/certready/reporter/approver"), strings.HasPrefix(pkg, "github.com/certready/certready/reporter/fleet"),
			strings.HasPrefix(pkg, "github.com/spf13/cobra"), strings.HasPrefix(pkg, "k8s.io/cli-runtime"), strings.HasPrefix(pkg, "sigs.k8s.io/kustomize"):
			t.Errorf("the node build links %s", pkg)
		case strings.HasPrefix(pkg, "k8s.io/api/"):
			apis++
			switch pkg {
			case "k8s.io/api/core/v1", "k8s.io/api/certificates/v1":
			case "k8s.io/api/authentication/v1", "k8s.io/api/authorization/v1": // the metrics endpoint's TokenReview and SubjectAccessReview
			default:
				t.Errorf("the node build links the API group %s", pkg)
			}
		}
	}
	if apis != 4 {
		t.Errorf("the node build links %d API groups, want core/v1, certificates/v1, authentication/v1 and authorization/v1", apis)
	}
}
