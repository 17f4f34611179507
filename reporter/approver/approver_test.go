package approver

import (
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
)

// A label a kubelet may set on its own Node would let any node vouch for
// itself as an API server host.
func TestAPIServerHostLabelMustBeOneKubeletsCannotSet(t *testing.T) {
	for _, tc := range []struct {
		key string
		ok  bool
	}{
		{DefaultAPIServerHostLabel, true},
		{"node-role.kubernetes.io/master", true},
		{"node-restriction.kubernetes.io/apiserver", true},
		{"", true},
		{"example.com/control-plane", false},        // any kubelet may set it (--node-labels)
		{"kubernetes.io/hostname", false},           // the kubelet's own
		{"node.kubernetes.io/control-plane", false}, // kubelets may set node.kubernetes.io/
	} {
		err := ValidateAPIServerHostLabel(tc.key)
		if (err == nil) != tc.ok {
			t.Errorf("%q: err = %v, want ok=%v", tc.key, err, tc.ok)
		}
		if err != nil && !strings.Contains(err.Error(), tc.key) {
			t.Errorf("%q: the error does not name the label: %v", tc.key, err)
		}
	}
}

func TestOptionsValidateRefusesFlagsThatWouldDoNothing(t *testing.T) {
	valid := func() Options {
		return Options{InventorySpec: "node", LeaderElect: true, LeaseDuration: 15 * time.Second, RenewDeadline: 10 * time.Second, RetryPeriod: 2 * time.Second, APIServerHostLabel: DefaultAPIServerHostLabel}
	}
	taintOf := func(key string) corev1.Taint {
		return corev1.Taint{Key: key, Value: "pending", Effect: corev1.TaintEffectNoSchedule}
	}
	for _, tc := range []struct {
		name   string
		mutate func(o *Options)
		want   string // "" when accepted
	}{
		{"node inventory", func(*Options) {}, ""},
		{"shared addresses with the node inventory", func(o *Options) { o.SharedAddressesOK = true }, ""},
		{"Cluster API with a selector", func(o *Options) {
			o.ClusterAPI, o.CAPI.Selector = true, labels.SelectorFromSet(labels.Set{"env": "prod"})
		}, ""},
		{"Cluster API, every cluster", func(o *Options) { o.ClusterAPI, o.CAPI.Selector = true, labels.Everything() }, ""},
		{"an empty selector without Cluster API", func(o *Options) { o.CAPI.Selector = labels.Everything() }, ""},
		{"a selector without Cluster API", func(o *Options) { o.CAPI.Selector = labels.SelectorFromSet(labels.Set{"env": "prod"}) }, "--capi-cluster-selector needs --cluster-api"},
		{"an inventory beside Cluster API", func(o *Options) { o.ClusterAPI, o.InventorySpec = true, "file:/etc/inventory.yaml" }, "--inventory=file:/etc/inventory.yaml does nothing with --cluster-api"},
		{"shared addresses with Cluster API", func(o *Options) { o.ClusterAPI, o.SharedAddressesOK = true, true }, "--allow-shared-addresses does nothing with --cluster-api"},
		{"the taint fallback with Cluster API", func(o *Options) { o.ClusterAPI, o.LiftReadinessTaint = true, taintOf("t") }, "the taint fallback (--lift-readiness-taint) acts on this cluster's Nodes"},
		{"a soft taint without the fallback", func(o *Options) { o.SoftTaint = taintOf("soft") }, "--soft-taint needs the taint fallback"},
		{"a soft taint with the fallback", func(o *Options) { o.SoftTaint, o.LiftReadinessTaint = taintOf("soft"), taintOf("t") }, ""},
		{"a renew deadline as long as the lease", func(o *Options) { o.RenewDeadline = o.LeaseDuration }, "--leader-elect-lease-duration > --leader-elect-renew-deadline"},
		{"durations do not matter without election", func(o *Options) { o.LeaderElect, o.RenewDeadline = false, o.LeaseDuration }, ""},
		{"a host label kubelets can set", func(o *Options) { o.APIServerHostLabel = "example.com/cp" }, `--apiserver-host-label: label "example.com/cp"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := valid()
			tc.mutate(&o)
			err := o.Validate()
			switch {
			case tc.want == "" && err != nil:
				t.Errorf("refused: %v", err)
			case tc.want != "" && err == nil:
				t.Errorf("accepted, want an error containing %q", tc.want)
			case tc.want != "" && !strings.Contains(err.Error(), tc.want):
				t.Errorf("error %q, want it to contain %q", err, tc.want)
			}
		})
	}
}
