"""What ``--help`` tells of each flag: what it does, and the value it will take (the params file's, else built in)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest


def _help(parse: Callable[[list[str]], object], argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    """``--help``'s text with its line wrapping undone."""
    with pytest.raises(SystemExit) as exited:
        parse([*argv, "--help"])
    assert exited.value.code == 0
    return " ".join(capsys.readouterr().out.split())


@pytest.fixture(autouse=True)
def _wide_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    # argparse wraps help to the terminal and breaks words longer than a line, such as a temp path
    monkeypatch.setenv("COLUMNS", "1000")


def test_a_stages_help_gives_each_flags_use_and_value(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from pipelines import dedup

    params = tmp_path / "100%" / "params.yaml"  # "%" is argparse's format character
    params.parent.mkdir()
    params.write_text("held_out_fraction: 0.1\ndedup:\n  jaccard_threshold: 0.65\n")
    text = _help(dedup.run, ["--params", str(params)], capsys)
    expected = [
        f"--params PARAMS params file with the command's section ({params})",
        "--jaccard_threshold JACCARD_THRESHOLD estimated shingle Jaccard at which a worse document is removed"
        f" (0.65, from {params})",
        "--held_out_fraction HELD_OUT_FRACTION share of documents held out, half dev, half test (top-level param: every"
        " stage's one split)"
        f" (0.1, from {params})",
        "--shingle_words SHINGLE_WORDS words per MinHash shingle (5, built-in default)",
    ]
    assert [line for line in expected if line not in text] == []


def test_evaluates_help_gives_each_flags_use_and_value(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from albert_lightning.evaluation.cli import _parse

    params = tmp_path / "params.yaml"
    params.write_text("seed: 7\nevaluate:\n  seeds: 2\n  lrs: [0.001, 0.002]\n")
    text = _help(_parse, ["--params", str(params)], capsys)
    expected = [
        f"--seeds SEEDS fine-tuning seeds per task and training-set size (2, from {params})",
        "--lrs [LRS ...] fine-tuning learning rates; each start uses the best on a held-out slice, one skips that"
        f" ([0.001, 0.002], from {params})",
        f"--seed SEED seed of the fine-tuning seeds, training subsets and bootstrap resamples (7, from {params})",
        "--batch_size BATCH_SIZE examples per fine-tuning and scoring batch (32, built-in default)",
        "--glue_dir GLUE_DIR folder of GLUE's task folders, which names like CoLA are read from"
        " (unset, built-in default)",
        "--random_baseline RANDOM_BASELINE also fine-tune a random model of the same shape (grids may skip it)"
        " (true, built-in default)",
    ]
    assert [line for line in expected if line not in text] == []


def test_without_a_params_file_help_says_every_value_is_built_in(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from albert_lightning.evaluation.cli import _parse

    missing = tmp_path / "params.yaml"
    text = _help(_parse, ["--params", str(missing)], capsys)
    assert (
        f"--params PARAMS params file with the command's section ({missing}: none there, so built-in defaults)" in text
    )
    assert "--train_sizes [TRAIN_SIZES ...] nested training-set sizes (a learning curve); 0: every example" in text
    assert "0: every example ([32, 128, 512, 0], built-in default)" in text
    assert ", from " not in text
