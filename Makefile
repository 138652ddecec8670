# aleph-sandbox build entry points. Every binary lands in bin/.
GO        ?= go
BIN       ?= bin
GOFLAGS   ?=
# Code generators, pinned: `make proto-tools` installs exactly these.
PROTOC_GEN_GO_VERSION      := v1.36.12
PROTOC_GEN_GO_GRPC_VERSION := v1.5.1
PROTOC_GEN_CONNECT_GO_VERSION := v1.21.1
TOOLS     := $(CURDIR)/.tools
# The GitHub Actions linter; `go run pkg@version` fetches it through the
# module proxy, so a fresh machine needs nothing installed.
ACTIONLINT_VERSION := v1.7.12

.PHONY: soak test-serve-load
.PHONY: all build test test-go test-python test-unprivileged test-nolandlock test-nonamespaces fuzz-short proto proto-tools proto-check lint cross bench bench-cpu clean

all: build

# Static binaries (CGO_ENABLED=0): no dynamic loader runs before sandbox-init
# has confined itself, and a static Go binary starts about 0.7 ms faster,
# paid on every sandboxed command (docs/performance.md).
build:
	@mkdir -p $(BIN)
	CGO_ENABLED=0 $(GO) build $(GOFLAGS) -o $(BIN)/ ./cmd/...

# The whole check, as CI runs it: generated code fresh, lint for all three
# OSes, cross builds, every test with the race detector, the Linux driver's
# tests again as an unprivileged user and again with Landlock made
# unavailable and with namespaces refused (the Landlock tier), the Python
# client against a real serve, and a short fuzzing pass.
#
# Every `go test` below names its -timeout: go's own default (10 minutes per
# test binary) once cut the CLI package off under load, and a hang should
# end in minutes with a stack dump rather than at CI's 90-minute limit. The
# timeouts are about 3× the time each group took here (2 cores, shared,
# -race); README.md ("Tests and their time") has the figures.
# `make test-stress` (the full serve load and the soak) is not part of
# `make test` but CI runs it too (.ci/run).
test: build proto-check lint cross test-go test-python test-typescript test-unprivileged test-nolandlock test-nonamespaces test-prepared test-session test-fleet-short fuzz-short

# go test runs the packages of one invocation side by side (-p, one per
# core); the groups run one after another, each with its own timeout.
MODULE          := github.com/aleph-sandbox/aleph-sandbox
GO_TEST         := $(GO) test -race -count=1
# The CLI's end-to-end tests (escape battery, serve, MCP, examples): the
# longest package by far.
GO_PKGS_CLI     := ./cmd/aleph-sandbox/
GO_TIMEOUT_CLI  ?= 30m
# The Linux driver, its in-sandbox supervisor and the conformance suite.
GO_PKGS_DRIVER  := ./drivers/bwrap/ ./drivers/bwrap/sandboxinit/ ./conformance/
GO_TIMEOUT_DRIVER ?= 20m
# Everything else: unit tests and small end-to-end tests; the slowest are
# the seatbelt plumbing conformance run (about 2 minutes) and the command
# policy's rule cross-check (about 1 minute).
GO_TIMEOUT_REST ?= 10m

.PHONY: test-go-cli test-go-driver test-go-rest test-go-e2e
test-go: test-go-rest test-go-e2e

# The CLI and the driver groups in one go test: the CLI package is one
# test binary whose tests run one after another, so on its own it kept one
# core busy while the other waited; side by side with the driver's
# packages (-p, one per core) both lanes stay busy. The CLI comes first so
# that it, the longest, starts first. Each package keeps its own timeout
# in effect (the longer one, the CLI's).
test-go-e2e: build
	$(GO_TEST) -timeout $(GO_TIMEOUT_CLI) $(GO_PKGS_CLI) $(GO_PKGS_DRIVER)

test-go-cli: build
	$(GO_TEST) -timeout $(GO_TIMEOUT_CLI) $(GO_PKGS_CLI)

test-go-driver: build
	$(GO_TEST) -timeout $(GO_TIMEOUT_DRIVER) $(GO_PKGS_DRIVER)

test-go-rest: build
	$(GO_TEST) -timeout $(GO_TIMEOUT_REST) $$($(GO) list ./... | grep -vxF $(foreach p,$(GO_PKGS_CLI) $(GO_PKGS_DRIVER),-e $(MODULE)/$(patsubst ./%/,%,$(p))))

# The slow soak and stress runs, kept out of `make test` (CI runs them after
# it, see .ci/run): the service under full load (64 × 50 over the socket)
# and the soak with the load sweep. About 15 minutes here.
.PHONY: test-stress
test-stress: test-serve-load soak

