#!/usr/bin/env bash
set -euo pipefail
command -v kind >/dev/null || { echo "kind-down: kind is not installed" >&2; exit 1; }
kind delete cluster --name "${KIND_CLUSTER_NAME:-certready}"
