# bitgo's front door. `make demo` runs the main job on a fresh machine; `make test` runs
# every test. Both install what they need (scripts/deps.sh is idempotent).

SHELL      := /bin/bash
GO         ?= go
PY         ?= /usr/bin/python3
SHARED     ?= $(abspath ../shared)
TORCH2     := $(SHARED)/tools/torch2
BIN        := bin/bitd
FUZZTIME   ?= 4s
export BITD_BIN := $(abspath $(BIN))

.PHONY: all deps build demo test test-go test-race test-fuzz test-integration test-py test-py2 \
        bench soak lint generate check-generate clean

all: build

deps:
	@scripts/deps.sh

build:
	$(GO) build -o $(BIN) ./cmd/bitd

## demo: build bitd, show what this machine offers, and check every format end to end.
demo: deps build
	$(BIN) info
	$(BIN) selfcheck -m 2560 -k 2560
	@if [ -f pyclient/bitgo/demo.py ]; then PYTHONPATH=pyclient $(PY) -m bitgo.demo; fi

## test: every test: Go (unit, race, fuzz, integration), OpenCL on PoCL, Python (torch 1.13 and 2.6).
test: deps build test-go test-race test-fuzz test-integration test-py test-py2 check-generate
	@echo "make test: all suites passed"

test-go: build
	@bad="$$(gofmt -l $$(git ls-files '*.go' | grep -v '^kernels/_asm/'))"; test -z "$$bad" || { echo "gofmt wants:"; echo "$$bad"; exit 1; }
	$(GO) vet ./...
	BITD_REQUIRE_OPENCL=1 $(GO) test -count=1 ./...
# the kernels again under every kernel tuning but the one that ran above (`bitd info`)
	info="$$($(BIN) info)"; ran="$$(awk '/^tuning/ { getline; print $$1 }' <<<"$$info")"; \
	all="$$(sed -n 's/.*BITD_TUNING=\([a-z0-9|+]*\).*/\1/p' <<<"$$info" | head -1 | tr '|' ' ')"; \
	test -n "$$ran" && test -n "$$all" || { echo "bitd info names no kernel tunings"; exit 1; }; \
	for t in $$all; do [ "$$t" = "$$ran" ] || BITD_TUNING=$$t $(GO) test -count=1 ./kernels || exit 1; done
	$(GO) test -count=1 -tags noasm ./kernels/... ./engine

test-race:
	$(GO) test -count=1 -race $$($(GO) list ./... | grep -E '/(sched|engine|ipc)$$')

test-fuzz:
	FUZZTIME=$(FUZZTIME) scripts/fuzz.sh

test-integration: build
	@if ls tests/*_test.go >/dev/null 2>&1; then $(GO) test -count=1 -tags integration ./tests/...; fi

test-py: build
	@if [ -d pyclient/tests ]; then PYTHONPATH=pyclient $(PY) -m pytest -q pyclient/tests; fi

# the chroot has another libc: a static bitd (CGO_ENABLED=0 compiles xe2's OpenCL binding out)
test-py2: build
	@if [ -d pyclient/tests ]; then \
	  CGO_ENABLED=0 $(GO) build -o build/bitd-static ./cmd/bitd && \
	  bash $(TORCH2)/make-env.sh && \
	  bash $(TORCH2)/run-in-env.sh -b "$(CURDIR)" -w "$(CURDIR)" -e PYTHONPATH=pyclient -e BITD_BIN=$(CURDIR)/build/bitd-static \
	    -- python3 -m pytest -q -p no:cacheprovider pyclient/tests; fi

## bench: the performance figures (DRAM working sets; minutes).
bench: build
	$(GO) test -run='^$$' -bench='ForkJoin' -count=6 ./sched/
	$(GO) test -run='^$$' -bench='RoundTrip|IdleCPU' -benchtime=20000x ./ipc/
	set -o pipefail; BITD_SOAK=60s $(GO) test -count=1 -tags integration -run='^TestLoad$$' -v ./tests/ | grep -E 'calls|ok|FAIL'
	$(BIN) bench --prefill --reads
	$(BIN) bench --model bitnet-2b
	$(BIN) bench --model bitnet-2b-merged --n 1,4
	$(BIN) bench --model llama3-8b-merged
	BITGO_ENGINE_HETERO=1 $(GO) test -count=1 -run='^TestHeteroGEMV$$' -v ./engine/ | grep -vE '^(=== RUN|PASS|ok)'
	BITGO_ENGINE_HETERO=1 BITGO_ENGINE_HETERO_BUSY=100us BITGO_ENGINE_HETERO_IDLE=100us \
	  $(GO) test -count=1 -run='^TestHeteroGEMV$$' -v ./engine/ | grep -vE '^(=== RUN|PASS|ok)'

lint:
	@test -z "$$(gofmt -l $$(git ls-files '*.go' | grep -v '^kernels/_asm/'))" || { gofmt -l $$(git ls-files '*.go'); exit 1; }
	$(GO) vet ./...
	$(GO) run honnef.co/go/tools/cmd/staticcheck@v0.8.2 ./...

generate:
	scripts/generate.sh

check-generate:
	scripts/check-generate.sh

clean:
	rm -rf bin
