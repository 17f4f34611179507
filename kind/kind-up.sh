#!/usr/bin/env bash
# Creates the kind cluster (kind/cluster.yaml), builds the certready image
# (make image: the host-built binary, no registry), loads it with kind load
# and applies the manifests with kubectl apply -k.
#   KIND_NODE_IMAGE   node image: unset = kind's own pinned kindest/node when it
#                     is present locally (docker pull it first), else one built
#                     offline by kind/node-image.sh; "offline" = always build;
#                     anything else = that image.
#   NRC_MANIFEST      node-readiness-controller release manifest (path or URL):
#                     installed with its CRD (NRC_CRD, default
#                     manifests/crds/nodereadinessrules.crd.yaml) and the nrc
#                     overlay is applied; otherwise the standalone overlay.
#   KIND_DEPLOY=0     stop after loading the image (make e2e-kind deploys in
#                     its first scenario).
set -euo pipefail
cd "$(dirname "$0")/.."
for t in docker kubectl go; do
  command -v "$t" >/dev/null || { echo "kind-up: '$t' is not installed; kind needs a Docker engine (use 'make demo' for the Docker-free local cluster)." >&2; exit 1; }
done
docker info >/dev/null 2>&1 || { echo "kind-up: no Docker engine answers ('docker info' failed)." >&2; exit 1; }
source kind/env.sh
t0=$(date +%s)
say() { echo "== kind-up [$(( $(date +%s) - t0 ))s] $*"; }
name=${KIND_CLUSTER_NAME:-certready}
# kind v0.33.0's own default node image (sigs.k8s.io/kind pkg/apis/config/defaults).
pinned=$(sed -n 's/^const Image = "\(.*\)"$/\1/p' "$(cd e2e && go mod download -json "sigs.k8s.io/kind@$KIND_VERSION" | jq -r .Dir)/pkg/apis/config/defaults/image.go")
image=${KIND_NODE_IMAGE:-}
if [ -z "$image" ]; then
  if docker image inspect "$pinned" >/dev/null 2>&1; then image=$pinned
  else
    say "$pinned is not here (with a registry: docker pull it first to skip this); building an offline node image"
    image=offline
  fi
fi
if [ "$image" = offline ]; then
  image=$(kind/node-image.sh)
fi
if kind get clusters 2>/dev/null | grep -qx "$name"; then
  say "kind cluster $name exists; using it"
else
  say "kind create cluster --name $name --image $image"
  kind create cluster --name "$name" --config kind/cluster.yaml --image "$image" --wait 180s
fi
say "make image, kind load docker-image certready:dev"
make --no-print-directory image VERSION=dev IMAGE=certready:dev
kind load docker-image certready:dev --name "$name"
if [ "${KIND_DEPLOY:-1}" = 0 ]; then say "cluster $name ready (certready not deployed)"; exit 0; fi
overlay=manifests/overlays/standalone
if [ -n "${NRC_MANIFEST:-}" ]; then
  kubectl apply -f "${NRC_CRD:-manifests/crds/nodereadinessrules.crd.yaml}"
  kubectl apply -f "$NRC_MANIFEST"
  overlay=manifests/overlays/nrc
fi
kubectl apply -k "$overlay"
kubectl -n certready-system rollout status deploy/certready-approver --timeout=180s
kubectl -n certready-system rollout status ds/certready-agent --timeout=180s
if [ -n "${NRC_MANIFEST:-}" ]; then
  # The overlay creates its rules in dry run (the safe rollout). This
  # cluster is new: every node joined with the readiness taint, and the
  # preflight has nothing to find. Switch them on.
  for rule in kubelet-serving-cert kubelet-serving-cert-placement; do
    kubectl patch nodereadinessrule "$rule" --type=merge -p '{"spec":{"dryRun":false}}'
  done
fi
kubectl get nodes -o custom-columns='NAME:.metadata.name,TAINTS:.spec.taints[*].key,CERT:.status.conditions[?(@.type=="KubeletServingCertNotReady")].reason'
say "done"
