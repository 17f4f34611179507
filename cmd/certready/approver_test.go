//go:build !nodeonly

package main

import (
	"slices"
	"strings"
	"testing"

	"github.com/spf13/pflag"

	"github.com/certready/certready/reporter/approver"
	"github.com/certready/certready/reporter/approver/policy"
)

func parsedApproverFlags(t *testing.T, args ...string) (approver.Options, error) {
	t.Helper()
	fs := pflag.NewFlagSet("approver", pflag.ContinueOnError)
	var f approverFlags
	f.add(fs)
	if err := fs.Parse(args); err != nil {
		t.Fatalf("parsing %v: %v", args, err)
	}
	return f.options()
}

// The approver's policy flags of issue 34: each value is validated, and a
// bad one is an error naming the flag, the value and what it wants.
func TestApproverPolicyFlags(t *testing.T) {
	for _, tc := range []struct {
		name  string
		args  []string
		check func(t *testing.T, o approver.Options)
		err   []string // parts of the error; nil: accepted
	}{
		{"defaults", nil, func(t *testing.T, o approver.Options) {
			if p := o.Controller.Policy; p.MaxSelfReportedIPs != policy.DefaultMaxSelfReportedIPs || len(p.AllowedDNSSuffixes) != 0 || len(p.DenyDNSNames) != 0 {
				t.Errorf("policy %+v", p)
			}
			if len(o.CloudControllers) != 0 {
				t.Errorf("cloud controllers %v by default, want none: a field manager's name is its writer's word", o.CloudControllers)
			}
		}, nil},
		{"a pattern in --apiserver-names", []string{"--apiserver-names=API.example.com.,*.X.y"}, func(t *testing.T, o approver.Options) {
			if got := o.Controller.Policy.DenyDNSNames; !slices.Equal(got, []string{"api.example.com", "*.x.y"}) {
				t.Errorf("DenyDNSNames %v, want the name and the pattern, normalized", got)
			}
		}, nil},
		{"a pattern over a top-level domain", []string{"--apiserver-names=*.com"}, nil, []string{"--apiserver-names", `"*.com"`, "at least two labels"}},
		{"a wildcard inside a label", []string{"--apiserver-names=api*.example.com"}, nil, []string{"--apiserver-names", `"api*.example.com"`, `only "*." followed by`}},
		{"a wildcard deeper in the name", []string{"--apiserver-names=a.*.example.com"}, nil, []string{"--apiserver-names", `"a.*.example.com"`}},
		{"a pattern whose domain is no host name", []string{"--apiserver-names=*.-x.example.com"}, nil, []string{"--apiserver-names", "hyphen", "*.api.example.com"}},
		{"a name with an underscore", []string{"--apiserver-names=api_1.example.com"}, nil, []string{"--apiserver-names", `"api_1.example.com"`, "underscore"}},
		{"--allowed-dns-suffixes", []string{"--allowed-dns-suffixes=.Nodes.Example.com,lan"}, func(t *testing.T, o approver.Options) {
			if got := o.Controller.Policy.AllowedDNSSuffixes; !slices.Equal(got, []string{"nodes.example.com", "lan"}) {
				t.Errorf("AllowedDNSSuffixes %v", got)
			}
		}, nil},
		{"a suffix that is no domain", []string{"--allowed-dns-suffixes=*.example.com"}, nil, []string{"--allowed-dns-suffixes", `"*.example.com"`, "not a domain"}},
		{"no cloud controller", []string{"--cloud-controller-managers="}, func(t *testing.T, o approver.Options) {
			if len(o.CloudControllers) != 0 {
				t.Errorf("cloud controllers %v, want none", o.CloudControllers)
			}
		}, nil},
		{"the kubelet as a cloud controller", []string{"--cloud-controller-managers=cloud-controller-manager,kubelet"}, nil, []string{"--cloud-controller-managers", "kubelet writes a node's own word"}},
		{"an empty field manager", []string{"--cloud-controller-managers=a,,b"}, nil, []string{"--cloud-controller-managers", "empty field manager"}},
		{"a cap of 0", []string{"--max-self-reported-ips=0"}, nil, []string{"--max-self-reported-ips=0", "at least 1"}},
		{"a cap of 2", []string{"--max-self-reported-ips=2"}, func(t *testing.T, o approver.Options) {
			if o.Controller.Policy.MaxSelfReportedIPs != 2 {
				t.Errorf("cap %d", o.Controller.Policy.MaxSelfReportedIPs)
			}
		}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o, err := parsedApproverFlags(t, tc.args...)
			if tc.err == nil {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				tc.check(t, o)
				return
			}
			if err == nil {
				t.Fatalf("accepted, want an error with %q", tc.err)
			}
			for _, part := range tc.err {
				if !strings.Contains(err.Error(), part) {
					t.Errorf("error %q lacks %q", err, part)
				}
			}
		})
	}
}
