# ipkeeper — see README.md. `make help` lists the targets.
SHELL := /usr/bin/env bash
.SHELLFLAGS := -euo pipefail -c
.DEFAULT_GOAL := build

VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
BIN_DIR ?= $(CURDIR)/bin
LDFLAGS := -s -w -X github.com/ipkeeper/ipkeeper/internal/version.Version=$(VERSION)
GO_TEST_FLAGS ?= -race -count=1
# The control-plane suites run without the race detector, on a CI machine
# whose two cores they keep busy: e2e, install and chart run ipkeeper as
# processes built as shipped, where -race would instrument only the test
# harness; the integration suite runs ipkeeper's controllers and agents in
# the test process, where -race doubles its CPU time, so it keeps -race for
# the tests whose point is concurrency (INTEGRATION_RACE_TESTS: many writers
# on one pool or address at once, a leader handing over). The unit tests and
# the short chaos run keep it throughout.
SUITE_TEST_FLAGS ?= -count=1
INTEGRATION_RACE_TESTS := ^(TestAgentsRacingHaveNoDuplicates|TestClusterAPIConcurrentClaims|TestMixedStormOnOnePool|TestClaimsAndPodsNeverShareAnAddress|TestConcurrentReservationsHaveOneWinner|TestLeaderElectionFailover)$$

# Paths of the pinned tool binaries (built by `make tools`, cached outside the checkout).
TOOLS_ENV := $(shell bash hack/tools.sh --env)
$(foreach kv,$(TOOLS_ENV),$(eval export $(kv)))

BINARIES := ipkeeper ipkeeper-agent ipkeeper-controller kubectl-ipkeeper
# Static binaries: the image has nothing else (its base is empty), and the
# agent copies the CNI plugin onto hosts of any distribution.
GO_BUILD = CGO_ENABLED=0 go build -trimpath -ldflags '$(LDFLAGS)'

.PHONY: help
help: ## List targets.
	@grep -E '^[a-z0-9-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-18s %s\n", $$1, $$2}'

.PHONY: build
build: ## Build the binaries (CNI plugin, agent, controller, kubectl plugin) into bin/.
	@mkdir -p $(BIN_DIR)
	for b in $(BINARIES); do $(GO_BUILD) -o $(BIN_DIR)/$$b ./cmd/$$b; done
	install -m 0755 cmd/kubectl-ipkeeper/kubectl_complete-ipkeeper $(BIN_DIR)/

# make image IMAGE=registry.example.org/ipkeeper:v1 IMAGE_PLATFORMS=linux/amd64:
# another name or fewer platforms. Every timestamp in the image is the
# commit's, so the same commit gives the same digest.
IMAGE ?= ghcr.io/ipkeeper/ipkeeper:$(VERSION)
IMAGE_DIR ?= $(BIN_DIR)/image
IMAGE_PLATFORMS ?= linux/amd64 linux/arm64
REVISION ?= $(shell git rev-parse HEAD 2>/dev/null || echo unknown)
SOURCE_DATE_EPOCH ?= $(shell git log -1 --format=%ct 2>/dev/null || echo 0)
.PHONY: image
image: ## OCI image of the four binaries, no Docker or base image needed: bin/image/oci (OCI layout, amd64+arm64), ipkeeper.oci.tar, ipkeeper-linux-<arch>.docker.tar (docs/install.md).
	for p in $(IMAGE_PLATFORMS); do \
		GOOS=$${p%/*} GOARCH=$${p#*/} $(GO_BUILD) -o $(IMAGE_DIR)/bin/$${p%/*}_$${p#*/}/ $(addprefix ./cmd/,$(BINARIES)); \
	done
	go run ./hack/image -out '$(IMAGE_DIR)' -bin-dir '$(IMAGE_DIR)/bin' -binaries '$(BINARIES)' -platforms '$(IMAGE_PLATFORMS)' \
		-image '$(IMAGE)' -version '$(VERSION)' -revision '$(REVISION)' -created '$(SOURCE_DATE_EPOCH)'

