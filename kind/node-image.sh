#!/usr/bin/env bash
# Builds a kind node image with no registry and prints its name, for
#   kind create cluster --image "$(kind/node-image.sh)"
# Everything comes from Debian's packages and the Go module proxy:
#   - root file system: debootstrap (kind/node/packages.txt), imported with
#     docker import: systemd, containerd, runc, CNI plugins, iptables, ...;
#   - kind's own node files (entrypoint, systemd units, containerd config)
#     from the sigs.k8s.io/kind module, as kind's base image installs them;
#   - kubeadm, kubelet, kubectl and the control-plane, kube-proxy, etcd,
#     CoreDNS and pause images built here from their sources, under the names
#     `kubeadm config images list` gives, preloaded into the node's
#     containerd as kind's own node-image build does;
#   - a CNI without an image (kind/node/files: bridge on each node's
#     podCIDRs), and registry hosts that point at 127.0.0.1:1, so that a
#     missing image fails at once instead of being looked for on the network;
#   - runc behind e2e/cmd/runc-capfilter (/usr/local/sbin/runc), for hosts
#     whose capability bounding set is reduced.
# The result is tagged by a hash of all its inputs; a second run with the
# same inputs finds it and prints it at once. The root file system and the
# built tools are cached in $CERTREADY_KIND_CACHE (~/.cache/certready/kind).
# Needs root (debootstrap), Docker, Go and gcc (the static pause binary).
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$PWD
cache=${CERTREADY_KIND_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/certready/kind}
mkdir -p "$cache/tools"
log() { echo "node-image: $*" >&2; }
t0=$(date +%s)
step() { log "[$(( $(date +%s) - t0 ))s] $*"; }

docker info >/dev/null 2>&1 || { log "no Docker engine answers ('docker info' failed)"; exit 1; }
for t in go gcc jq; do command -v "$t" >/dev/null || { log "'$t' is not installed"; exit 1; }; done

kind_version=$(cd e2e && go list -m -f '{{.Version}}' sigs.k8s.io/kind)
k8s_version=$(cd e2e && go list -m -f '{{.Version}}' k8s.io/kubernetes)
etcd_version=$(cd e2e && go list -m -f '{{.Version}}' go.etcd.io/etcd/server/v3)
cri_tools_version=v1.37.0

step "Kubernetes ${k8s_version} binaries"
k8s=$(e2e/hack/build-k8s.sh kubeadm kube-proxy)

