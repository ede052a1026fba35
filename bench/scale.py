"""Every data stage at growing sizes of distinct text: CPU per MB, peak memory and bytes written, 1 GB against 0.1 GB.

Run: ``python bench/scale.py --gb 0.1 0.3 1 [--workdir DIR] [--label after] [--dask 0.3]`` from the repository.
The corpus is ``bench/scale_corpus.py``'s (recombined sentences with seeded word substitutions, JSON Lines with a
``label``; its docstring says what it does not represent), built once under ``--workdir`` and shared by the sizes.
Each stage runs as ``python -m pipelines.<stage>`` with params.yaml's values except the corpus (the size's files,
``label`` as the label field) and ``instances.dupe_factor`` (``--dupe_factor``, 2: a pass more or less scales
both sizes alike), each from the one before, in Beam's multi-processing mode with one worker per core at every
size (the stages would run a small input in-process: the ratios would then compare modes). Per stage and size:
CPU-s of the whole process tree (Beam's SDK workers included), wall time, peak of the tree's summed RSS
(``measure.run_tree``), bytes written per input byte of text.

Targets, per stage, the largest size against the smallest: CPU-s per MB of text ≤ 1.15×, peak RSS ≤ 1.25×, and
no peak above 4 GB. ``--dask GB`` then runs the six Beam stages that Beam's Dask runner supports (not leakage:
``tests/test_dask.py``) at that size on a local cluster of two one-thread workers, each stage from the local
run's upstream, and records whether each output is byte-identical to the local run's, the wall-time ratio and
the peak RSS per worker. Results: ``scale.json`` and ``scale.md`` under ``--results``; a run with another
``--label`` (``before``, ``after``) keeps the other labels' tables in both files.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import psutil
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))
import measure
import scale_corpus

REPO = Path(__file__).resolve().parents[1]
MB = 1 << 20
TARGETS = {"cpu_per_mb": 1.15, "peak_rss": 1.25}
PEAK_LIMIT_MB = 4096
SAME_MODE = ["--direct_running_mode=multi_processing", f"--direct_num_workers={os.cpu_count() or 1}"]
DASK_RUNNER = "apache_beam.runners.dask.dask_runner.DaskRunner"
DASK_STAGES = ("corpus", "segment", "dedup", "vocab", "instances", "tasks")
# Each stage: its flags over a size's folder, and the folders it writes.
# fmt: off
STAGES: dict[str, tuple[list[str], list[str]]] = {
    "corpus": (["--output", "{w}/corpus"], ["corpus"]),
    "segment": (["--input", "{w}/corpus", "--output", "{w}/sentences"], ["sentences"]),
    "dedup": (["--input", "{w}/sentences", "--output", "{w}/deduped"], ["deduped"]),
    "vocab": (["--input", "{w}/deduped", "--output", "{w}/vocab"], ["vocab"]),
    "instances": (["--input", "{w}/deduped", "--spiece", "{w}/vocab/spiece.model", "--output", "{w}/shards",
                   "--eval_output", "{w}/eval_shards"], ["shards", "eval_shards"]),
    "tasks": (["--input", "{w}/deduped", "--output", "{w}/tasks"], ["tasks"]),
    "leakage": (["--sentences", "{w}/deduped", "--segmented", "{w}/sentences", "--shards", "{w}/shards",
                 "--tasks", "{w}/tasks", "--output", "{w}/leakage"], ["leakage"]),
}
# fmt: on


def write_params(folder: Path, inputs: list[Path], dupe_factor: int) -> Path:
    """params.yaml with the size's corpus files, their ``label`` and ``dupe_factor``; everything else as is."""
    params = yaml.safe_load((REPO / "params.yaml").read_text())
    params["corpus"].update(inputs=[str(p) for p in inputs], format="jsonl")
    params["tasks"]["label_field"] = "label"
    params["instances"]["dupe_factor"] = dupe_factor
    path = folder / "params.yaml"
    path.write_text(yaml.safe_dump(params, sort_keys=False))
    return path


def _bytes(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file()) if folder.exists() else 0


def _digests(folder: Path) -> dict[str, str]:
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.rglob("*"))
            if p.is_file()}  # fmt: skip


