# One image for every trainhub component: `trainhub hub`, `trainhub worker ...`, `trainhub submit`.
# Build: docker build -t ghcr.io/trainhub/trainhub:0.1.0 .   (the Helm chart's default image)
FROM python:3.11-slim AS build
# A C compiler for mypyc, which compiles placement's hot modules (dispatcher/native.py).
RUN apt-get update && apt-get install -y --no-install-recommends gcc libc6-dev \
    && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY pyproject.toml README.md ./
COPY schemas schemas
COPY bus bus
COPY dispatcher dispatcher
COPY workers workers
COPY trainhub trainhub
# A wheel, so the runtime stage carries no sources or build tools.
RUN pip wheel --no-cache-dir --wheel-dir /wheels .
# Compiled from the installed sources, so the runtime stage's identical install uses it.
RUN pip install --no-cache-dir /wheels/*.whl mypy setuptools \
    && TRAINHUB_NATIVE_DIR=/native python -m dispatcher.build_native

FROM python:3.11-slim
COPY --from=build /wheels /wheels
COPY --from=build /native /opt/trainhub/native
ENV TRAINHUB_NATIVE_DIR=/opt/trainhub/native
RUN pip install --no-cache-dir /wheels/*.whl && rm -rf /wheels \
    && useradd --uid 10001 --no-create-home --shell /usr/sbin/nologin trainhub
# Non-root, as the chart's securityContext expects (runAsNonRoot).
USER 10001
ENTRYPOINT ["trainhub"]
CMD ["--help"]
