#!/usr/bin/env bash
# Deletes the kind cluster (KIND_CLUSTER_NAME, default certready).
set -euo pipefail
cd "$(dirname "$0")/.."
KIND_SKIP_RUNTIME_PROBE=1 source kind/env.sh
kind delete cluster --name "${KIND_CLUSTER_NAME:-certready}"
