"""Tiny Shakespeare (char-rnn's ``input.txt``) as character id streams (docs/design.md, Tasks and data).

``tinyshakespeare()`` returns ``(vocabulary, {split: ids})``; where the file is read from, how
it is checked and split: ``tinyshakespeare``.
"""

from __future__ import annotations

import hashlib
import logging
import os
import tempfile
import urllib.error
import urllib.request
from pathlib import Path

import numpy as np

log = logging.getLogger("groupstate.data")

DATA_DIR_VARIABLE = "GROUPSTATE_DATA_DIR"
CACHE_DIR_VARIABLE = "GROUPSTATE_CACHE_DIR"
TINY_SHAKESPEARE_URL = "https://raw.githubusercontent.com/karpathy/char-rnn/master/data/tinyshakespeare/input.txt"
TINY_SHAKESPEARE_SHA256 = "86c4e6aa9db7c042ec79f339dcb96d42b0075e16b8fc2e86bf0ca57e2dc565ed"
RELATIVE_PATH = Path("tinyshakespeare") / "input.txt"
SPLITS = ("train", "valid", "test")
SPLIT_ENDS = {"train": 90, "valid": 95, "test": 100}  # percent of the file where each split ends


class ChecksumError(ValueError):
    """A data file whose sha256 differs from the published one."""


