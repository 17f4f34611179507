package clientmetrics_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/workqueue"

	"github.com/certready/certready/internal/clientmetrics"
)

// A queue made after Register reports its adds and depth by name, a REST
// request its result by code, and the build is labelled.
func TestRegisterExportsQueueClientAndBuild(t *testing.T) {
	reg := prometheus.NewRegistry()
	clientmetrics.Register(reg, "test", "1.2.3", "abc1234")

	q := workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[string](),
		workqueue.TypedRateLimitingQueueConfig[string]{Name: "certready-test"})
	defer q.ShutDown()
	q.Add("a")
	q.Add("b")

	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusNotFound)
		_, _ = w.Write([]byte(`{"kind":"Status","apiVersion":"v1","status":"Failure","code":404,"reason":"NotFound"}`))
	}))
	defer srv.Close()
	client, err := kubernetes.NewForConfig(&rest.Config{Host: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := client.CoreV1().Nodes().Get(context.Background(), "x", metav1.GetOptions{}); err == nil {
		t.Fatal("the fake API server's 404 did not arrive")
	}

	expected := `
# HELP workqueue_adds_total Adds handled by the workqueue.
# TYPE workqueue_adds_total counter
workqueue_adds_total{name="certready-test"} 2
# HELP workqueue_depth Current depth of the workqueue.
# TYPE workqueue_depth gauge
workqueue_depth{name="certready-test"} 2
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(expected), "workqueue_adds_total", "workqueue_depth"); err != nil {
		t.Error(err)
	}
	if n, err := testutil.GatherAndCount(reg, "rest_client_requests_total", "rest_client_request_duration_seconds"); err != nil || n != 2 {
		t.Errorf("REST client series: %d, %v; want one result and one latency", n, err)
	}
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		switch f.GetName() {
		case "certready_build_info":
			labels := map[string]string{}
			for _, l := range f.GetMetric()[0].GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["component"] != "test" || labels["version"] != "1.2.3" || labels["commit"] != "abc1234" || !strings.HasPrefix(labels["goversion"], "go") {
				t.Errorf("certready_build_info labels %v", labels)
			}
		case "rest_client_requests_total":
			if l := f.GetMetric()[0].GetLabel(); l[0].GetName() != "code" || l[0].GetValue() != "404" {
				t.Errorf("rest_client_requests_total labels %v, want code 404 first", l)
			}
		}
	}
}
