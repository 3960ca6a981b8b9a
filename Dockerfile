# drain-guard agent image. Build from the repository root, with a registry:
#   podman build -t <registry>/drain-guard:<version> .
# or, on a machine with no registry, `make image` (scripts/build-image.sh), which builds this
# same file against BASE, a Debian bookworm made by debootstrap (docs/image.md).
# Both stages are BASE plus Debian's own Python 3.11 (the same paths everywhere: the venv's
# interpreter is /usr/bin/python3.11 in both) and Debian's psutil and PyYAML, the two
# dependencies with C code that PyPI has no wheel of for every architecture the image is
# built for (docs/image.md): Debian builds them for all. The builder
# installs the agent (pyproject.toml, agent/drain_guard; never the simulator, a separate
# distribution in simulator/) and its other dependencies into a virtual environment; the
# runtime stage copies only that environment, so no compiler, pip, build cache or source tree
# ends up in the image.
ARG BASE=debian:bookworm-slim

# Wheels for pip to prefer to PyPI's: none, unless the build replaces this stage with a
# directory (`make image`: --build-context wheels=DIR).
FROM scratch AS wheels

FROM ${BASE} AS builder
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1
# Not pinned: bookworm's point and security releases replace these versions in the archive,
# and a pin would break the build with each; bookworm itself is the pin.
# hadolint ignore=DL3008
RUN apt-get update \
    && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
        python3.11 python3.11-venv python3-psutil python3-yaml \
    && rm -rf /var/lib/apt/lists/*
# Where pip finds the agent's dependencies: PyPI and the wheels stage; PIP_NO_INDEX=1 for the
# wheels alone (`make image`: its build has no way to PyPI, the host's pip downloaded them).
ARG PIP_NO_INDEX=0
WORKDIR /src
COPY pyproject.toml README.md ./
COPY agent ./agent
# The rights table: agent/drain_guard/rights.md is a link to it, resolved by the wheel build.
COPY docs/rights.md ./docs/
# pip lives in a venv of its own (/opt/pip, from Debian's ensurepip wheel) and installs into
# the agent's, which gets none. The agent's venv sees Debian's packages (psutil, PyYAML); pip
# installs the rest from wheels. The agent runs optimised (PYTHONOPTIMIZE=2 below) on a
# read-only root filesystem, so the bytecode it loads is compiled now, at that level, for the
# environment, Debian's packages and the standard library, into one tree that
# PYTHONPYCACHEPREFIX points at. Hash-checked: a .pyc is used only for the very source it was
# compiled from, whatever the copies do to file times.
RUN --mount=type=bind,from=wheels,target=/wheels \
    python3.11 -m venv /opt/pip \
    && python3.11 -m venv --without-pip --system-site-packages /opt/drain-guard \
    && /opt/pip/bin/pip --python /opt/drain-guard/bin/python install --no-cache-dir --no-compile \
        --find-links /wheels . \
    && PYTHONPYCACHEPREFIX=/opt/drain-guard/pycache python3.11 -m compileall -q -o 2 \
        --invalidation-mode checked-hash \
        /usr/lib/python3.11 /usr/lib/python3/dist-packages /opt/drain-guard/lib

FROM ${BASE}
LABEL org.opencontainers.image.title="drain-guard" \
      org.opencontainers.image.description="Holds OpenShift MCO drain requests while a drain would be harmful or pointless" \
      org.opencontainers.image.licenses="Apache-2.0"
# The builder's Debian packages less the venv module: the interpreter the venv points at.
# hadolint ignore=DL3008
RUN apt-get update \
    && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
        python3.11 python3-psutil python3-yaml \
    && rm -rf /var/lib/apt/lists/* /var/cache/apt/*.bin /var/log/apt /var/log/dpkg.log
COPY --from=builder /opt/drain-guard /opt/drain-guard
# Optimised: no docstrings (kubernetes_asyncio's are large) and no asserts (nothing in the
# agent relies on one); measured in docs/benchmarks.md, "Footprint". glibc's mmap threshold
# fixed at its default, 128 KiB: left dynamic, every freed large buffer raises it, later ones
# come from the heap, and the heap grew with every hold (about 3 KiB each, never returned;
# docs/reliability.md, "Soak").
ENV PATH=/opt/drain-guard/bin:$PATH \
    MALLOC_MMAP_THRESHOLD_=131072 \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONOPTIMIZE=2 \
    PYTHONPYCACHEPREFIX=/opt/drain-guard/pycache \
    PYTHONUNBUFFERED=1
# Numeric, so that Kubernetes can check runAsNonRoot without a passwd lookup; matches the
# DaemonSet's runAsUser.
USER 65532:65532
ENTRYPOINT ["drain-guard"]
CMD ["run"]
