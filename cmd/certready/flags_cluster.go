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

// readFindings reads the cluster findings the agents recorded (fleet.Findings).
// They are a footer: when the events cannot be read (no right to list
// events in namespace default), none is shown and the log says why.
func readFindings(ctx context.Context, client kubernetes.Interface, now time.Time) []fleet.Finding {
	list, err := client.CoreV1().Events(metav1.NamespaceDefault).List(ctx, metav1.ListOptions{FieldSelector: fleet.FindingEventSelector})
	if err != nil {
		klog.FromContext(ctx).V(1).Info("The agents' cluster findings were not read (list events in namespace default)", "err", err)
		return nil
	}
	return fleet.Findings(list.Items, now)
}

// printFindings writes the findings as a footer of text output.
func printFindings(w io.Writer, findings []fleet.Finding) {
	for _, f := range findings {
		fmt.Fprintf(w, "\nCluster finding %s (seen by the agents on %s, last %s): %s\n",
			f.Name, fleet.Escape(strings.Join(f.Nodes, ", ")), f.LastSeen.UTC().Format(time.RFC3339), f.Message)
	}
}
