# backendslice: developer and CI entry points. `make` (or `make help`) lists them.
SHELL := bash
.SHELLFLAGS := -euo pipefail -c
.DEFAULT_GOAL := help
MAKEFLAGS += --no-builtin-rules --no-print-directory
.SUFFIXES:

# Pinned tool versions (bumping one changes its cache key and rebuilds it).
CONTROLLER_GEN_VERSION ?= v0.23.0
GOLANGCI_LINT_VERSION ?= v2.15.0
CONTROLLER_GEN_PKG := sigs.k8s.io/controller-tools/cmd/controller-gen
GOLANGCI_LINT_PKG := github.com/golangci/golangci-lint/v2/cmd/golangci-lint
# kube-apiserver, kube-proxy, kube-controller-manager, etcd, consul and CoreDNS
# versions are pinned in test/controlplane/<name>/go.mod (kube-proxy and
# kube-controller-manager in kube-apiserver's).

# Every build and test here compiles as the image and the release do, with
# cgo off and paths trimmed (test/controlplane/install.sh too), so that the
# Go build cache compiles each package once for all of them: the tests'
# binaries, the image and release that their tests build, vet, and the
# control-plane binaries, whose shared dependencies are pinned to the
# product's versions (test/aligned.sh, in `make verify`).
# The tests' binaries link without DWARF (-ldflags=-w; the release and
# image builds set their own -ldflags, which win): nothing reads it, and it
# is a good part of linking each of a hundred test binaries.
export CGO_ENABLED := 0
export GOFLAGS := $(strip -trimpath -ldflags=-w $(GOFLAGS))

# Where things go.
GO ?= go
BIN := $(CURDIR)/bin
# Built tools live outside the checkout, keyed by version, and are linked into bin/.
CACHE_DIR ?= $(or $(BACKENDSLICE_CACHE_DIR),$(if $(XDG_CACHE_HOME),$(XDG_CACHE_HOME),$(HOME)/.cache)/backendslice)
export BACKENDSLICE_CACHE_DIR := $(CACHE_DIR)
CONTROLLER_GEN := $(BIN)/controller-gen
GOLANGCI_LINT := $(BIN)/golangci-lint
INSTALL := bash $(CURDIR)/test/controlplane/install.sh

# Test settings.
# The Consul provider tests run a real Consul agent: `make test` installs it
# into bin/ (built once, like the control plane).
# The data-path suites run kube-proxy, CoreDNS and kube-controller-manager
# (built once, too) in network namespaces, and need the nft and ip commands.
TEST_PREREQS := controlplane consul dataplane shellcheck
# GO_TEST_VET=off leaves out go test's own vet pass (a subset of go vet's
# checks, with a pass of its own over every dependency): CI sets it, as it
# runs golangci-lint, whose govet runs go vet's analyzers, on the tests too.
GO_TEST_VET ?=
TEST_FLAGS ?= -count=1 -timeout 30m$(if $(GO_TEST_VET), -vet=$(GO_TEST_VET))
TEST_PKGS ?= ./...
# envtest reads KUBEBUILDER_ASSETS and starts bin/kube-apiserver and bin/etcd.
ENVTEST_ENV := KUBEBUILDER_ASSETS=$(BIN)

# Modules of their own under the repository, which `go ... ./...` of the
# main module skips: fmt, vet, lint, verify and test run in each too.
# test/workflows lints .github/workflows with actionlint; test/promrules
# checks the chart's alerts and dashboard with Prometheus's parsers, and
# runs the alerts with its rule engine. Their dependencies stay out of the
# controller's go.mod.
SUBMODULES := test/workflows test/promrules

# The chart's copies of the generated CRD and RBAC (`make manifests`).
CHART_FILES := charts/backendslice/files

# Paths whose changes after generate/manifests/fmt make `make verify` fail.
VERIFY_PATHS := api config charts '*.go'

