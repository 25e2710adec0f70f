"""Score ``podmortem diagnose`` on a corpus of real records with hand-written expectations.

Every record file (``NN-name.log``, ``.txt``, ``.yaml``, ...) that has a sidecar
``NN-name.json`` is given to the installed CLI as a subprocess,
``podmortem diagnose --json FILE``, and its first report is compared with the
sidecar's ``expect`` object:

- ``verdict``: the first report's ``verdict``; exit code 3 (no OOM-kill record) or an
  empty ``reports`` list counts as ``"none"``;
- ``kills``: the number of reports that name a killed process (``kill.pid``,
  ``kill.killed_pids``, or the ``kill.chosen_pid`` of an old kernel's ``Kill process``): what
  the sidecars count. A record cut before its kill line (an OOM header at the end of a paste,
  a ``Task in`` line alone) is still reported, but is no kill;
- ``killed_pid`` / ``killed_comm`` / ``pod_uid`` / ``container_id``: the first report's
  ``kill.pid`` / ``kill.comm`` / ``kill.pod_uid`` / ``kill.container_id``;
- ``cgroup_version`` / ``dominant``: ``cgroup.version`` / ``cgroup.dominant``.

A record is right when the verdict and every other key present in ``expect`` match.
A record the CLI cannot read (exit 2, a crash, a timeout, output that is not JSON)
counts as wrong, with the reason. Keys of the sidecar outside ``expect`` (``source``,
``reading_note``, ``consequence``...) are notes and are not scored.

    python bench/diagnose_corpus.py [--jobs N] [DIR ...]      # default: tests/fixtures/held-out

The CLI is ``$PODMORTEM_CLI`` when set (split on spaces), else the repository's
``.venv/bin/podmortem``, else ``podmortem`` on ``PATH``, else
``python -m podmortem.cli.main``. The first lines printed say when, on which commit and
with which command the corpus was scored; the last line is
``<corpus>: N/M right (P%)``. The exit status is 0 whatever the score (1 only when
no record is found), so the script can record a baseline.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
DEFAULT_DIR = REPO / "tests" / "fixtures" / "held-out"
TIMEOUT_S = 120
#: The code ``podmortem diagnose`` runs: the run's header says whether it differs from the commit.
PARSER_PATHS = ("operator/podmortem/kernel", "operator/podmortem/diagnosis", "operator/podmortem/cli")

#: ``expect`` key -> where it is read in the first report (``kills`` and ``verdict`` are special).
FIELDS: dict[str, tuple[str, str]] = {
    "killed_pid": ("kill", "pid"),
    "killed_comm": ("kill", "comm"),
    "pod_uid": ("kill", "pod_uid"),
    "container_id": ("kill", "container_id"),
    "cgroup_version": ("cgroup", "version"),
    "dominant": ("cgroup", "dominant"),
    "oom_memcg": ("kill", "oom_memcg"),
    "runtime": ("kill", "runtime"),
}
#: ``expect`` keys read with a conversion: kB figures of the cgroup, the pod's exit code, a CUDA OOM's size.
DERIVED = ("limit_kb", "usage_kb", "exit_code", "cuda_tried_bytes")
#: The order in which mismatches are listed.
ORDER = ("verdict", "kills", *FIELDS, *DERIVED)


def cli_command() -> list[str]:
    """How to run the CLI: ``$PODMORTEM_CLI``, the repo's venv, ``PATH``, or ``python -m``."""
    env = os.environ.get("PODMORTEM_CLI")
    if env:
        return env.split()
    venv = REPO / ".venv" / "bin" / "podmortem"
    if venv.is_file() and os.access(venv, os.X_OK):
        return [str(venv)]
    found = shutil.which("podmortem")
    if found:
        return [found]
    return [sys.executable, "-m", "podmortem.cli.main"]


def records(directory: Path) -> list[tuple[Path, Path]]:
    """(record file, sidecar) pairs, by name; a sidecar without a record is reported as missing."""
    pairs: list[tuple[Path, Path]] = []
    for sidecar in sorted(directory.glob("*.json")):
        candidates = sorted(
            p
            for p in directory.iterdir()
            if p.is_file() and p != sidecar and p.name.startswith(sidecar.stem + ".") and p.suffix != ".json"
        )
        pairs.append((candidates[0] if candidates else sidecar.with_suffix(".missing"), sidecar))
    return pairs


def run_cli(command: list[str], path: Path) -> tuple[list[dict[str, Any]] | None, str]:
    """The reports the CLI prints for ``path``, or None and why it could not be read."""
    if not path.exists():
        return None, "record file missing"
    try:
        proc = subprocess.run(
            [*command, "diagnose", "--json", str(path)],
            capture_output=True,
            text=True,
            errors="replace",
            timeout=TIMEOUT_S,
            cwd=REPO,
        )
    except subprocess.TimeoutExpired:
        return None, f"diagnose timed out after {TIMEOUT_S} s"
    except OSError as exc:
        return None, f"diagnose could not run: {exc}"
    if proc.returncode == 3:
        return [], ""
    if proc.returncode != 0:
        tail = (proc.stderr.strip().splitlines() or ["(no stderr)"])[-1][:200]
        return None, f"diagnose exit {proc.returncode}: {tail}"
    try:
        data = json.loads(proc.stdout)
        reports = data["reports"]
        if not isinstance(reports, list):
            raise TypeError("reports is not a list")
    except (ValueError, KeyError, TypeError) as exc:
        return None, f"diagnose printed no readable JSON ({exc})"
    return [r if isinstance(r, dict) else {} for r in reports], ""


