"""tinygrad's helpers that its programs import (`from tinygrad.helpers import Timing, trange, fetch, ...`), each
against what it should give: progress bars, timers, downloads (from a file:// URL: no network in tests), bit and
integer helpers (against C semantics), the disk-cache decorator."""

from __future__ import annotations

import ctypes
import gzip
import math
import pathlib

import pytest

from lazygrad import helpers
from lazygrad.helpers import (
    Profiling,
    Timing,
    cdiv,
    cmod,
    data64,
    data64_le,
    diskcache,
    fetch,
    from_mv,
    fully_flatten,
    get_child,
    getbits,
    i2u,
    pluralize,
    strip_parens,
    time_to_str,
    to_mv,
    tqdm,
    trange,
    word_wrap,
)


def test_timing_prints_the_block_time(capsys) -> None:
    with Timing("step ", on_exit=lambda ns: f" ({ns >= 0})"):
        pass
    out = capsys.readouterr().out
    assert out.startswith("step ") and out.rstrip().endswith("ms (True)")
    with Timing(enabled=False):
        pass
    assert capsys.readouterr().out == ""

    @Timing("decorated ")
    def f() -> int:
        return 3

    assert f() == 3 and "decorated" in capsys.readouterr().out


def test_profiling_prints_the_stats(capsys, tmp_path: pathlib.Path) -> None:
    with Profiling(sort="tottime", frac=0.5):
        sum(i * i for i in range(1000))
    assert "function calls" in capsys.readouterr().out
    with Profiling(fn=str(tmp_path / "p.prof")):
        pass
    assert (tmp_path / "p.prof").stat().st_size > 0


def test_tqdm_and_trange(capsys) -> None:
    assert list(tqdm([3, 1, 2], desc="items")) == [3, 1, 2]
    err = capsys.readouterr().err
    assert "items: " in err and "3/3" in err and "100%" in err
    assert list(trange(4)) == [0, 1, 2, 3] and "4/4" in capsys.readouterr().err
    with tqdm(total=3000, unit="B", unit_scale=True) as bar:
        bar.update(1000)
        bar.set_description("bytes")
        bar.update(2000)
    err = capsys.readouterr().err
    assert "bytes: " in err and "3k/3k" in err and "B/s" in err
    assert list(tqdm(iter(range(3)))) == [0, 1, 2] and "3it" in capsys.readouterr().err  # no length: a count
    assert list(tqdm(range(2), disable=True)) == [0, 1] and capsys.readouterr().err == ""


def test_fetch_downloads_once_gunzips_and_caches(tmp_path: pathlib.Path, monkeypatch) -> None:
    monkeypatch.setattr(helpers, "_cache_dir", tmp_path / "cache")
    src = tmp_path / "data.txt.gz"
    src.write_bytes(gzip.compress(b"hello"))
    url = src.as_uri()
    raw, plain = fetch(url), fetch(url, gunzip=True)
    assert raw.read_bytes() == src.read_bytes() and plain.read_bytes() == b"hello"
    assert raw.parent == tmp_path / "cache" / "downloads" and raw != plain
    src.write_bytes(gzip.compress(b"changed"))
    assert fetch(url, gunzip=True).read_bytes() == b"hello"  # cached
    assert fetch(url, gunzip=True, allow_caching=False).read_bytes() == b"changed"
    named = fetch(url, name="x.gz", subdir="sets")
    assert named == tmp_path / "cache" / "downloads" / "sets" / "x.gz" and named.is_file()
    assert fetch(url, name=tmp_path / "exact.gz") == tmp_path / "exact.gz"
    assert fetch(str(src)) == src  # a local path is itself
    assert not list((tmp_path / "cache").rglob("*.part"))


def test_structure_helpers() -> None:
    assert fully_flatten([[1, (2, [3])], 4, []]) == [1, 2, 3, 4]

    class Layer:
        def __init__(self) -> None:
            self.blocks = [{"w": 5}, {"w": 7}]

    assert get_child(Layer(), "blocks.1.w") == 7
    assert pluralize("kernel", 1) == "1 kernel" and pluralize("kernel", 3) == "3 kernels"
    assert strip_parens("(a+b)") == "a+b" and strip_parens("(a)+(b)") == "(a)+(b)" and strip_parens("a") == "a"
    assert word_wrap("abcdefgh", 3) == "abc\ndef\ngh"
    assert word_wrap("\x1b[31mabcd\x1b[0m", 2).replace("\x1b[31m", "").replace("\x1b[0m", "") == "ab\ncd"
    assert time_to_str(20.0).strip() == "20.00s" and time_to_str(0.5).strip() == "500.00ms"
    assert time_to_str(2e-6).strip() == "2.00us"


@pytest.mark.parametrize("x, y", [(7, 2), (-7, 2), (7, -2), (-7, -2), (6, 3), (-1, 5), (5, 0)])
def test_c_division(x: int, y: int) -> None:
    if y == 0:
        assert cdiv(x, y) == 0
        return
    assert cdiv(x, y) == math.trunc(x / y)
    assert cmod(x, y) == int(math.fmod(x, y))


def test_bits_and_memory() -> None:
    assert i2u(8, -1) == 255 and i2u(32, -2) == 2**32 - 2 and i2u(8, 5) == 5
    assert getbits(0b110110, 1, 3) == 0b011
    assert data64(0x1234_5678_9ABC_DEF0) == (0x12345678, 0x9ABCDEF0)
    assert data64_le(0x1234_5678_9ABC_DEF0) == (0x9ABCDEF0, 0x12345678)
    buf = (ctypes.c_uint8 * 4)(1, 2, 3, 4)
    mv = to_mv(ctypes.addressof(buf), 4)
    assert bytes(mv) == b"\x01\x02\x03\x04"
    mv[0] = 9
    assert buf[0] == 9
    data = bytearray(b"abc")
    arr = from_mv(data)
    assert arr.raw == b"abc" and len(arr) == 3
    arr[0] = b"z"
    assert data == bytearray(b"zbc")  # the same memory


def test_diskcache_decorator(tmp_path: pathlib.Path, monkeypatch) -> None:
    monkeypatch.setattr(helpers, "CACHEDB", str(tmp_path / "cache.db"))
    monkeypatch.setattr(helpers, "_db_local", type(helpers._db_local)())  # a fresh connection to that file
    calls = []

    @diskcache
    def square(x: int) -> int:
        calls.append(x)
        return x * x

    assert square(3) == 9 and square(3) == 9 and square(4) == 16
    assert calls == [3, 4]


def test_from_url_and_top_level_fetch(tmp_path: pathlib.Path, monkeypatch) -> None:
    import lazygrad
    from lazygrad import Tensor

    assert lazygrad.fetch is fetch  # `from tinygrad import fetch`
    monkeypatch.setattr(helpers, "_cache_dir", tmp_path / "cache")
    src = tmp_path / "w.bin.gz"
    src.write_bytes(gzip.compress(bytes([3, 1, 4, 1, 5, 9, 2, 6])))
    t = Tensor.from_url(src.as_uri(), gunzip=True)
    assert t.device.startswith("DISK:") and t.shape == (8,)
    assert t.to("CPU").tolist() == [3, 1, 4, 1, 5, 9, 2, 6]
    assert t.to("CPU").bitcast(lazygrad.dtypes.uint16).tolist() == [3 + 256, 4 + 256, 5 + 9 * 256, 2 + 6 * 256]
