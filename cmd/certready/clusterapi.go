//go:build !nodeonly

package main

import (
	"context"
	"fmt"
	"io"
	"sort"
	"strings"
	"time"

	"github.com/spf13/cobra"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/certready/certready/reporter/approver/capi"
	"github.com/certready/certready/reporter/fleet"
)

// clusterAPIFlags are --cluster-api and --capi-cluster-selector: the
// command runs against the management cluster and looks at every
// workload cluster the approver serves, through each Cluster's kubeconfig
// Secret, as the approver does.
type clusterAPIFlags struct {
	on       bool
	selector string
}

func (f *clusterAPIFlags) add(cmd *cobra.Command) {
	cmd.Flags().BoolVar(&f.on, "cluster-api", false, "The kubeconfig is a Cluster API management cluster's: look at every workload cluster selected by --capi-cluster-selector, through its Cluster's kubeconfig Secret (refused as the approver refuses it), as the approver does.")
	cmd.Flags().StringVar(&f.selector, "capi-cluster-selector", "", "--cluster-api: label selector of the Cluster objects (the approver's --capi-cluster-selector; empty: every Cluster).")
}

func (f *clusterAPIFlags) validate() error {
	if f.selector != "" && !f.on {
		return fmt.Errorf("--capi-cluster-selector=%s without --cluster-api: set both, or neither", f.selector)
	}
	if _, err := labels.Parse(f.selector); err != nil {
		return fmt.Errorf("--capi-cluster-selector=%s: %w", f.selector, err)
	}
	return nil
}

// workloadCluster is a selected Cluster: its connection, or why it cannot
// be observed.
type workloadCluster struct {
	key     string // namespace/name
	cluster *unstructured.Unstructured
	config  *rest.Config
	err     error
}

// workloads lists the selected Clusters and makes each one's connection.
// A Cluster without a usable kubeconfig is listed with why: no Secret, or
// one refused (never dialled).
func (f *clusterAPIFlags) workloads(ctx context.Context, flags *fleetFlags, userAgent string) ([]workloadCluster, error) {
	cfg, err := flags.restConfig(userAgent)
	if err != nil {
		return nil, err
	}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	mgmt, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	list, err := dyn.Resource(capi.ClusterGVR).List(ctx, metav1.ListOptions{LabelSelector: f.selector})
	if err != nil {
		return nil, fmt.Errorf("--cluster-api: listing %s (is the kubeconfig the management cluster's, with Cluster API installed?): %w", capi.ClusterGVR.GroupResource(), err)
	}
	out := make([]workloadCluster, 0, len(list.Items))
	for i := range list.Items {
		c := &list.Items[i]
		w := workloadCluster{key: c.GetNamespace() + "/" + c.GetName(), cluster: c}
		secret, err := mgmt.CoreV1().Secrets(c.GetNamespace()).Get(ctx, capi.KubeconfigSecretName(c.GetName()), metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
			w.err = fmt.Errorf("no kubeconfig Secret %s/%s", c.GetNamespace(), capi.KubeconfigSecretName(c.GetName()))
		case err != nil:
			w.err = fmt.Errorf("reading its kubeconfig Secret: %w", err)
		default:
			if w.config, w.err = capi.WorkloadConfig(secret, c, capi.Limits{}); w.err == nil {
				w.config.UserAgent, w.config.QPS, w.config.Burst = userAgent, flags.qps, flags.burst
			}
		}
		out = append(out, w)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].key < out[j].key })
	return out, nil
}

// clusterStatus is one workload cluster in status --cluster-api.
type clusterStatus struct {
	Cluster string `json:"cluster"`
	// Observable: its nodes could be read; Reason says why not.
	Observable bool               `json:"observable"`
	Reason     string             `json:"reason,omitempty"`
	Nodes      []fleet.NodeStatus `json:"nodes"`
}

// workloadTimeout bounds the reading of one workload cluster: one that
// does not answer does not hold up the others' report for long.
const workloadTimeout = 30 * time.Second

