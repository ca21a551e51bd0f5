# syntax=docker/dockerfile:1
# One image for every role:  docker run IMAGE coordinator | worker | run | train | health ADDR
#   docker build -t hogwild:latest .
# Needs BuildKit (the default builder since Docker 23) for the wheel bind mount below.

ARG PYTHON_VERSION=3.11

# --- builder: wheels for hogwild and all its dependencies ---------------------------------
FROM python:${PYTHON_VERSION}-slim-bookworm AS builder

ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_ROOT_USER_ACTION=ignore

WORKDIR /src

# Dependencies first, read from pyproject.toml: this layer is rebuilt only when they change,
# not on every source edit.
COPY pyproject.toml ./
RUN python -c "import tomllib; print('\n'.join(tomllib.load(open('pyproject.toml', 'rb'))['project']['dependencies']))" \
        > /tmp/requirements.txt \
 && pip wheel --wheel-dir /wheels -r /tmp/requirements.txt

# The hogwild wheel itself. setup.py's build hook runs protoc (grpcio-tools, a build
# requirement) so the generated gRPC stubs are part of the wheel; .dockerignore keeps any
# locally generated copies out of the context.
COPY setup.py README.md ./
COPY protos/ protos/
COPY src/ src/
RUN pip wheel --no-deps --wheel-dir /wheels .

# --- runtime: the installed wheel, nothing from the build ---------------------------------
FROM python:${PYTHON_VERSION}-slim-bookworm AS runtime

ARG UID=10001
ARG GID=10001

# NUMBA_CACHE_DIR holds the kernels compiled below, writable by any uid (compose may run the
# coordinator as the host user): numba uses no cache directory it cannot write to, so under a
# read-only root filesystem (k8s/) an init container copies it to /tmp and the pod points
# NUMBA_CACHE_DIR there. XDG_CACHE_HOME (parsed-data cache, numba's fallback) and
# MPLCONFIGDIR point at /tmp so a read-only root filesystem still works.
ENV PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_ROOT_USER_ACTION=ignore \
    NUMBA_CACHE_DIR=/opt/hogwild/numba-cache \
    XDG_CACHE_HOME=/tmp/.cache \
    MPLCONFIGDIR=/tmp/matplotlib \
    MPLBACKEND=Agg

RUN groupadd --system --gid "${GID}" hogwild \
 && useradd --system --uid "${UID}" --gid hogwild --home-dir /home/hogwild --create-home \
        --shell /usr/sbin/nologin hogwild

# Install from the builder's wheels only (no index): the runtime stage never compiles or
# downloads anything, and the wheels themselves do not end up in a layer.
RUN --mount=type=bind,from=builder,source=/wheels,target=/wheels \
    pip install --no-index --find-links=/wheels /wheels/hogwild-*.whl

# Compile the numba kernels once at build time so no container pays for it at start.
RUN mkdir -p /opt/hogwild/numba-cache /data /out \
 && python -m hogwild.runtime.warmup \
 && chmod -R a+rwX /opt/hogwild/numba-cache \
 && chown hogwild:hogwild /data /out \
 && hogwild --version

# /data: your data files (point `data`/`test_data` at /data/...); /out: run outputs.
VOLUME ["/data", "/out"]
WORKDIR /out
USER ${UID}:${GID}

# coordinator_port and worker_port defaults (settings.yaml)
EXPOSE 50051 50061

# No HEALTHCHECK here: the image also runs one-shot commands (train, run, --help) that serve
# nothing. docker-compose.yml and k8s/ probe the servers with `hogwild health` / gRPC probes.
# hogwild handles SIGTERM itself (health turns NOT_SERVING, deltas drain, exit 0).
STOPSIGNAL SIGTERM
ENTRYPOINT ["hogwild"]
CMD ["--help"]
