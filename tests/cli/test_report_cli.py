"""``podmortem report --json FILE`` and ``podmortem diagnose --html``: the page from stored or pasted text."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from podmortem.cli import main as cli_main


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = cli_main.main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def _diagnosed(capsys: pytest.CaptureFixture[str]) -> dict[str, object]:
    code, out, _ = _run(capsys, "diagnose", "--example", "k3s-stress", "--json")
    assert code == 0
    report: dict[str, object] = json.loads(out)["reports"][0]
    return report


def test_diagnose_html_says_there_is_no_timeline(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = _run(capsys, "diagnose", "--example", "k3s-stress", "--html")
    assert code == 0 and out.startswith("<!DOCTYPE html>") and out.endswith("</html>")
    assert 'id="no-timeline">no timeline' in out and "<svg" not in out
    assert 'data-code="memcg-limit"' in out and 'class="tasks"' in out


def test_report_from_a_trainingjob_object(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    report = _diagnosed(capsys)
    report["pod"] = {"namespace": "ml", "name": "<script>x</script>", "container": "trainer", "exitCode": 137}
    tj = {
        "apiVersion": "podmortem.io/v1alpha1",
        "kind": "TrainingJob",
        "metadata": {"namespace": "ml", "name": "pg"},
        "status": {"failureReport": report},
    }
    src, out_file = tmp_path / "tj.json", tmp_path / "page.html"
    src.write_text(json.dumps(tj))
    code, out, err = _run(capsys, "report", "--json", str(src), "-o", str(out_file))
    assert code == 0 and out == "" and "wrote" in err
    page = out_file.read_text()
    assert "<title>ml/pg: failure report</title>" in page
    assert "&lt;script&gt;x&lt;/script&gt;" in page and "<script" not in page
    assert "the stored report holds no memory series" in page


def test_report_from_an_annotation_and_bad_input(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    summary = {
        "verdict": "memcg-limit",
        "pod": {"namespace": "ml", "name": "w-1"},
        "findings": [{"code": "memcg-limit", "severity": "critical", "message": "hit its limit"}],
    }
    obj = {
        "kind": "PyTorchJob",
        "metadata": {
            "namespace": "ml",
            "name": "ddp",
            "annotations": {"podmortem.io/failure-report": json.dumps(summary)},
        },
    }
    src = tmp_path / "ddp.json"
    src.write_text(json.dumps(obj))
    code, out, _ = _run(capsys, "report", "--json", str(src))
    assert code == 0 and "w-1: memcg-limit. hit its limit" in out
    src.write_text('{"kind": "Pod", "metadata": {"name": "x"}}')
    code, _, err = _run(capsys, "report", "--json", str(src))
    assert code == 2 and "holds no failure report" in err
    code, _, err = _run(capsys, "report", "--json", str(tmp_path / "missing.json"))
    assert code == 2 and "cannot read" in err


def test_report_from_status_reads_the_job_through_the_api(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    pytest.importorskip("cryptography")
    from tests.cli import entrypoints as ep
    from tests.cli.entrypoints import TJ_PATH

    from podmortem_demo.emulated.tls import make_pki
    from podmortem_demo.harness import harness

    report = _diagnosed(capsys)
    report["pod"] = {"namespace": "default", "name": "pg-train", "container": "trainer", "exitCode": 137}
    pki = make_pki()
    with harness(tmp_path / "cluster", pki=pki, tokens={"admin", "reader"}, admin_token="admin") as h:
        template = {"spec": {"containers": [{"name": "trainer", "image": "x"}]}}
        h.create(TJ_PATH, {"apiVersion": "podmortem.io/v1alpha1", "kind": "TrainingJob",
                           "metadata": {"name": "pg", "namespace": "default"},
                           "spec": {"template": template}})
        h.patch(f"{TJ_PATH}/pg/status", {"status": {"failureReport": report}})
        config = ep.write_kubeconfig(tmp_path / "k", server=h.url, token="reader", ca_pem=pki.ca_pem)
        out_file = tmp_path / "page.html"
        code, _, err = _run(
            capsys, "report", "--from-status", "pg", "--kubeconfig", str(config), "-o", str(out_file)
        )
        assert code == 0, err
        page = out_file.read_text()
        assert "<title>default/pg: failure report</title>" in page and 'data-code="memcg-limit"' in page
        code, _, err = _run(capsys, "report", "--from-status", "gone", "--kubeconfig", str(config))
        assert code == 2 and "trainingjobs/gone not found" in err
        bad = ep.write_kubeconfig(tmp_path / "bad", server=h.url, token="nobody", ca_pem=pki.ca_pem)
        code, _, err = _run(capsys, "report", "--from-status", "pg", "--kubeconfig", str(bad))
        assert code == 1 and "HTTP 401" in err


@pytest.mark.parametrize("where", ["file", "annotation"])
def test_a_report_nested_past_any_parser_is_a_clear_error(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, where: str
) -> None:
    """A file nested 100,000 deep, an annotation 5,000 deep (within its 256 KiB): exit 2 and why, never a
    RecursionError's traceback."""
    path = tmp_path / "deep.json"
    if where == "file":
        path.write_text('{"a": ' * 100_000 + "1" + "}" * 100_000)
    else:
        deep = "[" * 5000 + "]" * 5000
        path.write_text(json.dumps({"metadata": {"name": "j", "namespace": "ml",
                                                 "annotations": {"podmortem.io/failure-report": deep}}}))
    code, out, err = _run(capsys, "report", "--json", str(path))
    assert code == 2 and out == ""
    assert "nested deeper" in err and "Traceback" not in err
