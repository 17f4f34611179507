package capi

import "k8s.io/client-go/rest"

// Bound sets cfg up as the manager does for cluster, with l (zero
// fields: the defaults).
func Bound(cfg *rest.Config, cluster string, l Limits) { bound(cfg, cluster, l.withDefaults(), nil) }
