"""The TrainingJob CRD's schema accepts real TrainingJobs and rejects bad ones.

The API server validates custom objects against the CRD's structural OpenAPI v3 schema. That
schema is JSON Schema draft 4 plus `x-kubernetes-*` extensions, so jsonschema's Draft4Validator
checks it faithfully, with one addition: fields a structural schema does not name are pruned
silently by the server, so here they are made errors (additionalProperties: false) to catch a
status field the operator would write and lose.
"""

from __future__ import annotations

import copy
import functools
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from . import _render

MANIFESTS = Path(__file__).parent / "manifests"
INVALID = sorted((MANIFESTS / "invalid").glob("*.yaml"))

#: Where each invalid sample must be rejected (the JSON path of the error).
REJECTED_AT = {
    "bad-timestamp": "status.finishedAt",
    "condition-without-reason": "status.conditions.0",
    "negative-bytes": "status.memory.podPeakBytes",
    "no-containers": "spec.template.spec.containers",
    "no-template": "spec",
    "restart-always": "spec.template.spec.restartPolicy",
    "retention-words": "spec.logRetention",
    "status-field-pruned": "status.memory",
    "unknown-phase": "status.phase",
    "warning-ratio-zero": "spec.memoryWarningRatio",
}


@functools.cache
def crd() -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load(_render.CRD_FILE.read_text())
    return loaded


def version_schema(name: str = "v1alpha1") -> dict[str, Any]:
    (version,) = [v for v in crd()["spec"]["versions"] if v["name"] == name]
    return version


def structural_to_jsonschema(schema: dict[str, Any]) -> dict[str, Any]:
    """A structural schema as JSON Schema draft 4, with pruning turned into errors."""
    converted = copy.deepcopy(schema)

    def visit(node: dict[str, Any]) -> None:
        preserve = node.pop("x-kubernetes-preserve-unknown-fields", False)
        for key in [k for k in node if k.startswith("x-kubernetes-")]:
            del node[key]
        if node.pop("nullable", False):
            node["type"] = [node["type"], "null"]
        if node.get("type") == "object" and "properties" in node and not preserve:
            node.setdefault("additionalProperties", False)
        for sub in node.get("properties", {}).values():
            visit(sub)
        if isinstance(node.get("items"), dict):
            visit(node["items"])

    visit(converted)
    return converted


@pytest.fixture(scope="module")
def validator() -> jsonschema.Draft4Validator:
    schema = structural_to_jsonschema(version_schema()["schema"]["openAPIV3Schema"])
    jsonschema.Draft4Validator.check_schema(schema)
    return jsonschema.Draft4Validator(schema, format_checker=jsonschema.Draft4Validator.FORMAT_CHECKER)


def load(path: Path) -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load(path.read_text())
    return loaded


def test_names_and_scope() -> None:
    spec = crd()["spec"]
    assert (spec["group"], spec["scope"]) == ("podmortem.io", "Namespaced")
    assert spec["names"]["kind"] == "TrainingJob"
    assert spec["names"]["plural"] == "trainingjobs"
    assert spec["names"]["shortNames"] == ["tj"]
    version = version_schema()
    assert version["served"] and version["storage"] and version["subresources"] == {"status": {}}


@pytest.mark.parametrize("sample", ["trainingjob-minimal.yaml", "trainingjob-failed.yaml"])
def test_accepts_sample(validator: jsonschema.Draft4Validator, sample: str) -> None:
    errors = [
        f"{'.'.join(map(str, e.path))}: {e.message}" for e in validator.iter_errors(load(MANIFESTS / sample))
    ]
    assert errors == []


@pytest.mark.parametrize("path", INVALID, ids=[p.stem for p in INVALID])
def test_rejects_invalid_sample(validator: jsonschema.Draft4Validator, path: Path) -> None:
    assert set(REJECTED_AT) == {p.stem for p in INVALID}, "every invalid sample says where it fails"
    errors = list(validator.iter_errors(load(path)))
    assert errors, f"{path.name} was accepted"
    assert REJECTED_AT[path.stem] in {".".join(map(str, e.path)) for e in errors}, [
        (list(e.path), e.message) for e in errors
    ]


def _schema_at(json_path: str) -> dict[str, Any]:
    node = version_schema()["schema"]["openAPIV3Schema"]
    for part in json_path.lstrip(".").split("."):
        node = node["properties"][part]
    return node


