# appliance: `make run` brings up the lab, `make test` runs every tier (as root).
SHELL      := /bin/bash
GO         ?= go
# Evaluated once (:=), so every step of one make run names the same version
# even when a commit lands meanwhile; VERSION=... on the command line wins.
ifeq ($(origin VERSION), undefined)
VERSION    := $(shell git describe --always --dirty 2>/dev/null || echo dev)
endif
BIN        := bin/appliance
GOFLAGS_BUILD := -trimpath -ldflags "-s -w -X main.version=$(VERSION)"
# Debian packages the test tiers talk to: the real peers and tools.
TEST_DEBS  := keepalived bind9 bind9-utils iproute2 nftables tcpdump tshark stress-ng iputils-ping iputils-arping procps psmisc \
              bind9-dnsutils knot-dnsutils dnsperf avahi-daemon avahi-utils isc-dhcp-client udhcpc \
              kea-admin dnsmasq haproxy wrk iperf3 curl dbus \
              libvirt-daemon-system libvirt-clients qemu-system-x86 qemu-utils skopeo ignition systemd prometheus runc jq
# command each package provides, to see whether it is installed without asking dpkg per package
TEST_CMDS  := keepalived named named-checkconf ip nft tcpdump tshark stress-ng ping arping ps killall \
              dig kdig dnsperf avahi-daemon avahi-browse dhclient udhcpc perfdhcp dnsmasq haproxy wrk iperf3 curl dbus-daemon \
              libvirtd virsh qemu-system-x86_64 qemu-img skopeo ignition-validate systemd-analyze prometheus promtool runc jq
FUZZTIME   ?= 5s

.PHONY: all build image test test-deps unit kubelet soak-short soak-run soak-compare netns fuzz lint run soak bench clean

all: build

build:
	CGO_ENABLED=0 $(GO) build $(GOFLAGS_BUILD) -o $(BIN) ./cmd/appliance

# The node image: an OCI archive (scratch + /appliance), built without a container daemon by
# cmd/imagebuild, labelled with the binary's own version and dated at its commit, so the same
# binary gives the same digest. It prints the reference by digest (IMAGE_REPO@sha256:...) that
# `appliance ignition --image` takes; `skopeo copy oci-archive:$(IMAGE) docker://REGISTRY/appliance`
# copies the manifest as it is, so the digest holds there.
IMAGE      := bin/appliance-image.tar
IMAGE_REPO ?= localhost/appliance
image: build
	$(GO) run ./cmd/imagebuild -binary $(BIN) -out $(IMAGE) -repo $(IMAGE_REPO)

# Installs the Debian test dependencies only when one is missing.
test-deps:
	@missing=""; for c in $(TEST_CMDS); do command -v $$c >/dev/null 2>&1 || missing="$$missing $$c"; done; \
	if [ -n "$$missing" ]; then \
		echo "test-deps: missing$$missing; installing with apt-get"; \
		if [ "$$(id -u)" != 0 ]; then echo "test-deps: run as root to install$$missing" >&2; exit 1; fi; \
		apt-get update -qq && apt-get install -y -qq --no-install-recommends $(TEST_DEBS) >/dev/null; \
	fi

lint:
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	@# CGO_ENABLED=0 -trimpath as in build: vet and build share one set of compiled dependencies (a cold CI cache compiles client-go and friends once, not twice).
	CGO_ENABLED=0 $(GO) vet -trimpath ./...
	CGO_ENABLED=0 $(GO) vet -trimpath -tags kubelet ./e2e/
	$(GO) test -count=1 -run 'TestDependencyGuard|TestLayering' ./cmd/appliance

# The KubeVirt provider's tests run a real kube-apiserver: build.sh builds it once per
# machine (~6 min cold, cached after) and prints its folder, which the tests read from
# KUBEBUILDER_ASSETS (without it they skip; under CI=true they fail).
KUBE_TOOLS := ../shared/tools/kube-apiserver