def sha256_of_file(path):
    """Hex sha256 of a file's bytes."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def default_cache_dir():
    """``$GROUPSTATE_CACHE_DIR``, else ``$XDG_CACHE_HOME/groupstate``, else ``~/.cache/groupstate``."""
    if os.environ.get(CACHE_DIR_VARIABLE):
        return Path(os.environ[CACHE_DIR_VARIABLE]).expanduser()
    if os.environ.get("XDG_CACHE_HOME"):
        return Path(os.environ["XDG_CACHE_HOME"]).expanduser() / "groupstate"
    return Path.home() / ".cache" / "groupstate"


def download_verified(url, target, sha256, timeout=60.0):
    """Download ``url`` to ``target`` atomically, refusing content whose sha256 differs.

    The bytes are streamed into a temporary file in ``target``'s directory while hashing; on a
    match the file is renamed onto ``target`` (``os.replace``), otherwise it is deleted and
    ``ChecksumError`` is raised. ``file://`` URLs work (used by the tests).

    Returns:
        ``target`` as a ``Path``.
    """
    target = Path(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    log.info("downloading %s to %s", url, target)
    handle, temporary = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".part", dir=target.parent)
    try:
        digest = hashlib.sha256()
        with os.fdopen(handle, "wb") as out, urllib.request.urlopen(url, timeout=timeout) as response:
            for chunk in iter(lambda: response.read(1 << 20), b""):
                digest.update(chunk)
                out.write(chunk)
            out.flush()
            os.fsync(out.fileno())
        if digest.hexdigest() != sha256:
            raise ChecksumError(f"refusing the download of {url}: sha256 {digest.hexdigest()} differs from the "
                                f"expected {sha256}; nothing was written to {target}")
        os.replace(temporary, target)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
    return target


def tinyshakespeare_path(data_dir=None, cache_dir=None, url=TINY_SHAKESPEARE_URL, download=True):
    """Locate (or fetch into the cache) ``tinyshakespeare/input.txt``; see the module docstring.

    Raises:
        FileNotFoundError: the data directory lacks the file, or it is not cached and
            ``download=False``.
        ChecksumError: the download's sha256 differs from the published one.
        ConnectionError: the download failed (no network); the message names ``$GROUPSTATE_DATA_DIR``.
    """
    named = data_dir is not None or bool(os.environ.get(DATA_DIR_VARIABLE))
    if named:
        source = "data_dir" if data_dir is not None else f"${DATA_DIR_VARIABLE}"
        path = Path(data_dir if data_dir is not None else os.environ[DATA_DIR_VARIABLE]).expanduser() / RELATIVE_PATH
        if not path.is_file():
            raise FileNotFoundError(
                f"Tiny Shakespeare not found: {source} points to {path.parent.parent}, which has no "
                f"{RELATIVE_PATH} (looked for {path}). Put char-rnn's input.txt there (sha256 "
                f"{TINY_SHAKESPEARE_SHA256}), point {DATA_DIR_VARIABLE} at a directory that has it, "
                f"or unset {DATA_DIR_VARIABLE} to download it into the cache")
        return path
    path = Path(cache_dir if cache_dir is not None else default_cache_dir()).expanduser() / RELATIVE_PATH
    if path.is_file():
        return path
    if not download:
        raise FileNotFoundError(f"Tiny Shakespeare is not cached at {path} and download=False; set "
                                f"{DATA_DIR_VARIABLE} to a directory with {RELATIVE_PATH} or allow the download")
    try:
        return download_verified(url, path, TINY_SHAKESPEARE_SHA256)
    except urllib.error.URLError as error:
        raise ConnectionError(
            f"could not download Tiny Shakespeare from {url} ({error.reason}). Without a network, put "
            f"char-rnn's input.txt in DIR/{RELATIVE_PATH} and set {DATA_DIR_VARIABLE}=DIR") from None


def tinyshakespeare_text(data_dir=None, cache_dir=None, url=TINY_SHAKESPEARE_URL, download=True, verify=True):
    """The whole text (1,115,394 characters) after the sha256 check; arguments as ``tinyshakespeare``."""
    path = tinyshakespeare_path(data_dir, cache_dir, url, download)
    raw = path.read_bytes()
    if verify:
        digest = hashlib.sha256(raw).hexdigest()
        if digest != TINY_SHAKESPEARE_SHA256:
            raise ChecksumError(f"{path} has sha256 {digest}, not char-rnn's {TINY_SHAKESPEARE_SHA256}: the file is "
                                "corrupt or a different text (delete it, or pass verify=False to use it anyway)")
    return raw.decode("utf-8")


def encode_characters(text, vocabulary):
    """``text`` as an int64 id array under a sorted character ``vocabulary`` (ValueError on unknown characters)."""
    codes = np.frombuffer(text.encode("utf-32-le"), dtype="<u4")
    table = np.array([ord(symbol) for symbol in vocabulary], dtype="<u4")
    ids = np.searchsorted(table, codes)
    known = (ids < len(table)) & (table[np.minimum(ids, len(table) - 1)] == codes)
    if not known.all():
        bad = chr(int(codes[np.argmin(known)]))
        raise ValueError(f"character {bad!r} is not in the vocabulary")
    return ids.astype(np.int64)


def split_bounds(length):
    """``{split: (start, stop)}`` of a text of ``length`` characters (integer arithmetic, no rounding
    surprises): train [0, ⌊0.9·N⌋), valid [⌊0.9·N⌋, ⌊0.95·N⌋), test [⌊0.95·N⌋, N)."""
    bounds, start = {}, 0
    for split in SPLITS:
        stop = length * SPLIT_ENDS[split] // 100
        bounds[split], start = (start, stop), stop
    return bounds


def tinyshakespeare(data_dir=None, cache_dir=None, url=TINY_SHAKESPEARE_URL, download=True, verify=True):
    """``(vocabulary, {"train": ids, "valid": ids, "test": ids})``: the 65 sorted characters and
    int64 id streams of the 90/5/5 split (module docstring).

    Args:
        data_dir: directory holding ``tinyshakespeare/input.txt`` (default ``$GROUPSTATE_DATA_DIR``).
        cache_dir: download cache used when no data directory is named (default: see the module).
        url: where to download from (a ``file://`` URL works).
        download: allow the download when the file is not cached.
        verify: check the sha256 of the file read.

    The file is not in any package and never committed. It is resolved in this order:

    1. ``data_dir`` if given, else ``$GROUPSTATE_DATA_DIR`` if set (and not empty):
       ``<dir>/tinyshakespeare/input.txt`` must exist there. A missing file is an error naming the
       variable and the path; there is no silent fallback to a download when a data directory was
       named.
    2. Otherwise the cached download ``<cache>/tinyshakespeare/input.txt``, fetched from
       ``TINY_SHAKESPEARE_URL`` on first use. ``<cache>`` is ``cache_dir`` if given, else
       ``$GROUPSTATE_CACHE_DIR``, else ``$XDG_CACHE_HOME/groupstate``, else ``~/.cache/groupstate``.
       The download is streamed into a temporary file next to the target, checked against
       ``TINY_SHAKESPEARE_SHA256`` and only then renamed into place (atomic on POSIX), so the cache
       never holds a partial or wrong file.

    Every file read is checked against the sha256 (the split sizes and the vocabulary below are facts
    about that file); pass ``verify=False`` to read a local file of your own.

    Split (docs/design.md, Tasks and data): three contiguous pieces of the N characters, in file order: ``train`` is the
    first ⌊0.90·N⌋, ``valid`` (model selection) the next up to ⌊0.95·N⌋, ``test`` the rest. The train
    split is char-rnn's and nanoGPT's; their 10% validation split is cut in two here. The vocabulary
    is the 65 distinct characters of the whole file, sorted by code point, so no split holds an
    unknown symbol.

        >>> vocabulary, streams = tinyshakespeare()        # doctest: +SKIP
        >>> len(vocabulary), [len(streams[split]) for split in SPLITS]  # doctest: +SKIP
        (65, [1003854, 55770, 55770])
    """
    text = tinyshakespeare_text(data_dir, cache_dir, url, download, verify)
    vocabulary = sorted(set(text))
    ids = encode_characters(text, vocabulary)
    return vocabulary, {split: ids[start:stop].copy() for split, (start, stop) in split_bounds(len(ids)).items()}


__all__ = ["CACHE_DIR_VARIABLE", "ChecksumError", "DATA_DIR_VARIABLE", "SPLITS", "TINY_SHAKESPEARE_SHA256",
           "TINY_SHAKESPEARE_URL", "default_cache_dir", "download_verified", "encode_characters", "sha256_of_file",
           "split_bounds", "tinyshakespeare", "tinyshakespeare_path", "tinyshakespeare_text"]
