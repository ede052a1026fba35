"""Data in an S3 bucket, against moto's S3-compatible server on 127.0.0.1: the Beam stages reading and writing
s3:// paths, the loader training from the bucket through its download cache
(albert_lightning/pretraining/bucket_cache.py), and ``dvc push`` / ``dvc pull`` through an S3 remote into a fresh clone.

Skipped, with the reason, where moto or boto3 is not installed (``pip install -e '.[s3]'``) or no port on
127.0.0.1 can be opened.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest
import yaml
from apache_beam.options.pipeline_options import PipelineOptions

from albert_lightning.pretraining import bucket_cache as shard_cache
from albert_lightning.pretraining.data import ShardDataModule
from pipelines import corpus, dedup, segment, vocab
from pipelines.contracts.manifest import MANIFEST, Manifest
from pipelines.runtime import files
from tests.conftest import DISTRIBUTED_ENV, LOCAL, NO_PARAMS
from tests.test_end_to_end import GIT_IDENTITY, _commit, _project_copy
from tests.test_manifest_safety import VICTIM, files_below
from tests.test_pretraining import REPO, fit_args, fit_subprocess

moto_server = pytest.importorskip("moto.server", reason="moto[server] is not installed: pip install -e '.[s3]'")
boto3 = pytest.importorskip("boto3", reason="boto3 is not installed: pip install -e '.[s3]'")

pytestmark = pytest.mark.object_store

# moto accepts any credentials; boto3 and dvc-s3 only need some to sign requests with.
PACKAGES = ["email", "json", "collections"]  # ~100 documents of the embedded default: enough for a 400-piece vocab
HELD_OUT = 0.1
CREDENTIALS = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", "AWS_DEFAULT_REGION": "us-east-1"}


@pytest.fixture(scope="module")
def endpoint() -> Iterator[str]:
    """moto's S3 server on a free port of 127.0.0.1, with test credentials in the environment; yields its URL."""
    try:
        with socket.socket() as probe:  # the server thread would wait forever on a port it cannot open
            probe.bind(("127.0.0.1", 0))
    except OSError as err:
        pytest.skip(f"cannot open a port on 127.0.0.1 for the S3 server ({err})")
    logging.getLogger("werkzeug").setLevel(logging.WARNING)  # one log line per request otherwise
    server = moto_server.ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    with pytest.MonkeyPatch.context() as patch:
        for name, value in CREDENTIALS.items():
            patch.setenv(name, value)
        patch.delenv("AWS_ENDPOINT_URL", raising=False)
        patch.delenv("AWS_ENDPOINT_URL_S3", raising=False)
        yield f"http://{host}:{port}"
    server.stop()
    files.use_options(PipelineOptions([]))  # the stages run here set this server's endpoint for the process


def s3(endpoint: str):
    return boto3.client("s3", endpoint_url=endpoint)


@pytest.fixture(scope="module")
def bucket_shards(endpoint: str) -> str:
    """corpus → segment → dedup → vocab → instances with every input and output in a bucket; returns the shard
    folder. Dedup spills its records between steps to the bucket, in many slices.

    The first four run in this process; the instances stage runs as its own command on Beam's multi-processing
    engine, so its workers reach the bucket through the pipeline options alone (the environment names no endpoint).
    """
    s3(endpoint).create_bucket(Bucket="stages")
    root, flags = "s3://stages", ["--s3_endpoint_url", endpoint]
    corpus.run([*NO_PARAMS, "--output", f"{root}/corpus", "--embedded_sources=stdlib", "--embedded_packages",
                *PACKAGES, *LOCAL, *flags])  # fmt: skip
    segment.run([*NO_PARAMS, "--input", f"{root}/corpus", "--output", f"{root}/sentences", *LOCAL, *flags])
    dedup.run([*NO_PARAMS, "--input", f"{root}/sentences", "--output", f"{root}/deduped", "--slice_mb=0.01",
               f"--held_out_fraction={HELD_OUT}", *LOCAL, *flags])  # fmt: skip
    vocab.run([*NO_PARAMS, "--input", f"{root}/deduped", "--output", f"{root}/vocab", "--vocab_size=400",
               f"--held_out_fraction={HELD_OUT}", *LOCAL, *flags])  # fmt: skip
    command = [
        sys.executable, "-m", "pipelines.instances", *NO_PARAMS, "--input", f"{root}/deduped",
        "--spiece", f"{root}/vocab/spiece.model", "--output", f"{root}/shards", "--max_seq_length=64",
        "--dupe_factor=2", f"--held_out_fraction={HELD_OUT}", "--direct_num_workers=2", *flags,
    ]  # fmt: skip
    env = {k: v for k, v in os.environ.items() if k not in DISTRIBUTED_ENV}
    done = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-4000:]
    return f"{root}/shards"


