""""auto" never turns a working validation into a crash: a fork server only where its workers can work.

Before, a large trainer made "auto" pick a fork server whatever the script: a script without an
``if __name__ == "__main__":`` guard was re-run in every worker, and under ``python -c`` (or a
notebook) the dataset class could not be found (``Can't get attribute 'DS' on <module
'__main__'>``), so validation died with ``DataLoader worker (pid(s) ...) exited unexpectedly``.
The scripts here run as a user runs them, as subprocesses (``python script.py``, ``python -c``),
some in a real memory cgroup.
"""

from __future__ import annotations

import json
import subprocess
import sys
import types
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from podmortem_demo import sandbox
from podmortem_runtime import fresh_process, val_loader

MIB = 1024**2
ROOT = Path(__file__).resolve().parents[3]

# A trainer that has grown past "auto"'s fork budget (256 MiB of private memory), then validates.
BODY = """
import json, logging, sys
import torch.utils.data
from podmortem_runtime import val_loader

class DS(torch.utils.data.Dataset):
    def __len__(self):
        return 8
    def __getitem__(self, i):
        return i * 10

def run():
    grown = bytearray(GROWN)
    grown[::4096] = b"x" * len(grown[::4096])  # touch every page: private, resident memory
    choices = []
    loader = val_loader.make_val_loader(DS(), num_workers=2, policy="auto", on_choice=choices.append)
    items = [int(x) for batch in loader for x in batch]
    print(json.dumps({"policy": choices[0].policy, "reason": choices[0].reason, "items": items}))
"""
GUARDED = BODY + '\nif __name__ == "__main__":\n    run()\n'
UNGUARDED = BODY + "\nrun()\n"
EXPECTED = [i * 10 for i in range(8)]


def _env() -> dict[str, str]:
    import os

    return {**os.environ, "PYTHONPATH": f"{ROOT / 'runtime_patch'}:{ROOT / 'operator'}"}


def _script(source: str, grown: int) -> str:
    return source.replace("GROWN", str(grown))


def _result(done: subprocess.CompletedProcess[str]) -> dict[str, object]:
    assert done.returncode == 0, done.stderr[-3000:]
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    assert len(lines) == 1, done.stdout[-2000:]  # the script ran once, not again in a worker
    result: dict[str, object] = json.loads(lines[0])
    return result


def run_file(tmp_path: Path, source: str, *, grown: int = 320 * MIB) -> dict[str, object]:
    script = tmp_path / "train.py"
    script.write_text(_script(source, grown))
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=_env(),
                          timeout=300, check=False)
    return _result(done)


def test_a_guarded_script_gets_a_fork_server(tmp_path: Path) -> None:
    result = run_file(tmp_path, GUARDED)
    assert result["policy"] == "forkserver", result["reason"]
    assert result["items"] == EXPECTED


def test_an_unguarded_script_gets_fork_workers_and_is_not_run_again(tmp_path: Path) -> None:
    result = run_file(tmp_path, UNGUARDED)
    assert result["policy"] == "persistent"
    assert "guard" in str(result["reason"]) and "DS" in str(result["reason"])
    assert result["items"] == EXPECTED


def test_python_dash_c_gets_fork_workers() -> None:
    done = subprocess.run([sys.executable, "-c", _script(UNGUARDED, 320 * MIB)], capture_output=True,
                          text=True, env=_env(), timeout=300, check=False)
    result = _result(done)
    assert result["policy"] == "persistent"
    assert "python -c" in str(result["reason"])
    assert result["items"] == EXPECTED


def _imported_usage(cg: sandbox.MemoryCgroup, proc: subprocess.Popen[str]) -> int:
    """The cgroup's usage once ``proc`` has imported what the trainer imports (it then waits on stdin)."""
    import time

    deadline = time.monotonic() + 120
    last = -1
    while time.monotonic() < deadline:
        assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
        usage = cg.usage_bytes()
        if usage == last and usage > 50 * MIB:  # steady: the imports are done
            return usage
        last = usage
        time.sleep(1.0)
    raise AssertionError("the import probe never settled")


