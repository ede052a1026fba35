"""What every bench shares: interleaved rounds, medians and spread, process-tree CPU time, the load check, and
the results files. One implementation, so the benches' figures mean the same thing (bench/README.md).

- ``interleave``/``run_rounds``: settings A, B, … run as A, B, A, B, … (``rounds`` times), so a drift in the
  machine's load hits every setting alike instead of whichever ran last.
- ``summary``: median, min, max and spread ((max − min) / median) of one setting's rounds.
- ``ratio``: a figure over another, stored with both operands and a sentence saying what it divides.
- ``run_tree``: runs a command and returns its wall time, the CPU time of its whole process tree (``os.wait4``:
  the child and every descendant it reaped) and the cores other processes kept busy meanwhile (the load).
- ``verdicts``: PASS/FAIL lines (MIXED when the rounds fall on both sides of a target), or none when the
  machine was loaded: then only the figures and the load.
- ``write_results``: ``{name}.json`` and ``{name}.md`` with cores, load, date, git commit and command line.

Not a module of the package: the benches import it as ``from measure import …`` (their own folder is first on
``sys.path`` when run as scripts), and tests put ``bench/`` on the path.
"""

from __future__ import annotations

import datetime
import json
import os
import platform
import shlex
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil

__all__ = [
    "BUSY_WARNING",
    "TreeRun",
    "busy_cpu_s",
    "interleave",
    "machine",
    "other_cores",
    "ratio",
    "run_rounds",
    "run_tree",
    "summary",
    "verdicts",
    "write_results",
]

REPO = Path(__file__).resolve().parents[1]
MB = 1 << 20
# Cores other processes may keep busy before a timing is not trusted: on 2 cores a quarter core already shifts
# a CPU-bound run by ~10 %, and torch's OpenMP threads busy-wait, inflating a torch process's CPU time severalfold.
BUSY_WARNING = 0.25


def interleave(labels: Sequence[str], rounds: int) -> list[tuple[int, str]]:
    """Returns the run order (round, label): every label once per round, in the given order (A, B, A, B, …)."""
    if rounds < 1:
        raise ValueError(f"rounds={rounds}: at least one round")
    return [(r, label) for r in range(rounds) for label in labels]


def run_rounds(labels: Sequence[str], rounds: int, measure: Callable[[str], dict]) -> dict[str, list[dict]]:
    """Calls ``measure(label)`` in ``interleave`` order and returns each label's results, in round order."""
    results: dict[str, list[dict]] = {label: [] for label in labels}
    for r, label in interleave(labels, rounds):
        print(f"round {r + 1}/{rounds}: {label} ...", file=sys.stderr)
        results[label].append(measure(label))
    return results


def summary(values: Sequence[float]) -> dict[str, float]:
    """Returns median, min, max, spread ((max − min) / median, 0 for one value) and n of one setting's rounds."""
    if not values:
        raise ValueError("no values to summarise")
    median = statistics.median(values)
    spread = (max(values) - min(values)) / median if median else float("inf")
    return {"median": median, "min": min(values), "max": max(values), "spread": spread, "n": len(values)}


def ratio(numerator: float, denominator: float, divides: str, rounds: Sequence[float] = ()) -> dict[str, Any]:
    """Returns ``numerator / denominator`` with both operands and ``divides``, the sentence saying what they are.

    ``rounds``: the same ratio from each round's own runs (neighbours in the interleaved order), when given: how
    far one round's figure strays from the ratio of medians, which a single slow run cannot move.
    """
    out = {"value": numerator / denominator, "numerator": numerator, "denominator": denominator, "divides": divides}
    if rounds:
        out["rounds"] = {**summary(rounds), "values": list(rounds)}
    return out


def busy_cpu_s() -> float:
    """Returns the CPU seconds the whole machine has spent busy since boot (all processes, all cores)."""
    times = psutil.cpu_times()
    return sum(times) - times.idle - getattr(times, "iowait", 0.0)


