# hipq in a container. Build: docker build -t hipq .
#   docker run -v hipq-data:/var/lib/hipq -p 8000:8000 -e HIPQ_... hipq
# It listens on 0.0.0.0 inside the container, where hipq serve requires bearer
# tokens with scopes (see docs/security.md); the SQLite file lives on the
# /var/lib/hipq volume, the config at /etc/hipq/config.yaml (mount your own).
# See docs/production.md.

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
# /readyz through the CLI (the slim image has no curl); it reads the port from the config.
HEALTHCHECK --interval=10s --timeout=6s --start-period=30s --retries=3 \
    CMD ["hipq", "healthcheck", "--timeout", "5"]
STOPSIGNAL SIGTERM
CMD ["hipq", "serve"]
