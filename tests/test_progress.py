"""pipelines.runtime.progress: lines of done/total units at most every period on the local runner, in-process and from
worker processes; nothing on a remote runner; the same outputs with or without it."""

from __future__ import annotations

import io
import json
import os
import re
import time
from pathlib import Path

import pytest
from apache_beam.options.pipeline_options import PipelineOptions

from pipelines import segment
from pipelines.contracts.documents import DOCUMENT_SCHEMA, file_name, table_from_rows
from pipelines.runtime import commands, files, pace, progress

LINE = re.compile(r"^(\w+): ([\d,]+)/([\d,]+) (\w+) \(\d+%\)(, [\d.,]+ \w+/s, \d+:\d\d left| in \d+:\d\d)?$")
IN_MEMORY = ["--direct_running_mode=in_memory", "--direct_num_workers=1"]


@pytest.fixture(autouse=True)
def no_progress_from_outside(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(progress.ENV, raising=False)


def _lines(err: str) -> list[tuple[int, int, str]]:
    """(done, total, the rest) of each progress line; every line of ``err`` must be one."""
    parsed = []
    for line in err.splitlines():
        match = LINE.match(line)
        assert match, f"not a progress line: {line!r}"
        parsed.append((int(match[2].replace(",", "")), int(match[3].replace(",", "")), match[5] or ""))
    return parsed


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_a_terminal_gets_a_line_at_most_once_a_period(monkeypatch: pytest.MonkeyPatch):
    terminal = _Terminal()
    monkeypatch.setattr(progress, "console", lambda: terminal)
    with progress.shown("demo", 12, "files", PipelineOptions(IN_MEMORY), every_s=0.2):
        start = time.monotonic()
        for _ in range(12):
            progress.advance()
            time.sleep(0.1)
        elapsed = time.monotonic() - start
    lines = _lines(terminal.getvalue())
    *periodic, final = lines
    assert final[:2] == (12, 12) and final[2].startswith(" in ")
    assert 2 <= len(periodic) <= elapsed / 0.2 + 1  # the rate limit: no more than one line per period
    assert [done for done, _, _ in periodic] == sorted(done for done, _, _ in periodic)
    assert all(total == 12 and 0 < done < 12 for done, total, _ in periodic)  # none in start-up or after the end
    assert any(rest.endswith(" left") for _, _, rest in periodic)  # a rate once two counts were seen


def test_a_log_gets_a_line_per_5_percent_when_the_work_is_faster_than_the_period(capsys: pytest.CaptureFixture[str]):
    # Not a terminal (pytest captures stderr): 400 units in about 2 s, a period of 60 s that never passes.
    with progress.shown("demo", 400, "files", PipelineOptions(IN_MEMORY), every_s=60):
        for _ in range(400):
            progress.advance()
            time.sleep(0.005)
    *periodic, final = _lines(capsys.readouterr().err)
    assert final[:2] == (400, 400)
    marks = [done * 20 // 400 for done, _, _ in periodic]
    assert 2 <= len(periodic) <= 19 and marks == sorted(set(marks))  # each line a new twentieth, none twice


def test_the_pace_is_30_s_or_5_percent_whichever_comes_first():
    fast, slow = pace.Pace(1000, start=0.0), pace.Pace(100, start=0.0)
    # 1,000 units in 10 s: a line at each twentieth, the period never passes.
    assert [done for done in range(1, 1001) if fast.due(done, done / 100)] == list(range(50, 1001, 50))
    # 100 units in 3,000 s: a line every 30 s, and one more at each twentieth (every 150 s) that resets the period.
    slow_lines = [t for t in range(1, 3001) if slow.due(t // 30, float(t))]
    gaps = [b - a for a, b in zip([0, *slow_lines], slow_lines, strict=False)]
    assert max(gaps) <= 30 and len(slow_lines) <= 3000 / 30 + 20
    timed = pace.Pace(100, start=0.0, every_s=5, every_fraction=None)  # a terminal's: by time only
    assert [t for t in range(0, 20) if timed.due(t * 5, float(t))] == [5, 10, 15]
    assert pace.rate_and_left(30, 100, (0.0, 10), 10.0, "files") == "2 files/s, 0:35 left"
    assert pace.rate_and_left(10, 100, (0.0, 10), 10.0, "files") == ""
    assert pace.clock(3725) == "1:02:05"


def test_nothing_on_a_remote_runner(capsys: pytest.CaptureFixture[str]):
    with progress.shown("demo", 3, "files", PipelineOptions(["--runner", "DataflowRunner"]), every_s=0.01):
        assert progress.ENV not in os.environ
        progress.advance()  # as a worker would: a no-op there
        time.sleep(0.1)
    assert capsys.readouterr().err == ""


def test_lines_reach_the_terminal_while_the_workers_output_goes_to_the_log(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
):
    with open(tmp_path / "log", "w") as log, commands._stderr_to(log):
        os.write(2, b"worker chatter\n")
        print("demo: 1/2 files (50%)", file=commands.console())
    assert capfd.readouterr().err == "demo: 1/2 files (50%)\n"
    assert (tmp_path / "log").read_text() == "worker chatter\n"


def _corpus(folder: Path, num_files: int = 4) -> Path:
    """A finished corpus-stage folder: ``num_files`` files of three short documents each."""
    for index in range(num_files):
        rows = [
            {"id": f"d{index}-{k}", "text": f"Text {k} of file {index}. A second sentence.", "presegmented": False,
             "meta": json.dumps({"source": str(index)})}
            for k in range(3)
        ]  # fmt: skip
        files.write_parquet_atomically(
            str(folder / file_name("documents", index, num_files)), table_from_rows(rows, DOCUMENT_SCHEMA)
        )
    files.write_json_atomically(str(folder / "stats.json"), {})
    return folder


def _segment(corpus: Path, out: Path, beam: list[str]) -> dict[str, bytes]:
    segment.run(["--params", os.devnull, "--input", str(corpus), "--output", str(out), *beam])
    return {p.name: p.read_bytes() for p in sorted(out.iterdir())}


def test_a_stage_reports_its_files_from_worker_processes_and_writes_the_same_outputs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
):
    corpus = _corpus(tmp_path / "corpus")
    with monkeypatch.context() as off:
        off.setattr(progress, "runs_locally", lambda options: False)
        quiet = _segment(corpus, tmp_path / "quiet", IN_MEMORY)
    assert capsys.readouterr().err == ""
    monkeypatch.setattr(progress, "LOOK_S", 0.02)
    seen = []  # what the launching process counted at each look: only the worker processes report
    monkeypatch.setattr(progress, "_done", lambda folder, done=progress._done: seen.append(done(folder)) or seen[-1])
    two_processes = ["--direct_running_mode=multi_processing", "--direct_num_workers=2"]
    shown = _segment(corpus, tmp_path / "shown", two_processes)
    assert max(seen) == 4 and seen == sorted(seen)
    assert all(total == 4 for _, total, _ in _lines(capsys.readouterr().err))
    assert shown == quiet
