# drain-guard agent image. Build from the repository root:
#   docker build -t <registry>/drain-guard:<version> .
# Two stages: the builder installs the agent (pyproject.toml, agent/drain_guard; never the
# simulator, a separate distribution in simulator/) and its dependencies
# into a virtual environment; the runtime stage copies only that environment onto the same
# slim Python base, so no compiler, build cache or source tree ends up in the image.

FROM python:3.11-slim-bookworm AS builder
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /src
COPY pyproject.toml README.md ./
COPY agent ./agent
# The environment gets no pip of its own; the builder's pip installs into it. The agent runs
# optimised (PYTHONOPTIMIZE=2 below) on a read-only root filesystem, so the bytecode it loads is
# compiled now, at that level, for the environment and for the standard library (the base image
# ships none), into one tree that PYTHONPYCACHEPREFIX points at. Hash-checked: a .pyc is used
# only for the very source it was compiled from, whatever the copies do to file times.
RUN python -m venv --without-pip /opt/drain-guard \
    && pip --python /opt/drain-guard/bin/python install --no-cache-dir --no-compile . \
    && PYTHONPYCACHEPREFIX=/opt/drain-guard/pycache python -m compileall -q -o 2 \
        --invalidation-mode checked-hash -x '^/usr/local/lib/python3\.11/site-packages/' \
        /usr/local/lib/python3.11 /opt/drain-guard/lib

FROM python:3.11-slim-bookworm
LABEL org.opencontainers.image.title="drain-guard" \
      org.opencontainers.image.description="Holds OpenShift MCO drain requests while a drain would be harmful or pointless" \
      org.opencontainers.image.licenses="Apache-2.0"
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
