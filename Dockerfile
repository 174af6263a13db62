# syntax=docker/dockerfile:1
# lockcell image: lockcelld (the replica daemon) and lockcell (the CLI),
# static binaries on distroless, running as a non-root user.
#
#   docker build -t lockcell:dev .
#   docker run --rm lockcell:dev --version
#   docker run --rm --entrypoint lockcell lockcell:dev --version
#
# deploy/compose.yaml runs a five-replica cell with mutual TLS from it;
# docs/operations.md covers the rest. Ports: 7001 client (TLS), 7101 Raft
# (TLS, replicas only), 7201 HTTP for operators (/healthz, /readyz,
# /metrics for anyone; the status page's names only for a user
# certificate; TLS on a TLS cell). Data: /var/lib/lockcell.
#
# The build context must hold the repository's .git folder for --version to
# name the commit (.dockerignore keeps it); without it the binaries say
# "commit unknown".

ARG GO_VERSION=1.26.8

# The build stage runs on the builder's own platform and cross-compiles for
# the target one (docker buildx build --platform linux/arm64 ...).
FROM --platform=$BUILDPLATFORM golang:${GO_VERSION}-bookworm AS build
WORKDIR /src
# Modules come from the Go module proxy (GOPROXY, proxy.golang.org by
# default), in a layer of their own that changes only with go.mod/go.sum.
ARG GOPROXY=https://proxy.golang.org,direct
ENV GOPROXY=$GOPROXY GOTOOLCHAIN=local
COPY go.mod go.sum ./
RUN --mount=type=cache,target=/go/pkg/mod go mod download && go mod verify
COPY . .
ARG TARGETOS=linux
ARG TARGETARCH=amd64
# CGO_ENABLED=0: no libc, so the binaries run on distroless/static.
# -trimpath: no build-machine paths in the binaries.
# -buildvcs=auto: stamp the commit (for --version) when .git is present,
# whatever GOFLAGS says.
RUN --mount=type=cache,target=/go/pkg/mod --mount=type=cache,target=/root/.cache/go-build \
    mkdir -p /out/usr/local/bin /out/var/lib/lockcell /out/etc/lockcell/tls \
 && CGO_ENABLED=0 GOOS=$TARGETOS GOARCH=$TARGETARCH go build -trimpath -buildvcs=auto -ldflags='-s -w' -o /out/usr/local/bin/ ./cmd/lockcelld ./cmd/lockcell

# distroless/static: CA roots, tzdata, /etc/passwd with nonroot (65532),
# no shell and no package manager.
FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/usr/local/bin/ /usr/local/bin/
# Owned by the runtime user, so that a named volume mounted here starts
# writable by it (Docker and Podman copy the ownership into a new volume).
COPY --from=build --chown=65532:65532 /out/var/lib/lockcell /var/lib/lockcell
COPY --from=build --chown=65532:65532 /out/etc/lockcell/tls /etc/lockcell/tls
USER 65532:65532
VOLUME ["/var/lib/lockcell"]
EXPOSE 7001 7101 7201
ENTRYPOINT ["/usr/local/bin/lockcelld"]
CMD ["serve", "--config", "/etc/lockcell/lockcelld.yaml"]