# The images kubeadm will ask the node's containerd for.
mapfile -t want < <("$k8s/kubeadm" config images list --kubernetes-version "$k8s_version")
image_for() { printf '%s\n' "${want[@]}" | grep -E "/$1:" || { log "kubeadm lists no $1 image: ${want[*]}"; exit 1; }; }
etcd_image=$(image_for etcd)
coredns_image=$(image_for coredns)
pause_image=$(image_for pause)
# The etcd built here must be the version kubeadm expects (3.7.0 for 3.7.0-0).
etcd_tag=${etcd_image##*:}
[ "v${etcd_tag%-*}" = "$etcd_version" ] || { log "kubeadm expects $etcd_image, the e2e module builds etcd $etcd_version: align go.etcd.io/etcd/server/v3 in e2e/go.mod"; exit 1; }
coredns_version=${coredns_image##*:}
pause_version=${pause_image##*:}

tool() { # name version package: go install, cached by version
  local dir="$cache/tools/$1-$2"
  if [ ! -x "$dir/$1" ]; then
    step "building $1 $2 ($3)"
    mkdir -p "$dir.tmp"
    GOBIN="$dir.tmp" CGO_ENABLED=0 GOFLAGS= go install -trimpath -ldflags='-s -w' "$3@$2"
    rm -rf "$dir" && mv "$dir.tmp" "$dir"
  fi
  echo "$dir/$1"
}
crictl=$(tool crictl "$cri_tools_version" sigs.k8s.io/cri-tools/cmd/crictl)
coredns=$(tool coredns "$coredns_version" github.com/coredns/coredns)
kind_src=$(cd e2e && go mod download -json "sigs.k8s.io/kind@$kind_version" | jq -r .Dir)
k8s_src=$(cd e2e && go mod download -json "k8s.io/kubernetes@$k8s_version" | jq -r .Dir)
pause="$cache/tools/pause-$pause_version/pause"
if [ ! -x "$pause" ]; then
  step "building pause $pause_version (Kubernetes' build/pause/linux/pause.c, static)"
  mkdir -p "$(dirname "$pause")"
  gcc -Os -Wall -Werror -static -DVERSION="v$pause_version-certready" -o "$pause.tmp" "$k8s_src/build/pause/linux/pause.c"
  mv "$pause.tmp" "$pause"
fi

# Root file system, cached by the package list and the script that makes it.
rootfs_key=$(cat kind/node/packages.txt kind/node/rootfs.sh | sha256sum | cut -c1-16)
rootfs_tar="$cache/rootfs-$rootfs_key.tar"
if [ ! -s "$rootfs_tar" ]; then
  step "debootstrap of the node's root file system (a few minutes, once)"
  kind/node/rootfs.sh "$rootfs_tar"
fi
rootfs_image=certready/kind-rootfs:$rootfs_key
if ! docker image inspect "$rootfs_image" >/dev/null 2>&1; then
  step "docker import $rootfs_image"
  docker import "$rootfs_tar" "$rootfs_image" >/dev/null
fi

# Everything the image is made of, hashed: same inputs, same tag.
key=$( {
  echo "$kind_version $k8s_version $etcd_version $cri_tools_version $coredns_version $pause_version $rootfs_key"
  printf '%s\n' "${want[@]}"
  sha256sum "$k8s"/{kubeadm,kubelet,kubectl,kube-apiserver,kube-controller-manager,kube-scheduler,kube-proxy,etcd} \
    "$crictl" "$coredns" "$pause" | cut -d' ' -f1
  find kind/node kind/node-image.sh e2e/cmd/runc-capfilter -type f | sort | xargs sha256sum
} | sha256sum | cut -c1-16)
image=certready/kind-node:$k8s_version-$key
if docker image inspect "$image" >/dev/null 2>&1; then
  step "cached: $image"
  echo "$image"
  exit 0
fi

work=$(mktemp -d "${TMPDIR:-/tmp}/certready-node-image.XXXXXX")
builder=""
cleanup() { [ -z "$builder" ] || docker rm -f -v "$builder" >/dev/null 2>&1 || true; rm -rf "$work"; }
trap cleanup EXIT

# The component images, each FROM scratch (kube-proxy: the root file
# system, for iptables) and under the name kubeadm expects.
build_image() { # name dockerfile-body files...
  local name=$1 body=$2 dir
  dir="$work/img-$(echo "$name" | tr '/:' '__')"
  mkdir -p "$dir"
  shift 2
  cp "$@" "$dir/"
  printf '%s\n' "$body" > "$dir/Dockerfile"
  docker build -q -t "$name" "$dir" >/dev/null
}
step "component images"
images=()
for c in kube-apiserver kube-controller-manager kube-scheduler; do
  name=$(image_for "$c")
  build_image "$name" "FROM scratch
COPY $c /usr/local/bin/$c
ENV PATH=/usr/local/bin
ENTRYPOINT [\"/usr/local/bin/$c\"]" "$k8s/$c"
  images+=("$name")
done
build_image "$etcd_image" 'FROM scratch
COPY etcd /usr/local/bin/etcd
ENV PATH=/usr/local/bin
ENTRYPOINT ["/usr/local/bin/etcd"]' "$k8s/etcd"
build_image "$coredns_image" 'FROM scratch
COPY coredns /coredns
EXPOSE 53 53/udp
ENTRYPOINT ["/coredns"]' "$coredns"
build_image "$pause_image" 'FROM scratch
COPY pause /pause
USER 65535:65535
ENTRYPOINT ["/pause"]' "$pause"
proxy_image=$(image_for kube-proxy)
build_image "$proxy_image" "FROM $rootfs_image
COPY kube-proxy /usr/local/bin/kube-proxy
COPY iptables-wrapper /usr/sbin/iptables-wrapper
RUN for c in iptables iptables-save iptables-restore ip6tables ip6tables-save ip6tables-restore; do ln -sf iptables-wrapper /usr/sbin/\$c; done
ENTRYPOINT [\"/usr/local/bin/kube-proxy\"]" "$k8s/kube-proxy" kind/node/kube-proxy/iptables-wrapper
images+=("$etcd_image" "$coredns_image" "$pause_image" "$proxy_image")
docker save "${images[@]}" > "$work/images.tar"

# The node: kind's base image steps (images/base/Dockerfile of kind
# $kind_version) on the debootstrapped root file system.
step "node file system"
ctx="$work/node"
mkdir -p "$ctx/base" "$ctx/bin"
cp -a "$kind_src/images/base/files/." "$ctx/base/"
cp -a kind/node/files/. "$ctx/base/"
chmod -R u+w "$ctx/base"
find "$ctx/base" -type d -exec chmod 0755 {} +
find "$ctx/base" -type f -exec chmod 0644 {} +
chmod 0755 "$ctx/base/usr/local/bin/"* "$ctx/base/kind/bin/"*
rm -rf "$ctx/base/LICENSES"
# containerd: the pause image kubeadm lists, and registries that resolve to
# nothing (127.0.0.1:1) so that no pull leaves the node.
sed -i "s#^\(\s*sandbox_image = \).*#\1\"$pause_image\"#" "$ctx/base/etc/containerd/config.toml"
grep -q "sandbox_image = \"$pause_image\"" "$ctx/base/etc/containerd/config.toml" || { log "kind's containerd config has no sandbox_image line to set"; exit 1; }
printf '\n[plugins."io.containerd.grpc.v1.cri".registry]\n  config_path = "/etc/containerd/certs.d"\n' >> "$ctx/base/etc/containerd/config.toml"
for r in _default docker.io registry.k8s.io quay.io ghcr.io gcr.io; do
  mkdir -p "$ctx/base/etc/containerd/certs.d/$r"
  printf '# offline kind node: no registry answers; every image is preloaded.\nserver = "http://127.0.0.1:1"\n' > "$ctx/base/etc/containerd/certs.d/$r/hosts.toml"
done
echo "$k8s_version" > "$ctx/base/kind/version"
cp "$k8s/kubeadm" "$k8s/kubelet" "$k8s/kubectl" "$crictl" "$ctx/bin/"
# runc behind e2e/cmd/runc-capfilter: on hosts whose capability bounding set
# is reduced, the node's privileged pods and negative oom_score_adj values
# fail otherwise; elsewhere it changes nothing.
(cd e2e && CGO_ENABLED=0 go build -trimpath -ldflags='-s -w' -o "$ctx/bin/runc-capfilter" ./cmd/runc-capfilter)
cat > "$ctx/Dockerfile" <<EOF
FROM $rootfs_image
COPY base/ /
COPY bin/kubeadm bin/kubelet bin/kubectl /usr/bin/
COPY bin/crictl /usr/local/bin/crictl
COPY bin/runc-capfilter /usr/local/sbin/runc
RUN set -e; \\
    ln -sf /usr/bin/containerd /usr/local/bin/containerd; \\
    ln -sf /usr/bin/ctr /usr/local/bin/ctr; \\
    ln -sf /usr/bin/containerd-shim-runc-v2 /usr/local/bin/containerd-shim-runc-v2; \\
    mkdir -p /opt/cni/bin /etc/cni/net.d /etc/kubernetes/manifests; \\
    cp /usr/lib/cni/bridge /usr/lib/cni/host-local /usr/lib/cni/loopback /usr/lib/cni/portmap /usr/lib/cni/ptp /opt/cni/bin/; \\
    find /lib/systemd/system/sysinit.target.wants/ -name systemd-tmpfiles-setup.service -delete; \\
    rm -f /lib/systemd/system/multi-user.target.wants/* /etc/systemd/system/*.wants/* /lib/systemd/system/local-fs.target.wants/* \\
      /lib/systemd/system/sockets.target.wants/*udev* /lib/systemd/system/sockets.target.wants/*initctl* /lib/systemd/system/basic.target.wants/*; \\
    echo ReadKMsg=no >> /etc/systemd/journald.conf; \\
    ln -sf /usr/lib/systemd/systemd /sbin/init; \\
    systemctl enable kubelet.service containerd.service undo-mount-hacks.service certready-offline-cni.service; \\
    systemctl mask systemd-binfmt.service; \\
    ctr oci spec | jq '.hooks.createContainer[.hooks.createContainer | length] |= . + {"path": "/kind/bin/mount-product-files.sh"}' \\
      | jq 'del(.process.rlimits)' > /etc/containerd/cri-base.json; \\
    kubelet --version; kubeadm version -o short; containerd --version; /usr/bin/runc --version | head -n 1
ENV container=docker
STOPSIGNAL SIGRTMIN+3
LABEL io.x-k8s.kind.offline=true io.certready.inputs=$key
ENTRYPOINT ["/usr/local/bin/entrypoint", "/sbin/init"]
EOF
files_image=$(docker build -q "$ctx")

# Preload the images as kind's node-image build does: containerd started in
# a build container, ctr import, commit.
step "preloading ${#images[@]} images into the node's containerd"
builder=certready-node-build-$key-$$
docker run -d --pull never --name "$builder" --entrypoint sleep --security-opt seccomp=unconfined "$files_image" infinity >/dev/null
docker cp "$work/images.tar" "$builder:/images.tar"
docker exec "$builder" bash -c 'set -e
  nohup containerd > /var/log/containerd-build.log 2>&1 &
  for i in $(seq 50); do [ -S /run/containerd/containerd.sock ] && ctr version >/dev/null 2>&1 && break; sleep 0.2; done
  ctr --namespace=k8s.io images import --label=io.cri-containerd.pinned=pinned --all-platforms --no-unpack --digests /images.tar >/dev/null
  ctr --namespace=k8s.io images list -q
  pkill containerd; for i in $(seq 50); do pgrep containerd >/dev/null || break; sleep 0.2; done
  rm -f /images.tar /var/log/containerd-build.log' > "$work/imported"
for n in "${images[@]}"; do
  grep -qx "$n" "$work/imported" || { log "$n is not in the node's containerd after import:"; cat "$work/imported" >&2; exit 1; }
done
docker commit --change 'ENTRYPOINT ["/usr/local/bin/entrypoint", "/sbin/init"]' --change 'CMD []' "$builder" "$image" >/dev/null
step "built $image (kind $kind_version, Kubernetes $k8s_version, $(docker image inspect -f '{{.Size}}' "$image" | awk '{printf "%.0f MiB", $1/1048576}'))"
echo "$image"