def objects(endpoint: str, bucket: str, prefix: str = "") -> dict[str, bytes]:
    client = s3(endpoint)
    keys = [o["Key"] for o in client.list_objects_v2(Bucket=bucket, Prefix=prefix).get("Contents", [])]
    return {key: client.get_object(Bucket=bucket, Key=key)["Body"].read() for key in keys}


def test_the_stages_write_whole_files_and_the_manifest_to_the_bucket(bucket_shards: str, endpoint: str) -> None:
    everything = objects(endpoint, "stages")
    assert not [key for key in everything if ".tmp-" in key]  # every temporary name was renamed (copied, deleted)
    assert {"corpus/stats.json", "sentences/stats.json", "deduped/stats.json", "vocab/stats.json",
            "vocab/spiece.model"} <= set(everything)  # fmt: skip
    assert json.loads(everything["deduped/stats.json"])["counters"]["documents_kept"] > 0
    manifest = Manifest.from_json(json.loads(everything[f"shards/{MANIFEST}"]))
    assert manifest.counters["instances"] > 0 and manifest.split("validation")
    shards = {key.removeprefix("shards/"): data for key, data in everything.items() if key.startswith("shards/")}
    assert set(shards) == {MANIFEST} | {name for name, _, _ in manifest.files()}
    for name, size, sha256 in manifest.files():  # the workers' hashes are of the bytes the bucket holds
        assert hashlib.sha256(shards[name]).hexdigest() == sha256 and size in (None, len(shards[name])), name


def test_training_reads_the_bucket_through_the_cache(bucket_shards: str, endpoint: str, tmp_path: Path, monkeypatch):
    monkeypatch.setenv("AWS_ENDPOINT_URL_S3", endpoint)  # boto3's own setting: training takes no Beam options
    cache = tmp_path / "cache"
    fit_subprocess(fit_args(tmp_path, bucket_shards, 4, 2, f"--data.cache_dir={cache}"))
    assert (tmp_path / "checkpoints" / "last.ckpt").exists()
    steps = [json.loads(line)["step"] for line in (tmp_path / "steps-rank0.jsonl").read_text().splitlines()]
    assert steps == [1, 2]
    manifest = Manifest.from_json(json.loads(objects(endpoint, "stages", f"shards/{MANIFEST}")[f"shards/{MANIFEST}"]))
    blobs = {p.name for p in (cache / "blobs").iterdir() if not p.name.endswith(".lock")}
    assert blobs == {sha256 for _, _, sha256 in manifest.files()}  # every file once, under its hash, nothing else


@pytest.fixture
def counted_downloads(endpoint: str, monkeypatch) -> list[str]:
    """The remote paths downloaded, in order, in a process configured as training is (no Beam options)."""
    monkeypatch.setenv("AWS_ENDPOINT_URL_S3", endpoint)
    files.use_options(PipelineOptions([]))
    fetched, download = [], files.download
    monkeypatch.setattr(files, "download", lambda remote, local: fetched.append(remote) or download(remote, local))
    return fetched