# Tier 1-4: unit, loopback and network-namespace tests (the latter need root;
# under CI=true they fail instead of skipping).
unit:
	assets=$$($(KUBE_TOOLS)/build.sh) && KUBEBUILDER_ASSETS=$$assets $(GO) test -race -count=1 -timeout 20m ./...
	@# go-ovirt-client's in-memory mock mutates the objects it hands out from its
	@# own goroutines, so its scenario tests skip under -race; run them plainly.
	$(GO) test -count=1 ./platform/ovirt/

# A short native-fuzz pass over every wire decoder (the seed corpora also run in `unit`).
fuzz:
	@log=$$(mktemp); trap 'rm -f $$log' EXIT; \
	for pkg in $$($(GO) list ./...); do \
		for f in $$($(GO) test -list '^Fuzz' $$pkg 2>/dev/null | grep '^Fuzz'); do \
			echo "fuzz $$pkg $$f ($(FUZZTIME))"; \
			for try in 1 2; do \
				$(GO) test -run '^$$' -fuzz "^$$f$$" -fuzztime $(FUZZTIME) $$pkg >$$log 2>&1 && break; \
				if [ $$try = 1 ] && grep -q 'context deadline exceeded' $$log && ! grep -q 'Failing input written' $$log; then \
					echo "  go1.26's fuzz coordinator raced its own -fuzztime deadline (golang/go#75804, fixed in 1.27); no failing input: once more"; \
					continue; \
				fi; \
				cat $$log; exit 1; \
			done; \
		done; \
	done

# Tier 6b, the kubelet tier (e2e, build tag kubelet): the static pod run only as a node runs it,
# by a real kubelet v1.37 (containerd v2.4, runc) in each node namespace of the lab's cluster,
# from the image make image builds (the tests build it from the same source, twice: the upgrade
# needs a second version). build.sh builds the kubelet tools once per machine (~7 min cold,
# cached after) and prints their folder. About 5 minutes (README, "The kubelet tier").
KUBELET_TOOLS := ../shared/tools/kubelet
kubelet:
	assets=$$($(KUBELET_TOOLS)/build.sh) && KUBELET_ASSETS=$$assets \
	$(GO) test -count=1 -tags kubelet -run '^TestKubelet' -v -timeout 20m ./e2e/

# A short fault soak (SOAK_SHORT, fixed seed) after the unit tiers, so every change meets the faults.
test: test-deps lint build unit kubelet soak-short fuzz

# The fault soak (`appliance soak`, README "The fault soak"): the lab's cluster under constant load while a
# seeded schedule injects faults; exit 0 only when every invariant held. SOAK=30m make soak; SEED picks
# the schedule (the same seed and duration give the same faults). The kube-apiserver (the Node source
# and the kube-restart and day2-node faults) comes from KUBE_TOOLS as for `make run`; without it those
# faults are skipped and the report says why, but under CI=true a missing one fails.
SOAK       ?= 5m
SOAK_SHORT ?= 3m
SEED       ?= 1
SOAK_FLAGS ?=
soak: build test-deps
	@$(MAKE) --no-print-directory soak-run SOAK_DURATION=$(SOAK)

soak-short: build
	@if [ "$$(id -u)" != 0 ]; then \
		if [ "$$CI" = true ]; then echo "soak-short: needs root (network namespaces); CI=true, so this fails" >&2; exit 1; fi; \
		echo "soak-short: skipped, needs root (network namespaces)"; exit 0; \
	fi; \
	$(MAKE) --no-print-directory soak-run SOAK_DURATION=$(SOAK_SHORT)

soak-run:
	@if [ "$$(id -u)" != 0 ]; then echo "the soak needs root (network namespaces)" >&2; exit 1; fi
	@assets=""; \
	if [ -x $(KUBE_TOOLS)/build.sh ]; then \
		assets=$$($(KUBE_TOOLS)/build.sh) || { [ "$$CI" = true ] && { echo "soak: $(KUBE_TOOLS)/build.sh failed" >&2; exit 1; }; \
			echo "soak: build.sh failed; no Kubernetes API"; assets=""; }; \
	elif [ "$$CI" = true ]; then echo "soak: no $(KUBE_TOOLS)/build.sh (the kube-apiserver); CI=true, so this fails" >&2; exit 1; fi; \
	./$(BIN) soak --duration $(SOAK_DURATION) --seed $(SEED) --kube-tools $(KUBE_TOOLS) --kube-assets "$$assets" \
		$(if $(filter true,$(CI)),--require-kube) $(SOAK_FLAGS)

