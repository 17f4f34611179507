package approver

import (
	"strings"
	"testing"
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
