# syntax=docker/dockerfile:1
# Relay gateway image: the web bundle (npm), then a static binary with the
# bundle embedded, then a non-root runtime on a distroless base.
#
#   docker build -t relay:dev --build-arg VERSION=$(git describe --tags --always) \
#     --build-arg COMMIT=$(git rev-parse HEAD) .
#
# Every RUN line is one line on purpose: scripts/check-image.sh runs the same
# RUN commands outside Docker (CI has no Docker engine) and checks the result.

FROM node:20-bookworm-slim AS web
WORKDIR /src
COPY package.json package-lock.json ./
RUN npm ci --no-audit --no-fund --loglevel=error
COPY web ./web
RUN npm run --silent build:web

FROM golang:1.26.8-bookworm AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
COPY --from=web /src/web/dist ./web/dist
ARG VERSION=dev
ARG COMMIT=unknown
RUN CGO_ENABLED=0 go build -trimpath -buildvcs=false -ldflags "-s -w -X github.com/relaygw/relay/internal/buildinfo.Version=${VERSION} -X github.com/relaygw/relay/internal/buildinfo.Commit=${COMMIT}" -o /out/gateway ./cmd/gateway
RUN /out/gateway --version

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/gateway /gateway
USER nonroot:nonroot
EXPOSE 4000
ENV ADDR=:4000
ENTRYPOINT ["/gateway"]
