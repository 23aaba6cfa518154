# syntax=docker/dockerfile:1
#
# The backendslice controller image: a static Go binary (no cgo, no libc) on
# distroless/static, running as the unprivileged user 65532 that the Helm
# chart's securityContext expects (runAsNonRoot, read-only root filesystem).
#
#   docker build -t ghcr.io/backendslice/backendslice:dev .
#   docker buildx build --platform linux/amd64,linux/arm64 -t ... .

ARG GO_VERSION=1.26

FROM --platform=$BUILDPLATFORM golang:${GO_VERSION} AS build
WORKDIR /src
# Modules first, so source edits do not invalidate the download layer.
COPY go.mod go.sum ./
RUN --mount=type=cache,target=/go/pkg/mod go mod download
# Only what the binary is built from: not bin/ (the test control plane) or
# the tests. The binary's demo subcommand imports test/controlplane.
COPY *.go ./
COPY api/ api/
COPY controllers/ controllers/
COPY providers/ providers/
COPY test/controlplane/ test/controlplane/
ARG TARGETOS
ARG TARGETARCH
RUN --mount=type=cache,target=/go/pkg/mod \
    --mount=type=cache,target=/root/.cache/go-build \
    CGO_ENABLED=0 GOOS=${TARGETOS} GOARCH=${TARGETARCH} \
    go build -trimpath -ldflags='-s -w' -o /out/backendslice .

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/backendslice /backendslice
USER 65532:65532
ENTRYPOINT ["/backendslice"]
CMD ["controller"]