@pytest.mark.kernel
def test_under_a_pod_limit_without_room_for_a_copy_it_loads_in_the_trainer(
    tmp_path: Path, make_cgroup: Callable[..., sandbox.MemoryCgroup]
) -> None:
    """Real kernel: a trainer grown by 600 MiB under a limit that leaves 640 MiB of room: enough for a
    fork server (512 MiB), not for a copy of the trainer.

    The limit is set from what the interpreter and torch's import cost in a cgroup of their own on
    this machine, measured first: that charge differs between torch builds (276 MiB for 2.13.0's
    CUDA 13 wheel), and a fixed limit made the room depend on it.
    """
    probe = make_cgroup(limit_bytes=None)
    started = probe.popen([sys.executable, "-c", "import torch.utils.data\nfrom podmortem_runtime import "
                           "val_loader\nimport sys\nsys.stdin.read()"], env=_env(), stdin=subprocess.PIPE,
                          stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        imported = _imported_usage(probe, started)
    finally:
        started.communicate("", timeout=60)
    cg = make_cgroup(limit_bytes=imported + 600 * MIB + 640 * MIB)
    proc = cg.popen([sys.executable, "-c", _script(UNGUARDED, 600 * MIB)], env=_env(),
                    stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    out, err = proc.communicate(timeout=300)
    result = _result(subprocess.CompletedProcess(proc.args, proc.returncode, out, err))
    assert result["policy"] == "none", result["reason"]
    assert "would not fit" in str(result["reason"])
    assert result["items"] == EXPECTED
    assert cg.oom_kills() == 0


@pytest.mark.kernel
def test_under_a_pod_limit_with_room_for_a_copy_it_forks_and_is_not_killed(
    tmp_path: Path, make_cgroup: Callable[..., sandbox.MemoryCgroup]
) -> None:
    cg = make_cgroup(limit_bytes=2048 * MIB)
    script = tmp_path / "train.py"
    script.write_text(_script(UNGUARDED, 320 * MIB))
    proc = cg.popen([sys.executable, str(script)], env=_env(), stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE, text=True)
    out, err = proc.communicate(timeout=300)
    result = _result(subprocess.CompletedProcess(proc.args, proc.returncode, out, err))
    assert result["policy"] == "persistent"
    assert result["items"] == EXPECTED
    assert cg.oom_kills() == 0
    peak = cg.peak_bytes()
    assert peak is None or peak < 2048 * MIB


# --- the check itself --------------------------------------------------------------------------


class Importable:
    """A dataset-like object of an importable module (this test module)."""

    def __init__(self) -> None:
        self.items = list(range(10))


@pytest.fixture
def main_module(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[types.ModuleType]:
    main = types.ModuleType("__main__")
    monkeypatch.setitem(sys.modules, "__main__", main)
    yield main


def _from_main(main: types.ModuleType) -> object:
    cls = type("DS", (), {"__module__": "__main__"})
    main.DS = cls  # type: ignore[attr-defined]
    return cls()


def test_objects_of_importable_modules_need_nothing_from_main(main_module: types.ModuleType) -> None:
    assert fresh_process.problem([("dataset", Importable()), ("collate function", json.dumps)]) is None


def test_what_does_not_pickle_is_named(main_module: types.ModuleType) -> None:
    why = fresh_process.problem([("dataset", Importable()), ("collate function", lambda b: b)])
    assert why is not None and why.startswith("the collate function does not pickle")


def test_main_without_a_file_is_no_place_to_import_from(main_module: types.ModuleType) -> None:
    why = fresh_process.problem([("dataset", _from_main(main_module))])
    assert why is not None and "DS" in why and "python -c" in why


@pytest.mark.parametrize(("source", "ok"), [
    ('x = 1\nif __name__ == "__main__":\n    main()\n', True),
    ('if "__main__" == __name__:\n    main()\n', True),
    ("main()\n", False),
    ('if __name__ != "__main__":\n    main()\n', False),
    ("def f(:\n", False),
])
def test_main_needs_a_guard(main_module: types.ModuleType, tmp_path: Path, source: str, ok: bool) -> None:
    script = tmp_path / "train.py"
    script.write_text(source)
    main_module.__file__ = str(script)
    why = fresh_process.problem([("dataset", _from_main(main_module))])
    assert (why is None) is ok, why


def test_auto_asks_only_when_it_would_pick_a_fork_server() -> None:
    asked: list[int] = []

    def blocked() -> str:
        asked.append(1)
        return "the dataset does not pickle"

    small = val_loader.ForkTimeMemory(100 * MIB)
    assert val_loader.choose_policy("auto", num_workers=2, memory=small,
                                    fresh_process_problem=blocked).policy == "persistent"
    assert asked == []
    big = val_loader.ForkTimeMemory(600 * MIB, cgroup_usage_bytes=700 * MIB, cgroup_limit_bytes=4096 * MIB)
    choice = val_loader.choose_policy("auto", num_workers=2, memory=big, fresh_process_problem=blocked)
    assert choice.policy == "persistent" and "does not pickle" in choice.reason and asked == [1]
    tight = val_loader.ForkTimeMemory(600 * MIB, cgroup_usage_bytes=700 * MIB, cgroup_limit_bytes=1280 * MIB)
    assert val_loader.choose_policy("auto", num_workers=2, memory=tight,
                                    fresh_process_problem=blocked).policy == "none"
    assert val_loader.choose_policy("auto", num_workers=2, memory=big,
                                    fresh_process_problem=lambda: None).policy == "forkserver"
