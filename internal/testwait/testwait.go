// Package testwait lets tests wait for a condition with a deadline (never a
// fixed sleep standing in for it), on apimachinery's wait package.
package testwait

import (
	"context"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
)

// Interval is how often Until looks.
const Interval = 10 * time.Millisecond

// Until checks cond now and then every Interval until it holds or timeout
// has passed, and says whether it held. The caller fails the test with
// what it knows then: `if !testwait.Until(d, ok) { t.Fatalf(...) }`.
func Until(timeout time.Duration, cond func() bool) bool {
	return wait.PollUntilContextTimeout(context.Background(), Interval, timeout, true, func(context.Context) (bool, error) {
		return cond(), nil
	}) == nil
}