def _stage_argv(stage: str, params: Path, folder: Path, beam: list[str]) -> list[str]:
    flags = [flag.format(w=folder) for flag in STAGES[stage][0]]
    return [sys.executable, "-m", f"pipelines.{stage}", "--params", str(params), *flags, *beam]


def run_size(gb: float, workdir: Path, dupe_factor: int, stages: list[str]) -> dict:
    """Every stage of ``stages`` at ``gb``: its figures, by stage."""
    inputs = scale_corpus.build(workdir / "source", gb)
    text_mb = sum(p.stat().st_size for p in inputs) / MB
    folder = workdir / f"gb-{gb:g}"
    folder.mkdir(parents=True, exist_ok=True)
    params = write_params(folder, inputs, dupe_factor)
    figures = {"gb": gb, "text_mb": text_mb, "files": len(inputs), "stages": {}}
    for stage in stages:
        for out in STAGES[stage][1]:
            shutil.rmtree(folder / out, ignore_errors=True)  # this bench's own outputs of an earlier run
        log = folder / f"{stage}.log"
        run = measure.run_tree(_stage_argv(stage, params, folder, SAME_MODE), log=log)
        if run.returncode:
            raise SystemExit(f"{stage} at {gb:g} GB failed ({run.returncode}): see {log}")
        written = {out: _bytes(folder / out) for out in STAGES[stage][1]}
        figures["stages"][stage] = {
            "cpu_s": run.cpu_s, "sampled_cpu_s": run.sampled_cpu_s,
            "wall_s": run.wall_s, "tree_peak_mb": run.tree_peak_mb, "maxrss_mb": run.maxrss_mb,
            "other_cores": run.other_cores, "cpu_s_per_mb": run.cpu_s / text_mb, "written": written,
            "written_per_input_byte": {out: size / (text_mb * MB) for out, size in written.items()},
        }  # fmt: skip
        print(f"{gb:g} GB {stage}: {run.cpu_s:.0f} CPU-s, {run.wall_s:.0f} s, peak {run.tree_peak_mb:.0f} MB, "
              f"wrote {sum(written.values()) / MB:.0f} MB", file=sys.stderr, flush=True)  # fmt: skip
    stats = folder / "deduped" / "stats.json"
    if stats.exists():
        figures["dedup_counters"] = json.loads(stats.read_text())["counters"]
    return figures


class _WorkerSampler(threading.Thread):
    """The peak RSS of each Dask worker process (a nanny's child), sampled every 0.2 s until stopped."""

    def __init__(self, root: int) -> None:
        super().__init__(daemon=True)
        self.root, self.stop, self.peaks = psutil.Process(root), threading.Event(), {}

    def run(self) -> None:
        while not self.stop.wait(0.2):
            for process in self.root.children(recursive=True):
                try:
                    if "--nworkers" in process.cmdline():  # the command and its nannies; workers are below them
                        continue
                    self.peaks[process.pid] = max(self.peaks.get(process.pid, 0), process.memory_info().rss)
                except psutil.NoSuchProcess:
                    continue


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _start(command: list[str], log: Path) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
    with log.open("wb") as out:
        argv = [sys.executable, "-m", *command, "--no-dashboard"]
        return subprocess.Popen(argv, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)


