"""Where a command's log goes: a folder of the user's own, a file only the user reads, no secret in it, and nothing
another user left at the predictable names (a link, their folder) redirects it or fails the command."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from pipelines.runtime.commands import main, redacted

NAME = "corpus"


@pytest.fixture
def temp_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A temp dir of the test's own, under the umask most systems have, which lets others read what is made."""
    temp = tmp_path / "tmp"
    temp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(temp))
    umask = os.umask(0o022)
    yield temp
    os.umask(umask)


def _predictable_folders(temp: Path) -> list[Path]:
    """The folder names another user can guess: the shared one of earlier versions, and the per-user one."""
    return [temp / "albert-lightning", temp / f"albert-lightning-{os.getuid()}"]


def _fail(argv: list[str]) -> None:
    raise ValueError("x.parquet: not Parquet")


def _run(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], argv: list[str] | None = None) -> Path:
    """Runs a failing command as ``main`` does; returns the log path its error line names."""
    monkeypatch.setattr(sys, "argv", ["corpus.py", *(argv or ["--input", "in"])])
    with pytest.raises(SystemExit) as exited:
        main(_fail, NAME)
    assert exited.value.code == 1
    [line] = capsys.readouterr().err.splitlines()
    assert line.startswith(f"{NAME}: error: x.parquet: not Parquet (trace: ")
    log = Path(line.split("(trace: ")[1].split(",")[0])
    assert "Traceback" in log.read_text() and "ValueError: x.parquet: not Parquet" in log.read_text()
    return log


def _mode(path: Path) -> int:
    return stat.S_IMODE(os.lstat(path).st_mode)


def test_the_log_folder_is_the_users_own_and_the_log_only_the_user_reads(
    temp_dir: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    log = _run(monkeypatch, capsys)
    assert log.parent.parent == temp_dir and os.lstat(log.parent).st_uid == os.getuid()
    assert (_mode(log.parent), _mode(log)) == (0o700, 0o600)


def test_a_link_planted_at_the_log_path_is_not_followed(
    temp_dir: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    target = temp_dir / "victim.txt"
    target.write_text("precious\n")
    for folder in _predictable_folders(temp_dir):
        folder.mkdir(mode=0o700)
        (folder / f"{NAME}-{os.getpid()}.log").symlink_to(target)
    log = _run(monkeypatch, capsys)
    assert target.read_text() == "precious\n"
    assert not log.is_symlink() and _mode(log) == 0o600


def _world_writable(folder: Path, elsewhere: Path) -> None:
    folder.mkdir()
    folder.chmod(0o777)


def _another_users(folder: Path, elsewhere: Path) -> None:
    if os.geteuid() != 0:
        pytest.skip("giving a folder to another user needs root")
    folder.mkdir(mode=0o755)
    os.chown(folder, 65534, 65534)  # nobody's, as the first user on a node leaves it for the second


def _link_to_elsewhere(folder: Path, elsewhere: Path) -> None:
    folder.symlink_to(elsewhere, target_is_directory=True)


@pytest.mark.parametrize("plant", [_world_writable, _another_users, _link_to_elsewhere])
def test_what_another_user_left_at_the_folder_names_neither_fails_the_command_nor_gets_the_log(
    plant: Callable[[Path, Path], None],
    temp_dir: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    elsewhere = temp_dir / "elsewhere"
    elsewhere.mkdir()
    planted = _predictable_folders(temp_dir)
    for folder in planted:
        plant(folder, elsewhere)
    log = _run(monkeypatch, capsys)
    assert log.parent not in planted and log.parent.resolve() != elsewhere
    assert list(elsewhere.iterdir()) == []
    assert os.lstat(log.parent).st_uid == os.getuid() and (_mode(log.parent), _mode(log)) == (0o700, 0o600)


def test_secret_flag_values_are_not_logged(
    temp_dir: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["--input", "in", "--s3_secret_access_key", "hunter2", "--s3_access_key_id=AKIA1234"]
    argv += ["--api_token", "tok-5678", "--db_password=pw-90", "--enable_hot_key_logging", "--format", "text"]
    text = _run(monkeypatch, capsys, argv).read_text()
    assert not [secret for secret in ("hunter2", "AKIA1234", "tok-5678", "pw-90") if secret in text]
    assert text.splitlines()[0] == (
        "$ corpus.py --input in --s3_secret_access_key *** --s3_access_key_id=*** --api_token *** --db_password=***"
        " --enable_hot_key_logging --format text"
    )


def test_a_secret_that_a_beam_worker_logs_is_taken_out_of_the_log(
    temp_dir: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def run(argv: list[str]) -> None:
        # a child process writing to the stderr it inherits, as Beam's SDK workers log their options
        line = "INFO:__main__:Pipeline_options: {'s3_secret_access_key': 'hunter2', 's3_access_key_id': 'AKIA1234'}"
        subprocess.run([sys.executable, "-c", f"import sys; print({line!r}, file=sys.stderr)"], check=True)
        raise ValueError("x.parquet: not Parquet")

    monkeypatch.setitem(sys.modules, "IPython", sys.modules.get("IPython"))  # main(beam=True) sets it
    monkeypatch.setattr(sys, "argv", ["corpus.py", "--s3_secret_access_key", "hunter2", "--s3_access_key_id=AKIA1234"])
    with pytest.raises(SystemExit):
        main(run, NAME, beam=True)
    log = Path(capsys.readouterr().err.split("(trace: ")[1].split(",")[0])
    text = log.read_text()
    assert "{'s3_secret_access_key': '***', 's3_access_key_id': '***'}" in text and "Traceback" in text
    assert not [secret for secret in ("hunter2", "AKIA1234") if secret in text]


def test_redaction_hides_the_values_of_secret_flags_and_nothing_else() -> None:
    # "=" inside a value; a secret flag last, with no value; "key" in a value rather than in a flag's name
    argv = ["--credentials_file", "c.json", "--S3_SECRET=abc=def", "--input", "key.txt", "--seed=3", "--token"]
    shown = ["--credentials_file", "***", "--S3_SECRET=***", "--input", "key.txt", "--seed=3", "--token"]
    assert redacted(argv) == shown
