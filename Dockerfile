# One image for all binaries: ipkeeper-controller, ipkeeper-agent, the
# ipkeeper CNI plugin (which the agent copies onto the host) and the
# kubectl-ipkeeper plugin (for copying out of the image).
#
# `make image` builds the same image without Docker (hack/image); the two
# must agree on what is in it, which hack/image's TestImage/dockerfile checks.
ARG GO_VERSION=1.26
FROM golang:${GO_VERSION} AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
ARG VERSION=dev
RUN make build VERSION=${VERSION} BIN_DIR=/out

# Nothing but the static binaries: they need no libc, CA bundle or
# /etc/passwd (the user is numeric).
FROM scratch
ARG VERSION=dev
ARG REVISION=unknown
LABEL org.opencontainers.image.source="https://github.com/ipkeeper/ipkeeper" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${REVISION}"
ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
COPY --from=build /out/ipkeeper /out/ipkeeper-agent /out/ipkeeper-controller /out/kubectl-ipkeeper /usr/bin/
# The controller runs as distroless' non-root user 65532; the agent's
# DaemonSet overrides the user because it writes into the host's CNI bin dir
# and serves a root-only socket.
USER 65532:65532
ENTRYPOINT ["/usr/bin/ipkeeper-controller"]
