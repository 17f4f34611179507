# One image for agent, approver and check: a static binary on distroless.
FROM golang:1.26 AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY cmd ./cmd
COPY internal ./internal
COPY reporter ./reporter
ARG VERSION=dev
ARG COMMIT=unknown
RUN CGO_ENABLED=0 go build -trimpath \
    -ldflags "-s -w -X main.version=${VERSION} -X main.commit=${COMMIT}" \
    -o /out/certready ./cmd/certready

FROM gcr.io/distroless/static-debian12
COPY --from=build /out/certready /usr/local/bin/certready
# The agent overrides this with runAsUser 0 to read the kubelet's 0600 file.
USER 65532:65532
ENTRYPOINT ["/usr/local/bin/certready"]
