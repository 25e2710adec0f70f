"""The Dockerfile can't be built here (no Docker engine); check what can be checked without one."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
DOCKERFILE = ROOT / "Dockerfile"
CHART_VALUES = ROOT / "charts" / "podmortem" / "values.yaml"


def _instructions() -> list[tuple[str, str]]:
    text = DOCKERFILE.read_text().replace("\\\n", " ")
    result = []
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        keyword, _, rest = line.partition(" ")
        result.append((keyword.upper(), rest.strip()))
    return result


def test_every_copied_source_exists() -> None:
    copies = [rest for kw, rest in _instructions() if kw == "COPY" and not rest.startswith("--from")]
    assert copies, "the Dockerfile copies nothing from the build context"
    for rest in copies:
        *sources, _dest = shlex.split(rest)
        for source in sources:
            assert (ROOT / source).exists(), f"Dockerfile copies {source!r}, which is not in the repository"


def test_base_image_is_pinned_and_not_latest() -> None:
    args = dict(re.findall(r"^ARG (\w+)=(\S+)$", DOCKERFILE.read_text(), flags=re.M))
    image = args["PYTHON_IMAGE"]
    assert re.fullmatch(r"python:3\.11\.\d+-slim-\w+(@sha256:[0-9a-f]{64})?", image), image


def test_final_stage_runs_as_non_root_without_torch() -> None:
    instructions = _instructions()
    last_from = max(i for i, (kw, _) in enumerate(instructions) if kw == "FROM")
    final = instructions[last_from:]
    uid, _gid = _final_user()
    assert uid not in {"0", "root"}
    assert not any("torch" in rest for _, rest in final), "the operator image must not install torch"
    entrypoint = [rest for kw, rest in final if kw == "ENTRYPOINT"]
    assert entrypoint == ['["podmortem"]']


def _final_user() -> tuple[str, str]:
    """The final stage's last ``USER uid:gid``."""
    instructions = _instructions()
    last_from = max(i for i, (kw, _) in enumerate(instructions) if kw == "FROM")
    users = [rest for kw, rest in instructions[last_from:] if kw == "USER"]
    assert users, "the final stage sets no USER"
    uid, sep, gid = users[-1].partition(":")
    assert sep and uid.isdigit() and gid.isdigit(), f"USER {users[-1]}: expected numeric uid:gid"
    return uid, gid


def test_image_user_is_the_charts_operator_user() -> None:
    """The image's USER, the user it creates and the chart's operator securityContext agree."""
    uid, gid = _final_user()
    context = yaml.safe_load(CHART_VALUES.read_text())["operator"]["podSecurityContext"]
    chart = (str(context["runAsUser"]), str(context["runAsGroup"]))
    assert (uid, gid) == chart, f"Dockerfile USER {uid}:{gid}, the chart's runAsUser:runAsGroup {chart}"
    assert str(context["fsGroup"]) == gid
    run = " ".join(rest for kw, rest in _instructions() if kw == "RUN")
    assert re.search(rf"\buseradd\b[^&]*--uid {uid}\b", run), f"the Dockerfile creates no user {uid}"
    assert re.search(rf"\bgroupadd\b[^&]*--gid {gid}\b", run), f"the Dockerfile creates no group {gid}"
