"""Datasets (docs/design.md, Tasks and data): sizes, vocabularies and checksums pinned; Tiny Shakespeare's resolution,
download (from a local ``file://`` URL), checksum refusal and missing-data errors.

Pinned id-stream checksums are sha256 of the little-endian int64 bytes of each split.
"""

from __future__ import annotations

import hashlib
import os
import shutil
from pathlib import Path

import numpy as np
import pytest

from experiments.data.ptb import EOS, SPLITS as PTB_SPLITS, ptb_char, ptb_text, ptb_word
from experiments.data.tinyshakespeare import (
    CACHE_DIR_VARIABLE,
    DATA_DIR_VARIABLE,
    TINY_SHAKESPEARE_SHA256,
    ChecksumError,
    default_cache_dir,
    sha256_of_file,
    split_bounds,
    tinyshakespeare,
    tinyshakespeare_path,
    tinyshakespeare_text,
)

# The repository's sibling ../shared/data (where CI points GROUPSTATE_DATA_DIR).
SHARED_DATA = Path(__file__).resolve().parents[2] / "shared" / "data"
INPUT = Path("tinyshakespeare") / "input.txt"


def stream_sha256(ids):
    return hashlib.sha256(np.ascontiguousarray(ids, dtype="<i8").tobytes()).hexdigest()


def locate_data_dir():
    """``$GROUPSTATE_DATA_DIR``, else ../shared/data next to the repository; never a silent skip."""
    if os.environ.get(DATA_DIR_VARIABLE):
        tinyshakespeare_path(download=False)  # a directory without the file: the loader's error, naming both
        return Path(os.environ[DATA_DIR_VARIABLE])
    if (SHARED_DATA / INPUT).is_file():
        return SHARED_DATA
    pytest.fail(f"Tiny Shakespeare not found: {DATA_DIR_VARIABLE} is not set and {SHARED_DATA / INPUT} does "
                f"not exist; set {DATA_DIR_VARIABLE} to a directory holding {INPUT} (CI: ../shared/data)")


@pytest.fixture(scope="module")
def data_dir():
    return locate_data_dir()


@pytest.fixture(scope="module")
def shakespeare(data_dir):
    return tinyshakespeare(data_dir=data_dir)


@pytest.fixture
def no_data_dir(monkeypatch):
    """Neither the data-directory nor the cache variable set: resolution goes to the download."""
    monkeypatch.delenv(DATA_DIR_VARIABLE, raising=False)
    monkeypatch.delenv(CACHE_DIR_VARIABLE, raising=False)


# --- Tiny Shakespeare: pinned facts -------------------------------------------------------------

TS_VOCABULARY = "\n !$&',-.3:;?ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
TS_SPLITS = {  # split: (tokens, sha256 of the id stream); 90/5/5 of the 1,115,394 characters (docs/design.md, Tasks and data)
    "train": (1_003_854, "0f4025c3c124bb920bb39e98f886c47c440860813f0768beb379a7c64f29a0db"),
    "valid": (55_770, "171defec6f07e200793a9af9481b14d4a475274f39032a6dc60683832ea293d8"),
    "test": (55_770, "a554639d4113ff92de2db75220b08c21e3cd645204a094a56be01d82a1aa56fb"),
}


def test_tinyshakespeare_published_facts(data_dir):
    text = tinyshakespeare_text(data_dir=data_dir)
    assert len(text) == 1_115_394
    assert len(set(text)) == 65
    assert text.startswith("First Citizen:\n")
    assert hashlib.sha256(text.encode("utf-8")).hexdigest() == TINY_SHAKESPEARE_SHA256


def test_tinyshakespeare_vocabulary(shakespeare):
    vocabulary, _ = shakespeare
    assert "".join(vocabulary) == TS_VOCABULARY
    assert len(vocabulary) == 65


@pytest.mark.parametrize("split", list(TS_SPLITS), ids=list(TS_SPLITS))
def test_tinyshakespeare_split(shakespeare, split):
    _, streams = shakespeare
    ids = streams[split]
    tokens, checksum = TS_SPLITS[split]
    assert ids.dtype == np.int64 and ids.ndim == 1
    assert len(ids) == tokens
    assert stream_sha256(ids) == checksum
    assert 0 <= ids.min() and ids.max() < 65