# make release VERSION=v0.1.0 IMAGE=registry.example.org/ipkeeper: builds the
# image, pushes it as IMAGE:VERSION (PUSH=false: does not; INSECURE=true: plain
# HTTP) and writes the assets into RELEASE_DIR: install.yaml,
# install-<overlay>.yaml and the Helm chart package, each pinning the image
# by digest; the kubectl plugin's krew archives
# kubectl-ipkeeper_<os>_<arch>.tar.gz and manifest ipkeeper.yaml (its uris
# under PLUGIN_BASE_URL/VERSION/); SHA256SUMS (hack/release, docs/install.md). Here IMAGE is a repository
# without tag, by default ghcr.io/ipkeeper/ipkeeper.
RELEASE_IMAGE = $(if $(filter file,$(origin IMAGE)),ghcr.io/ipkeeper/ipkeeper,$(IMAGE))
RELEASE_DIR ?= $(BIN_DIR)/release/$(VERSION)
PUSH ?= true
INSECURE ?= false
PLUGIN_BASE_URL ?= https://github.com/ipkeeper/ipkeeper/releases/download
.PHONY: release
release: ## Build, push and pin a release: make release VERSION=v0.1.0 IMAGE=registry.example.org/ipkeeper -> bin/release/<VERSION>/ (install.yaml, chart, krew plugin, SHA256SUMS).
	go run ./hack/release -check -version '$(VERSION)' -image '$(RELEASE_IMAGE)' -insecure=$(INSECURE) -plugin-base-url '$(PLUGIN_BASE_URL)'
	bash hack/tools.sh kubernetes helm
	$(MAKE) --no-print-directory image IMAGE='$(RELEASE_IMAGE):$(VERSION)' IMAGE_DIR='$(RELEASE_DIR)/image'
	go run ./hack/release -version '$(VERSION)' -image '$(RELEASE_IMAGE)' -layout '$(RELEASE_DIR)/image/oci' -out '$(RELEASE_DIR)' \
		-push=$(PUSH) -insecure=$(INSECURE) -kubectl '$(IPKEEPER_KUBECTL)' -helm '$(IPKEEPER_HELM)' \
		-bin-dir '$(RELEASE_DIR)/image/bin' -created '$(SOURCE_DATE_EPOCH)' -plugin-base-url '$(PLUGIN_BASE_URL)'

.PHONY: tools
tools: ## Build the pinned etcd, kube-apiserver, kube-controller-manager, kubectl, CNI plugins, Multus, controller-gen, KubeVirt virt-controller, whereabouts, ipam-extensions, helm, promtool and kubeconform (cached; the first time about 35 minutes on two cores).
	bash hack/tools.sh

.PHONY: generate
generate: ## Regenerate deepcopy code, CRD manifests, RBAC roles, and the Helm chart's copies of the CRDs and alert rules.
	bash hack/tools.sh controller-gen
	$(IPKEEPER_CONTROLLER_GEN) object:headerFile=hack/boilerplate.go.txt paths=./pkg/apis/...
	$(IPKEEPER_CONTROLLER_GEN) crd paths=./pkg/apis/... output:crd:artifacts:config=manifests/crds
	$(IPKEEPER_CONTROLLER_GEN) rbac:roleName=ipkeeper-controller paths=./internal/controller/manager/... output:rbac:artifacts:config=manifests/rbac/controller
	$(IPKEEPER_CONTROLLER_GEN) rbac:roleName=ipkeeper-agent paths=./internal/node/agent/... output:rbac:artifacts:config=manifests/rbac/agent
	go run ./hack/crdgen -crd-dir manifests/crds -test-crd-dir tests/crds
	go run ./hack/chartgen -crd-dir manifests/crds -prometheus-rule manifests/components/monitoring/prometheusrule.yaml -chart charts/ipkeeper
	go run ./hack/chartdoc -values charts/ipkeeper/values.yaml charts/ipkeeper/README.md docs/helm.md

.PHONY: verify-generated
verify-generated: ## Fail when generated files are stale.
	bash hack/verify-generated.sh

