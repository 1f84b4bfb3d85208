"""What DEBUG prints: one line per kernel at 2, the AST and opts at 3, the source at 4."""

import re

import numpy as np

from lazygrad import Context, Tensor
from lazygrad.helpers import ansistrip


def fresh(n: int) -> Tensor:
    return Tensor(np.random.default_rng(n).standard_normal(n).astype(np.float32)).realize()


def test_debug2_kernel_line(capsys):
    a, b = fresh(1000), fresh(1001)[:1000]
    with Context(DEBUG=2):
        (a + b).realize()
    lines = [ansistrip(x) for x in capsys.readouterr().out.splitlines() if x.startswith("***") or "***" in x]
    assert len(lines) == 1
    line = lines[0]
    want = r"CPU\s+\d+\s+E_\w+\s+arg\s+3\s+mem\s+[\d.]+ GB\s+tm\s+[\d.]+us/\s*[\d.]+ms"
    want += r" \(\s*[\d.]+ GFLOPS\s+[\d.]+ GB/s\)"
    assert re.search(want, line), line


def test_debug3_prints_ast_and_opts(capsys):
    a = fresh(512)
    with Context(DEBUG=3):
        (a * 3).realize()
    out = capsys.readouterr().out
    assert "Ops.SINK" in out and "applied [" in out


def test_debug4_prints_c_source(capsys):
    a = fresh(77)
    with Context(DEBUG=4):
        (a * 5 - 1).realize()
    out = capsys.readouterr().out
    assert "void E_" in out and "restrict data0" in out and "for (int" in out


def test_noopt_shows_plain_kernel(capsys):
    a = fresh(256)
    with Context(DEBUG=2, NOOPT=1):
        (a * 7).realize()
    assert "E_256 " in ansistrip(capsys.readouterr().out)
