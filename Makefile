# certready. `make test` runs everything CI runs; `make demo` runs the local cluster demo.
SHELL := /bin/bash
GO ?= go
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
COMMIT ?= $(shell git rev-parse --short HEAD 2>/dev/null || echo unknown)
LDFLAGS := -s -w -X main.version=$(VERSION) -X main.commit=$(COMMIT)
BIN := bin/certready
# The node build: agent, check and copy-binary only, linking neither the
# approver nor client-go's clientset (bench table 4).
NODE_BIN := bin/certready-node

.PHONY: release all build test unit lint static integration e2e demo demo-down bench bench-smoke image kind-up e2e-kind kind-node-image kind-down clean help prereqs-test prereqs-demo prereqs-kind

all: build

help: ## List the targets.
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | sed 's/:.*## /\t/' | expand -t 16

build: ## Build the static certready binary and its node build (certready-node) into bin/.
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $(BIN) ./cmd/certready
	CGO_ENABLED=0 $(GO) build -trimpath -tags nodeonly -ldflags '$(LDFLAGS)' -o $(NODE_BIN) ./cmd/certready

test: prereqs-test lint unit static integration e2e bench-smoke ## Everything: lint, unit, static manifest checks, integration (real API server, no root), e2e (needs root), benchmark smoke run.

prereqs-test prereqs-demo prereqs-kind: ## Check (as root: apt-get install) what 'make test' / 'make demo' need, before any long step.
	@hack/prereqs.sh $(@:prereqs-%=%)

unit: ## Unit tests (no root, no cluster), and the harness's own in the e2e module.
	@echo '== unit tests (race detector)'
	$(GO) test -race -count=1 ./...
	$(GO) test -race -count=1 -tags nogotemplate ./cmd/certready/
	cd e2e && $(GO) test -race -count=1 ./cmd/... ./provider/

lint: ## go vet, gofmt and golangci-lint (pinned, .golangci.yml; both modules, the node build, and the CLI for Windows and macOS).
	@echo '== lint: go vet, gofmt, golangci-lint'
	$(GO) vet ./...
	$(GO) vet -tags nodeonly ./cmd/...
	$(GO) vet -tags nogotemplate ./cmd/...
	GOOS=windows GOARCH=amd64 $(GO) vet ./cmd/certready/
	GOOS=darwin GOARCH=arm64 $(GO) vet ./cmd/certready/
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	  if [ -n "$$out" ]; then echo "gofmt -l reports:"; echo "$$out"; exit 1; fi
	@if [ -f e2e/go.mod ]; then cd e2e && $(GO) vet ./...; fi
	@lint=$$(hack/golangci-lint.sh) && $$lint run ./... && $$lint run --build-tags nodeonly ./cmd/... && $$lint run --build-tags nogotemplate ./cmd/... && cd e2e && $$lint run ./...

static: ## Static manifest checks: kustomize builds, Helm chart (SDK: lint, render, equal to the overlays), strict decoding, CRD schema, kind config, promtool alert tests.
	@echo '== static manifest checks'
	cd e2e && $(GO) test -count=1 -timeout 30m ./static/

integration: ## Integration tests against the real kube-apiserver and etcd on loopback (no root): selectors, the approval subresource, patch preconditions.
	@echo '== integration tests against the real API server'
	$(MAKE) -C e2e integration

e2e: ## End-to-end suite against the local cluster of real Kubernetes binaries (root).
	@echo '== e2e suite on the local cluster'
	$(MAKE) -C e2e test

bench-smoke: ## Tiny benchmark run on the local cluster (CI: proves the benchmarks work; root).
	$(MAKE) -C e2e bench-smoke

bench: ## Benchmarks on the local cluster (root): latency, approval storms, API load, footprint. BENCH_ARGS=--storm=100,1000,5000
	$(MAKE) -C e2e bench

demo: prereqs-demo ## Start the local cluster (root), deploy certready, show the taints lifted; stays up.
	$(MAKE) -C e2e demo

demo-down: ## Stop the demo cluster; leaves nothing behind.
	$(MAKE) -C e2e demo-down

# The shipped overlays and the chart's default reference certready:dev:
# 'make image' tags that too, so what it builds is what they run.
IMAGE ?= certready:$(VERSION)
image: build ## Container image IMAGE (certready:<version>, also tagged certready:dev, which the overlays use) from the binaries just built (certready without -o go-template: docs/benchmarks.md), on scratch: no registry needed. 'docker build .' builds from source.
	@docker info >/dev/null 2>&1 || { echo "make image: no Docker engine answers (docker info failed); build the image where Docker runs."; exit 1; }
	@rm -rf bin/image-root && mkdir -p bin/image-root/usr/local/bin bin/image-root/etc/ssl/certs
	CGO_ENABLED=0 $(GO) build -trimpath -tags nogotemplate -ldflags '$(LDFLAGS)' -o bin/image-root/usr/local/bin/certready ./cmd/certready
	@cp $(NODE_BIN) bin/image-root/usr/local/bin/certready-node
	@printf 'root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n' > bin/image-root/etc/passwd
	@printf 'root:x:0:\nnonroot:x:65532:\n' > bin/image-root/etc/group
	@if [ -f /etc/ssl/certs/ca-certificates.crt ]; then cp /etc/ssl/certs/ca-certificates.crt bin/image-root/etc/ssl/certs/; fi
	docker build -q --target prebuilt --build-arg VERSION=$(VERSION) --build-arg COMMIT=$(COMMIT) -t $(IMAGE) -t certready:dev .
	@echo "make image: $(IMAGE) ($$(docker image inspect -f '{{.Size}}' $(IMAGE) | awk '{printf "%.1f MiB", $$1/1048576}'))"

RELEASE_DIR ?= dist
IMAGE_REPO ?= certready
release: ## Release artifacts offline into dist/VERSION/: static binaries (linux/amd64, arm64; also kubectl-certready), the CLI for darwin and windows (amd64, arm64), krew archives and certready.krew.yaml, the image as an OCI archive, the packaged chart, rendered overlays, SHA256SUMS. VERSION=x.y.z
	@if ! echo '$(VERSION)' | grep -Eq '^[0-9]+\.[0-9]+\.[0-9]+(-[0-9A-Za-z.-]+)?$$'; then echo "make release: VERSION=x.y.z (no leading v), not '$(VERSION)'"; exit 2; fi
	cd e2e && SOURCE_DATE_EPOCH=$$(git log -1 --format=%ct 2>/dev/null || echo 0) $(GO) run ./cmd/release --version $(VERSION) --commit $(COMMIT) --image-repo $(IMAGE_REPO) --out $(abspath $(RELEASE_DIR)) --repo $(CURDIR) $(if $(LAPTOPS),--laptops $(LAPTOPS)) $(if $(KREW_URI_BASE),--krew-uri-base $(KREW_URI_BASE))

kind-up: prereqs-kind ## Create the kind cluster (kind, and offline a node image, built here), load the image, apply the manifests (needs a Docker engine).
	kind/kind-up.sh

e2e-kind: prereqs-kind ## The e2e suite against a fresh kind cluster, same scenarios as make e2e (needs a Docker engine; KEEP=1 keeps it).
	kind/e2e-kind.sh

kind-node-image: prereqs-kind ## Build the offline kind node image (no registry; root for debootstrap) and print its name.
	@kind/node-image.sh

kind-down: ## Delete the kind cluster.
	kind/kind-down.sh

clean: ## Remove build outputs.
	rm -rf bin