.PHONY: help
help: ## Show this help.
	@echo 'Usage: make <target>'
	@echo
	@awk 'BEGIN { FS = ":.*## " } /^##@ / { printf "\n%s\n", substr($$0, 5) } /^[a-zA-Z0-9_-]+:.*## / { printf "  %-14s %s\n", $$1, $$2 }' $(MAKEFILE_LIST)
	@echo
	@echo 'Binaries are built once per machine into $(CACHE_DIR) and linked into bin/.'

##@ Build

# What `backendslice version` and backendslice_build_info report: the
# release (the chart's appVersion unless VERSION is given), the commit, and
# whether the checkout had changes (internal/version.LDFlags does the same
# for `make image`).
VERSION ?= $(shell sed -n 's/^appVersion: *"\{0,1\}\([^"]*\)"\{0,1\}$$/\1/p' charts/backendslice/Chart.yaml)
COMMIT := $(shell git rev-parse HEAD 2>/dev/null)
MODIFIED := $(if $(shell git status --porcelain 2>/dev/null),true,false)
VERSION_PKG := github.com/backendslice/backendslice/internal/version
LDFLAGS := -X $(VERSION_PKG).version=$(VERSION) -X $(VERSION_PKG).commit=$(COMMIT) -X $(VERSION_PKG).modified=$(MODIFIED)

.PHONY: build
build: ## Build bin/backendslice (the controller, as shipped, with its version: `bin/backendslice version`) and bin/backendslice-demo.
	$(GO) build -ldflags '$(LDFLAGS)' -o $(BIN)/backendslice ./cmd/backendslice
	$(GO) build -o $(BIN)/backendslice-demo ./cmd/backendslice-demo

# More cmd/build-image flags: -tarball bin/image.tar, -version 0.2.0, -platforms linux/amd64.
IMAGE_ARGS ?=

.PHONY: image
image: ## Build the controller image (linux/amd64 and arm64, no Docker) into the OCI layout bin/image/ and print its digest.
	$(GO) run ./cmd/build-image -out $(BIN)/image $(IMAGE_ARGS)

# Every timestamp of a release is its commit's time (reproducible-builds.org's
# SOURCE_DATE_EPOCH): two builds of one commit are the same bytes, so the
# digests signed are the ones anyone rebuilding it gets.
SOURCE_DATE_EPOCH ?= $(or $(shell git log -1 --format=%ct 2>/dev/null),0)

.PHONY: release
release: ## Build the release offline into bin/release/VERSION/: the chart (.tgz, and the OCI layout helm push sends), the multi-arch image, the binaries with CycloneDX SBOMs, SHA256SUMS (docs/release.md).
	SOURCE_DATE_EPOCH=$(SOURCE_DATE_EPOCH) $(GO) run ./cmd/build-release -out $(BIN)/release -version $(VERSION)

.PHONY: release-test
release-test: ## Build the image and the release for every platform (linux/amd64 and linux/arm64; `make test` builds this machine's only) and check them: the release workflow runs it before `make release`.
	BACKENDSLICE_RELEASE_PLATFORMS=all $(GO) test ./internal/image ./test/releasetest -run 'TestImage$$|TestRelease$$' -count=1 -v -timeout 30m

.PHONY: generate
generate: controller-gen ## Generate deepcopy code for api/ (controller-gen object).
	$(CONTROLLER_GEN) object paths=./api/...

