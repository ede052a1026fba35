"""A manifest is input from whoever can write to the data folder or bucket: every name, hash and size in it is
checked for the writer's shape before a reader joins it to a path, and a bad one is one line naming the manifest,
the entry and the problem. The bucket cache's side (nothing written outside the cache, no planted link followed) is
in test_object_store.py, which holds the S3 server."""

from __future__ import annotations

import json
import re
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from albert_lightning.pretraining.data import ShardDataModule
from pipelines.contracts.manifest import MANIFEST, Manifest
from tests.conftest import PipelineRun

VICTIM = b"a file outside the shard folder"


def _entry(field: str, value: Callable[[Path], Any]) -> Callable[[dict, Path], Any]:
    """A change of the first shard entry's ``field`` to ``value(victim)``."""
    return lambda body, victim: body | {"shards": [body["shards"][0] | {field: value(victim)}, *body["shards"][1:]]}


def _field(field: str, value: Any) -> Callable[[dict, Path], Any]:
    return lambda body, victim: body | {field: value}


# (change of the parsed manifest, given the victim's path; what the error says after "not a readable manifest (")
HOSTILE = {
    "file-dotdot": (_entry("file", lambda v: "../victim"), r"shards\[0\]\.file is '\.\./victim', not the name of"),
    "file-absolute": (_entry("file", str), r"shards\[0\]\.file is '/.*/victim', not the name of a train shard"),
    "file-subfolder": (_entry("file", lambda v: "x/train-00000-of-00003.arrow"), r"shards\[0\]\.file is 'x/"),
    "file-newline": (_entry("file", lambda v: "train-00000-of-00003.arrow\n"), r"shards\[0\]\.file is '.*\\n'"),
    "file-arabic-digits": (_entry("file", lambda v: "train-٠٠٠٠٠-of-00003.arrow"), r"shards\[0\]\.file is 'train-"),
    "file-other-split": (_entry("file", lambda v: "validation-00000-of-00003.arrow"), r"shards\[0\]\.file is 'vali"),
    "file-number": (_entry("file", lambda v: 5), r"shards\[0\]\.file is 5, not a string"),
    "file-twice": (
        lambda body, victim: body | {"shards": [body["shards"][0], *body["shards"]]},
        r"shards: 'train-00000-of-[0-9]{5}\.arrow' listed twice",
    ),
    "sha256-path": (_entry("sha256", lambda v: "../../victim"), r"shards\[0\]\.sha256 is '\.\./\.\./victim', not a"),
    "sha256-upper": (_entry("sha256", lambda v: "AB" * 32), r"shards\[0\]\.sha256 is 'ABAB.*64 lowercase hex"),
    "vocab-sha256-path": (_field("vocab_sha256", "../../victim"), r"vocab_sha256 is '\.\./\.\./victim', not a"),
    "vocab-file-path": (_field("vocab_file", "../../victim"), r"vocab_file '\.\./\.\./victim', expected one of"),
    "vocab-file-number": (_field("vocab_file", 3), r"vocab_file is 3, not a string"),
    "tokenizer-for-spiece": (_field("tokenizer", {"do_lower_case": True}), r"settings for a vocab\.txt, but"),
    "bytes-negative": (_entry("bytes", lambda v: -1), r"shards\[0\]\.bytes is -1, not a non-negative integer"),
    "bytes-string": (_entry("bytes", lambda v: "100"), r"shards\[0\]\.bytes is '100', not an integer"),
    "bytes-null": (_entry("bytes", lambda v: None), r"shards\[0\]\.bytes is None, not an integer"),
    "rows-negative": (_entry("rows", lambda v: -5), r"shards\[0\]\.rows is -5, not a non-negative integer"),
    "rows-true": (_entry("rows", lambda v: True), r"shards\[0\]\.rows is True, not an integer"),
    "entry-string": (
        lambda body, victim: body | {"shards": ["x", *body["shards"][1:]]},
        r"shards\[0\] is 'x', not an object",
    ),
    "shards-object": (_field("shards", {}), r"shards is an object, not an array"),
    "vocab-size-string": (_field("vocab_size", "2000"), r"vocab_size is '2000', not an integer"),
    "normalizer-string": (_field("normalizer", {"lower_case": "yes", "strip_accents": True}), r"lower_case is 'yes'"),
    "counters-float": (_field("counters", {"documents": 1.5}), r"counters\.documents is 1\.5, not an integer"),
    "manifest-array": (lambda body, victim: [body], r"the manifest is an array, not a JSON object"),
}


def files_below(root: Path) -> dict[str, bytes | str]:
    """Every file and link below ``root``: its bytes, or where the link points."""
    return {
        str(p.relative_to(root)): str(p.readlink()) if p.is_symlink() else p.read_bytes()
        for p in sorted(root.rglob("*"))
        if p.is_symlink() or p.is_file()
    }


@pytest.fixture
def shards(pipeline_run: PipelineRun, tmp_path: Path) -> Path:
    """A copy of the shard folder beside a victim file, ``tmp_path/victim``."""
    (tmp_path / "victim").write_bytes(VICTIM)
    return Path(shutil.copytree(pipeline_run.shards, tmp_path / "shards"))


@pytest.mark.parametrize(("change", "message"), HOSTILE.values(), ids=HOSTILE.keys())
def test_a_hostile_manifest_is_refused_in_one_line_naming_it_and_the_entry(
    shards: Path, tmp_path: Path, change, message: str
) -> None:
    body = json.loads((shards / MANIFEST).read_text())
    (shards / MANIFEST).write_text(json.dumps(change(body, tmp_path / "victim")))
    before = files_below(tmp_path)
    with pytest.raises(
        ValueError, match=rf"^{re.escape(str(shards / MANIFEST))}: not a readable shard manifest \(.*{message}"
    ) as err:
        ShardDataModule(str(shards), batch_size=8, num_workers=0)
    assert "\n" not in str(err.value)
    assert files_below(tmp_path) == before


def test_a_manifest_nested_too_deep_for_json_is_refused_in_one_line(shards: Path) -> None:
    (shards / MANIFEST).write_text("[" * 100_000)  # json's parser gives up with a RecursionError
    with pytest.raises(ValueError, match=rf"^{re.escape(str(shards / MANIFEST))}: not a readable shard manifest"):
        Manifest.read(shards)


@pytest.mark.parametrize("key", ["manifest-array", "entry-string", "file-number", "vocab-size-string"])
def test_from_json_refuses_wrong_json_types_with_a_value_error_not_a_type_error(shards: Path, key: str) -> None:
    change, message = HOSTILE[key]
    body = change(json.loads((shards / MANIFEST).read_text()), shards.parent / "victim")
    with pytest.raises(ValueError, match=message):
        Manifest.from_json(body)