def test_tinyshakespeare_split_is_first_ninety_percent(data_dir, shakespeare):
    vocabulary, streams = shakespeare
    text = tinyshakespeare_text(data_dir=data_dir)
    assert len(streams["train"]) == int(0.9 * len(text))
    decoded = "".join(vocabulary[i] for i in streams["train"][:200]) + "|" + "".join(
        vocabulary[i] for i in streams["valid"][:200])
    cut = len(streams["train"])
    assert decoded == text[:200] + "|" + text[cut:cut + 200]


def test_tinyshakespeare_splits_are_contiguous_and_cover_the_file(data_dir, shakespeare):
    """Decoded, train = text[:1,003,854] (⌊0.90·N⌋), valid = text[1,003,854:1,059,624] (⌊0.95·N⌋),
    test = the rest: in file order, no gap, no overlap, together the whole file."""
    vocabulary, streams = shakespeare
    text = tinyshakespeare_text(data_dir=data_dir)
    decoded = {split: "".join(vocabulary[i] for i in streams[split]) for split in ("train", "valid", "test")}
    assert decoded["train"] == text[:1_003_854]
    assert decoded["valid"] == text[1_003_854:1_059_624]
    assert decoded["test"] == text[1_059_624:]
    assert decoded["train"] + decoded["valid"] + decoded["test"] == text
    assert sorted(streams) == ["test", "train", "valid"]
    assert vocabulary == sorted(set(text)) and len(vocabulary) == 65


@pytest.mark.parametrize("length, bounds", [
    (16, [(0, 14), (14, 15), (15, 16)]),
    (100, [(0, 90), (90, 95), (95, 100)]),
    (1_115_394, [(0, 1_003_854), (1_003_854, 1_059_624), (1_059_624, 1_115_394)]),
], ids=["16", "100", "tinyshakespeare"])
def test_split_bounds_by_hand(length, bounds):
    assert list(split_bounds(length).values()) == bounds
    assert list(split_bounds(length)) == ["train", "valid", "test"]


def test_tinyshakespeare_from_environment_variable(monkeypatch, data_dir, shakespeare):
    monkeypatch.setenv(DATA_DIR_VARIABLE, str(data_dir))
    vocabulary, streams = tinyshakespeare()
    assert vocabulary == shakespeare[0]
    assert all(np.array_equal(streams[s], shakespeare[1][s]) for s in TS_SPLITS)


@pytest.mark.parametrize("how", ["variable", "argument"], ids=["variable", "argument"])
def test_missing_data_names_variable_and_file(monkeypatch, tmp_path, how):
    if how == "variable":
        monkeypatch.setenv(DATA_DIR_VARIABLE, str(tmp_path))
        call = tinyshakespeare
    else:
        monkeypatch.delenv(DATA_DIR_VARIABLE, raising=False)
        call = lambda: tinyshakespeare(data_dir=tmp_path)  # noqa: E731
    with pytest.raises(FileNotFoundError) as caught:
        call()
    message = str(caught.value)
    assert DATA_DIR_VARIABLE in message
    assert str(tmp_path / INPUT) in message


def test_wrong_local_file_refused(tmp_path):
    (tmp_path / INPUT).parent.mkdir(parents=True)
    (tmp_path / INPUT).write_text("not Shakespeare\n")
    with pytest.raises(ChecksumError, match="sha256"):
        tinyshakespeare(data_dir=tmp_path)
    vocabulary, streams = tinyshakespeare(data_dir=tmp_path, verify=False)
    assert "".join(vocabulary) == "\n Saehknoprst" and len(streams["train"]) == int(0.9 * 16)


# --- Tiny Shakespeare: download path --------------------------------------------------------------

def _cache_files(cache):
    return sorted(str(p.relative_to(cache)) for p in cache.rglob("*") if p.is_file()) if cache.exists() else []


