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
HEALTHCHECK --interval=30s --timeout=3s --start-period=30s \
    CMD python -c "import urllib.request,sys; sys.exit(0 if urllib.request.urlopen('http://127.0.0.1:8080/healthz').status == 200 else 1)"
CMD ["memproxy", "serve"]
