# Sourced by the kind scripts: puts kind $KIND_VERSION (built once from the Go
# module proxy into the cache) first on PATH, and, where this Docker engine
# needs it for --privileged containers (kind/docker-runtime.sh), a docker
# that creates containers with that runtime. Nothing else changes: other
# docker commands go to the real client unchanged.
kind_cache=${CERTREADY_KIND_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/certready/kind}
KIND_VERSION=$(cd "$(dirname "${BASH_SOURCE[0]}")/../e2e" && go list -m -f '{{.Version}}' sigs.k8s.io/kind)
kind_shim="$kind_cache/path-$KIND_VERSION"
mkdir -p "$kind_shim"
if [ ! -x "$kind_cache/tools/kind-$KIND_VERSION/kind" ]; then
  echo "kind: building sigs.k8s.io/kind $KIND_VERSION from the Go module proxy" >&2
  GOBIN="$kind_cache/tools/kind-$KIND_VERSION" CGO_ENABLED=0 GOFLAGS= go install -trimpath "sigs.k8s.io/kind@$KIND_VERSION"
fi
ln -sf "$kind_cache/tools/kind-$KIND_VERSION/kind" "$kind_shim/kind"
real_docker=$(PATH=${PATH//$kind_shim:/} command -v docker) || { echo "kind: docker is not installed" >&2; exit 1; }
rm -f "$kind_shim/docker"
if [ -z "${KIND_SKIP_RUNTIME_PROBE:-}" ]; then
  kind_runtime=$("$(dirname "${BASH_SOURCE[0]}")/docker-runtime.sh")
  if [ -n "$kind_runtime" ]; then
    printf '#!/bin/sh\n# kind/env.sh: containers kind creates use the %s runtime (kind/docker-runtime.sh).\nif [ "$1" = run ]; then shift; exec %s run --runtime=%s "$@"; fi\nexec %s "$@"\n' \
      "$kind_runtime" "$real_docker" "$kind_runtime" "$real_docker" > "$kind_shim/docker"
    chmod +x "$kind_shim/docker"
  fi
fi
case ":$PATH:" in *":$kind_shim:"*) ;; *) export PATH="$kind_shim:$PATH" ;; esac
# kind's entrypoint picks containerd's snapshotter from the file system of the
# node's root (/kind): on a Docker engine whose storage driver is
# fuse-overlayfs that is "fuseblk", and it chooses fuse-overlayfs, whose
# gRPC plugin the offline node image does not have (and which is slow). The
# snapshots live on the node's /var, a Docker volume on the host's real file
# system, where kernel overlayfs works: say so (kind passes this variable to
# the entrypoint). Rootless engines keep kind's own choice.
if [ -z "${KIND_EXPERIMENTAL_CONTAINERD_SNAPSHOTTER:-}" ] && [ "$(docker info --format '{{.Driver}}' 2>/dev/null)" = fuse-overlayfs ] \
   && ! docker info --format '{{.SecurityOptions}}' 2>/dev/null | grep -q rootless; then
  export KIND_EXPERIMENTAL_CONTAINERD_SNAPSHOTTER=overlayfs
fi
