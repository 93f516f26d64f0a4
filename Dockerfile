# One image for every trainhub component: `trainhub hub`, `trainhub worker ...`, `trainhub submit`.
# Build: docker build -t ghcr.io/trainhub/trainhub:0.1.0 .   (the Helm chart's default image)
FROM python:3.11-slim AS build
WORKDIR /src
COPY pyproject.toml README.md ./
COPY schemas schemas
COPY bus bus
COPY dispatcher dispatcher
COPY workers workers
COPY trainhub trainhub
# A wheel, so the runtime stage carries no sources or build tools.
RUN pip wheel --no-cache-dir --wheel-dir /wheels .

FROM python:3.11-slim
COPY --from=build /wheels /wheels
RUN pip install --no-cache-dir /wheels/*.whl && rm -rf /wheels \
    && useradd --uid 10001 --no-create-home --shell /usr/sbin/nologin trainhub
# Non-root, as the chart's securityContext expects (runAsNonRoot).
USER 10001
ENTRYPOINT ["trainhub"]
CMD ["--help"]
