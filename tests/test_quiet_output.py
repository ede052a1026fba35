"""The Lightning commands' console: one line per fine-tuning run, not Lightning's banners, tips or the libraries'
deprecation notices, which go to the command's private log (``pipelines.runtime.commands.Chatter``)."""

from __future__ import annotations

import logging
import os
import re
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

from pipelines.runtime import commands
from pipelines.runtime.commands import DEPRECATIONS, Chatter
from tests.conftest import DISTRIBUTED_ENV, PipelineRun

ROOT = Path(__file__).resolve().parents[1]
NOISE = re.compile(r"Tip:|litlogger|_pytree|LeafSpec|Deprecat|GPU available|TPU available|Trainer\.fit", re.I)
RUN_LINE = re.compile(r"^tiny_dogs, (choosing lr on \d+ examples|\d+ examples, seed \d/2, (pretrained|random_init)): ")


def _task(folder: Path) -> Path:
    """A generic two-class task: whether the text names a dog."""
    folder.mkdir()
    words = ["the quick brown fox", "a lazy dog sleeps", "return the value", "the dog barks twice"]
    for split, count in (("train", 12), ("dev", 6)):
        rows = [f"{words[i % 4]} {i}\t{int('dog' in words[i % 4])}" for i in range(count)]
        (folder / f"{split}.tsv").write_text("text\tlabel\n" + "\n".join(rows) + "\n")
    return folder


def test_evaluate_prints_a_line_per_run_and_logs_lightnings_output(
    pipeline_run: PipelineRun, random_export: Path, tmp_path: Path
) -> None:
    temp = tmp_path / "tmp"  # the private log's folder is under the temp dir
    temp.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in DISTRIBUTED_ENV} | {"TMPDIR": str(temp)}
    argv = [
        "--params", os.devnull, "--checkpoint", str(random_export), "--spiece", str(pipeline_run.spiece),
        "--shards", str(pipeline_run.shards), "--output", str(tmp_path / "eval"), "--max_steps", "2",
        "--batch_size", "4", "--intrinsic_batches", "1", "--seeds", "2", "--train_sizes", "0", "--min_steps", "1",
        "--bootstrap_resamples", "20", "--lrs", "1e-4", "2e-4", "--tasks", str(_task(tmp_path / "tiny_dogs")),
    ]  # fmt: skip
    command = [sys.executable, "-m", "albert_lightning.evaluate", *argv]
    result = subprocess.run(command, capture_output=True, text=True, env=env, cwd=ROOT, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    console = (result.stdout + result.stderr).splitlines()
    assert [line for line in console if NOISE.search(line)] == []
    # Two rates chosen per start (2 starts × 2 rates), then 2 seeds × 2 starts at the one size: a line each.
    runs = [line for line in result.stderr.splitlines() if RUN_LINE.match(line)]
    assert len(runs) == 8 and all(re.search(r"accuracy \d\.\d{3} \(\d+\.\d s\)$", line) for line in runs), runs
    *_, last = result.stderr.splitlines()
    assert len(result.stderr.splitlines()) == len(runs) + 1 and last.startswith("evaluate: ")
    [log] = (temp / f"albert-lightning-{os.getuid()}").glob("evaluate-*.log")
    assert str(log) in last
    logged = log.read_text()
    assert logged.count("Tip:") == 8 and logged.count("GPU available") == 8  # each run's, as Lightning says them
    assert "LeafSpec" in logged  # a deprecation notice raised inside Lightning (torch 2.13, Lightning 2.6)


def _chatty_run(argv: list[str]) -> None:
    """Says what Lightning and the libraries say during a run, and what this project says."""
    logging.getLogger("lightning.pytorch.utilities.rank_zero").info("GPU available: False, used: False")
    logging.getLogger("lightning.pytorch.utilities.rank_zero").warning("a Lightning warning for the user")
    library = "/somewhere/site-packages/library/module.py"
    warnings.warn_explicit("old_name is deprecated", DeprecationWarning, library, 1)
    warnings.warn_explicit("a library's advice", UserWarning, library, 2)
    warnings.warn_explicit("ours is deprecated", DeprecationWarning, commands.__file__, 3)


def test_chatter_goes_to_the_log_and_the_rest_to_the_console(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr("tempfile.tempdir", str(tmp_path))
    monkeypatch.setattr(sys, "argv", ["fit.py"])
    lightning = logging.getLogger("lightning.pytorch")
    handler = logging.StreamHandler(sys.stderr)  # as Lightning's package sets it up when nothing else logs
    monkeypatch.setattr(lightning, "handlers", [handler])
    monkeypatch.setattr(lightning, "propagate", False)
    monkeypatch.setattr(lightning, "level", logging.INFO)
    with warnings.catch_warnings(record=True) as shown:  # what warnings would print on the console
        warnings.simplefilter("always")
        commands.main(_chatty_run, "fit", chatter=Chatter(("lightning.pytorch",), DEPRECATIONS))
    err = capsys.readouterr().err
    [log] = (tmp_path / f"albert-lightning-{os.getuid()}").glob("fit-*.log")
    logged = log.read_text()
    assert "GPU available" in logged and "old_name is deprecated" in logged
    assert "GPU available" not in err
    # Lightning's warnings, the libraries' other warnings and this project's own notices stay on the console.
    assert "a Lightning warning for the user" in err
    assert [str(w.message) for w in shown] == ["a library's advice", "ours is deprecated"]
    assert err.splitlines()[-1] == f"fit: 2 library messages (banners, tips, warnings) are in {log}"
    assert lightning.handlers == [handler]  # put back after the run
