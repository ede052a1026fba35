"""Measures each Beam stage's start-up against its work on the embedded default: target total < 2 × work.

Run: ``python bench/startup.py [--stages segment vocab ...] [--modes default in_memory multi_processing]
[--rounds 3] [--data data] [--results bench/results]`` from the repository (``--code DIR`` runs another checkout's
``pipelines``, e.g. an older commit's, on the same inputs). Inputs are the embedded default's outputs in
``--data`` (corpus, sentences, deduped, vocab), read only; outputs go to a temporary folder.

What is measured, per stage and runner mode, as medians over ``--rounds`` interleaved rounds (``measure.py``):

- total: the stage's command (``python -m pipelines.<stage> --params params.yaml ...``, interpreter start to exit)
  on its full input: wall time, and CPU time of its whole process tree (the SDK workers included);
- start-up: the same command on a one-file slice of that input (the upstream's first file as a one-file folder;
  the corpus stage: ``--embedded_packages json``, a few source files), in the same runner mode. It holds what the
  stage spends whatever its input: interpreter and imports, pipeline construction, SDK worker start-up, numba's
  cache, teardown. The slice's own work (1/59 of the whole for the text stages) counts as start-up, so start-up
  is over-stated by ~2 % of the work, never under-stated;
- work: total − start-up; ``total/work`` is the target's ratio (below 2: start-up less than the work);
- imports: ``python -c "import pipelines.<stage>"`` alone, a part of start-up.

Modes: ``default`` passes no Beam flag (the stage's own choice; ``sdk`` says which it made: SDK worker processes
seen, 0 for in-process), ``in_memory`` one in-process worker, ``multi_processing`` one worker process per core.
The default's start-up is the slice's in the mode it chose. Timings mean something only on an idle machine: each
run records the cores other processes used (``busy_other``), and above a quarter core no verdict is given.
Results: ``startup.json`` and ``startup.md`` in ``--results``.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import measure

REPO = Path(__file__).resolve().parents[1]
TARGET = 2.0  # total ÷ work: start-up no longer than the work itself
MODES = {
    "default": [],
    "in_memory": ["--direct_running_mode=in_memory", "--direct_num_workers=1"],
    "multi_processing": ["--direct_running_mode=multi_processing", f"--direct_num_workers={os.cpu_count() or 1}"],
}
# stage: (module, upstream folder and file kind it reads, or None for the corpus stage, extra flags as dvc.yaml
# gives them; {work} is the bench's temporary folder)
STAGES = {
    "corpus": ("corpus", None, []),
    "segment": ("segment", ("corpus", "documents"), []),
    "vocab": ("vocab", ("deduped", "sentences"), []),
    "instances": ("instances", ("deduped", "sentences"), ["--eval_output", "{work}/out-eval"]),
    "tasks": ("tasks", ("deduped", "sentences"), []),
}


def make_slice(data: Path, folder: str, kind: str, work: Path) -> Path:
    """Returns a one-file copy of a finished upstream folder: its first file as ``{kind}-00000-of-00001``."""
    out = work / f"slice-{folder}"
    if not out.exists():
        out.mkdir()
        first = sorted((data / folder).glob(f"{kind}-*-of-*.parquet"))[0]
        shutil.copy(first, out / f"{kind}-00000-of-00001.parquet")
        shutil.copy(data / folder / "stats.json", out / "stats.json")  # the normaliser record and dedup's mark
    return out


def stage_argv(stage: str, size: str, data: Path, work: Path, code: Path) -> list[str]:
    """The stage's command line (without Beam flags) on its ``full`` input or its one-file ``slice``."""
    module, upstream, extra = STAGES[stage]
    argv = [sys.executable, "-m", f"pipelines.{module}", "--params", str(code / "params.yaml")]
    if upstream is None:
        argv += ["--embedded_packages", "json"] if size == "slice" else []
    else:
        folder = data / upstream[0] if size == "full" else make_slice(data, *upstream, work)
        argv += ["--input", str(folder)]
    if module == "instances":
        argv += ["--spiece", str(data / "vocab" / "spiece.model")]
    return [*argv, *(arg.format(work=work) for arg in extra), "--output", str(work / f"out-{stage}")]


def clear_outputs(work: Path) -> None:
    """Removes what a stage's run wrote (``out-*``), so the next run starts from nothing."""
    for folder in work.glob("out-*"):
        shutil.rmtree(folder, ignore_errors=True)


def run_one(label: str, data: Path, work: Path, code: Path) -> dict:
    """Runs one ``stage/size/mode`` (or ``stage/import``) in a subprocess and returns its tree's figures."""
    stage, size, mode = [*label.split("/"), ""][:3]
    if size == "import":
        command = [sys.executable, "-c", f"import pipelines.{STAGES[stage][0]}"]
    else:
        command = [*stage_argv(stage, size, data, work, code), *MODES[mode]]
    log = work / f"{label.replace('/', '-')}.log"
    tree = measure.run_tree(command, log, cwd=code)
    clear_outputs(work)
    if tree.returncode:
        raise SystemExit(f"{label} failed ({tree.returncode}); see {log}")
    return {"wall_s": tree.wall_s, "cpu_s": tree.cpu_s, "sdk": tree.sdk_workers, "other_cores": tree.other_cores}