def test_each_file_is_downloaded_once_and_a_damaged_copy_again(
    bucket_shards: str, endpoint: str, counted_downloads: list[str], tmp_path: Path
) -> None:
    cache = tmp_path / "cache"
    folder = shard_cache.local_folder(bucket_shards, cache)
    manifest = Manifest.read(folder, verify=True)  # a local shard folder, every byte as the manifest says
    remote = {files.join(bucket_shards, name): sha256 for name, _, sha256 in manifest.files()}
    assert sorted(counted_downloads) == sorted(remote)

    counted_downloads.clear()
    assert shard_cache.local_folder(bucket_shards, cache) == folder and not counted_downloads  # all from the cache

    [(first, first_sha), (second, second_sha)] = list(remote.items())[:2]
    damaged = bytearray((cache / "blobs" / first_sha).read_bytes())
    damaged[len(damaged) // 2] ^= 0xFF  # same size, other bytes: only the hash tells
    (cache / "blobs" / first_sha).write_bytes(bytes(damaged))
    partial = (cache / "blobs" / second_sha).read_bytes()
    (cache / "blobs" / second_sha).write_bytes(partial[: len(partial) // 3])  # a download cut short
    assert shard_cache.local_folder(bucket_shards, cache) == folder
    assert sorted(counted_downloads) == sorted([first, second])
    Manifest.read(folder, verify=True)


def test_a_download_cut_short_is_fetched_again(
    bucket_shards: str, counted_downloads: list[str], tmp_path: Path, monkeypatch
) -> None:
    download, cut = files.download, []

    def cut_short_once(remote: str, local: Path) -> str:
        digest = download(remote, local)
        if cut:
            return digest
        cut.append(remote)
        partial = local.read_bytes()[:100]  # as if the connection dropped: fewer bytes, and no error
        local.write_bytes(partial)
        return hashlib.sha256(partial).hexdigest()

    monkeypatch.setattr(files, "download", cut_short_once)
    folder = shard_cache.local_folder(bucket_shards, tmp_path / "cache")
    Manifest.read(folder, verify=True)
    assert counted_downloads.count(cut[0]) == 2 and len(counted_downloads) == len(set(counted_downloads)) + 1


def test_a_killed_downloads_temporary_file_goes_once_abandoned(
    bucket_shards: str, counted_downloads: list[str], tmp_path: Path
) -> None:
    blobs = tmp_path / "cache" / "blobs"
    blobs.mkdir(parents=True)
    abandoned, live = blobs / f".tmp-{'a' * 32}-{'0' * 64}", blobs / f".tmp-{'b' * 32}-{'1' * 64}"
    abandoned.write_bytes(b"half a shard")
    live.write_bytes(b"a download in progress")
    written = time.time() - shard_cache.ABANDONED_AFTER_S - 60
    os.utime(abandoned, (written, written))
    shard_cache.local_folder(bucket_shards, tmp_path / "cache")
    assert not abandoned.exists() and live.exists()


def test_ranks_sharing_a_cache_download_each_file_once(
    bucket_shards: str, counted_downloads: list[str], tmp_path: Path
) -> None:
    # Threads stand for a node's ranks: flock locks belong to each open of the lock file, so they contend alike.
    with ThreadPoolExecutor(max_workers=3) as ranks:
        folders = list(ranks.map(lambda _: shard_cache.local_folder(bucket_shards, tmp_path / "cache"), range(3)))
    assert len(set(folders)) == 1 and len(counted_downloads) == len(set(counted_downloads))
    assert len(counted_downloads) == len(Manifest.read(folders[0], verify=True).files())


def test_batches_from_the_bucket_equal_those_from_a_local_copy(
    bucket_shards: str, endpoint: str, counted_downloads: list[str], tmp_path: Path
) -> None:
    plain = tmp_path / "plain"
    plain.mkdir()
    for key, data in objects(endpoint, "stages", "shards/").items():
        (plain / key.removeprefix("shards/")).write_bytes(data)
    remote = ShardDataModule(bucket_shards, batch_size=8, num_workers=0, cache_dir=str(tmp_path / "cache"))
    local = ShardDataModule(str(plain), batch_size=8, num_workers=0)
    assert remote.folder != bucket_shards and local.folder == str(plain)  # a local data_dir is read in place
    for loader in ("train_dataloader", "val_dataloader"):
        for a, b in zip(getattr(remote, loader)(), getattr(local, loader)(), strict=True):
            assert a.keys() == b.keys() and all(np.array_equal(a[k], b[k]) for k in a)


def test_a_remote_file_that_differs_from_its_manifest_is_an_error_naming_it(
    bucket_shards: str, endpoint: str, counted_downloads: list[str], tmp_path: Path
) -> None:
    client, shards = s3(endpoint), objects(endpoint, "stages", "shards/")
    for key in shards:
        client.copy_object(Bucket="stages", Key=f"changed/{key}", CopySource={"Bucket": "stages", "Key": key})
    name = Manifest.from_json(json.loads(shards[f"shards/{MANIFEST}"])).split("train")[0].file
    client.put_object(Bucket="stages", Key=f"changed/shards/{name}", Body=b"not that shard")
    changed = f"s3://stages/changed/shards/{name}"
    with pytest.raises(ValueError, match=re.escape(f"{changed}: sha256 ") + ".* says [0-9a-f]{64}"):
        shard_cache.local_folder("s3://stages/changed/shards", tmp_path / "cache")
    assert counted_downloads.count(changed) == shard_cache.DOWNLOAD_ATTEMPTS
    assert not list((tmp_path / "cache" / "blobs").glob(".tmp-*"))  # no partial file left behind

    client.delete_object(Bucket="stages", Key=f"changed/shards/{name}")
    with pytest.raises(FileNotFoundError, match=re.escape(f"{changed}: listed in its folder's {MANIFEST}")):
        shard_cache.local_folder("s3://stages/changed/shards", tmp_path / "cache")


# ------------------------------------------------------------------------------------------------ dvc remote


def _dvc(project: Path, env: dict[str, str], *args: str) -> str:
    done = subprocess.run([sys.executable, "-m", "dvc", *args], cwd=project, env=env, capture_output=True, text=True,
                          timeout=300)  # fmt: skip
    assert done.returncode == 0, f"dvc {' '.join(args)}: {done.stdout[-3000:]}{done.stderr[-3000:]}"
    return done.stdout


def _git(project: Path, env: dict[str, str], *args: str) -> None:
    subprocess.run(["git", *args], cwd=project, env=env, check=True, capture_output=True)


def test_dvc_push_then_pull_into_a_fresh_clone_finds_every_stage_up_to_date(endpoint: str, tmp_path: Path) -> None:
    s3(endpoint).create_bucket(Bucket="dvc-store")
    first = _project_copy(tmp_path / "first")
    params = yaml.safe_load((first / "params.yaml").read_text())
    params["beam_args"] = " ".join(LOCAL)
    params["corpus"].update(embedded_sources="stdlib", embedded_packages=PACKAGES)
    params["vocab"].update(vocab_size=400)
    (first / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    env = {k: v for k, v in os.environ.items() if k not in DISTRIBUTED_ENV}
    env.update(DVC_NO_ANALYTICS="1", PATH=f"{Path(sys.executable).parent}:{env.get('PATH', '')}", **GIT_IDENTITY)
    _git(first, env, "init", "-q")
    _commit(first, env, "the project")
    stages = ["corpus", "segment", "dedup", "vocab"]
    _dvc(first, env, "repro", "vocab")  # and the stages before it
    _dvc(first, env, "remote", "add", "-d", "store", "s3://dvc-store/cache")
    _dvc(first, env, "remote", "modify", "store", "endpointurl", endpoint)
    _commit(first, env, "the first stages' outputs, in the remote")
    _dvc(first, env, "push", *stages)
    assert objects(endpoint, "dvc-store", "cache/")

    second = tmp_path / "second"
    _git(tmp_path, env, "clone", "-q", str(first), str(second))
    assert not (second / "data" / "vocab").exists()
    _dvc(second, env, "pull", *stages)
    for name in ("vocab/spiece.model", "corpus/stats.json", "sentences/stats.json"):
        assert (second / "data" / name).read_bytes() == (first / "data" / name).read_bytes(), name
    assert json.loads(_dvc(second, env, "status", "--json", *stages)) == {}  # outputs and deps as dvc.lock says
    assert json.loads(_dvc(second, env, "status", "--cloud", "--json", *stages)) == {}  # and as the remote holds
    again = _dvc(second, env, "repro", "vocab")
    assert "Running stage" not in again and "Data and pipelines are up to date." in again, again
    assert all(f"Stage '{stage}' didn't change, skipping" in again for stage in stages), again


# ------------------------------------------------------------------------------------------- hostile manifests


def _with_manifest(endpoint: str, prefix: str, change) -> str:
    """Returns the URL of a copy of the bucket's shard folder at ``prefix`` whose manifest is ``change(parsed)``."""
    client, shards = s3(endpoint), objects(endpoint, "stages", "shards/")
    for key in shards:
        client.copy_object(Bucket="stages", Key=f"{prefix}/{key}", CopySource={"Bucket": "stages", "Key": key})
    body = json.loads(shards[f"shards/{MANIFEST}"])
    client.put_object(Bucket="stages", Key=f"{prefix}/shards/{MANIFEST}", Body=json.dumps(change(body)).encode())
    return f"s3://stages/{prefix}/shards"


def _extra_entry(**fields):
    """A change adding a copy of the first shard's entry with ``fields`` changed, last: by then its blob is in
    the cache, so a reader that took the entry would write its link without downloading anything."""
    return lambda body: body | {"shards": [*body["shards"], body["shards"][0] | fields]}


def _first_entry(**fields):
    return lambda body: body | {"shards": [body["shards"][0] | fields, *body["shards"][1:]]}


# (change, given the victim's path; what the error says after "not a readable shard manifest (")
HOSTILE_IN_THE_BUCKET = {
    "file-dotdot": (lambda v: _extra_entry(file="../../../victim"), r"file is '\.\./\.\./\.\./victim', not the"),
    "file-absolute": (lambda v: _extra_entry(file=str(v)), r"file is '/.*/victim', not the name of a train shard"),
    "file-number": (lambda v: _first_entry(file=5), r"shards\[0\]\.file is 5, not a string"),
    "sha256-path": (lambda v: _first_entry(sha256="../../victim"), r"shards\[0\]\.sha256 is '\.\./\.\./victim'"),
    "bytes-negative": (lambda v: _first_entry(bytes=-1), r"shards\[0\]\.bytes is -1, not a non-negative integer"),
    "bytes-string": (lambda v: _first_entry(bytes="100"), r"shards\[0\]\.bytes is '100', not an integer"),
}


@pytest.mark.parametrize(("change", "message"), HOSTILE_IN_THE_BUCKET.values(), ids=HOSTILE_IN_THE_BUCKET.keys())
def test_a_hostile_manifest_in_the_bucket_is_refused_and_nothing_outside_the_cache_changes(
    bucket_shards: str, endpoint: str, counted_downloads: list[str], tmp_path: Path, change, message: str, request
) -> None:
    (tmp_path / "victim").write_bytes(VICTIM)  # the cache is tmp_path/cache: victim is its sibling
    remote = _with_manifest(endpoint, f"hostile-{request.node.callspec.id}", change(tmp_path / "victim"))
    (tmp_path / "cache").mkdir()
    before = files_below(tmp_path)
    with pytest.raises(
        ValueError, match=rf"^{re.escape(remote)}/{MANIFEST}: not a readable shard manifest \(.*{message}"
    ) as err:
        shard_cache.local_folder(remote, tmp_path / "cache")
    assert "\n" not in str(err.value) and not counted_downloads
    assert files_below(tmp_path) == before


@pytest.mark.parametrize("where", ["blobs", "folders", "folder", "lock"])
def test_a_link_planted_in_the_cache_is_not_followed(
    bucket_shards: str, endpoint: str, counted_downloads: list[str], tmp_path: Path, where: str
) -> None:
    text = objects(endpoint, "stages", f"shards/{MANIFEST}")[f"shards/{MANIFEST}"]
    first_blob = Manifest.from_json(json.loads(text)).shards[0].sha256
    planted = (
        tmp_path.resolve()
        / "cache"
        / {
            "blobs": "blobs",
            "folders": "folders",
            "folder": f"folders/{hashlib.sha256(text).hexdigest()}",  # this manifest's
            "lock": f"blobs/{first_blob}.lock",  # the first one taken
        }[where]
    )
    planted.parent.mkdir(parents=True)
    outside = tmp_path / "outside"
    if where == "lock":
        planted.symlink_to(outside)  # to a file to be: opening the lock through it would create it
    else:
        outside.mkdir()
        planted.symlink_to(outside, target_is_directory=True)
    with pytest.raises(ValueError, match=rf"^{re.escape(str(planted))}: .*link.*, which the cache never makes") as err:
        shard_cache.local_folder(bucket_shards, tmp_path / "cache")
    assert "\n" not in str(err.value)
    assert not outside.exists() if where == "lock" else not any(outside.iterdir())
