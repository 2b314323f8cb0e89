# Relay gateway. `make run` starts one node on its embedded default (no external
# services); `make test` runs every test (CI runs exactly that); CONTRIBUTING.md
# describes the test tiers (test-short, test, fuzz, chaos).
SHELL := /bin/bash
GO ?= go
STATICCHECK := honnef.co/go/tools/cmd/staticcheck@v0.8.2
FUZZTIME ?= 5s
PKGS := ./...
GOTESTSUM := gotest.tools/gotestsum@v1.13.0

.PHONY: run build web test test-short lint unit fuzz e2e chromium services bench chaos load cluster load-cluster check-image check-k8s kubeconform clean

# One line per step (`-->`): npm packages (first run only), web bundle, Go
# modules, compile, start. Ctrl-C stops the node with exit status 0
# (scripts/run.sh).
run: build
	@scripts/run.sh

build: web
	@echo "--> Go modules: go list -deps ./cmd/gateway (the first run downloads them)"
	@$(GO) list -deps ./cmd/gateway >/dev/null
	@echo "--> compiling bin/gateway: go build (the first run compiles every dependency)"
	@$(GO) build -o bin/gateway ./cmd/gateway

node_modules: package-lock.json
	@echo "--> npm packages: npm ci (first run, or after package-lock.json changed)"
	@npm ci --no-audit --no-fund --loglevel=error
	@touch node_modules

web: node_modules
	@echo "--> web bundle: esbuild web/src -> web/dist"
	@npm run --silent build:web

# Every test: lint, Go unit and integration tests with the race detector
# (real Postgres, Redis and NATS; every fuzz target's seed corpus runs as an
# ordinary test), and the end-to-end suite with the official phoenix client
# against real gateway processes. Timed fuzzing is `make fuzz`.
test: services lint unit e2e

# The services-free tier: no Postgres, Redis or NATS needed; every test that
# needs one skips under -short with a message naming it.
test-short:
	$(GO) test -short -count=1 $(PKGS)

services:
	@scripts/services.sh

lint:
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || { gofmt -l $$(git ls-files '*.go'); echo "gofmt: files above need formatting"; exit 1; }
	$(GO) vet $(PKGS)
	$(GO) run $(STATICCHECK) $(PKGS)
	@$(GO) mod tidy -diff || { echo "go mod tidy: go.mod/go.sum are not tidy (run go mod tidy)"; exit 1; }
	@scripts/lint-refs.sh --self-test
	@scripts/lint-refs.sh

# Go tests with the race detector, through gotestsum: one line per package with
# its result and time, a failing test's output in full at the end. The chaos
# package (minutes, mostly waiting on real gateway processes) runs beside the
# others and prints one line per test and per checker seed as each finishes.
UNITFLAGS := -race -count=1 -timeout 15m
unit:
	@$(GO) run $(GOTESTSUM) --format testname -- $(UNITFLAGS) ./chaos/ & chaos=$$!; \
	$(GO) run $(GOTESTSUM) --format pkgname-and-test-fails -- $(UNITFLAGS) $$($(GO) list $(PKGS) | grep -v '/chaos$$'); rest=$$?; \
	wait $$chaos; chaos=$$?; \
	[ $$rest -eq 0 ] && [ $$chaos -eq 0 ] || { echo "unit: failed (packages $$rest, chaos $$chaos)"; exit 1; }

# Timed runs of every fuzz target (FUZZTIME each, a duration or a count such
# as 20000x), one after the other; each package's test binary is built once
# (scripts/fuzz.sh). Not part of `make test`, which runs the seed corpora.
fuzz:
	@scripts/fuzz.sh $(FUZZTIME)

# The end-to-end suite, browser tests included (headless Chromium driven by
# playwright-core; screenshots in e2e/artifacts/screenshots/).
e2e: build chromium
	npm run --silent test:e2e

# Debian's chromium for the browser tests, installed with apt-get when missing
# (scripts/chromium.sh; fails with a message when it cannot).
chromium:
	@scripts/chromium.sh

bench:
	$(GO) test -run '^$$' -bench . -benchmem $(PKGS)

# The accepted-event checker over RUNS random seeds (about 30-60 s each):
# a 3-node cluster under a seeded fault schedule, every accepted event
# checked (chaos.TestAcceptedEventChecker). Each run logs its seed, its
# schedule and a replay command; the last lines tabulate every run.
RUNS ?= 10
chaos: services
	CHAOS_RUNS=$(RUNS) $(GO) test -race -count=1 -timeout 0 -v -run '^TestAcceptedEventChecker$$' ./chaos/

# Three cluster-mode nodes on :4001-:4003 against the local Postgres, Redis and
# NATS; prints URLs and tokens; Ctrl-C stops them (scripts/cluster.sh).
cluster: build
	@scripts/cluster.sh

# Bounded load run over three loopback cluster nodes: 10,000 sockets on one
# topic; SOCKETS, RATE, DURATION, PROCS override (scripts/load-cluster.sh).
load-cluster: web
	@scripts/load-cluster.sh

# The container image's build without a Docker engine: runs the Dockerfile's
# RUN lines in a copy of the checkout and checks the binary (static, --version,
# embedded bundle) and the non-root runtime stage (scripts/check-image.sh).
# Minutes with a cold build cache, so not part of `make test`.
check-image:
	@scripts/check-image.sh

# docker-compose.yml and the Kubernetes manifests in deploy/k8s against the
# fields and invariants the deployment relies on (strict decoding, no engine or
# cluster; deploy/*_test.go, also part of `make test`). With network access to
# the published schemas, `make kubeconform` validates against them too.
check-k8s:
	$(GO) test -count=1 ./deploy/...

KUBECONFORM := github.com/yannh/kubeconform/cmd/kubeconform@v0.8.0
kubeconform:
	$(GO) run $(KUBECONFORM) -strict -summary -kubernetes-version 1.30.0 -ignore-filename-pattern kustomization.yaml deploy/k8s/

clean:
	rm -rf bin web/dist/*.js web/dist/*.map
