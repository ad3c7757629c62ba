# hipq in a container. Build: docker build -t hipq:local .
# It listens on 0.0.0.0 inside the container, so hipq serve requires a bearer token
# (see docs/security.md); the image mints one itself:
#   docker run --rm hipq:local hipq tokens new --name ops --scope admin
#   docker run -d --restart unless-stopped -v hipq-data:/var/lib/hipq \
#     -p 127.0.0.1:8000:8000 -e HIPQ_TOKENS='<the line it printed>' hipq:local
# The SQLite file lives on the /var/lib/hipq volume, the config at
# /etc/hipq/config.yaml (mount your own). See docs/production.md.
#
# The base images are named by tag: pin them by digest (python:3.11-slim@sha256:...)
# in your registry's mirror for builds that must not move.

FROM python:3.11-slim AS build
WORKDIR /src
COPY pyproject.toml README.md constraints.txt ./
COPY hipq ./hipq
COPY throttlers ./throttlers
COPY alembic ./alembic
# Pinned versions (constraints.txt): the same image from the same commit.
RUN python -m venv /opt/hipq \
    && /opt/hipq/bin/pip install --no-cache-dir --constraint constraints.txt .

FROM python:3.11-slim
COPY --from=build /opt/hipq /opt/hipq
COPY deploy/container-config.yaml /etc/hipq/config.yaml
COPY deploy/healthcheck.py /opt/hipq/healthcheck.py
RUN useradd --system --uid 10001 --home-dir /var/lib/hipq --shell /usr/sbin/nologin hipq \
    && mkdir -p /var/lib/hipq && chown hipq:hipq /var/lib/hipq
# One container on its own SQLite file migrates at start; with several processes
# on PostgreSQL set HIPQ_MIGRATE_ON_START=false and run `hipq migrate` once instead.
ENV PATH=/opt/hipq/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    HIPQ_CONFIG=/etc/hipq/config.yaml \
    HIPQ_SERVER__HOST=0.0.0.0 \
    HIPQ_MIGRATE_ON_START=true
USER hipq
WORKDIR /var/lib/hipq
VOLUME ["/var/lib/hipq"]
EXPOSE 8000
# /readyz with the standard library only (the slim image has no curl): a few ms of CPU
# per check, where importing hipq's CLI took half a second. Port: HIPQ_SERVER__PORT or 8000.
HEALTHCHECK --interval=10s --timeout=6s --start-period=30s --retries=3 \
    CMD ["python", "-I", "-S", "/opt/hipq/healthcheck.py"]
STOPSIGNAL SIGTERM
CMD ["hipq", "serve"]
