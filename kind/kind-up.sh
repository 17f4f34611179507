#!/usr/bin/env bash
# Creates the kind cluster, builds and loads the certready image, applies the
# manifests. NRC_MANIFEST=<path or URL of the node-readiness-controller
# release manifest> installs it, with its NodeReadinessRule CRD (NRC_CRD,
# default manifests/crds/nodereadinessrules.crd.yaml), and uses the nrc
# overlay; otherwise the standalone overlay (approver's taint fallback)
# is used. KIND_DEPLOY=0 stops after loading the image (make e2e-kind
# deploys in its first scenario).
set -euo pipefail
cd "$(dirname "$0")/.."
for t in kind docker kubectl; do
  command -v "$t" >/dev/null || { echo "kind-up: '$t' is not installed; kind needs a Docker engine (use 'make demo' for the Docker-free local cluster)." >&2; exit 1; }
done
docker info >/dev/null 2>&1 || { echo "kind-up: no Docker engine answers ('docker info' failed)." >&2; exit 1; }
name=${KIND_CLUSTER_NAME:-certready}
kind get clusters | grep -qx "$name" || kind create cluster --name "$name" --config kind/cluster.yaml --wait 120s
make image VERSION=dev
kind load docker-image certready:dev --name "$name"
[ "${KIND_DEPLOY:-1}" = 0 ] && exit 0
overlay=manifests/overlays/standalone
if [ -n "${NRC_MANIFEST:-}" ]; then
  kubectl apply -f "${NRC_CRD:-manifests/crds/nodereadinessrules.crd.yaml}"
  kubectl apply -f "$NRC_MANIFEST"
  overlay=manifests/overlays/nrc
fi
kubectl apply -k "$overlay"
kubectl -n certready-system rollout status deploy/certready-approver --timeout=180s
kubectl -n certready-system rollout status ds/certready-agent --timeout=180s
kubectl get nodes -o custom-columns='NAME:.metadata.name,TAINTS:.spec.taints[*].key,CERT:.status.conditions[?(@.type=="KubeletServingCertNotReady")].reason'
