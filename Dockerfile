# One image for agent, approver and check: the static certready binary and
# its node build, certready-node (agent, check, copy-binary: the agent's
# DaemonSet runs it, and node-problem-detector's plugin is a copy of it),
# non-root by default (the agent's DaemonSet runs as root to read the
# kubelet's 0600 file).
#
# Two targets, one image:
#   docker build .                    # "image" (the default, last stage):
#                                     # built from source in GO_IMAGE, on BASE_IMAGE
#   make image                        # "prebuilt": the binary 'make build' made
#                                     # on this host, on scratch; pulls nothing
# No "# syntax=" line: BuildKit would pull its frontend image. Pin the base
# images by digest where you build (--build-arg BASE_IMAGE=...@sha256:...):
# the digests are those of your registry's copy.
ARG GO_IMAGE=golang:1.26.8-bookworm
ARG BASE_IMAGE=gcr.io/distroless/static-debian12:nonroot

# With no registry: 'make image' stages bin/image-root/ (the static binaries,
# passwd and group entries for root and nonroot, the host's CA bundle).
FROM scratch AS prebuilt
ARG VERSION=dev
ARG COMMIT=unknown
COPY bin/image-root/ /
LABEL org.opencontainers.image.title="certready" \
      org.opencontainers.image.description="Keeps a Kubernetes node from taking workloads until its kubelet can really serve TLS" \
      org.opencontainers.image.source="https://github.com/certready/certready" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${COMMIT}"
USER 65532:65532
ENTRYPOINT ["/usr/local/bin/certready"]

# With a registry: build for the target platform on the build platform.
FROM --platform=$BUILDPLATFORM ${GO_IMAGE} AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY cmd ./cmd
COPY internal ./internal
COPY reporter ./reporter
ARG TARGETOS=linux
ARG TARGETARCH
ARG VERSION=dev
ARG COMMIT=unknown
RUN CGO_ENABLED=0 GOOS=${TARGETOS} GOARCH=${TARGETARCH} go build -trimpath -tags nogotemplate \
    -ldflags "-s -w -X main.version=${VERSION} -X main.commit=${COMMIT}" \
    -o /out/certready ./cmd/certready && \
    CGO_ENABLED=0 GOOS=${TARGETOS} GOARCH=${TARGETARCH} go build -trimpath -tags nodeonly \
    -ldflags "-s -w -X main.version=${VERSION} -X main.commit=${COMMIT}" \
    -o /out/certready-node ./cmd/certready

FROM ${BASE_IMAGE} AS image
ARG VERSION=dev
ARG COMMIT=unknown
COPY --from=build /out/certready /out/certready-node /usr/local/bin/
LABEL org.opencontainers.image.title="certready" \
      org.opencontainers.image.description="Keeps a Kubernetes node from taking workloads until its kubelet can really serve TLS" \
      org.opencontainers.image.source="https://github.com/certready/certready" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${COMMIT}"
USER 65532:65532
ENTRYPOINT ["/usr/local/bin/certready"]
