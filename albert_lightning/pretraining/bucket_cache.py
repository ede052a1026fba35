"""A local copy of a remote shard folder (s3://, gs://, ...): each file downloaded once, checked, then reused.

``local_folder(data_dir, cache_dir)`` returns a local ``data_dir`` unchanged. For a URL it reads the remote
``manifest.json``, makes sure every file the manifest lists (shards and ``spiece.model``) is in the cache, and
returns a local folder that ``ShardDataset`` reads like any shard folder:

- ``{cache_dir}/blobs/{sha256}``: one file's bytes, named by the manifest's hash of them, so dataset versions
  that share shards share their downloads.
- ``{cache_dir}/folders/{sha256 of the manifest}/``: the manifest, and a symlink per listed file to its blob.

A blob is used only once its size and sha256 match the manifest: a partial or corrupt one (a killed download, a
disk error) is deleted and fetched again, and a file that still differs after a second download is an error
naming the remote file; a temporary file a killed download left behind goes once no process has written to it
for ``ABANDONED_AFTER_S``. Every file goes in under a temporary name and is renamed into place, so processes that
share the cache (the ranks of a node, or nodes on one shared disk) never read half a file, whichever of them
writes it; on one machine a lock per blob also makes the other ranks wait for the first download instead of
repeating it.

The manifest comes from whoever can write to the bucket, and other users may share the cache folder, so the cache
writes only below its own folder: ``Manifest.read`` refuses any name or hash that is not the writer's, every path
is checked to be a plain name in a folder of the cache, and a link found where the cache writes (a folder, a lock,
a blob, a temporary file) is never followed: refused, or in a blob's place replaced by a download.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import os
import stat
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

from pipelines.contracts.manifest import MANIFEST, Manifest, file_mismatch

__all__ = ["default_cache_dir", "is_remote", "local_folder"]

DOWNLOAD_ATTEMPTS = 2  # a second try covers a connection cut mid-file; a second mismatch is the remote's fault
# A download in progress writes its temporary file every few MB: one untouched this long was left by a killed
# process. Younger ones may be another node's download into a shared cache, which the lock does not reach.
ABANDONED_AFTER_S = 15 * 60


def default_cache_dir() -> Path:
    """``$XDG_CACHE_HOME/albert-lightning/shards``, or ``~/.cache/albert-lightning/shards``."""
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "albert-lightning" / "shards"


def is_remote(data_dir: str | os.PathLike) -> bool:
    """Whether ``data_dir`` is a URL (s3://bucket/shards) rather than a local folder."""
    return "://" in os.fspath(data_dir)


def local_folder(data_dir: str | os.PathLike, cache_dir: str | os.PathLike | None = None) -> str:
    """Returns a local shard folder with the contents of ``data_dir``: itself when local, else a checked copy.

    Args:
        data_dir: a shard folder (the instances stage's output), local or a URL Beam's file systems read.
        cache_dir: where downloads are kept; None is ``default_cache_dir()``.

    Raises:
        FileNotFoundError: no manifest at ``data_dir``, or a file it lists is missing there.
        ValueError: an unreadable manifest, or a remote file whose sha256 is not the manifest's.
    """
    if not is_remote(data_dir):
        return os.fspath(data_dir)
    # Beam's file systems, only for a remote folder: a local run never imports them.
    from pipelines.runtime import files

    files.ensure_options()
    remote = os.fspath(data_dir).rstrip("/")
    manifest = Manifest.read(remote, read_bytes=files.read_bytes, join=files.join)
    text = manifest.to_bytes()  # byte for byte the manifest the instances stage wrote
    # Absolute for the symlink targets, resolved once as its user set it (it may be a link); none below it is followed.
    cache = Path(cache_dir if cache_dir is not None else default_cache_dir()).absolute()
    cache.mkdir(parents=True, exist_ok=True)
    cache = cache.resolve()
    blobs = _folder(cache, "blobs")
    folder = _folder(_folder(cache, "folders"), hashlib.sha256(text).hexdigest())
    _delete_abandoned(blobs.glob(".tmp-*"))
    for name, size, sha256 in manifest.files():
        blob = _fetched(files.download, files.join(remote, name), blobs, size, sha256)
        with files.renamed_into_place(os.fspath(_inside(folder, name))) as tmp:
            Path(tmp).symlink_to(blob)
    with files.renamed_into_place(os.fspath(_inside(folder, MANIFEST))) as tmp:  # last, as in the remote folder
        _create(Path(tmp), text)
    return os.fspath(folder)


def _inside(folder: Path, name: str) -> Path:
    """Returns ``folder/name``, refusing a name that would lead anywhere else (``..``, a separator, a root)."""
    path = folder / name
    if path.parent != folder or path.name != name or name == "..":
        raise ValueError(f"{folder}: {name!r} is no file name in this folder; the cache writes only inside it")
    return path


def _folder(parent: Path, name: str) -> Path:
    """Returns the folder ``parent/name``, made if missing: a real folder, not a link (which would take every
    write below it out of the cache)."""
    path = _inside(parent, name)
    with contextlib.suppress(FileExistsError):
        path.mkdir()
    if not stat.S_ISDIR(path.lstat().st_mode):
        raise ValueError(f"{path}: not a folder but a link or file, which the cache never makes; delete it")
    return path


def _create(path: Path, data: bytes = b"") -> None:
    """Writes ``data`` to ``path``, which must not exist: whatever is there, a link above all, is left alone."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
    with open(fd, "wb") as f:
        f.write(data)


def _fetched(download: Callable[[str, Path], str], remote: str, blobs: Path, size: int | None, sha256: str) -> Path:
    """Returns the blob of ``remote``'s bytes, downloading it unless a complete, matching copy is there.

    ``download(remote, local)`` copies the file and returns the sha256 of the bytes it wrote.
    """
    from pipelines.runtime import files  # only here for a remote folder, as in local_folder

    blob = _inside(blobs, sha256)
    with _locked(_inside(blobs, f"{sha256}.lock")):
        if stat.S_ISREG(_mode(blob)) and file_mismatch(blob, size, sha256) is None:
            return blob
        blob.unlink(missing_ok=True)  # partial, corrupt or a planted link (unlink removes the link itself)
        for _ in range(DOWNLOAD_ATTEMPTS):
            try:
                with files.renamed_into_place(os.fspath(blob)) as tmp:
                    _create(Path(tmp))  # so that the download opens a file of its own, not a link someone put there
                    actual = download(remote, Path(tmp))
                    if actual != sha256:
                        raise _Mismatch  # the temporary file goes, and the download is tried again
                return blob
            except _Mismatch:
                continue
            except FileNotFoundError as err:
                raise FileNotFoundError(f"{remote}: listed in its folder's {MANIFEST} but missing") from err
    raise ValueError(
        f"{remote}: sha256 {actual} in {DOWNLOAD_ATTEMPTS} downloads, but {MANIFEST} says {sha256}: the file "
        "changed after its manifest was written; rerun the instances stage"
    )


class _Mismatch(Exception):
    """A download whose bytes are not the manifest's: its temporary file is deleted, not renamed into place."""


def _delete_abandoned(temporaries: Iterable[Path]) -> None:
    """Deletes the temporary files that no download has written to for ``ABANDONED_AFTER_S``."""
    now = time.time()
    for tmp in temporaries:
        with contextlib.suppress(FileNotFoundError):  # renamed or deleted meanwhile by its owner
            if now - tmp.lstat().st_mtime > ABANDONED_AFTER_S:
                tmp.unlink()


@contextlib.contextmanager
def _locked(lock: Path) -> Iterator[None]:
    """Holds an exclusive lock on ``lock`` (released by the OS if this process dies). Only a courtesy: the
    temporary-name-then-rename writes are what keep the cache consistent, locked or not (e.g. on a shared disk
    whose locks do not reach other nodes)."""
    try:  # O_NOFOLLOW: opening a link planted at the lock's name would create or touch its target
        fd = os.open(lock, os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
    except OSError as err:
        if err.errno != errno.ELOOP:
            raise
        raise ValueError(f"{lock}: a link, which the cache never makes; delete it") from err
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)


def _mode(path: Path) -> int:
    """``path``'s own file type and mode bits (a link's, not its target's); 0 when there is nothing there."""
    try:
        return path.lstat().st_mode
    except FileNotFoundError:
        return 0