// runClusterAPI is status --cluster-api: every selected workload cluster's
// nodes, or why they cannot be read. Exit 1 when a node is not ready or a
// cluster cannot be observed.
func (o *statusOptions) runClusterAPI(ctx context.Context, out io.Writer) error {
	now := time.Now()
	userAgent := "certready-status/" + version
	workloads, err := o.clusterAPI.workloads(ctx, o.view.fleetFlags, userAgent)
	if err != nil {
		return err
	}
	var clusters []clusterStatus
	problems := false
	for _, w := range workloads {
		cs := clusterStatus{Cluster: w.key, Nodes: []fleet.NodeStatus{}}
		if w.err == nil {
			rctx, cancel := context.WithTimeout(ctx, workloadTimeout)
			_, cs.Nodes, w.err = o.view.forWorkload(w.config).read(rctx, userAgent, now)
			cancel()
		}
		if w.err != nil {
			// The error may name the tenant's server: no address or
			// host under --redact.
			cs.Reason, cs.Nodes = w.err.Error(), []fleet.NodeStatus{}
			if o.red != nil {
				cs.Reason = o.red.Text(cs.Reason, nil, nil)
			}
		}
		cs.Observable = w.err == nil
		fleet.Redact(cs.Nodes, o.red)
		if err := sortBy(cs.Nodes, o.sortExpr); err != nil {
			return err
		}
		if !cs.Observable || len(fleet.Problems(cs.Nodes)) > 0 {
			problems = true
		}
		if o.problems {
			cs.Nodes = fleet.Problems(cs.Nodes)
		}
		clusters = append(clusters, cs)
	}
	if clusters == nil {
		clusters = []clusterStatus{}
	}
	if o.output == "json" || o.output == "yaml" {
		err = printDocument(out, o.output, map[string]any{"taken": now, "clusters": clusters})
	} else {
		err = printClusters(out, o.output, o.noHeaders, clusters, now)
	}
	if err != nil {
		return err
	}
	if problems {
		return exitWith(1, nil)
	}
	return nil
}

func printClusters(out io.Writer, output string, noHeaders bool, clusters []clusterStatus, now time.Time) error {
	if output == "" {
		output = "table"
	}
	for i, c := range clusters {
		if i > 0 {
			fmt.Fprintln(out)
		}
		if !c.Observable {
			fmt.Fprintf(out, "Cluster %s: NOT OBSERVABLE: %s\n", fleet.Escape(c.Cluster), fleet.Escape(c.Reason))
			continue
		}
		fmt.Fprintf(out, "Cluster %s:\n", fleet.Escape(c.Cluster))
		if err := printStatus(out, output, c.Nodes, now, noHeaders); err != nil {
			return err
		}
		ready := len(c.Nodes) - len(fleet.Problems(c.Nodes))
		if !noHeaders {
			fmt.Fprintf(out, "%d of %d nodes listed ready.\n", ready, len(c.Nodes))
		}
	}
	if len(clusters) == 0 {
		_, err := fmt.Fprintln(out, "No Cluster API Cluster selected (--capi-cluster-selector).")
		return err
	}
	return nil
}

// connectWorkload is the connection to one workload cluster, key
// (namespace/name of its Cluster), through the management cluster cfg.
func connectWorkload(ctx context.Context, cfg *rest.Config, key string) (workloadCluster, error) {
	ns, name, _ := strings.Cut(key, "/")
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return workloadCluster{}, err
	}
	mgmt, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return workloadCluster{}, err
	}
	c, err := dyn.Resource(capi.ClusterGVR).Namespace(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return workloadCluster{}, fmt.Errorf("--workload-cluster=%s: reading the Cluster: %w", key, err)
	}
	secret, err := mgmt.CoreV1().Secrets(ns).Get(ctx, capi.KubeconfigSecretName(name), metav1.GetOptions{})
	if err != nil {
		return workloadCluster{}, fmt.Errorf("--workload-cluster=%s: reading its kubeconfig Secret: %w", key, err)
	}
	wc, err := capi.WorkloadConfig(secret, c, capi.Limits{})
	if err != nil {
		return workloadCluster{}, fmt.Errorf("--workload-cluster=%s: %w", key, err)
	}
	wc.UserAgent = cfg.UserAgent
	return workloadCluster{key: key, cluster: c, config: wc}, nil
}

// inWorkload says where a CSR was looked for.
func inWorkload(key string) string {
	if key == "" {
		return ""
	}
	return " in workload cluster " + key
}
