FROM python:3.11-slim
WORKDIR /app
COPY pyproject.toml README.md ./
COPY hipq ./hipq
COPY throttlers ./throttlers
COPY alembic ./alembic
RUN pip install --no-cache-dir .
EXPOSE 8000
CMD ["hipq", "serve"]
