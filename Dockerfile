# syntax=docker/dockerfile:1
# The STRETCH sidecar: build a wheel, install it in a slim runtime, warm the Numba kernels
# into a cache the non-root user can write, and serve the REST API on port 8321 with its
# operators' state (journal and checkpoints) in the volume /var/lib/stretch.

FROM python:3.11-slim AS build
WORKDIR /src
RUN pip install --no-cache-dir build==1.2.2
COPY pyproject.toml README.md ./
COPY stretch ./stretch
COPY scalegate ./scalegate
COPY api ./api
COPY controller ./controller
RUN python -m build --wheel --outdir /dist

FROM python:3.11-slim AS runtime
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    NUMBA_CACHE_DIR=/var/cache/stretch/numba
RUN groupadd --system --gid 10001 stretch \
    && useradd --system --uid 10001 --gid stretch --home-dir /home/stretch --create-home stretch \
    && mkdir -p /var/cache/stretch/numba /var/lib/stretch \
    && chown -R 10001:10001 /var/cache/stretch /var/lib/stretch
COPY --from=build /dist/*.whl /tmp/
RUN pip install --no-cache-dir /tmp/*.whl && rm -f /tmp/*.whl
USER 10001:10001
WORKDIR /home/stretch
# Compile every kernel once at build time (the catalog's operators, both input layouts,
# a reconfiguration), so that neither the first request nor the first rescale waits for
# the JIT. An image built on this one that installs operators of its own compiles theirs
# the same way: RUN stretch warm --skip-spark --operators mypackage.ops
RUN stretch warm --skip-spark
VOLUME ["/var/lib/stretch"]
EXPOSE 8321
HEALTHCHECK --interval=10s --timeout=3s --start-period=20s --retries=3 \
    CMD ["python", "-c", "import urllib.request, sys; sys.exit(0 if urllib.request.urlopen('http://127.0.0.1:8321/healthz', timeout=2).status == 200 else 1)"]
# Bound to every interface, so stretch serve needs a token: run with -e STRETCH_TOKEN=...
ENTRYPOINT ["stretch", "serve", "--host", "0.0.0.0", "--port", "8321", "--state-dir", "/var/lib/stretch"]
