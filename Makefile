# Every target sets up what it needs on a fresh machine: a .venv with the project and,
# for the tests, the system tools they drive (promtool and prometheus, containerd, runc and the
# CNI plugins from Debian) and the real control plane (kube-apiserver, kube-controller-manager,
# etcd) and node (kubelet, kube-scheduler, kube-proxy) built from source with Go.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test lint chaos bench system-deps control-plane image kube-rbac-proxy-image network-policy-enforcer systemd-root clean

$(STAMP): pyproject.toml simulator/pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[test,lint]' -e ./simulator
	touch $(STAMP)

system-deps:
	scripts/system-deps.sh

# Does nothing when the binaries in tools/control-plane/bin are current (keyed on go.sum).
control-plane:
	tools/control-plane/build.sh

# The agent's image, built on this machine from Debian's packages with debootstrap and buildah,
# no registry (scripts/build-image.sh, docs/image.md): build/image/drain-guard.oci.tar holds
# one image, localhost/drain-guard:VERSION (pyproject.toml's version), for
# `ctr -n k8s.io images import` or `podman load`. Rebuilt when what it installs changes.
IMAGE_ARCHIVE := build/image/drain-guard.oci.tar
image: $(IMAGE_ARCHIVE)

$(IMAGE_ARCHIVE): $(STAMP) Dockerfile .dockerignore scripts/build-image.sh pyproject.toml README.md docs/rights.md \
		$(shell find agent -name '*.py')
	scripts/system-deps.sh
	scripts/build-image.sh

# The kube-rbac-proxy sidecar's image for the node tests (the central shield's), built here:
# kube-rbac-proxy v0.19.1 from the Go module proxy, an image of its one static binary by
# buildah (scripts/build-kube-rbac-proxy.sh, docs/image.md): build/image/kube-rbac-proxy.oci.tar
# holds localhost/kube-rbac-proxy:v0.19.1. Does nothing when the archive was built by the
# script as it is (keyed on its content, not its date: a rebase rewrites the file).
kube-rbac-proxy-image: system-deps
	scripts/build-kube-rbac-proxy.sh

# A NetworkPolicy enforcer for the node tests (the bridge CNI plugin enforces none):
# kube-router from the Go module proxy (scripts/build-kube-router.sh), its network policy
# controller alone, build/kube-router/kube-router. Does nothing when built by the script as it
# is.
network-policy-enforcer: system-deps
	scripts/build-kube-router.sh

# A Debian bookworm whose PID 1 is systemd, from make image's debootstrap'd base, for the tests
# that boot the shipped units under it (scripts/build-systemd-root.sh).
SYSTEMD_ROOT := build/systemd/bookworm-systemd.tar
systemd-root: $(SYSTEMD_ROOT)

$(SYSTEMD_ROOT): $(IMAGE_ARCHIVE) scripts/build-systemd-root.sh
	scripts/build-systemd-root.sh

demo: $(STAMP)
	$(BIN)/drain-guard demo $${MCO:+--mco-version $$MCO} $(ARGS)

# On two workers per CPU (tests/conftest.py): the suite waits far more than it computes.
# worksteal: a worker that runs out takes tests from another's queue (the slow tests vary).
# The node tests (tests/node) run after, in one process of their own: one node per machine
# (its bridge, sysctls and iptables guard are host-wide), shared by all of them.
test: $(STAMP) system-deps control-plane image kube-rbac-proxy-image network-policy-enforcer systemd-root
	status=0; $(BIN)/pytest -n auto --dist worksteal -m 'not node' || status=$$?; \
	$(BIN)/pytest -p no:xdist -m node tests/node || status=$$?; exit $$status

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy
	$(BIN)/lint-imports
	$(BIN)/vulture

chaos: $(STAMP)
	$(BIN)/pytest -m slow tests/chaos --chaos-seeds=$${SEEDS:-200}

bench: $(STAMP)
	$(BIN)/python -m benchmarks

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache .hypothesis tools/control-plane/bin build/image build/kube-rbac-proxy build/systemd
