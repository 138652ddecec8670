# aleph-sandbox build entry points. Every binary lands in bin/.
GO        ?= go
BIN       ?= bin
GOFLAGS   ?=
# Code generators, pinned: `make proto-tools` installs exactly these.
PROTOC_GEN_GO_VERSION      := v1.36.12
PROTOC_GEN_GO_GRPC_VERSION := v1.5.1
TOOLS     := $(CURDIR)/.tools

.PHONY: all build test test-short proto proto-tools proto-check lint cross bench clean

all: build

build:
	@mkdir -p $(BIN)
	$(GO) build $(GOFLAGS) -o $(BIN)/ ./cmd/...

test: build
	$(GO) test -race -count=1 ./...

proto-tools:
	@mkdir -p $(TOOLS)
	GOBIN=$(TOOLS) $(GO) install google.golang.org/protobuf/cmd/protoc-gen-go@$(PROTOC_GEN_GO_VERSION)
	GOBIN=$(TOOLS) $(GO) install google.golang.org/grpc/cmd/protoc-gen-go-grpc@$(PROTOC_GEN_GO_GRPC_VERSION)

proto: proto-tools
	PATH=$(TOOLS):$$PATH protoc -I driverapi/proto/alephv1 \
		--go_out=paths=source_relative:driverapi/proto/alephv1 \
		--go-grpc_out=paths=source_relative:driverapi/proto/alephv1 \
		driverapi/proto/alephv1/aleph.proto

# Fails when the committed generated code differs from what `make proto` makes.
proto-check: proto
	@git diff --exit-code -- driverapi/proto || (echo "generated protobuf code is stale: run make proto and commit" >&2; exit 1)

lint:
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || (gofmt -l $$(git ls-files '*.go'); echo "gofmt needed" >&2; exit 1)
	GOOS=linux   $(GO) vet ./...
	GOOS=darwin  $(GO) vet ./...
	GOOS=windows $(GO) vet ./...

cross:
	GOOS=darwin  GOARCH=arm64 $(GO) build ./...
	GOOS=darwin  GOARCH=amd64 $(GO) build ./...
	GOOS=windows GOARCH=amd64 $(GO) build ./...
	GOOS=linux   GOARCH=arm64 $(GO) build ./...

bench: build
	$(GO) test -run '^$$' -bench . -benchmem ./...

clean:
	rm -rf $(BIN) $(TOOLS)
