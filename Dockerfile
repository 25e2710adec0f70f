# syntax=docker/dockerfile:1
# One image for the operator and the node agent: `podmortem operator`, `podmortem agent`.
# No torch here: the trainer image installs `podmortem[runtime]` instead (see README).
ARG PYTHON_IMAGE=python:3.11.11-slim-bookworm

FROM ${PYTHON_IMAGE} AS build
WORKDIR /src
# Pinned Python dependencies (build tools here, runtime below): hack/lock-image-deps.sh
# regenerates both files. PIP_CONSTRAINT also reaches the isolated build environment.
COPY constraints/image-build.txt /tmp/constraints-build.txt
ENV PIP_CONSTRAINT=/tmp/constraints-build.txt
COPY pyproject.toml README.md ./
COPY operator/ operator/
COPY runtime_patch/ runtime_patch/
RUN pip install --no-cache-dir build==1.2.2 \
 && python -m build --wheel --outdir /dist .

FROM ${PYTHON_IMAGE}
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1
COPY --from=build /dist/*.whl /tmp/
COPY constraints/image.txt /tmp/constraints.txt
RUN pip install --no-cache-dir -c /tmp/constraints.txt "$(ls /tmp/podmortem-*.whl)[operator]" \
 && rm -f /tmp/*.whl /tmp/constraints.txt \
 && groupadd --gid 65532 podmortem \
 && useradd --uid 65532 --gid 65532 --no-create-home --shell /usr/sbin/nologin podmortem
# 65532: distroless's "nonroot", and the chart's operator.podSecurityContext runAsUser/runAsGroup
# (tests/image/test_dockerfile.py keeps the two the same).
USER 65532:65532
ENTRYPOINT ["podmortem"]
CMD ["--help"]