# The Python client against a real `serve` started by the tests (bin/).
test-python: build
	cd clients/python && python3 -W error::ResourceWarning -m unittest discover -s tests

# The TypeScript client against a real `serve` started by the tests (bin/).
# The pinned compiler comes from the lockfile, installed only when
# node_modules is missing: the tests themselves download nothing. dist/ is
# committed (the package runs from a checkout without npm), so it must be
# exactly what tsc builds from src/.
.PHONY: test-typescript
test-typescript: build
	cd clients/typescript && { test -d node_modules || npm ci --no-audit --no-fund; } && \
		./node_modules/.bin/tsc -p tsconfig.json && ./node_modules/.bin/tsc -p tsconfig.test.json && \
		node --test .build-test/client.test.js
	@test -z "$$(git status --porcelain -- clients/typescript/dist)" || \
		(git status --short -- clients/typescript/dist; echo "clients/typescript/dist is stale: commit what tsc built" >&2; exit 1)

# The service under full load: 64 clients × 50 commands over the real
# socket, every answer checked, nothing leaked, the server's live heap back to its
# baseline (the default test run uses 16 × 10). A few minutes here.
test-serve-load: build
	ALEPH_SANDBOX_LOAD_FULL=1 $(GO) test -count=1 -v -timeout 30m -run 'TestServeLoad$$' ./cmd/aleph-sandbox

# Hostile inputs at the sizes that found the bounds missing (300 MB
# bodies, 20,000 stalled connections, 4,000 reads of unknown sessions, a
# 100 MB MCP line) against a real serve and mcp; prints serve's RSS and
# fds before and after. The default test run replays the same shapes
# smaller (TestHostileInputs, RSS growth bound 64 MB).
.PHONY: test-hostile
test-hostile: build
	ALEPH_HOSTILE_FULL=1 $(GO) test -count=1 -v -timeout 20m -run '^TestHostileInputs$$' ./cmd/aleph-sandbox

test-unprivileged: build
	./scripts/test-unprivileged.sh

# The Linux driver's tests, the CLI's sandbox tests (escape battery first)
# and the bwrap driver's conformance suite under a seccomp filter that hides
# Landlock (EOPNOTSUPP): every security test must hold without it. The
# tests that do not depend on the mode are left to the main pass (each
# package's testdata/modes.txt, checked by scripts/modes_test.go). About 11
# minutes here on two cores shared with other heavy work (load 15-20), 4 to
# 5 on a quieter machine; test-unprivileged likewise.
test-nolandlock: build
	./scripts/test-nolandlock.sh

# The driver's tests, the conformance suite and the CLI escape battery with
# every command handed to a prepared sandbox (sandbox.linux.prepared =
# "always"). README.md ("Tests and their time") has the figures.
.PHONY: test-prepared
test-prepared: build
	./scripts/test-prepared.sh

# The conformance suite and the escape battery with every command of a
# session run in its persistent session sandboxes
# (sandbox.linux.session_sandbox = "always"); SESSION_ALL=1 adds the
# driver's whole package.
.PHONY: test-session
test-session: build
	./scripts/test-session.sh

# The fleet (contrib/fleet, a module of its own: the Kubernetes types stay
# out of the main module): the manifests checked against agent-sandbox's and
# Kubernetes' Go types, then three serve pods played by podman from
# contrib/kubernetes behind contrib/haproxy, the Python client through it.
# test-fleet-short (in make test) runs affinity and metrics, test-fleet adds
# a rolling restart under load, a drain and a killed pod; both skip the
# pods, naming what is missing, where podman, runc or HAProxy are not
# installed (scripts/setup-fleet.sh) or a container cannot start, and
# sweep what a killed run left. About 1.5 to 2 minutes here (45 s short),
# more under load. bench-fleet logs the figures of docs/fleet.md (about
# 6 minutes).
FLEET_DIR := contrib/fleet
.PHONY: test-fleet test-fleet-short bench-fleet
test-fleet: build
	cd $(FLEET_DIR) && $(GO_TEST) -v -timeout 20m ./...

test-fleet-short: build
	cd $(FLEET_DIR) && $(GO_TEST) -short -timeout 15m ./...

bench-fleet: build
	cd $(FLEET_DIR) && ALEPH_FLEET_FIGURES=1 $(GO) test -count=1 -v -timeout 40m -run 'TestFleetFigures$$' ./...

# The Landlock tier (sandbox.linux.fallback = "landlock") on a host that
# refuses namespaces, reproduced for one process tree (see the script): the
# tier tests, the conformance suite and the CLI escape battery, side by
# side. About 3.5 minutes here under load (load 20), the conformance suite
# the longest.
test-nonamespaces: build
	./scripts/test-nonamespaces.sh

