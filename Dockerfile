# One image for all binaries: ipkeeper-controller, ipkeeper-agent, the
# ipkeeper CNI plugin (which the agent copies onto the host) and the
# kubectl-ipkeeper plugin (for copying out of the image).
ARG GO_VERSION=1.26
FROM golang:${GO_VERSION} AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
ARG VERSION=dev
RUN CGO_ENABLED=0 make build VERSION=${VERSION} BIN_DIR=/out

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/ipkeeper /out/ipkeeper-agent /out/ipkeeper-controller /out/kubectl-ipkeeper /usr/bin/
# The controller runs as the distroless non-root user; the agent's DaemonSet
# overrides the user because it writes into the host's CNI bin dir and serves
# a root-only socket.
USER 65532:65532
ENTRYPOINT ["/usr/bin/ipkeeper-controller"]