@dataclass
class TreeRun:
    """One command run by ``run_tree``."""

    returncode: int
    wall_s: float  # start to exit, interpreter start-up included
    cpu_s: float  # user + system CPU seconds of the whole process tree
    other_cores: float  # mean cores busy with processes outside the tree: the load
    maxrss_mb: float  # ru_maxrss of the tree: its largest single process, not a sum
    tree_peak_mb: float  # peak of the tree's summed RSS, sampled every 0.2 s
    sdk_workers: int  # Beam SDK worker processes seen among the descendants
    # User + system CPU seconds of every process seen in the tree, each at its last 0.2 s sample: unlike
    # ``cpu_s`` it counts descendants that outlive or escape the wait (Beam's SDK workers are not reaped by the
    # stage, so ``cpu_s`` misses them), and misses at most a sample's worth per process.
    sampled_cpu_s: float = 0.0


class _TreeSampler(threading.Thread):
    """Samples the summed RSS of a process and its descendants, and counts Beam SDK workers, until stopped."""

    def __init__(self, pid: int, interval: float = 0.2) -> None:
        super().__init__(daemon=True)
        self.root, self.interval, self.stop = psutil.Process(pid), interval, threading.Event()
        self.peak_bytes, self.sdk_workers = 0, 0
        self.cpu: dict[tuple[int, float], float] = {}  # (pid, start time) → CPU seconds at the last sample

    def run(self) -> None:
        while not self.stop.is_set():
            total, workers = 0, 0
            try:
                tree = [self.root, *self.root.children(recursive=True)]
            except psutil.NoSuchProcess:
                return
            for process in tree:
                try:
                    total += process.memory_info().rss
                    times = process.cpu_times()
                    self.cpu[(process.pid, process.create_time())] = times.user + times.system
                    # exact argv element: Beam starts each worker through `sh -c`, whose one argument also names it
                    workers += "apache_beam.runners.worker.sdk_worker_main" in process.cmdline()
                except psutil.NoSuchProcess:  # ended between listing and reading (zombies included)
                    continue
            self.peak_bytes, self.sdk_workers = max(self.peak_bytes, total), max(self.sdk_workers, workers)
            self.stop.wait(self.interval)


def run_tree(command: Sequence[str], log: Path | None = None, cwd: Path = REPO) -> TreeRun:
    """Runs ``command`` (output to ``log``, or discarded) and measures its whole process tree.

    ``os.wait4`` gives the rusage of the child and every descendant it reaped, so Beam's SDK workers and
    DataLoader workers are counted; a descendant that outlives the child (none here) would not be.
    """
    out = open(log, "w") if log else subprocess.DEVNULL  # closed in finally
    try:
        start, busy_before = time.perf_counter(), busy_cpu_s()
        child = subprocess.Popen(list(command), cwd=cwd, stdout=out, stderr=out)
        sampler = _TreeSampler(child.pid)
        sampler.start()
        _, status, usage = os.wait4(child.pid, 0)
        child.returncode = os.waitstatus_to_exitcode(status)
        wall_s = time.perf_counter() - start
        cpu_s = usage.ru_utime + usage.ru_stime
        other = other_cores(busy_before, cpu_s, wall_s)
        sampler.stop.set()
        sampler.join()
    finally:
        if log:
            out.close()
    maxrss_mb = usage.ru_maxrss * 1024 / MB  # KiB on Linux
    sampled = sum(sampler.cpu.values())
    return TreeRun(
        child.returncode, wall_s, cpu_s, other, maxrss_mb, sampler.peak_bytes / MB, sampler.sdk_workers, sampled
    )


def other_cores(busy_before: float, own_cpu_s: float, wall_s: float) -> float:
    """Mean cores other processes kept busy over ``wall_s``: the machine's busy CPU-s since ``busy_before``
    (``busy_cpu_s``) less the measured run's own ``own_cpu_s``."""
    return max(0.0, (busy_cpu_s() - busy_before - own_cpu_s) / wall_s)


