FROM python:3.11-slim

# docker stop sends SIGKILL 10 s after SIGTERM: a 7 s grace for in-flight streams leaves time
# to stop the worker and write index snapshots. Raise it together with docker's --stop-timeout.
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    LITELLM_LOCAL_MODEL_COST_MAP=True \
    MEMPROXY_SERVER__HOST=0.0.0.0 \
    MEMPROXY_SERVER__PORT=8080 \
    MEMPROXY_STORAGE__DATA_DIR=/data \
    MEMPROXY_SERVER__SHUTDOWN_GRACE_S=7

WORKDIR /app
COPY pyproject.toml README.md LICENSE NOTICE ./
COPY memproxy ./memproxy
RUN pip install --no-cache-dir . \
    && useradd --system --uid 10001 --home /app memproxy \
    && mkdir -p /data && chown memproxy /data

USER memproxy
VOLUME ["/data"]
EXPOSE 8080
# The port the server was told to use (MEMPROXY_SERVER__PORT, which `docker run -e` may change), not a literal.
HEALTHCHECK --interval=30s --timeout=3s --start-period=30s \
    CMD python -c "import os,sys,urllib.request; port = os.environ.get('MEMPROXY_SERVER__PORT') or '8080'; sys.exit(0 if urllib.request.urlopen(f'http://127.0.0.1:{port}/healthz', timeout=2).status == 200 else 1)"
CMD ["memproxy", "serve"]