# Each fuzz target for a few seconds (go test -fuzz takes one target at a time).
# The budget is a count of executions, not a duration: a duration budget makes
# go1.26's fuzz coordinator report a spurious "context deadline exceeded" now
# and then when it expires (golang/go#75804). 10000 runs take 1-7 s here.
FUZZ_TARGETS := ./hooks/commandpolicy:FuzzNormalize ./hooks/commandpolicy:FuzzMatch ./core/proxy:FuzzReadProxyRequest ./core/proxy:FuzzSOCKS ./core/proxy:FuzzParseRule
FUZZ_EXECS   ?= 10000
fuzz-short:
	@for t in $(FUZZ_TARGETS); do \
		pkg=$${t%%:*}; name=$${t##*:}; \
		echo "fuzz $$name ($$pkg)"; \
		$(GO) test -timeout 10m -run '^$$' -fuzz "^$$name\$$" -fuzztime $(FUZZ_EXECS)x $$pkg || exit 1; \
	done

proto-tools:
	@mkdir -p $(TOOLS)
	GOBIN=$(TOOLS) $(GO) install google.golang.org/protobuf/cmd/protoc-gen-go@$(PROTOC_GEN_GO_VERSION)
	GOBIN=$(TOOLS) $(GO) install google.golang.org/grpc/cmd/protoc-gen-go-grpc@$(PROTOC_GEN_GO_GRPC_VERSION)
	GOBIN=$(TOOLS) $(GO) install connectrpc.com/connect/cmd/protoc-gen-connect-go@$(PROTOC_GEN_CONNECT_GO_VERSION)

proto: proto-tools
	PATH=$(TOOLS):$$PATH protoc -I driverapi/proto/alephv1 \
		--go_out=paths=source_relative:driverapi/proto/alephv1 \
		--go-grpc_out=paths=source_relative:driverapi/proto/alephv1 \
		driverapi/proto/alephv1/aleph.proto
	PATH=$(TOOLS):$$PATH protoc -I service/api/hostv1 \
		--go_out=paths=source_relative:service/api/hostv1 \
		--connect-go_out=paths=source_relative:service/api/hostv1 \
		service/api/hostv1/host.proto

# Fails when the committed generated code differs from what `make proto` makes.
proto-check: proto
	@git diff --exit-code -- driverapi/proto service/api || (echo "generated protobuf code is stale: run make proto and commit" >&2; exit 1)

lint:
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || (gofmt -l $$(git ls-files '*.go'); echo "gofmt needed" >&2; exit 1)
	GOOS=linux   $(GO) vet ./...
	GOOS=darwin  GOARCH=arm64 $(GO) vet ./...
	GOOS=darwin  GOARCH=amd64 $(GO) vet ./...
	GOOS=windows $(GO) vet ./...
	$(GO) run github.com/rhysd/actionlint/cmd/actionlint@$(ACTIONLINT_VERSION) .github/workflows/*.yml

cross:
	GOOS=darwin  GOARCH=arm64 $(GO) build ./...
	GOOS=darwin  GOARCH=amd64 $(GO) build ./...
	GOOS=windows GOARCH=amd64 $(GO) build ./...
	GOOS=linux   GOARCH=arm64 $(GO) build ./...
	GOOS=linux   GOARCH=386   $(GO) build ./...

# The side-by-side table (direct exec, raw bwrap with the driver's flags,
# the warm pipeline, the cold CLI; interleaved, p50 and ratios), then the Go
# microbenchmarks, each briefly: a few minutes in all. See docs/performance.md.
# scripts/bench.sh runs each step in a process group of its own and ends it
# whatever happens (Ctrl-C, SIGTERM, SIGKILL of make or of the script): a
# bench killed part way leaves no private serve behind.
BENCH_PKGS = ./core/ ./core/proxy/ ./hooks/commandpolicy/ ./drivers/bwrap/ ./drivers/bwrap/sandboxinit/
bench: build
	./scripts/bench.sh $(BIN) $(GO) $(BENCH_PKGS)

# CPU per command, warm pipeline against raw minimal bwrap at concurrency 4
# (the machine's busy time, /proc/stat): what throughput is made of. About a
# minute; run it on a quiet machine. See docs/performance.md.
bench-cpu: build
	./scripts/cpu-per-command.sh

# The soak (10000 commands through one warm pipeline) and the load sweep
# (concurrency 1-64), then what was left behind. Minutes; not part of test.
soak: build
	./scripts/soak.sh

clean:
	rm -rf $(BIN) $(TOOLS)
