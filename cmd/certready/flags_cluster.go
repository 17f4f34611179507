//go:build !nodeonly

package main

import (
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/pager"
	"k8s.io/klog/v2"

	"github.com/certready/certready/reporter/fleet"
)

// protobufClient is a client talking protobuf (the approver's clients).
func (k *kubeFlags) protobufClient(userAgent string) (kubernetes.Interface, error) {
	cfg, err := k.config(userAgent)
	if err != nil {
		return nil, err
	}
	return kubernetes.NewForConfig(protobuf(cfg))
}

// listNodes reads every Node (matching the label selector, when given), in
// pages, for the read-only fleet commands.
func listNodes(ctx context.Context, client kubernetes.Interface, selector string) ([]corev1.Node, error) {
	var nodes []corev1.Node
	err := pager.New(func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
		return client.CoreV1().Nodes().List(ctx, o)
	}).EachListItem(ctx, metav1.ListOptions{LabelSelector: selector}, func(obj runtime.Object) error {
		nodes = append(nodes, *obj.(*corev1.Node))
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("listing nodes: %w", err)
	}
	return nodes, nil
}

// listAgentSets reads certready's agent DaemonSets (fleet.AgentSelector)
// in namespace, every one when empty, for fleet.MarkNoAgent to judge where
// agents run. An error (no right to list DaemonSets) leaves placement
// unjudged: the caller passes no sets.
func listAgentSets(ctx context.Context, client kubernetes.Interface, namespace string) ([]fleet.AgentSet, error) {
	list, err := client.AppsV1().DaemonSets(namespace).List(ctx, metav1.ListOptions{LabelSelector: fleet.AgentSelector, ResourceVersion: "0"})
	if err != nil {
		return nil, fmt.Errorf("listing agent DaemonSets: %w", err)
	}
	sets := make([]fleet.AgentSet, 0, len(list.Items))
	for _, ds := range list.Items {
		sets = append(sets, fleet.AgentSet{Name: ds.Namespace + "/" + ds.Name, Pod: ds.Spec.Template.Spec})
	}
	return sets, nil
}

// readInstallProblems checks certready's own workloads, read-only, for
// what keeps every node tainted (fleet.InstallProblem): an approver
// Deployment no node may run, an agent DaemonSet whose pods are refused.
// An error (no right to list Deployments, DaemonSets or events) is
// returned for the output to say so.
func readInstallProblems(ctx context.Context, client kubernetes.Interface, nodes []corev1.Node) ([]fleet.InstallProblem, error) {
	var problems []fleet.InstallProblem
	deps, err := client.AppsV1().Deployments("").List(ctx, metav1.ListOptions{LabelSelector: fleet.ApproverSelector, ResourceVersion: "0"})
	if err != nil {
		return nil, fmt.Errorf("listing approver Deployments: %w", err)
	}
	for i := range deps.Items {
		if p := fleet.ApproverUnplaceable(&deps.Items[i], nodes); p != nil {
			problems = append(problems, *p)
		}
	}
	sets, err := client.AppsV1().DaemonSets("").List(ctx, metav1.ListOptions{LabelSelector: fleet.AgentSelector, ResourceVersion: "0"})
	if err != nil {
		return nil, fmt.Errorf("listing agent DaemonSets: %w", err)
	}
	for i := range sets.Items {
		ds := &sets.Items[i]
		if ds.Status.DesiredNumberScheduled <= ds.Status.CurrentNumberScheduled {
			continue
		}
		events, err := client.CoreV1().Events(ds.Namespace).List(ctx, metav1.ListOptions{ResourceVersion: "0",
			FieldSelector: fields.Set{"involvedObject.kind": "DaemonSet", "involvedObject.name": ds.Name, "reason": "FailedCreate"}.AsSelector().String()})
		if err != nil {
			return nil, fmt.Errorf("listing events of DaemonSet %s/%s: %w", ds.Namespace, ds.Name, err)
		}
		if p := fleet.AgentPodsRefusedBy(ds, events.Items); p != nil {
			problems = append(problems, *p)
		}
	}
	return problems, nil
}

// readFindings reads the cluster findings the agents recorded about nodes
// (fleet.Findings), from the API server's cache, a page at a time. They
// are a footer: an error (no right to list events in namespace default)
// is returned for the footer to say so, never a failure of the command.
func readFindings(ctx context.Context, client kubernetes.Interface, nodes []corev1.Node, now time.Time) ([]fleet.Finding, error) {
	var events []corev1.Event
	err := pager.New(func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
		return client.CoreV1().Events(metav1.NamespaceDefault).List(ctx, o)
	}).EachListItem(ctx, metav1.ListOptions{FieldSelector: fleet.FindingEventSelector, ResourceVersion: "0"}, func(obj runtime.Object) error {
		events = append(events, *obj.(*corev1.Event))
		return nil
	})
	if err != nil {
		klog.FromContext(ctx).V(1).Info("The agents' cluster findings were not read", "err", err)
		return nil, fmt.Errorf("listing events in namespace default: %w", err)
	}
	return fleet.Findings(events, nodes, now), nil
}

// printFindings writes the findings, or why they were not read, as a
// footer of text output.
func printFindings(w io.Writer, findings []fleet.Finding, err error) {
	if err != nil {
		fmt.Fprintf(w, "\nCluster findings not read (%s): the agents record them as Node events.\n", fleet.Escape(err.Error()))
		return
	}
	for _, f := range findings {
		on := strings.Join(f.Nodes, ", ")
		if f.MoreNodes > 0 {
			on += fmt.Sprintf(" and %d more", f.MoreNodes)
		}
		fmt.Fprintf(w, "\nCluster finding %s (seen by the agents on %s, last %s): %s\n",
			f.Name, fleet.Escape(on), f.LastSeen.UTC().Format(time.RFC3339), f.Message)
	}
}