def verdicts(ratios: dict[str, dict], targets: dict[str, tuple[str, float]], load: float) -> list[str]:
    """Returns one PASS/FAIL/MIXED line per target, or, when ``load`` (other processes' cores) is above
    ``BUSY_WARNING``, a line saying there is no verdict: a loaded machine's figures are printed, never judged.

    Args:
        ratios: ``ratio`` dicts by name.
        targets: name → (">=" or "<=", bound).
        load: the most cores other processes kept busy during any measured run.
    """
    if load > BUSY_WARNING:
        return [f"NO VERDICT: other processes kept up to {load:.2f} cores busy (> {BUSY_WARNING}); figures only"]
    lines = []
    for name, (op, bound) in targets.items():
        if op not in (">=", "<="):
            raise ValueError(f"target {name}: op {op!r} is not '>=' or '<='")
        r = ratios[name]
        values = r["rounds"]["values"] if "rounds" in r else [r["value"]]
        meet = sum(v >= bound if op == ">=" else v <= bound for v in values)
        ok = r["value"] >= bound if op == ">=" else r["value"] <= bound
        # A target met by the medians but not by every round (or the reverse) is within the machine's noise.
        verdict = "PASS" if ok and meet == len(values) else "FAIL" if not ok and not meet else "MIXED"
        by_round = ""
        if "rounds" in r:
            by_round = f"; {meet}/{len(values)} rounds meet it, {min(values):.3g}-{max(values):.3g}"
        lines.append(f"{verdict} {name} = {r['value']:.3g} (target {op} {bound}{by_round}): {r['divides']}")
    return lines


def _git(*args: str) -> str:
    try:
        return subprocess.run(["git", *args], cwd=REPO, capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def machine(argv: Sequence[str] | None = None) -> dict[str, Any]:
    """Returns what a result depends on besides the code's figures: cores, load average, date, commit, command."""
    argv = sys.argv if argv is None else argv
    return {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "commit": _git("rev-parse", "HEAD"),
        "dirty": bool(_git("status", "--porcelain", "--untracked-files=no")),  # uncommitted changes to tracked files
        "command": shlex.join(["python", *argv]),
        "cores": os.cpu_count(),
        "loadavg_1_5_15": list(os.getloadavg()),
        "python": platform.python_version(),
        "platform": platform.platform(),
    }


def write_results(
    folder: Path, name: str, figures: dict, ratios: dict[str, dict], load: float, lines: Sequence[str] = ()
) -> tuple[Path, Path]:
    """Writes ``{folder}/{name}.json`` (machine, load, ratios, figures) and ``{name}.md`` (a short summary).

    Args:
        folder: where the files go (created).
        name: the bench's name, e.g. "pipeline".
        figures: every measured figure, JSON-serialisable.
        ratios: ``ratio`` dicts by name.
        load: the most cores other processes kept busy during any measured run.
        lines: the printed verdict (or no-verdict) lines, copied into the summary.

    Returns:
        The paths of the JSON and Markdown files.
    """
    folder.mkdir(parents=True, exist_ok=True)
    about = machine()
    body = {"bench": name, **about, "load_other_cores": load, "loaded": load > BUSY_WARNING}
    body.update(ratios=ratios, verdicts=list(lines), figures=figures)
    json_path, md_path = folder / f"{name}.json", folder / f"{name}.md"
    json_path.write_text(json.dumps(body, indent=2) + "\n")
    md = [f"# bench/{name}.py", "", f"`{about['command']}`", ""]
    md.append(f"{about['date']}, commit {about['commit'][:12]}{' (dirty)' if about['dirty'] else ''}, ")
    md[-1] += f"{about['cores']} cores, other processes' load up to {load:.2f} cores."
    md += ["", "| ratio | value | rounds: min-max | = numerator / denominator | what it divides |"]
    md.append("|---|---|---|---|---|")
    for key, r in ratios.items():
        spread = f"{r['rounds']['min']:.3g}-{r['rounds']['max']:.3g}" if "rounds" in r else ""
        operands = f"{r['numerator']:.4g} / {r['denominator']:.4g}"
        md.append(f"| {key} | {r['value']:.3g} | {spread} | {operands} | {r['divides']} |")
    md += ["", *[f"- {line}" for line in lines]]
    md_path.write_text("\n".join(md) + "\n")
    return json_path, md_path