def test_download_into_cache(no_data_dir, data_dir, shakespeare, tmp_path):
    remote = tmp_path / "remote" / "input.txt"
    remote.parent.mkdir()
    shutil.copyfile(data_dir / INPUT, remote)
    cache = tmp_path / "cache"
    vocabulary, streams = tinyshakespeare(cache_dir=cache, url=remote.as_uri())
    assert _cache_files(cache) == [str(INPUT)]  # the file, and no temporary left behind
    assert sha256_of_file(cache / INPUT) == TINY_SHAKESPEARE_SHA256
    assert vocabulary == shakespeare[0]
    assert all(np.array_equal(streams[s], shakespeare[1][s]) for s in TS_SPLITS)
    remote.unlink()  # the second call reads the cache, no download
    assert tinyshakespeare(cache_dir=cache, url=remote.as_uri())[0] == vocabulary
    with pytest.raises(FileNotFoundError, match="download=False"):
        tinyshakespeare(cache_dir=tmp_path / "empty", download=False)


def _flip_a_byte(raw):
    return raw[:1000] + bytes([raw[1000] ^ 1]) + raw[1001:]


CORRUPTIONS = {"flipped_byte": _flip_a_byte, "truncated": lambda raw: raw[: len(raw) // 2],
               "appended": lambda raw: raw + b"\n"}


@pytest.mark.parametrize("corrupt", list(CORRUPTIONS.values()), ids=list(CORRUPTIONS))
def test_corrupt_download_refused(no_data_dir, data_dir, tmp_path, corrupt):
    remote = tmp_path / "remote.txt"
    remote.write_bytes(corrupt((data_dir / INPUT).read_bytes()))
    cache = tmp_path / "cache"
    with pytest.raises(ChecksumError, match="refusing"):
        tinyshakespeare(cache_dir=cache, url=remote.as_uri())
    assert _cache_files(cache) == []  # nothing written, no temporary left


def test_a_failed_download_names_the_data_directory_variable(no_data_dir, tmp_path):
    """Offline (here: a URL that cannot be opened) the error is one ConnectionError that says how to
    run without a network, not a raw URLError; nothing is left in the cache."""
    cache = tmp_path / "cache"
    with pytest.raises(ConnectionError, match=f"{DATA_DIR_VARIABLE}=DIR") as caught:
        tinyshakespeare(cache_dir=cache, url=(tmp_path / "absent.txt").as_uri())
    assert "absent.txt" in str(caught.value) and caught.value.__cause__ is None
    assert _cache_files(cache) == []


def test_corrupt_cached_file_refused(no_data_dir, data_dir, tmp_path):
    cached = tmp_path / "cache" / INPUT
    cached.parent.mkdir(parents=True)
    cached.write_bytes(_flip_a_byte((data_dir / INPUT).read_bytes()))
    with pytest.raises(ChecksumError, match=str(cached)):
        tinyshakespeare(cache_dir=tmp_path / "cache")


CACHE_SETTINGS = {  # case: (GROUPSTATE_CACHE_DIR, XDG_CACHE_HOME, expected under tmp_path or home)
    "groupstate_variable": ("mine", "xdg", "mine"),
    "xdg": (None, "xdg", "xdg/groupstate"),
    "home": (None, None, "~/.cache/groupstate"),
}


@pytest.mark.parametrize("setting", list(CACHE_SETTINGS.values()), ids=list(CACHE_SETTINGS))
def test_default_cache_dir(monkeypatch, tmp_path, setting):
    own, xdg, expected = setting
    for variable, value in ((CACHE_DIR_VARIABLE, own), ("XDG_CACHE_HOME", xdg)):
        if value is None:
            monkeypatch.delenv(variable, raising=False)
        else:
            monkeypatch.setenv(variable, str(tmp_path / value))
    want = Path(expected).expanduser() if expected.startswith("~") else tmp_path / expected
    assert default_cache_dir() == want


# --- Penn Treebank --------------------------------------------------------------------------------

PTB_TEXT_SHA256 = {
    "train": "11982c90bda2f36d382987b7216d77f5aaf126e16c53624ef87e79568b1f5fe4",
    "valid": "c9fe6985fe0d4ccb578183407d7668fc6066c20700cb4cf87d8ff1cc34df1bf2",
    "test": "dd65dff31e70846b2a6030a87482edcd5d199130cdcfa1f3dccbb033728deee0",
}
PTB_WORD = {  # split: (tokens with <eos>, sentences, sha256 of the id stream)
    "train": (929_589, 42_068, "b2994dc02e2d40ac231456f1182dcde7a73eeea6999944dcc363d379653e3a0a"),
    "valid": (73_760, 3_370, "832903cc1263f7f83cbd1308eda65602cc8c92fe4a727a1463ed933cc8630d15"),
    "test": (82_430, 3_761, "ab4786bd425c09454e38f927f5c1fb3bc8b9dd33cb2b82b1453a60cc8d4398b1"),
}
PTB_WORD_VOCABULARY_SHA256 = "135c1cdfba9ba2627ec3793c69ec07de0dd88160d58aef56c285c140f4831094"  # "\n".join
PTB_CHAR_VOCABULARY = "\n#$&'*-./0123456789<>N\\_abcdefghijklmnopqrstuvwxyz"
PTB_CHAR = {  # split: (tokens, sha256 of the id stream)
    "train": (5_017_482, "248db1150f51250394265fa61e1f3bea7496ffa9e489e1e82004357029099258"),
    "valid": (393_042, "723bf237a59a53e326add84dc74847d79a860b3f921e64bee2aef024a5ce5922"),
    "test": (442_423, "d75630e9ea54af0a01ddf0eb65c1886c3f96cb0a4f95ee39b297153a728754f6"),
}


@pytest.mark.parametrize("split", PTB_SPLITS, ids=PTB_SPLITS)
def test_ptb_package_text(split):
    text = ptb_text(split)
    assert hashlib.sha256(text.encode("utf-8")).hexdigest() == PTB_TEXT_SHA256[split]
    assert text.endswith("\n\n") == (split == "train")  # train's one extra trailing newline


def test_ptb_word_published_facts():
    vocabulary, streams = ptb_word()
    assert len(vocabulary) == 10_000 and len(set(vocabulary)) == 10_000
    assert EOS in vocabulary and "<unk>" in vocabulary
    assert [len(streams[s]) // 1000 for s in PTB_SPLITS] == [929, 73, 82]


def test_ptb_word_vocabulary():
    vocabulary, streams = ptb_word()
    assert hashlib.sha256("\n".join(vocabulary).encode("utf-8")).hexdigest() == PTB_WORD_VOCABULARY_SHA256
    assert vocabulary[:5] == ["the", "<unk>", EOS, "N", "of"]  # by training frequency
    counts = np.bincount(streams["train"], minlength=len(vocabulary))
    assert (np.diff(counts) <= 0).all()


@pytest.mark.parametrize("split", PTB_SPLITS, ids=PTB_SPLITS)
def test_ptb_word_split(split):
    vocabulary, streams = ptb_word()
    ids = streams[split]
    tokens, sentences, checksum = PTB_WORD[split]
    assert ids.dtype == np.int64 and ids.ndim == 1
    assert len(ids) == tokens
    assert stream_sha256(ids) == checksum
    eos = vocabulary.index(EOS)
    ends = np.flatnonzero(ids == eos)
    assert len(ends) == sentences and ends[-1] == len(ids) - 1
    assert ids[0] != eos and not (np.diff(ends) == 1).any()  # no empty sentence (train's extra newline)
    line = ptb_text(split).split("\n")[0].split()
    assert [vocabulary[i] for i in ids[: len(line) + 1]] == line + [EOS]


def test_ptb_word_returns_copies():
    _, first = ptb_word()
    first["train"][:] = 0
    assert stream_sha256(ptb_word()[1]["train"]) == PTB_WORD["train"][2]


def test_ptb_char_vocabulary():
    vocabulary, _ = ptb_char()
    assert len(vocabulary) == 50
    assert "".join(vocabulary) == PTB_CHAR_VOCABULARY


@pytest.mark.parametrize("split", PTB_SPLITS, ids=PTB_SPLITS)
def test_ptb_char_split(split):
    vocabulary, streams = ptb_char()
    ids = streams[split]
    tokens, checksum = PTB_CHAR[split]
    assert ids.dtype == np.int64 and ids.ndim == 1
    assert len(ids) == tokens
    assert stream_sha256(ids) == checksum
    # the words of the first sentence spelled out with '_' between them, then the newline token
    first = "_".join(ptb_text(split).split("\n")[0].split()) + "\n"
    assert "".join(vocabulary[i] for i in ids[: len(first)]) == first
    # one newline token per sentence: as many as the word level's <eos>
    assert (ids == vocabulary.index("\n")).sum() == PTB_WORD[split][1]
