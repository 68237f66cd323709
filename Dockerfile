# syntax=docker/dockerfile:1
# One file, three images; pick one with --target:
#   docker build --target agent  -t ghcr.io/nodeportlocal/npl-agent:0.1.0  --build-arg VERSION=0.1.0 .
#   docker build --target lbsync -t ghcr.io/nodeportlocal/npl-lbsync:0.1.0 --build-arg VERSION=0.1.0 .
#   docker build --target nplctl -t ghcr.io/nodeportlocal/nplctl:0.1.0     --build-arg VERSION=0.1.0 .
# Multi-arch: docker buildx build --platform linux/amd64,linux/arm64 --target agent ...
# The binaries are cross-compiled on the build platform (CGO_ENABLED=0).
# `make images` (test/harness/images) assembles the same contents without a
# container engine for the real-node test cluster; test/chart keeps the two in
# agreement.

ARG GO_IMAGE=golang:1.26
ARG AGENT_BASE_IMAGE=debian:bookworm-slim
ARG STATIC_BASE_IMAGE=gcr.io/distroless/static:nonroot

FROM --platform=$BUILDPLATFORM ${GO_IMAGE} AS builder
WORKDIR /src
# Modules first: this layer is reused until go.mod or go.sum change.
COPY go.mod go.sum ./
RUN --mount=type=cache,target=/go/pkg/mod go mod download
COPY . .
ARG TARGETOS=linux
ARG TARGETARCH
ARG VERSION=dev
# The same flags as `make build`.
RUN --mount=type=cache,target=/go/pkg/mod --mount=type=cache,target=/root/.cache/go-build \
    CGO_ENABLED=0 GOOS=$TARGETOS GOARCH=$TARGETARCH \
    go build -trimpath \
      -ldflags "-s -w -X github.com/nodeportlocal/npl/internal/buildinfo.Version=${VERSION}" \
      -o /out/ ./cmd/npl-agent ./cmd/npl-lbsync ./cmd/nplctl

# npl-agent needs iptables (both the nft and the legacy backends, the host
# decides which), nft for its nftables datapath, and conntrack, so it is not
# distroless. Debian's iptables package ships both backends; the build fails
# if that ever changes.
FROM ${AGENT_BASE_IMAGE} AS agent
RUN apt-get update \
 && apt-get install -y --no-install-recommends iptables nftables conntrack \
 && rm -rf /var/lib/apt/lists/* \
 && test -x /usr/sbin/xtables-nft-multi && test -x /usr/sbin/xtables-legacy-multi && test -x /usr/sbin/nft
COPY --chmod=0755 hack/iptables-wrapper.sh /usr/local/bin/iptables-wrapper
COPY --from=builder /out/npl-agent /usr/local/bin/npl-agent
# The wrapper switches iptables to the host's backend, then runs npl-agent
# with the container's arguments (for example `cleanup --node-name N`).
ENTRYPOINT ["/usr/local/bin/iptables-wrapper", "/usr/local/bin/npl-agent"]

FROM ${STATIC_BASE_IMAGE} AS lbsync
COPY --from=builder /out/npl-lbsync /npl-lbsync
USER 65532:65532
ENTRYPOINT ["/npl-lbsync"]

FROM ${STATIC_BASE_IMAGE} AS nplctl
COPY --from=builder /out/nplctl /nplctl
USER 65532:65532
ENTRYPOINT ["/nplctl"]
