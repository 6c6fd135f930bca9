# syntax=docker/dockerfile:1
#
# The newsfeed image: one static binary on an empty base (scratch), with CA
# certificates and a passwd entry for the non-root user it runs as. The same
# image runs every role; the command names it (see docs/OPERATIONS.md,
# "Running the image").
#
#   docker build -t newsfeed .          builds the binary here, in Go's image
#   make image                          builds the binary on the host (no base
#                                       image to pull) and packs it the same way
#
# BINARY_FROM picks where the files of the final image come from: "source"
# (the golang stage) or "host" (build/image-rootfs, which `make image` fills).
# BuildKit and podman skip the stage the image does not use, so the host path
# pulls nothing (docker's legacy builder would build every stage).
ARG BINARY_FROM=source
ARG GO_VERSION=1.26

FROM docker.io/library/golang:${GO_VERSION}-bookworm AS source
WORKDIR /src
COPY go.mod go.sum ./
RUN --mount=type=cache,target=/root/go/pkg/mod go mod download
COPY . .
# What `newsfeed version` prints (the Makefile passes `git describe` and the
# commit; the build context has no .git).
ARG VERSION=dev
ARG COMMIT=unknown
RUN --mount=type=cache,target=/root/go/pkg/mod --mount=type=cache,target=/root/.cache/go-build \
    CGO_ENABLED=0 go build -trimpath \
      -ldflags "-s -w -X github.com/newsfeed/newsfeed/app.Version=${VERSION} -X github.com/newsfeed/newsfeed/app.Commit=${COMMIT}" \
      -o /rootfs/usr/local/bin/newsfeed . \
 && scripts/image-rootfs.sh /rootfs

FROM scratch AS host
COPY build/image-rootfs/ /rootfs/

FROM ${BINARY_FROM} AS rootfs

FROM scratch
COPY --from=rootfs /rootfs/ /
# newsfeed (65532), from the image's /etc/passwd: never root.
USER 65532:65532
# A config.yaml mounted here is read without --config; NEWSFEED_* variables
# set every key too.
WORKDIR /etc/newsfeed
# http.addr (the API of serve and all), metrics.addr (/metrics, /healthz,
# /readyz of every role).
EXPOSE 8080 9090
ENTRYPOINT ["newsfeed"]
# Every role in one process, as a small install runs it (it applies the
# schema first, and refuses to start without auth.secret unless --dev). A
# deployment with a container per role names the role instead: serve,
# dispatch, work, and migrate before them.
CMD ["all"]