def run_dask(gb: float, workdir: Path, local: dict, stages: list[str]) -> dict:
    """The Dask stages at ``gb`` from the local run's upstreams: identical outputs, wall ratio, worker peaks."""
    folder = workdir / f"gb-{gb:g}"
    params, dask = folder / "params.yaml", folder / "dask"
    port = _free_port()
    address = f"tcp://127.0.0.1:{port}"
    scheduler = _start(["distributed.cli.dask_scheduler", "--host", "127.0.0.1", "--port", str(port)],
                       folder / "dask-scheduler.log")  # fmt: skip
    workers = _start(["distributed.cli.dask_worker", address, "--nworkers", "2", "--nthreads", "1",
                      "--local-directory", str(folder / "dask-scratch")], folder / "dask-workers.log")  # fmt: skip
    beam = ["--runner", DASK_RUNNER, "--dask_client_address", address, "--dask_npartitions", "4"]
    out: dict = {"gb": gb, "stages": {}}
    try:
        time.sleep(10)  # the workers connect; a stage's client waits for the scheduler, not for them
        for stage in (s for s in stages if s in DASK_STAGES):
            flags = [flag.format(w=folder) for flag in STAGES[stage][0]]
            outputs = STAGES[stage][1]
            for i in range(len(flags) - 1):  # outputs go under dask/, inputs stay the local run's
                if flags[i] in ("--output", "--eval_output"):
                    flags[i + 1] = str(dask / Path(flags[i + 1]).name)
                    shutil.rmtree(flags[i + 1], ignore_errors=True)  # this bench's own, of an earlier run
            sampler = _WorkerSampler(workers.pid)
            sampler.start()
            argv = [sys.executable, "-m", f"pipelines.{stage}", "--params", str(params), *flags, *beam]
            run = measure.run_tree(argv, log=folder / f"dask-{stage}.log")
            sampler.stop.set()
            sampler.join()
            if run.returncode:
                raise SystemExit(f"{stage} on Dask failed ({run.returncode}): see {folder / f'dask-{stage}.log'}")
            same = all(_digests(folder / o) == _digests(dask / o) for o in outputs)
            out["stages"][stage] = {
                "identical": same, "wall_s": run.wall_s, "wall_ratio": run.wall_s / local["stages"][stage]["wall_s"],
                "worker_peak_mb": max(sampler.peaks.values(), default=0) / MB,
            }  # fmt: skip
            print(f"dask {stage}: identical={same}, {run.wall_s:.0f} s", file=sys.stderr, flush=True)
    finally:
        for process in (workers, scheduler):
            try:
                os.killpg(process.pid, 15)
                process.wait(timeout=30)
            except (ProcessLookupError, subprocess.TimeoutExpired):
                os.killpg(process.pid, 9)
    return out


def compare(sizes: list[dict]) -> dict:
    """Per stage, the largest size against the smallest: the two ratios and the largest peak."""
    small, large = sizes[0], sizes[-1]
    out = {}
    for stage in large["stages"]:
        a, b = small["stages"][stage], large["stages"][stage]
        out[stage] = {
            "cpu_per_mb": b["cpu_s_per_mb"] / a["cpu_s_per_mb"],
            "peak_rss": b["tree_peak_mb"] / a["tree_peak_mb"],
            "largest_peak_mb": b["tree_peak_mb"],
        }
    return out