def labels_for(stages: list[str], modes: list[str]) -> list[str]:
    """One round's runs: per stage its imports, the slice in both explicit modes, the full input in each mode."""
    out = []
    for stage in stages:
        out += [f"{stage}/import", f"{stage}/slice/in_memory", f"{stage}/slice/multi_processing"]
        out += [f"{stage}/full/{mode}" for mode in modes]
    return out


def medians(runs: list[dict]) -> dict:
    """One label's rounds: wall and CPU summaries, the most SDK workers seen and the highest load."""
    return {
        "wall_s": measure.summary([r["wall_s"] for r in runs]),
        "cpu_s": measure.summary([r["cpu_s"] for r in runs]),
        "sdk": max(r["sdk"] for r in runs),
        "other_cores": max(r["other_cores"] for r in runs),
        "rounds": runs,
    }


def rows(figures: dict, stages: list[str], modes: list[str]) -> list[dict]:
    """Per stage and mode: start-up, work and total (medians), wall and CPU; the default's start-up in its mode."""
    out = []
    for stage in stages:
        for mode in modes:
            full = figures[f"{stage}/full/{mode}"]
            chosen = mode if mode != "default" else ("multi_processing" if full["sdk"] else "in_memory")
            start = figures[f"{stage}/slice/{chosen}"]
            row = {"stage": stage, "mode": mode, "chosen": chosen, "sdk": full["sdk"]}
            row["import_s"] = figures[f"{stage}/import"]["wall_s"]["median"]
            for kind in ("wall_s", "cpu_s"):
                total, startup = full[kind]["median"], start[kind]["median"]
                row[kind] = {"total": total, "startup": startup, "work": total - startup}
            row["spread"] = full["wall_s"]["spread"]
            out.append(row)
    return out


def ratios(table: list[dict]) -> dict[str, dict]:
    """``{stage}_{mode}``: total ÷ work, wall time, with what it divides."""
    return {
        f"{r['stage']}_{r['mode']}": measure.ratio(
            r["wall_s"]["total"], max(r["wall_s"]["work"], 1e-9),
            f"{r['stage']} ({r['mode']} mode, ran {r['chosen']}): wall of the whole run ÷ its work (whole run − "
            "the one-file slice's run)")
        for r in table
    }  # fmt: skip


def lines(table: list[dict]) -> list[str]:
    """The aligned table (medians), then what its columns mean."""
    head = f"{'stage':<12}{'mode':<17}{'sdk':>4}{'import':>7}{'startup':>8}{'work':>7}{'total':>7}{'tot/work':>9}"
    out = [head + f"{'spread':>7}{'cpu_start':>10}{'cpu_work':>9}{'cpu_total':>10}"]
    for r in table:
        w, c = r["wall_s"], r["cpu_s"]
        out.append(
            f"{r['stage']:<12}{r['mode']:<17}{r['sdk']:>4}{r['import_s']:>7.2f}{w['startup']:>8.2f}{w['work']:>7.2f}"
            f"{w['total']:>7.2f}{w['total'] / max(w['work'], 1e-9):>9.2f}{r['spread']:>7.2f}{c['startup']:>10.2f}"
            f"{c['work']:>9.2f}{c['total']:>10.2f}"
        )
    out += [
        "seconds, medians over the rounds; startup: the run on a one-file slice in the same mode; work: total −",
        "startup; import: `import pipelines.<stage>` alone; sdk: SDK worker processes seen (0: in-process);",
        "spread: (max − min) / median of total; cpu_*: CPU seconds of the process tree",
    ]
    return out


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--stages", nargs="+", choices=list(STAGES), default=list(STAGES))
    parser.add_argument("--modes", nargs="+", choices=list(MODES), default=["default"], help="full-input runs")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds of every run")
    parser.add_argument("--data", type=Path, default=REPO / "data", help="the embedded default's stage outputs")
    parser.add_argument("--code", type=Path, default=REPO, help="the checkout whose pipelines/ and params.yaml run")
    parser.add_argument("--results", type=Path, default=REPO / "bench" / "results", help="startup.json/.md go here")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    data, code = args.data.resolve(), args.code.resolve()
    work = Path(tempfile.mkdtemp(prefix="bench-startup-"))
    try:
        for stage in args.stages:  # once unmeasured: numba's cache and the bytecode files exist from here on
            subprocess.run([*stage_argv(stage, "slice", data, work, code), *MODES["in_memory"]], cwd=code,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)  # fmt: skip
            clear_outputs(work)
        labels = labels_for(args.stages, args.modes)
        rounds = measure.run_rounds(labels, args.rounds, lambda label: run_one(label, data, work, code))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    figures = {label: medians(runs) for label, runs in rounds.items()}
    table = rows(figures, args.stages, args.modes)
    found = ratios(table)
    print("\n".join(lines(table)))
    load = max(f["other_cores"] for f in figures.values())
    targets = {name: ("<=", TARGET) for name in found if name.endswith("_default")}
    verdict = measure.verdicts(found, targets, load)
    print("\n".join(verdict))
    paths = measure.write_results(args.results, "startup", {"table": table, "runs": figures}, found, load, verdict)
    print(f"wrote {paths[0]} and {paths[1]}")


if __name__ == "__main__":
    main()