def _value_at(obj: dict[str, Any], json_path: str) -> Any:
    for part in json_path.lstrip(".").split("."):
        obj = obj[part]
    return obj


COLUMN_TYPES = {"integer": ("integer", None), "string": ("string", None), "date": ("string", "date-time")}


def test_printer_columns_point_at_schema_fields() -> None:
    columns = version_schema()["additionalPrinterColumns"]
    assert [c["name"] for c in columns if c.get("priority", 0) == 0] == [
        "Phase",
        "Epoch",
        "Peak/Limit",
        "Verdict",
        "Root-Cause-Pod",
        "Age",
    ]
    for column in columns:
        if column["jsonPath"] == ".metadata.creationTimestamp":
            continue
        field = _schema_at(column["jsonPath"])
        expected_type, expected_format = COLUMN_TYPES[column["type"]]
        assert field["type"] == expected_type, column
        if expected_format:
            assert field.get("format") == expected_format, column


def test_printer_columns_show_the_story() -> None:
    failed = load(MANIFESTS / "trainingjob-failed.yaml")
    shown = {
        c["name"]: _value_at(failed, c["jsonPath"])
        for c in version_schema()["additionalPrinterColumns"]
        if c["jsonPath"].startswith(".status")
    }
    assert shown["Phase"] == "Failed"
    assert shown["Epoch"] == 57
    assert shown["Peak/Limit"] == "31.8Gi/32Gi (99%)"
    assert shown["Verdict"] == "memcg-limit"
    assert shown["Root-Cause-Pod"] == "pointgroup-scannet-trainer"


def test_failure_report_documents_its_size_limit(chart_values: dict[str, Any]) -> None:
    report = _schema_at(".status.failureReport")
    assert report["x-kubernetes-preserve-unknown-fields"] is True
    limit = chart_values["operator"]["reports"]["statusMaxBytes"]
    assert f"{limit // 1024} KiB" in report["description"]


@pytest.fixture
def chart_values() -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load((_render.CHART_DIR / "values.yaml").read_text())
    return loaded


def test_schema_is_structural() -> None:
    """What the API server demands of a v1 CRD schema and kubernetes-validate does not check:
    every node has a type (unless it preserves unknown fields), and list-map keys are required."""
    untyped = []

    def visit(node: dict[str, Any], path: str) -> None:
        if "type" not in node and not node.get("x-kubernetes-preserve-unknown-fields"):
            untyped.append(path)
        if node.get("x-kubernetes-list-type") == "map":
            item = node["items"]
            assert set(node["x-kubernetes-list-map-keys"]) <= set(item.get("required", [])), path
        for key, sub in node.get("properties", {}).items():
            visit(sub, f"{path}.{key}")
        if isinstance(node.get("items"), dict):
            visit(node["items"], f"{path}[]")

    visit(version_schema()["schema"]["openAPIV3Schema"], "")
    assert untyped == []


@pytest.mark.parametrize("where", ["spec.containers", "spec.template.spec.containers"])
@pytest.mark.parametrize("name", ["x" * 40_000, "x" * 64, "Trainer", "trainer-", "train_er", "-trainer"])
def test_container_names_are_dns_labels(validator: jsonschema.Draft4Validator, where: str, name: str) -> None:
    """Kubernetes container names are DNS labels; a longer name once became an 80,092-character
    condition message, past the CRD's own limit on messages."""
    job = load(MANIFESTS / "trainingjob-minimal.yaml")
    if where == "spec.containers":
        job["spec"]["containers"] = [name]
        path = "spec.containers.0"
    else:
        job["spec"]["template"]["spec"]["containers"][0]["name"] = name
        path = "spec.template.spec.containers.0.name"
    assert path in {".".join(map(str, e.path)) for e in validator.iter_errors(job)}


@pytest.mark.parametrize("name", ["x" * 63, "trainer", "t", "gpu-0", "0"])
def test_container_names_that_kubernetes_takes_are_accepted(validator: jsonschema.Draft4Validator,
                                                            name: str) -> None:
    job = load(MANIFESTS / "trainingjob-minimal.yaml")
    job["spec"]["containers"] = [name]
    job["spec"]["template"]["spec"]["containers"][0]["name"] = name
    assert list(validator.iter_errors(job)) == []