# The side by side: the soak's schedule (SOAK, SEED) on `appliance run`, then the same schedule on the
# stack it replaces (keepalived, haproxy and CoreDNS as OpenShift's templates configure them; the loops
# of runtimecfg's monitors run in the soak), then both reports in one table. Exit 0 when the
# appliance's soak held every invariant: the classic stack's broken ones are the comparison.
# SOAK=30m SEED=1 make soak-compare
soak-compare: build test-deps bin/coredns
	@dir=soak-reports/compare-$$(date +%Y%m%d-%H%M%S)-seed$(SEED); \
	$(MAKE) --no-print-directory soak-run SOAK_DURATION=$(SOAK) SOAK_FLAGS="--report-dir $$dir/appliance $(SOAK_FLAGS)"; apl=$$?; \
	$(MAKE) --no-print-directory soak-run SOAK_DURATION=$(SOAK) \
		SOAK_FLAGS="--stack classic --coredns bin/coredns --report-dir $$dir/classic $(SOAK_FLAGS)"; \
	./$(BIN) soak compare $$dir/appliance/report.json $$dir/classic/report.json | tee $$dir/compare.txt; \
	echo "side by side: $$dir/compare.txt"; exit $$apl

# Stock CoreDNS (every plugin) at the version go.mod names, for the classic stack.
bin/coredns: go.mod go.sum
	cd "$$($(GO) list -m -f '{{.Dir}}' github.com/coredns/coredns)" && GOFLAGS=-mod=mod CGO_ENABLED=0 $(GO) build -o $(CURDIR)/bin/coredns .

# The lab: a bootstrap, three masters and two workers running `appliance run`, a client calling
# the API through the VIP through the bootstrap's teardown, a master's death and a day-2 worker.
# That worker's Node object goes through a real kube-apiserver once `appliance run` takes
# --kubeconfig and build.sh can build it (~6 min the first time); otherwise it joins through mDNS.
# make run KUBELET=1 runs the same cluster through a real kubelet per node, the appliance as the
# static pod from make image's image; it needs the kubelet tools built ($(KUBELET_TOOLS)/build.sh,
# ~7 min the first time) and says so when they are not.
run: build test-deps $(if $(KUBELET),image)
	@if [ "$$(id -u)" != 0 ]; then echo "make run needs root (network namespaces)" >&2; exit 1; fi
	@assets=""; \
	if ./$(BIN) run --help 2>/dev/null | grep -q -- '--kubeconfig' && [ -x $(KUBE_TOOLS)/build.sh ]; then \
		echo "make run: kube-apiserver for the day-2 worker: $(KUBE_TOOLS)/build.sh (cached after the first build)"; \
		assets=$$($(KUBE_TOOLS)/build.sh) || { echo "make run: build.sh failed; the day-2 worker joins through mDNS"; assets=""; }; \
	fi; \
	./$(BIN) lab --kube-tools $(KUBE_TOOLS) --kube-assets "$$assets" \
		$(if $(KUBELET),--kubelet --kubelet-tools $(KUBELET_TOOLS) --kubelet-image $(IMAGE))

# Side-by-side benchmarks against the anchors; results go into BENCHMARKS.md.
bench: build test-deps
	assets=$$($(KUBE_TOOLS)/build.sh) && KUBEBUILDER_ASSETS=$$assets \
	$(GO) test -count=1 -p 1 -tags bench -run '^TestBench' -v -timeout 80m ./... 2>&1 | tee bench.out

clean:
	rm -rf bin bench.out soak-reports
