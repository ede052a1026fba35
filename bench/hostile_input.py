"""Measures the corpus stage on hostile input: it must fail with one line naming the file, holding far
less than the input, where it used to take the whole input into memory.

Run: ``python bench/hostile_input.py [--before DIR] [--size_mb 1024] [--timeout_s 240] [--results bench/results]``
from the repository. ``--before`` names a checkout of older code to run on the same inputs, e.g. one made with
``git worktree add --detach /tmp/wt-before <commit>`` (and removed after with ``git worktree remove``); each
checkout runs with its own ``params.yaml``. In a temporary folder the bench builds two ``--size_mb`` inputs:

- ``line``: one line of words, ``line.txt``, past ``max_line_mb``;
- ``bomb``: lines of 1,023 ASCII zeros, gzipped 480-fold (1 GB in 2.2 MB), ``bomb.txt.gz``: past
  ``max_expansion`` before any line is long (NUL bytes would stop at the line bound first, or at the NUL check).

Each runs as the user's command, ``python -m pipelines.corpus --params params.yaml --inputs F --format text
--output O``, under ``timeout --timeout_s`` (exit 124 when it runs out), measured by ``measure.run_tree``: exit
code, the one error line printed (its ``(trace: ...)`` tail cut), wall and CPU time, the largest process's peak
RSS (``maxrss_mb``) and the peak of the tree's summed RSS (``tree_peak_mb``; the stage picks Beam's
multi-processing mode for a large input, so SDK workers are in the tree). Targets, per input, for the code
under test: exit 1, one ``corpus: error:`` line naming the file, and a largest process below ``TARGET_MB``
whatever the input's size. One round: the figures are memory and exit codes, which the machine's load does not move.
Results: ``hostile_input.json`` and ``hostile_input.md`` in ``--results``.
"""

from __future__ import annotations

import argparse
import gzip
import re
import shutil
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import measure

REPO = Path(__file__).resolve().parents[1]
MB = 1 << 20
# Interpreter, Beam and Arrow (~170 MB in-process) and a few copies of one line of max_line_mb (64 MB), the
# most a reader holds: bounded by the params, not by the input.
TARGET_MB = 512
_ERROR = re.compile(r"^corpus: error: (.*?)(?: \(trace: .*)?$")


def build_inputs(folder: Path, size_mb: int) -> dict[str, Path]:
    """Writes the ``line`` and ``bomb`` inputs of ``size_mb`` decoded MB each into ``folder``."""
    line, bomb = folder / "line.txt", folder / "bomb.txt.gz"
    words = b"word " * (MB // 5)
    with open(line, "wb") as f:
        for _ in range(size_mb):
            f.write(words.ljust(MB, b"x"))
    zeros = (b"0" * 1023 + b"\n") * 1024
    with gzip.open(bomb, "wb", compresslevel=9) as f:
        for _ in range(size_mb):
            f.write(zeros)
    return {"line": line, "bomb": bomb}


def run_stage(code: Path, source: Path, out: Path, timeout_s: int) -> dict:
    """Runs the corpus stage of checkout ``code`` on ``source``; returns its figures and the error line printed."""
    stage = [sys.executable, "-m", "pipelines.corpus", "--params", "params.yaml", "--inputs", str(source)]
    command = ["timeout", str(timeout_s), *stage, "--format", "text", "--output", str(out)]
    log = out.parent / f"{out.name}.log"
    run = measure.run_tree(command, log=log, cwd=code)
    printed = log.read_text(errors="replace").splitlines()
    errors = [m.group(1) for m in map(_ERROR.match, printed) if m]
    return {
        "exit": run.returncode,
        "error_line": errors[0] if errors else None,
        "error_lines": len(errors),
        "last_line": printed[-1] if printed else "",
        "wall_s": run.wall_s,
        "cpu_s": run.cpu_s,
        "maxrss_mb": run.maxrss_mb,
        "tree_peak_mb": run.tree_peak_mb,
        "sdk_workers": run.sdk_workers,
        "other_cores": run.other_cores,
    }


def verdict(label: str, figures: dict, source: Path) -> str:
    ok = figures["exit"] == 1 and figures["error_lines"] == 1 and str(source) in (figures["error_line"] or "")
    small = figures["maxrss_mb"] < TARGET_MB
    return (
        f"{'PASS' if ok and small else 'FAIL'} {label}: exit {figures['exit']}, "
        f"{'one error line naming the file' if ok else 'no one-line error naming the file'}, "
        f"largest process {figures['maxrss_mb']:.0f} MB (target < {TARGET_MB} MB)"
    )


def describe(code: str, name: str, figures: dict) -> str:
    said = figures["error_line"] or f"(no error line; last: {figures['last_line'][:120]!r})"
    return (
        f"{code} {name}: exit {figures['exit']}, {figures['wall_s']:.1f} s, {figures['cpu_s']:.1f} CPU-s, "
        f"largest process {figures['maxrss_mb']:.0f} MB, tree {figures['tree_peak_mb']:.0f} MB: {said}"
    )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", type=Path, help="a checkout of older code to run on the same inputs")
    parser.add_argument("--size_mb", type=int, default=1024, help="decoded MB of each input")
    parser.add_argument("--timeout_s", type=int, default=240, help="a run's limit (exit 124 past it)")
    parser.add_argument("--results", type=Path, default=REPO / "bench" / "results")
    args = parser.parse_args(argv)
    codes = {"after": REPO, **({"before": args.before.resolve()} if args.before else {})}
    figures: dict = {"size_mb": args.size_mb, "codes": {k: str(v) for k, v in codes.items()}}
    lines, described, load = [], [], 0.0
    work = Path(tempfile.mkdtemp(prefix="hostile-input-"))
    try:
        inputs = build_inputs(work, args.size_mb)
        figures["input_bytes"] = {name: path.stat().st_size for name, path in inputs.items()}
        for code, folder in codes.items():
            for name, source in inputs.items():
                print(f"{code}: {name} ...", file=sys.stderr)
                result = run_stage(folder, source, work / f"out-{code}-{name}", args.timeout_s)
                figures[f"{code}_{name}"] = result
                load = max(load, result["other_cores"])
                described.append(describe(code, name, result))
                if code == "after":
                    lines.append(verdict(name, result, source))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    ratios = {
        f"maxrss_{name}": measure.ratio(
            figures[f"after_{name}"]["maxrss_mb"],
            figures[f"before_{name}"]["maxrss_mb"],
            f"the largest process's peak RSS on the {name} input, this code over --before's",
        )
        for name in inputs
        if "before" in codes
    }
    for line in [*lines, *described]:
        print(line)
    measure.write_results(args.results, "hostile_input", figures, ratios, load, [*lines, *described])


if __name__ == "__main__":
    main()
