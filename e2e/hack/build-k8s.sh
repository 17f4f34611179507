#!/usr/bin/env bash
# Builds (once) etcd and the Kubernetes binaries the local cluster runs, into a
# cache folder keyed by version, and prints that folder. A second run with the
# binaries present returns at once. Arguments name more binaries to build
# into the same folder (the kind node image adds kubeadm and kube-proxy).
set -euo pipefail
cd "$(dirname "$0")/.."
K8S_VERSION=$(go list -m -f '{{.Version}}' k8s.io/kubernetes)
ETCD_VERSION=$(go list -m -f '{{.Version}}' go.etcd.io/etcd/server/v3)
# The version the binaries report (kubelet's node status, kubectl version,
# kubeadm's skew checks), set as Kubernetes' own build does
# (hack/lib/version.sh): without it they call themselves v0.0.0-master.
major=${K8S_VERSION#v}; minor=${major#*.}; major=${major%%.*}; minor=${minor%%.*}
ldflags="-s -w"
for pkg in k8s.io/client-go/pkg/version k8s.io/component-base/version; do
  ldflags+=" -X $pkg.gitVersion=$K8S_VERSION -X $pkg.gitMajor=$major -X $pkg.gitMinor=$minor -X $pkg.gitTreeState=clean"
done
dir=${CERTREADY_K8S_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/certready}/k8s-${K8S_VERSION}-etcd-${ETCD_VERSION}-$(go env GOOS)-$(go env GOARCH)-$(echo "$ldflags" | sha256sum | cut -c1-8)
bins=(etcd kube-apiserver kube-controller-manager kube-scheduler kubelet kubectl "$@")
missing=()
for b in "${bins[@]}"; do [ -x "$dir/$b" ] || missing+=("$b"); done
if [ ${#missing[@]} -eq 0 ]; then echo "$dir"; exit 0; fi
mkdir -p "$dir"
echo "building ${missing[*]} (Kubernetes ${K8S_VERSION}, etcd ${ETCD_VERSION}) into $dir; the first build takes 7 to 11 minutes on 2 cores" >&2
tmp=$(mktemp -d "$dir/.build.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
for b in "${missing[@]}"; do
  pkg=k8s.io/kubernetes/cmd/$b
  [ "$b" = etcd ] && pkg=./cmd/etcd
  start=$(date +%s)
  CGO_ENABLED=0 go build -trimpath -ldflags "$ldflags" -o "$tmp/$b" "$pkg"
  mv "$tmp/$b" "$dir/$b"
  echo "  built $b in $(( $(date +%s) - start ))s" >&2
done
echo "$dir"
