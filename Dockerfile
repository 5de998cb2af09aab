# syntax=docker/dockerfile:1
#
# wal2delta container image.
#
#   docker build -t wal2delta:0.1.0 .                              # embedded Sail / Spark Connect
#   docker build --build-arg WITH_JRE=true -t wal2delta:0.1.0-jre .  # + JRE and Delta jars for
#                                                                    #   sink.spark.mode: classic
#
# Two stages: the builder installs the locked dependencies into a virtual environment at
# /opt/wal2delta and adds the wal2delta wheel built from the sources; the runtime stage
# copies only that environment onto a fresh slim image, so no build tooling, pip cache or
# source tree ends up in the image. The runtime runs as uid 10001 and works with a
# read-only root file system: it writes only to /tmp and /var/lib/wal2delta (volumes in
# Kubernetes).
#
# Dependencies come from requirements/*.lock (exported from uv.lock by `make lock`): exact
# versions with hashes, so an image built next month has the versions that were tested.
# The default image has the Spark Connect client only (pyspark-client); the JRE variant
# adds the classic extra (pyspark, delta-spark) over it and the jars, in the runtime stage.
# The demo (devtools/) is not part of the image: `wal2delta demo` is a development command.

ARG PYTHON_IMAGE=python:3.11.14-slim-bookworm

FROM ${PYTHON_IMAGE} AS builder

# true adds the classic extra (pyspark with its JVM side, delta-spark) from its lock.
ARG WITH_JRE=false

ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PYTHONDONTWRITEBYTECODE=1

WORKDIR /src
RUN python -m venv /opt/wal2delta

# A C compiler for the two kernels (decoder/_tuplewalk.c, sink/planning/_columnar.c), built into
# the wheel below; only in this stage: the runtime image gets the built module, not gcc.
# hadolint ignore=DL3008
RUN apt-get update \
    && apt-get install -y --no-install-recommends gcc libc6-dev \
    && rm -rf /var/lib/apt/lists/*

# Dependencies first, from the locks alone: that layer, by far the largest (pyarrow, Sail,
# deltalake), is reused from the build cache until a lock changes, whatever happens to the
# sources. pyspark (classic) is pyspark-client's files and more, at the same version.
COPY requirements/runtime.lock requirements/classic.lock requirements/
RUN /opt/wal2delta/bin/pip install --require-hashes -r requirements/runtime.lock \
    && if [ "${WITH_JRE}" = "true" ]; then \
        /opt/wal2delta/bin/pip install --require-hashes -r requirements/classic.lock; \
    fi

COPY pyproject.toml setup.py README.md ./
COPY capture/ capture/
COPY daemon/ daemon/
COPY decoder/ decoder/
COPY sink/ sink/
COPY config/ config/

# The wheel alone (--no-deps): nothing is resolved again; pip check fails the build when
# the lock does not satisfy what the wheel declares, and the import check when the
# decoder kernel was not compiled into it.
RUN /opt/wal2delta/bin/pip wheel --no-deps --wheel-dir /wheels . \
    && /opt/wal2delta/bin/pip install --no-deps /wheels/wal2delta-*.whl \
    && /opt/wal2delta/bin/pip check \
    && /opt/wal2delta/bin/python -c "import decoder, sys; sys.exit(decoder.DECODER_KERNEL != 'compiled')" \
    && /opt/wal2delta/bin/python -m compileall -q /opt/wal2delta/lib

FROM ${PYTHON_IMAGE} AS runtime

# Re-declared: an ARG before the first FROM is not visible inside a stage.
ARG PYTHON_IMAGE
# true adds a JRE and the Delta and S3A jars, for sink.spark.mode: classic (the builder
# installed pyspark and delta-spark with the same argument).
ARG WITH_JRE=false
ARG VERSION=0.1.0
ARG REVISION=unknown
ARG CREATED=unknown
ARG SOURCE=unknown

LABEL org.opencontainers.image.title="wal2delta" \
      org.opencontainers.image.description="PostgreSQL logical replication (pgoutput) into Delta Lake tables" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${REVISION}" \
      org.opencontainers.image.created="${CREATED}" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.source="${SOURCE}" \
      org.opencontainers.image.base.name="${PYTHON_IMAGE}"

ENV PATH="/opt/wal2delta/bin:${PATH}" \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    HOME=/tmp \
    WAL2DELTA_HEALTH_PORT=9187

# A fixed numeric uid/gid so Kubernetes can verify runAsNonRoot and volumes can be
# pre-owned. /var/lib/wal2delta holds the spool and, for local lakes, the lake; HOME is
# /tmp because it is the one place that stays writable under readOnlyRootFilesystem.
RUN groupadd --system --gid 10001 wal2delta \
    && useradd --system --uid 10001 --gid 10001 --home-dir /var/lib/wal2delta \
       --shell /usr/sbin/nologin wal2delta \
    && mkdir -p /var/lib/wal2delta/spool /var/lib/wal2delta/lake /etc/wal2delta \
    && chown -R 10001:10001 /var/lib/wal2delta

# Debian's JRE is pinned by the base image's release, not by version here: pinning an
# exact Debian revision breaks the build at every security update.
# hadolint ignore=DL3008
RUN if [ "${WITH_JRE}" = "true" ]; then \
        apt-get update \
        && apt-get install -y --no-install-recommends openjdk-17-jre-headless \
        && rm -rf /var/lib/apt/lists/*; \
    fi

COPY --from=builder /opt/wal2delta /opt/wal2delta
COPY deploy/docker/prefetch_delta_jars.py /opt/wal2delta/share/prefetch_delta_jars.py

# The jars a classic session needs, resolved once here (Maven Central, build time only) into
# pyspark/jars: at start the daemon uses them and never downloads anything.
RUN if [ "${WITH_JRE}" = "true" ]; then \
        /opt/wal2delta/bin/python /opt/wal2delta/share/prefetch_delta_jars.py \
        && rm -rf /tmp/* /var/lib/wal2delta/.cache; \
    fi

USER 10001:10001
WORKDIR /var/lib/wal2delta
EXPOSE 9187

# The slim image has no curl: ask Python. /healthz answers while the process is alive;
# readiness (/readyz) is for the orchestrator, not for restarting the container.
HEALTHCHECK --interval=30s --timeout=5s --start-period=60s --retries=3 \
    CMD ["python", "-c", "import os, urllib.request; urllib.request.urlopen('http://127.0.0.1:%s/healthz' % os.environ.get('WAL2DELTA_HEALTH_PORT', '9187'), timeout=4)"]

ENTRYPOINT ["wal2delta"]
CMD ["run", "-c", "/etc/wal2delta/config.yaml"]
