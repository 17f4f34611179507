#!/usr/bin/env bash
# Runs the e2e suite against a fresh kind cluster: the same scenarios as
# 'make e2e', through e2e/provider's Kind (node files and processes are
# reached with kind's node API, i.e. docker exec). Needs Docker and kind.
# KEEP=1 keeps the cluster afterwards.
set -euo pipefail
cd "$(dirname "$0")/.."
for t in kind docker kubectl go; do
  command -v "$t" >/dev/null || { echo "e2e-kind: '$t' is not installed; kind needs a Docker engine (use 'make e2e' for the Docker-free local cluster)." >&2; exit 1; }
done
docker info >/dev/null 2>&1 || { echo "e2e-kind: no Docker engine answers ('docker info' failed)." >&2; exit 1; }
export KIND_CLUSTER_NAME=${KIND_CLUSTER_NAME:-certready-e2e}
# Fresh: the first scenario checks the workers before certready is deployed.
kind delete cluster --name "$KIND_CLUSTER_NAME" >/dev/null 2>&1 || true
trap '[ -n "${KEEP:-}" ] || kind delete cluster --name "$KIND_CLUSTER_NAME"' EXIT
KIND_DEPLOY=0 kind/kind-up.sh
# The preflight scenario runs the host's certready against the cluster.
make build
export CERTREADY_BIN=$PWD/bin/certready
cd e2e
CERTREADY_E2E_PROVIDER=kind CERTREADY_KIND_CLUSTER="$KIND_CLUSTER_NAME" go test -count=1 -timeout 60m -v ./suite/
