//go:build !nodeonly

package main

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/pager"
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