def table(label: str, body: dict) -> list[str]:
    """The Markdown of one labelled run: per stage and size, then the ratios with their verdicts."""
    sizes, ratios = body["sizes"], body["ratios"]
    head = " | ".join(f"{s['gb']:g} GB" for s in sizes)
    lines = [f"## {label}", "", f"{body['about']['date']}, commit {body['about']['commit'][:12]}"
             f"{' (dirty)' if body['about']['dirty'] else ''}, `{body['about']['command']}`", "",
             f"| stage | CPU-s: {head} | CPU-s per MB: {head} | peak RSS MB: {head} | written MB: {head} "
             f"| bytes per input byte (largest) |",
             "|---|" + "---|" * (4 * len(sizes) + 1)]  # fmt: skip
    for stage in sizes[-1]["stages"]:
        rows = [s["stages"][stage] for s in sizes]
        per_byte = ", ".join(f"{o} {v:.3g}" for o, v in rows[-1]["written_per_input_byte"].items())
        cells = [" | ".join(f"{r['cpu_s']:.0f}" for r in rows), " | ".join(f"{r['cpu_s_per_mb']:.3f}" for r in rows),
                 " | ".join(f"{r['tree_peak_mb']:.0f}" for r in rows),
                 " | ".join(f"{sum(r['written'].values()) / MB:.0f}" for r in rows)]  # fmt: skip
        lines.append(f"| {stage} | {' | '.join(cells)} | {per_byte} |")
    lines += ["", f"Ratios, {sizes[-1]['gb']:g} GB ÷ {sizes[0]['gb']:g} GB (targets: CPU-s per MB ≤ "
              f"{TARGETS['cpu_per_mb']}, peak RSS ≤ {TARGETS['peak_rss']}, peak ≤ {PEAK_LIMIT_MB} MB):", "",
              "| stage | CPU-s per MB | peak RSS | largest peak MB | verdict |", "|---|---|---|---|---|"]  # fmt: skip
    for stage, r in ratios.items():
        ok = r["cpu_per_mb"] <= TARGETS["cpu_per_mb"] and r["peak_rss"] <= TARGETS["peak_rss"]
        ok = ok and r["largest_peak_mb"] <= PEAK_LIMIT_MB
        lines.append(f"| {stage} | {r['cpu_per_mb']:.2f} | {r['peak_rss']:.2f} | {r['largest_peak_mb']:.0f} | "
                     f"{'PASS' if ok else 'FAIL'} |")  # fmt: skip
    if body.get("dask"):
        d = body["dask"]
        lines += ["", f"Beam's Dask runner at {d['gb']:g} GB, 2 one-thread workers, against the local runner's "
                  "2 worker processes:", "", "| stage | byte-identical | wall ÷ local | peak RSS per worker MB |",
                  "|---|---|---|---|"]  # fmt: skip
        for stage, r in d["stages"].items():
            lines.append(f"| {stage} | {'yes' if r['identical'] else 'NO'} | {r['wall_ratio']:.2f} | "
                         f"{r['worker_peak_mb']:.0f} |")  # fmt: skip
    counters = sizes[-1].get("dedup_counters")
    if counters:
        lines += ["", f"dedup at {sizes[-1]['gb']:g} GB removed {counters['exact_duplicate_documents']} exact and "
                  f"{counters['near_duplicate_documents']} near duplicates of {counters['documents']:,} documents "
                  f"and {counters['shared_passage_sentences']} of {counters['sentences']:,} sentences as shared "
                  "passages."]  # fmt: skip
    return [*lines, ""]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gb", type=float, nargs="+", default=[0.1, 0.3, 1.0])
    parser.add_argument("--workdir", type=Path, default=Path(tempfile.gettempdir()) / "albert-lightning-scale")
    parser.add_argument("--results", type=Path, default=REPO / "bench" / "results")
    parser.add_argument("--label", default="after", help="the name of this run's table (before, after, ...)")
    parser.add_argument("--stages", nargs="+", default=list(STAGES), choices=list(STAGES))
    parser.add_argument("--dupe_factor", type=int, default=2)
    parser.add_argument("--dask", type=float, default=None, help="also run the Dask stages at this size")
    parser.add_argument("--keep", action="store_true", help="keep each size's stage outputs")
    args = parser.parse_args()
    sizes = []
    for gb in sorted(args.gb):
        sizes.append(run_size(gb, args.workdir, args.dupe_factor, args.stages))
        if args.dask == gb:
            dask = run_dask(gb, args.workdir, sizes[-1], args.stages)
        if not args.keep:
            for out in (o for stage in args.stages for o in STAGES[stage][1]):
                shutil.rmtree(args.workdir / f"gb-{gb:g}" / out, ignore_errors=True)
            shutil.rmtree(args.workdir / f"gb-{gb:g}" / "dask", ignore_errors=True)
    body = {"about": measure.machine(), "sizes": sizes, "ratios": compare(sizes)}
    if args.dask is not None:
        body["dask"] = dask
    results = args.results / "scale.json"
    runs = json.loads(results.read_text()) if results.exists() else {}
    earlier = runs.get(args.label)
    if earlier and set(args.stages) != set(STAGES):  # a rerun of some stages: the label's other figures stay
        for size in sizes:
            match = [s for s in earlier["sizes"] if s["gb"] == size["gb"]]
            if match:
                match[0]["stages"].update(size["stages"])
        dask_runs = earlier.get("dask")
        if args.dask is not None and dask_runs and dask_runs["gb"] == dask["gb"]:
            dask_runs["stages"].update(dask["stages"])
        body = {**earlier, "about": body["about"], "ratios": compare(earlier["sizes"])}
    runs[args.label] = body
    args.results.mkdir(parents=True, exist_ok=True)
    results.write_text(json.dumps(runs, indent=2) + "\n")
    lines = ["# bench/scale.py", "", __doc__.split("\n\n")[0], ""]
    for label, run in runs.items():
        lines += table(label, run)
    (args.results / "scale.md").write_text("\n".join(lines))
    print("\n".join(table(args.label, body)))


if __name__ == "__main__":
    main()
