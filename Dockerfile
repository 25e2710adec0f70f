# syntax=docker/dockerfile:1
# One image for the operator and the node agent: `podmortem operator`, `podmortem agent`.
# No torch here: the trainer image installs `podmortem[runtime]` instead (see README).
ARG PYTHON_IMAGE=python:3.11.11-slim-bookworm

FROM ${PYTHON_IMAGE} AS build
WORKDIR /src
COPY pyproject.toml README.md ./
COPY operator/ operator/
COPY runtime_patch/ runtime_patch/
RUN pip install --no-cache-dir build==1.2.2 \
 && python -m build --wheel --outdir /dist .

FROM ${PYTHON_IMAGE}
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1
COPY --from=build /dist/*.whl /tmp/
RUN pip install --no-cache-dir "$(ls /tmp/podmortem-*.whl)[operator]" \
 && rm -f /tmp/*.whl \
 && useradd --uid 10001 --no-create-home --shell /usr/sbin/nologin podmortem
USER 10001:10001
ENTRYPOINT ["podmortem"]
CMD ["--help"]