.PHONY: lint
lint: ## gofmt check, go vet, the SPDX licence line in every Go file, docs/development.md's code map against the packages, golangci-lint, and kubeconform on the rendered manifests and chart.
	@out=$$(gofmt -l $$(git ls-files '*.go' | grep -v '^vendor/')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	go vet ./...
	bash hack/check-license.sh
	go test -count=1 -run '^TestCodeMapNamesThePackagesThatExist$$' ./hack/docscheck/
	bash hack/tools.sh golangci-lint
	$(IPKEEPER_GOLANGCI_LINT) run --allow-parallel-runners ./...
	bash hack/kubeconform.sh

.PHONY: test-unit
test-unit: ## Unit tests (no control plane), and the alert rules' unit tests with the pinned promtool (tests/monitoring).
	bash hack/tools.sh promtool
	go test $(GO_TEST_FLAGS) ./pkg/... ./internal/... ./cmd/... ./hack/... ./tests/monitoring/...

.PHONY: test-image
test-image: ## `make image` into a temporary directory, read back: config, static binaries, archives, same digest twice, the Dockerfile's agreement (no Docker).
	go test -count=1 -v -run '^TestImage$$' ./hack/image/

.PHONY: test-integration
test-integration: tools ## Integration tests on a real etcd + kube-apiserver + kube-controller-manager (tests/integration).
	go test $(SUITE_TEST_FLAGS) -timeout 30m -v -skip '$(INTEGRATION_RACE_TESTS)' ./tests/integration/...
	go test $(GO_TEST_FLAGS) -timeout 10m -v -run '$(INTEGRATION_RACE_TESTS)' ./tests/integration/...

.PHONY: test-install
test-install: tools ## The install tests (tests/install: manifests, overlays, release, Helm on a real control plane).
	go test $(SUITE_TEST_FLAGS) -timeout 20m -v ./tests/install/...

.PHONY: test-chart
test-chart: tools ## The Helm chart's checks (tests/chart): against the kustomize tree, its values, lint, the flags it passes; no API server.
	go test $(SUITE_TEST_FLAGS) -timeout 10m -v ./tests/chart/...

.PHONY: test-e2e
test-e2e: tools ## End-to-end tests as root: controller and agent processes, real Multus/bridge/macvlan plugins, network namespaces (skipped when not root).
	go test $(SUITE_TEST_FLAGS) -timeout 20m -v ./tests/e2e/...

.PHONY: test-chaos
test-chaos: tools ## The short fixed-seed chaos run: random operations and faults on agent and controller processes, invariants checked (tests/chaos).
	go test $(GO_TEST_FLAGS) -timeout 10m -v ./tests/chaos/

# The real-node lane: two nodes with Debian's containerd and runc and the
# pinned kubelet, each in its own network, mount and PID namespaces, the
# real kube-scheduler, Multus' DaemonSet and ipkeeper installed from
# manifests/ with the image `make image` builds here (tests/nodes,
# docs/development.md#real-nodes).
LAB_ARCH := $(shell go env GOARCH)
LAB_IMAGE_DIR := $(BIN_DIR)/lab-image
LAB_TOOLS := etcd kubernetes kubernetes-node node-images guest-kernel cni-plugins multus kubevirt kubevirt-node launcher-rootfs guest-rootfs
.PHONY: test-nodes
test-nodes: ## The real-node lane as root: real kubelets, containerd, Multus and ipkeeper installed as it ships.
	bash hack/tools.sh $(LAB_TOOLS)
	$(MAKE) --no-print-directory image IMAGE=lab.ipkeeper.test/ipkeeper:dev IMAGE_PLATFORMS=linux/$(LAB_ARCH) IMAGE_DIR='$(LAB_IMAGE_DIR)'
	IPKEEPER_LAB_IMAGE='$(LAB_IMAGE_DIR)/ipkeeper-linux-$(LAB_ARCH).docker.tar' go test $(SUITE_TEST_FLAGS) -timeout 20m -v ./tests/nodes/

.PHONY: bench-nodes
bench-nodes: ## As root: figure 8 of docs/performance.md, a VM's creation to its guest's address on the real nodes, ipkeeper against host-local in the same run (not part of make test).
	bash hack/tools.sh $(LAB_TOOLS)
	$(MAKE) --no-print-directory image IMAGE=lab.ipkeeper.test/ipkeeper:dev IMAGE_PLATFORMS=linux/$(LAB_ARCH) IMAGE_DIR='$(LAB_IMAGE_DIR)'
	IPKEEPER_LAB_IMAGE='$(LAB_IMAGE_DIR)/ipkeeper-linux-$(LAB_ARCH).docker.tar' go test -run '^$$' -bench VMBootRealNodes -benchtime=1x -count=1 -timeout 30m -v ./tests/nodes/

.PHONY: demo-real
demo-real: ## Watch a real guest keep its address and MAC across a live migration between two real nodes (root; the real-node lane's scenario).
	@if [ "$$(id -u)" != 0 ]; then \
		echo "make demo-real must run as root: its nodes are namespaces with their own containerd and kubelet. Run: sudo -E make demo-real" >&2; exit 1; fi
	@echo "make demo-real: building the real-node lane's tools if they are not cached yet (part of make tools, whose first build is given in its help; the lane's part about 25 minutes)..."
	@bash hack/tools.sh $(LAB_TOOLS) >/dev/null
	@$(MAKE) --no-print-directory image IMAGE=lab.ipkeeper.test/ipkeeper:dev IMAGE_PLATFORMS=linux/$(LAB_ARCH) IMAGE_DIR='$(LAB_IMAGE_DIR)' >/dev/null
	@echo "make demo-real: starting a control plane, two real nodes, Multus, ipkeeper and KubeVirt's node side, then a VM (about 3 minutes)..."
	@IPKEEPER_LAB_IMAGE='$(LAB_IMAGE_DIR)/ipkeeper-linux-$(LAB_ARCH).docker.tar' bash -o pipefail -c \
		"go test -count=1 -timeout 15m -v -run '^TestRealNodes\$$/^VMs\$$/^VMLiveMigration\$$/^LiveMigration\$$' ./tests/nodes/ | grep -e '_test.go:[0-9]*: ' -e '^--- FAIL' -e '^FAIL'"
	@echo "make demo-real: done. Every real-node scenario, asserted, runs in 'make test' (tests/nodes, docs/development.md#real-nodes)."

# make chaos DURATION=10m SEED=42: a long chaos run; the same SEED replays the
# same schedule. Without them, the short fixed-seed run of test-chaos.
# RACE=1 builds the agent and the controller with the race detector.
DURATION ?=
SEED ?=
RACE ?=
.PHONY: chaos
chaos: tools ## Chaos run: make chaos DURATION=10m SEED=n runs long (replay a run with its seed); no args: the short fixed-seed run.
	CHAOS_DURATION=$(DURATION) CHAOS_SEED=$(SEED) CHAOS_RACE=$(RACE) go test -count=1 -timeout 0 -v -run '^TestChaos$$' ./tests/chaos/

LEFTOVERS := $(shell mktemp -u /tmp/ipkeeper-leftovers.XXXXXX)

# The control-plane suites run in two lanes side by side (hack/side-by-side.sh),
# which end about together: integration, then the image and chart tests, in
# one; the unit tests, e2e, then install, in the other. The short chaos
# run comes after them, alone: it loads both cores, and its faults and
# timings are its own. The generated-files check and lint come first, to fail
# fast, and the tools are built before the lanes, once, so that the lanes
# never build them at the same time.
.PHONY: test
test: ## Everything CI runs, then a check that it left no network namespace, interface, process or temporary directory behind.
	@bash hack/leftovers.sh snapshot $(LEFTOVERS)
	@$(MAKE) --no-print-directory verify-generated lint tools || { rm -f $(LEFTOVERS); exit 1; }
	@MAKE='$(MAKE)' bash hack/side-by-side.sh 'test-integration test-image test-chart' 'test-unit test-e2e test-install' || { rm -f $(LEFTOVERS); exit 1; }
	@$(MAKE) --no-print-directory test-nodes || { rm -f $(LEFTOVERS); exit 1; }
	@$(MAKE) --no-print-directory test-chaos || { rm -f $(LEFTOVERS); exit 1; }
	@bash hack/leftovers.sh check $(LEFTOVERS); status=$$?; rm -f $(LEFTOVERS); exit $$status

.PHONY: clean
clean: ## Remove build output (not the tools cache).
	rm -rf $(BIN_DIR)

.PHONY: demo
demo: ## Walk through a VM keeping its address (root: network namespaces and bridges).
	@if [ "$$(id -u)" != 0 ]; then \
		echo "make demo must run as root: it creates network namespaces, bridges and a root-only socket. Run: sudo -E make demo" >&2; exit 1; fi
	@command -v ping >/dev/null 2>&1 || { echo "make demo needs ping (Debian/Ubuntu: apt-get install iputils-ping) and ip (iproute2)" >&2; exit 1; }
	@echo "make demo: building the pinned etcd, kube-apiserver, kube-controller-manager, kubectl, CNI plugins, Multus and"
	@echo "KubeVirt's virt-controller if they are not cached yet in ~/.cache/ipkeeper/tools: part of 'make tools', whose"
	@echo "first build takes about 35 minutes on two cores (the demo's part about 15)."
	@bash hack/tools.sh etcd kubernetes cni-plugins multus kubevirt
	@echo "make demo: building ipkeeper and starting the local control plane (about half a minute)..."
	@IPKEEPER_DEMO=1 go test -count=1 -timeout 10m -v -run '^TestDemo$$' ./tests/e2e/ | grep -v -e '^=== RUN' -e '^--- PASS' -e '^PASS$$' -e '^ok '
	@echo "make demo: done. The same scenarios, asserted, run in 'make test' (tests/e2e/system_test.go)."

# make bench BENCH='Shim|Exhaustion': only those figures (AllocationStorm
# Scaling Whereabouts Shim Memory Exhaustion BootStorm; "Storm" matches
# figures 1 and 7); docs/performance.md reads the table.
BENCH ?= .
.PHONY: bench
bench: tools ## The seven figures of docs/performance.md on a real control plane, each against a same-run baseline, plus micro-benchmarks.
	go test -run '^$$' -bench '$(BENCH)' -benchtime=1x -count=1 -timeout 40m -v ./tests/bench/
	go test -run '^$$' -bench . -benchmem ./internal/allocator/ ./internal/iprange/ ./internal/node/agent/...
