"""What a user sees when a stage fails: one line naming the file and the problem, the trace in a log file."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from pipelines.runtime.commands import error_line

BEAM_WORKER_ERROR = """Traceback (most recent call last):
  File "apache_beam/runners/common.py", line 1512, in apache_beam.runners.common.DoFnRunner.process
  File "/repo/pipelines/readers/sources.py", line 133, in _lines
ValueError: /data/a.txt: line 2: NUL byte [while running 'ReadDocuments/ReadFiles']

During handling of the above exception, another exception occurred:

Traceback (most recent call last):
  File "apache_beam/runners/worker/sdk_worker.py", line 310, in _execute
ValueError: /data/a.txt: line 2: NUL byte [while running 'ReadDocuments/ReadFiles'] [while running 'Outer']
"""


def test_the_error_line_is_the_raised_message_without_beams_wrapping():
    assert error_line(RuntimeError(BEAM_WORKER_ERROR)) == "/data/a.txt: line 2: NUL byte"
    assert error_line(ValueError("x.parquet: not Parquet")) == "x.parquet: not Parquet"
    assert error_line(FileNotFoundError(2, "No such file or directory", "/no/such")) == (
        "/no/such: No such file or directory"
    )


def _corpus_stage(inputs: Path, output: Path) -> subprocess.CompletedProcess:
    """The corpus stage as a user runs it, on two SDK worker processes (whose output is the noise)."""
    command = [sys.executable, "-m", "pipelines.corpus", "--params", os.devnull, "--format", "text"]
    command += ["--inputs", str(inputs), "--output", str(output), "--direct_num_workers=2"]
    return subprocess.run(command, capture_output=True, text=True, env=_environment(), timeout=300)


def _environment() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k not in ("MASTER_PORT", "WORLD_SIZE", "RANK", "LOCAL_RANK")}


def test_a_bad_file_read_by_beam_workers_prints_one_line_and_exits_1(tmp_path: Path):
    text = tmp_path / "in" / "a.txt"
    text.parent.mkdir()
    text.write_bytes(b"A first line of text.\n\x00\x01 binary\n")
    result = _corpus_stage(text.parent, tmp_path / "out")
    assert result.returncode == 1
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr[-3000:]
    assert lines[0].startswith(f"corpus: error: {text}: line 2: ")
    log = Path(lines[0].split("(trace: ")[1].split(",")[0])
    assert "Traceback" in log.read_text() and "NUL" in log.read_text()
    assert not (tmp_path / "out" / "stats.json").exists()


def test_a_warning_logged_in_a_beam_worker_is_shown_once_after_the_run(tmp_path: Path):
    jsonl = tmp_path / "in" / "a.jsonl"
    jsonl.parent.mkdir()
    jsonl.write_text('{"text": "A first document, long enough to keep."}\n{"text": "And a second one."}\n')
    result = _corpus_stage(jsonl.parent, tmp_path / "out")
    assert result.returncode == 0, result.stderr[-3000:]
    [line] = result.stderr.splitlines()
    assert line.startswith(f"warning: {jsonl}: every line looks like JSON")


def test_a_warning_of_the_stage_module_itself_is_shown(tmp_path: Path):
    """Run with ``python -m``, the stage module is ``__main__``: its warnings must still be told from Beam's."""
    from pipelines import corpus, segment

    text = tmp_path / "in" / "a.txt"
    text.parent.mkdir()
    text.write_text("\n\n".join(f"Paragraph {i} holds a sentence. And a second one, number {i}." for i in range(40)))
    local = ["--params", os.devnull, "--direct_running_mode=in_memory", "--direct_num_workers=1"]
    corpus.run([*local, "--inputs", str(text.parent), "--format", "text", "--output", str(tmp_path / "corpus")])
    segment.run([*local, "--input", str(tmp_path / "corpus"), "--output", str(tmp_path / "sentences")])
    command = [sys.executable, "-m", "pipelines.vocab", *local, "--vocab_size=5000"]
    command += ["--input", str(tmp_path / "sentences"), "--allow_undeduped", "--output", str(tmp_path / "vocab")]
    result = subprocess.run(command, capture_output=True, text=True, env=_environment(), timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    [line] = result.stderr.splitlines()
    assert line.startswith("warning: vocab_size 5000 is more than this corpus supports; using ")


def test_a_usage_error_is_shown_on_the_console_not_only_in_the_log(tmp_path: Path):
    # argparse writes its message to stderr, which a Beam stage points at its log while it runs.
    command = [sys.executable, "-m", "pipelines.vocab", "--params", os.devnull, "--output", str(tmp_path / "v")]
    result = subprocess.run(command, capture_output=True, text=True, env=_environment(), timeout=120)
    assert result.returncode == 2
    assert result.stderr.startswith("usage: ")
    assert "error: the following arguments are required: --input" in result.stderr