.PHONY: manifests
manifests: controller-gen ## Generate the CRD and RBAC into config/, and copy them into the Helm chart.
	$(CONTROLLER_GEN) crd rbac:roleName=manager-role paths="./api/...;./controllers/..." \
		output:crd:artifacts:config=config/crd/bases output:rbac:artifacts:config=config/rbac
	@# The chart renders these copies (templates/crds.yaml, templates/clusterrole.yaml,
	@# templates/tenant-roles.yaml, templates/metrics-reader.yaml),
	@# so its CRD and ClusterRoles are always the generated and kustomize base's ones.
	rm -f $(CHART_FILES)/crds/*.yaml
	cp -f config/crd/bases/*.yaml $(CHART_FILES)/crds/
	cp -f config/rbac/role.yaml config/rbac/tenant_view_role.yaml config/rbac/tenant_edit_role.yaml config/rbac/metrics_reader_role.yaml $(CHART_FILES)/rbac/

##@ Check

.PHONY: fmt
fmt: ## Format the Go code (go fmt), the test modules' too.
	$(GO) fmt ./...
	@for m in $(SUBMODULES); do (cd $$m && $(GO) fmt ./...); done

.PHONY: vet
vet: ## Run go vet, on the test modules too.
	$(GO) vet ./...
	@for m in $(SUBMODULES); do echo "go vet ($$m)"; (cd $$m && $(GO) vet ./...); done

.PHONY: lint
lint: golangci-lint ## Run golangci-lint (.golangci.yml), on the test modules too.
	$(GOLANGCI_LINT) run --allow-parallel-runners ./...
	@for m in $(SUBMODULES); do echo "golangci-lint ($$m)"; (cd $$m && $(GOLANGCI_LINT) run --allow-parallel-runners --config $(CURDIR)/.golangci.yml ./...); done

# The end-to-end suites run a second time on a single-stack (IPv4-only) API
# server, the kind most clusters are; the first run is dual-stack.
E2E_PKGS ?= ./test/e2e/...

.PHONY: test
test: ## Run all tests on a real kube-apiserver and etcd (envtest), dual-stack, each end-to-end suite then again single-stack; and the workflows' lint. Builds what they need first (test/run.sh: Consul and the data-path binaries build in the background while the suites that need neither run).
	$(ENVTEST_ENV) GO=$(GO) MAKE=$(MAKE) TEST_PKGS='$(TEST_PKGS)' E2E_PKGS='$(E2E_PKGS)' TEST_FLAGS='$(TEST_FLAGS)' SUBMODULES='$(SUBMODULES)' bash test/run.sh

.PHONY: verify
verify: generate manifests fmt ## Fail if generated code, manifests, formatting or go.mod are out of date, a test module's shared dependencies are not the product's versions, or the kustomize base does not build.
	@changed=$$(git status --porcelain -- $(VERIFY_PATHS)); \
	if [[ -n "$$changed" ]]; then \
		echo; \
		echo 'verify: FAILED. These files are not committed or changed when regenerated:'; \
		echo "$$changed"; \
		echo; \
		git --no-pager diff --stat -- $(VERIFY_PATHS) || true; \
		echo; \
		echo 'Run `make generate manifests fmt` and commit the result (or commit/stash your own edits first).'; \
		exit 1; \
	fi
	@for m in . $(SUBMODULES); do \
		if ! (cd $$m && $(GO) mod tidy -diff); then \
			echo; \
			echo "verify: FAILED. $$m/go.mod or go.sum is not tidy: run 'go mod tidy' there and commit the result."; \
			exit 1; \
		fi; \
	done
	@if ! GO=$(GO) bash test/aligned.sh; then \
		echo; \
		echo 'verify: FAILED. A module the tests build shares dependencies with the product at other versions (above).'; \
		exit 1; \
	fi
	@if ! $(GO) test ./test/kustomizetest -count=1; then \
		echo; \
		echo 'verify: FAILED. The kustomize base config/default does not build, or is not what an install needs (above).'; \
		exit 1; \
	fi
	@echo 'verify: OK'

##@ Chaos

CHAOS_ARGS ?= -kills=50 -quiet=30s -backends=200 -handovers=3 -down=8s

.PHONY: chaos
chaos: $(TEST_PREREQS) ## Long chaos run of the real binary (50 SIGKILLs, leader handovers by SIGKILL and SIGTERM, every fault, 30s quiet windows): rewrites docs/reliability.md. `make test` runs the short form.
	$(ENVTEST_ENV) $(GO) test ./test/chaos -count=1 -v -timeout 60m -args $(CHAOS_ARGS) -report=$(CURDIR)/docs/reliability.md

##@ Fuzzing

FUZZTIME ?= 30s

.PHONY: fuzz
fuzz: controlplane ## Run each Go fuzz target for FUZZTIME (default 30s), one after another; a failing input is written to the package's testdata/fuzz/<target>/.
	$(GO) test ./internal/publish -run '^$$' -fuzz '^FuzzNormalize$$' -fuzztime $(FUZZTIME)
	$(GO) test ./internal/sliceplan -run '^$$' -fuzz '^FuzzPlanner$$' -fuzztime $(FUZZTIME)
	$(GO) test ./cmd/backendslice -run '^$$' -fuzz '^FuzzRenderDecode$$' -fuzztime $(FUZZTIME)
	$(ENVTEST_ENV) $(GO) test ./test/e2e -run '^$$' -fuzz '^FuzzValidateAgainstAdmission$$' -fuzztime $(FUZZTIME) -parallel 1

##@ Benchmarks

.PHONY: bench-churn
bench-churn: controlplane ## Replay the churn sequences (ours, with and without churn-aware placement, against upstream), then apply them on a real API server with 100 watchers counting bytes: rewrite the churn and fan-out sections of docs/benchmarks.md, docs/churn.png and docs/fanout.svg.
	$(ENVTEST_ENV) $(GO) test -tags bench -run 'TestChurnReport|TestFanoutReport' -count=1 -v -timeout 60m ./test/bench/churn -args -docs=$(CURDIR)/docs

.PHONY: bench-scale
bench-scale: controlplane ## Converge 10,000 endpoints and 2,000 backends on a real API server, against a bare client, and write docs/benchmarks-scale.md.
	$(ENVTEST_ENV) $(GO) test -tags bench -run TestScaleReport -count=1 -v -timeout 60m ./test/bench/scale -args -docs=$(CURDIR)/docs

.PHONY: bench-memory
bench-memory: controlplane ## Measure heap and RSS per 1,000 backends and per 10,000 endpoints, and the cache transforms' saving side by side: write the memory section of docs/benchmarks-scale.md.
	$(ENVTEST_ENV) $(GO) test -tags bench -run TestMemoryReport -count=1 -v -timeout 30m ./test/bench/memory -args -docs=$(CURDIR)/docs

.PHONY: bench-validate
bench-validate: ## Validate 1,000 ExternalBackends offline on one core, 5 rounds, after compiling the CRDs' CEL programs once: rewrites the validate section of docs/benchmarks.md.
	$(GO) test ./internal/validate -run '^TestValidateSpeed$$' -count=1 -v -args -report=$(CURDIR)/docs/benchmarks.md

.PHONY: bench-noisy
bench-noisy: controlplane ## Time another namespace's creates, health flips and revocations, busy and quiet, idle and under each attack in turn (label flips on 200 slices, 60 DNS names that never answer, a status and event storm, 300 SERVFAIL backends) with leader election on, and compare client-go's request limiter with the controller's: rewrites the noisy-neighbour and client-limit sections of docs/benchmarks.md (about 30 minutes on 2 cores). NOISY_FLAGS adds flags (go test -tags bench ./test/bench/noisy -args -h lists them).
	$(ENVTEST_ENV) $(GO) test -tags bench -run 'TestNoisyNeighbourReport|TestClientLimiterReport' -count=1 -v -timeout 60m ./test/bench/noisy -args -report=$(CURDIR)/docs/benchmarks.md $(NOISY_FLAGS)

FLEETS ?= 5000,10000,20000

.PHONY: bench-ceiling
bench-ceiling: controlplane ## Grow one fleet to each size of FLEETS (backends), time single changes and a restart at each, and write the ceiling section of docs/benchmarks-scale.md.
	$(ENVTEST_ENV) $(GO) test -tags bench -run TestCeilingReport -count=1 -v -timeout 90m ./test/bench/scale -args -docs=$(CURDIR)/docs -fleets=$(FLEETS)

MIGRATION_RUNS ?= 20

.PHONY: bench-migration
bench-migration: $(TEST_PREREQS) ## Migrate hand-written Services (slices, legacy Endpoints, rollback) onto ExternalBackends under traffic through kube-proxy, MIGRATION_RUNS each (default 20): rewrites the migration section of docs/benchmarks.md.
	$(ENVTEST_ENV) $(GO) test ./test/e2e/migration -run '^TestMigration$$' -count=1 -v -timeout 60m -args -runs=$(MIGRATION_RUNS) -report=$(CURDIR)/docs/benchmarks.md

FAILOVER_FLIPS ?= 100

.PHONY: bench-failover
bench-failover: $(TEST_PREREQS) ## Measure failover through kube-proxy for each kind of source (FAILOVER_FLIPS each, default 100) and rewrite the failover section of docs/benchmarks.md.
	$(ENVTEST_ENV) $(GO) test ./test/e2e/datapath -run '^TestFailover$$' -count=1 -v -timeout 60m -args -flips=$(FAILOVER_FLIPS) -report=$(CURDIR)/docs/benchmarks.md

PLUGIN_FLIPS ?= 100
PLUGIN_BACKENDS ?= 1000

.PHONY: bench-plugins
bench-plugins: controlplane consul ## Time PLUGIN_FLIPS (100) health flips to the slice through a plugin that pushes and through Consul in one run, and the idle cost of PLUGIN_BACKENDS (1,000) backends on one plugin, polled and pushed: rewrites the plugins section of docs/benchmarks.md.
	$(ENVTEST_ENV) $(GO) test ./test/e2e/plugins -run '^TestBenchmarkPlugins$$' -count=1 -v -timeout 60m -args -flips=$(PLUGIN_FLIPS) -cost-backends=$(PLUGIN_BACKENDS) -idle=2m -report=$(CURDIR)/docs/benchmarks.md

.PHONY: bench-probes
bench-probes: $(TEST_PREREQS) ## Probe 10,000 endpoints at a 10 s period on one prober, and time 50 server stops to the slice: rewrites the probes and probe-latency sections of docs/benchmarks.md.
	$(GO) test -tags bench -run TestProbeScaleReport -count=1 -v -timeout 30m ./test/bench/probes -args -report=$(CURDIR)/docs/benchmarks.md
	$(ENVTEST_ENV) $(GO) test ./test/e2e/probes -run '^TestStopToSlice$$' -count=1 -v -timeout 30m -args -flips=50 -report=$(CURDIR)/docs/benchmarks.md

.PHONY: bench-hostile
bench-hostile: ## Hold 64 probe targets and 64 plugin long-polls whose peers never end their answers (endless or trickling headers, huge bodies, TLS handshakes that never end) beside the same fleet answering well, each fleet in a process of its own: heap and RSS side by side; rewrites the hostile-peers section of docs/benchmarks.md (about 2 minutes).
	$(GO) test -tags bench -run TestHostileReport -count=1 -v -timeout 20m ./test/bench/hostile -args -report=$(CURDIR)/docs/benchmarks.md

# 0.2.0 has no tag: fcb9b8b is its last commit, the one before the first
# change CHANGELOG.md lists as unreleased (the code laid out by behaviour).
PREVIOUS_RELEASE ?= fcb9b8b
UPGRADES ?= 4
UPGRADE_BACKENDS ?= 200
# BASELINE=<commit> runs each upgrade a second time to that commit's
# controller, side by side in the report (the behaviour before a change).
BASELINE ?=

.PHONY: bench-upgrade
bench-upgrade: $(TEST_PREREQS) ## Upgrade two replicas from PREVIOUS_RELEASE (0.2.0) to this checkout as the chart's rolling update does, UPGRADES times, while a health check flips and a client connects through kube-proxy: rewrites the upgrade section of docs/benchmarks.md.
	$(ENVTEST_ENV) $(GO) test ./test/e2e/upgrade -run '^TestRollingUpgrade$$' -count=1 -v -timeout 30m -args -previous=$(PREVIOUS_RELEASE) -upgrades=$(UPGRADES) -backends=$(UPGRADE_BACKENDS) -baseline=$(BASELINE) -report=$(CURDIR)/docs/benchmarks.md

##@ Helm chart (Helm Go SDK, pinned in go.mod)

HELMCHART := $(GO) run ./test/helm/cmd/helmchart
# HELM_VALUES=file renders `make helm-template` with a values file.
HELM_VALUES ?=

.PHONY: helm-lint
helm-lint: ## Lint charts/backendslice with its defaults and the sample values; fails on warnings.
	$(HELMCHART) lint
	$(HELMCHART) lint -f test/helm/testdata/values-production.yaml

.PHONY: helm-template
helm-template: ## Print charts/backendslice as `helm template` renders it (HELM_VALUES=file for a values file).
	@$(HELMCHART) template $(if $(HELM_VALUES),-f $(HELM_VALUES))

##@ Run

.PHONY: demo
demo: controlplane build ## Run the demo against a local kube-apiserver and etcd.
	$(ENVTEST_ENV) $(BIN)/backendslice-demo

##@ Test binaries and tools

.PHONY: controlplane
controlplane: ## Build (once) and link kube-apiserver and etcd into bin/.
	$(INSTALL) etcd
	$(INSTALL) kube-apiserver

.PHONY: consul
consul: ## Build (once) and link the Consul agent into bin/.
	$(INSTALL) consul

.PHONY: dataplane
dataplane: ## Build (once) and link kube-proxy, kube-controller-manager and CoreDNS into bin/; install nft and ip (Debian's nftables, iproute2) when missing.
	$(INSTALL) kube-proxy
	$(INSTALL) kube-controller-manager
	$(INSTALL) coredns
	@missing=; \
	command -v nft >/dev/null || missing="$$missing nftables"; \
	command -v ip >/dev/null || missing="$$missing iproute2"; \
	if [[ -n "$$missing" ]]; then \
		echo "dataplane: installing Debian packages:$$missing (the data-path tests need nft and ip)"; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $$missing; \
	fi

.PHONY: shellcheck
shellcheck: ## Install Debian's shellcheck when missing (the workflows' lint runs it on every run: script).
	@if ! command -v shellcheck >/dev/null; then \
		echo 'shellcheck: installing Debian package shellcheck (test/workflows runs it through actionlint)'; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends shellcheck; \
	fi

.PHONY: tools
tools: controller-gen golangci-lint ## Build (once) and link controller-gen and golangci-lint into bin/.

# go-install-tool: go install $(2)@$(3) into $(CACHE_DIR)/$(1)-$(3)/ once, then link it into bin/.
# flock serialises concurrent installs of the same tool version. Paths are
# trimmed as in every other build here (cgo is off for all), so the standard
# library the tool needs is the one compiled for the rest, not compiled again.
define go-install-tool
@dir='$(CACHE_DIR)/$(1)-$(3)'; \
mkdir -p "$$dir" '$(BIN)'; \
if [[ ! -x "$$dir/$(1)" ]]; then \
	exec 9>"$$dir/.lock"; \
	if command -v flock >/dev/null; then flock 9; fi; \
	if [[ ! -x "$$dir/$(1)" ]]; then \
		echo '$(1) $(3): building it into '"$$dir"' (once; a few minutes cold)'; \
		start=$$SECONDS; \
		GOBIN="$$dir" GOWORK=off GOFLAGS='-trimpath -ldflags=-w' $(GO) install $(2)@$(3); \
		echo "$(1) $(3): built in $$((SECONDS - start))s"; \
	fi; \
fi; \
ln -sfn "$$dir/$(1)" '$(BIN)/$(1)' 2>/dev/null || cp -f "$$dir/$(1)" '$(BIN)/$(1)'
endef

.PHONY: controller-gen
controller-gen: ## Build (once) and link controller-gen into bin/.
	$(call go-install-tool,controller-gen,$(CONTROLLER_GEN_PKG),$(CONTROLLER_GEN_VERSION))

.PHONY: golangci-lint
golangci-lint: ## Build (once) and link golangci-lint into bin/.
	$(call go-install-tool,golangci-lint,$(GOLANGCI_LINT_PKG),$(GOLANGCI_LINT_VERSION))

##@ Clean

.PHONY: clean
clean: ## Remove bin/ (the per-machine build cache is kept).
	rm -rf $(BIN)