def _names_a_victim(report: dict[str, Any]) -> bool:
    kill = report.get("kill")
    return isinstance(kill, dict) and (
        kill.get("pid") is not None or bool(kill.get("killed_pids")) or kill.get("chosen_pid") is not None)


def got_value(key: str, reports: list[dict[str, Any]]) -> Any:
    if key == "kills":
        return sum(1 for r in reports if _names_a_victim(r))
    if not reports:
        return "none" if key == "verdict" else None
    first = reports[0]
    if key == "verdict":
        return first.get("verdict") or "none"
    if key in ("limit_kb", "usage_kb"):
        cgroup = first.get("cgroup")
        value = cgroup.get(key.replace("_kb", "_bytes")) if isinstance(cgroup, dict) else None
        return value // 1024 if isinstance(value, int) else None
    if key == "exit_code":
        pod = first.get("pod")
        return pod.get("exitCode") if isinstance(pod, dict) else None
    if key == "cuda_tried_bytes":
        for finding in first.get("findings") or []:
            if isinstance(finding, dict) and finding.get("code") == "cuda-oom":
                return (finding.get("evidence") or {}).get("tried_bytes")
        return None
    section, field = FIELDS[key]
    part = first.get(section)
    return part.get(field) if isinstance(part, dict) else None


def score(command: list[str], record: Path, sidecar: Path) -> tuple[bool, str]:
    """(right, the line to print after the record's name)."""
    try:
        expect = json.loads(sidecar.read_text(encoding="utf-8"))["expect"]
        if not isinstance(expect, dict) or "verdict" not in expect:
            raise ValueError("expect has no verdict")
    except (OSError, ValueError, KeyError, TypeError) as exc:
        return False, f"MISS: sidecar unreadable ({exc})"
    reports, why = run_cli(command, record)
    if reports is None:
        return False, f"MISS: {why}"
    misses = []
    for key in ORDER:
        if key not in expect:
            continue
        want, got = expect[key], got_value(key, reports)
        if want != got:
            misses.append(f"{key} expected {want!r} got {got!r}")
    unknown = sorted(set(expect) - set(ORDER))
    if unknown:
        misses.append(f"unknown expect keys {unknown} (not scored)")
    if misses:
        return False, "MISS: " + "; ".join(misses)
    return True, "ok"


def git(*args: str) -> str:
    try:
        out = subprocess.run(["git", "-C", str(REPO), *args], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return "unknown"
    return out.stdout.rstrip() if out.returncode == 0 else "unknown"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "dirs", nargs="*", type=Path, help="corpus folders (default: tests/fixtures/held-out)"
    )
    parser.add_argument(
        "--jobs", type=int, default=os.cpu_count() or 1,
        help="records scored at once, each by its own CLI process (default: the number of CPUs)",
    )
    args = parser.parse_args(argv)
    dirs = args.dirs or [DEFAULT_DIR]
    command = cli_command()
    parser_dirty = git("status", "--porcelain", "--", *PARSER_PATHS)
    other_dirty = git("status", "--porcelain", "--", "operator/podmortem")
    print(f"# scored {datetime.datetime.now(datetime.UTC).isoformat(timespec='seconds')}")
    print(f"# commit {git('rev-parse', 'HEAD')}")
    if parser_dirty == "unknown":
        print("# parser (kernel/, diagnosis/, cli/): state unknown (no git)")
    elif parser_dirty:
        print(
            "# parser (kernel/, diagnosis/, cli/) has uncommitted changes: "
            + ", ".join(line[3:] for line in parser_dirty.splitlines())
        )
    else:
        print(
            "# parser (kernel/, diagnosis/, cli/) as committed"
            + (
                "; uncommitted elsewhere in operator/podmortem: "
                + ", ".join(line[3:] for line in other_dirty.splitlines())
                if other_dirty and other_dirty != "unknown"
                else ""
            )
        )
    print(f"# cli    {' '.join(command)} diagnose --json FILE")
    right = total = 0

    def scored(pair: tuple[Path, Path]) -> tuple[bool, str]:
        try:
            return score(command, *pair)
        except Exception as exc:  # a broken record must not stop the run
            return False, f"MISS: scorer error {type(exc).__name__}: {exc}"

    with ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        for directory in dirs:
            pairs = records(directory)
            if not pairs:
                print(f"# no records with a .json sidecar in {directory}")
            # map keeps the records' order: the output is the same whatever --jobs is
            for (record, _), (ok, line) in zip(pairs, pool.map(scored, pairs), strict=True):
                total += 1
                right += ok
                print(f"{record.name}: {line}", flush=True)
    if total == 0:
        return 1
    label = "held-out" if not args.dirs else "+".join(d.name for d in dirs)
    print(f"{label}: {right}/{total} right ({100.0 * right / total:.0f}%)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
