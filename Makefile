# npl: NodePortLocal for any cluster, and the controller that feeds load
# balancers from it. `make help` lists the targets.

SHELL := bash
.SHELLFLAGS := -euo pipefail -c
.DEFAULT_GOAL := help

BIN        := $(CURDIR)/bin
VERSION    ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS    := -s -w -X github.com/nodeportlocal/npl/internal/buildinfo.Version=$(VERSION)
GO         ?= go
GOTEST     := $(GO) test -count=1
COMMANDS   := npl-agent npl-lbsync nplctl npl-edge
GOLANGCI_LINT_VERSION := v2.15.0
PROVIDER   ?= haproxy
KEEP       ?= 0
FUZZTIME   ?= 30s
# The tag of `make images`: the chart's appVersion, so the chart's defaults use them.
IMAGE_TAG  ?= $(shell awk '$$1=="appVersion:" {print $$2}' charts/npl/Chart.yaml)
# Where `make conformance` writes the official Gateway API conformance report.
CONFORMANCE_REPORT ?= docs/conformance/gateway-api-$(shell awk '$$1=="sigs.k8s.io/gateway-api/conformance" {print $$2; exit}' go.mod)-report.yaml

##@ Build

.PHONY: build
build: ## Build npl-agent, npl-lbsync, nplctl and npl-edge into ./bin (and the kubectl-npl plugin link).
	@mkdir -p $(BIN)
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags "$(LDFLAGS)" -o $(BIN)/ $(addprefix ./cmd/,$(COMMANDS))
	@ln -sf nplctl $(BIN)/kubectl-npl

.PHONY: tools
tools: ## Build etcd, the control plane, kubelet, kube-proxy, the CNI plugins (bin/cni) and echo-basic into ./bin (idempotent).
	BIN_DIR=$(BIN) test/tools/build.sh

.PHONY: images
images: build ## Build the images (agent, lbsync, nplctl, pause, test workload) into ./bin/images for real nodes (cached).
	$(GO) run ./test/harness/images/cmd/npl-images --repo . --bin $(BIN) --out $(BIN)/images --tag $(IMAGE_TAG)

.PHONY: chart
chart: ## Package the Helm chart with the Gateway API CRDs it installs when gatewayAPI.installCRDs is true into ./bin/chart.
	$(GO) run ./hack/chartpkg -chart charts/npl -out $(BIN)/chart

.PHONY: kubectl
kubectl: ## Build kubectl into ./bin (for make demo-shell).
	BIN_DIR=$(BIN) test/tools/build.sh kubectl

.PHONY: deps
deps: ## Install the system packages tests and the demo need (iproute2, iptables, nftables, conntrack, haproxy, containerd, runc), when missing.
	hack/deps.sh

##@ Test

.PHONY: test
test: deps tools build images lint ## Everything a fresh machine needs, then every test (unit, end to end, real nodes).
	$(GOTEST) -timeout 25m ./...

.PHONY: test-unit
test-unit: ## Unit tests only (packages outside test/).
	$(GOTEST) -timeout 10m $$($(GO) list ./... | grep -v '/test/')

.PHONY: test-e2e
test-e2e: deps tools build images ## End-to-end tests on the local cluster (test/...).
	$(GOTEST) -timeout 25m ./test/...

.PHONY: test-real-nodes
test-real-nodes: deps tools build images ## The tests on real nodes alone (kubelet, containerd, kube-proxy; the chart installed with Helm).
	$(GOTEST) -v -timeout 20m -run 'RealNodes' ./test/harness/cluster/ ./test/realnodes/...

.PHONY: conformance
conformance: deps tools build ## Run the Gateway API conformance suite (profiles GATEWAY-HTTP, -TCP, -UDP, -TLS, -GRPC), write its official report to CONFORMANCE_REPORT; fails when its results differ from the committed report's.
	@mkdir -p $(dir $(CONFORMANCE_REPORT))
	$(GOTEST) -v -timeout 60m -ldflags "-X github.com/nodeportlocal/npl/internal/buildinfo.Version=$(VERSION)" \
	  -run '^TestGatewayAPIConformance$$' ./test/conformance/ -args -npl.report=$(abspath $(CONFORMANCE_REPORT))

.PHONY: fuzz
fuzz: ## Run every fuzz target for FUZZTIME (default 30s) each, one at a time (make test runs their seeds).
	@for file in $$(git ls-files '*_test.go' | xargs grep -l '^func Fuzz'); do \
	  for target in $$(sed -n 's/^func \(Fuzz[A-Za-z0-9_]*\)(.*/\1/p' $$file); do \
	    echo "fuzz: $$target in ./$$(dirname $$file) for $(FUZZTIME)"; \
	    $(GO) test -run '^$$' -fuzz "^$$target\$$" -fuzztime $(FUZZTIME) ./$$(dirname $$file); \
	  done; \
	done

.PHONY: fmt
fmt: ## Format the code.
	gofmt -w $$(git ls-files '*.go')

.PHONY: vet
vet: ## go vet.
	$(GO) vet ./...

.PHONY: lint
lint: vet ## gofmt check, go vet and golangci-lint.
	@out=$$(gofmt -l $$(git ls-files -co --exclude-standard '*.go')); \
	  if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi
	@if [ ! -x $(BIN)/golangci-lint ] || ! $(BIN)/golangci-lint version 2>/dev/null | grep -q "$(GOLANGCI_LINT_VERSION:v%=%)"; then \
	  echo "lint: installing golangci-lint $(GOLANGCI_LINT_VERSION)"; \
	  GOBIN=$(BIN) $(GO) install github.com/golangci/golangci-lint/v2/cmd/golangci-lint@$(GOLANGCI_LINT_VERSION); fi
	$(BIN)/golangci-lint run ./...

##@ Run

.PHONY: demo
demo: deps tools build ## Run the whole system on one machine with real traffic (PROVIDER=haproxy|mock|avi|bigip, KEEP=1).
	$(GO) run ./test/demo/cmd/npl-demo --provider $(PROVIDER) --keep=$(KEEP)

.PHONY: demo-shell
demo-shell: kubectl ## Open a shell inside a running `make demo KEEP=1` (its network namespace, KUBECONFIG set).
	@pid=$$(cat /tmp/npl-demo/pid 2>/dev/null) && kill -0 $$pid 2>/dev/null || { echo "demo-shell: no demo is running: start one with 'make demo KEEP=1'"; exit 1; }; \
	  echo "demo-shell: inside the demo (exit to leave); try: kubectl get pods -n npl-demo -o wide"; \
	  nsenter --target $$pid --net --mount -- env KUBECONFIG=$$(cat /tmp/npl-demo/kubeconfig) PATH=$(BIN):$$PATH bash -i

.PHONY: bench
bench: deps tools build images ## Measure speed and memory (Go benchmarks and scale runs on the local cluster).
	$(GO) test -run '^$$' -bench . -benchmem -benchtime 3x -timeout 90m ./...

.PHONY: clean
clean: ## Remove ./bin and test caches.
	rm -rf $(BIN)
	$(GO) clean -testcache

.PHONY: help
help: ## Show this help.
	@awk 'BEGIN {FS = ":.*##"; printf "Usage: make <target>\n"} /^[a-zA-Z0-9_-]+:.*?##/ { printf "  %-12s %s\n", $$1, $$2 } /^##@/ { printf "\n%s\n", substr($$0, 5) }' $(MAKEFILE_LIST)
