"""The VIZ page in a real headless browser (Debian's chromium): the DOM after the page's scripts ran shows the kernel
list, a kernel's source and its graphs drawn as SVG, and a screenshot of a rewrite step is not blank."""

from __future__ import annotations

import html.parser
import random
import shutil
import struct
import subprocess
import zlib

import numpy as np
import pytest

from lazygrad import Tensor
from lazygrad.helpers import Context
from lazygrad.viz import profile, record
from lazygrad.viz.layout import subgraph
from lazygrad.viz.server import serve

CHROMIUM = next(
    (p for p in map(shutil.which, ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")) if p), None
)
pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="no chromium (apt-get install chromium; .ci/run does)")


def chromium(url: str, profile_dir, *args: str) -> str:
    # virtual time lets the page's fetches and scripts finish before the DOM is dumped or the screenshot taken;
    # --no-sandbox: CI runs as root, where chromium's sandbox refuses to start; containers have a tiny /dev/shm
    cmd = [
        CHROMIUM,
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        f"--user-data-dir={profile_dir}",
    ]
    cmd += ["--virtual-time-budget=10000", "--window-size=800,600", *args, url]
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr[-2000:]
    return res.stdout


class _Dom(html.parser.HTMLParser):
    """What the test reads of the dumped DOM: kernel list entries, the source text, drawn graphs and their nodes."""

    def __init__(self) -> None:
        super().__init__()
        self.kernels, self.graph_nodes, self.graph_roots, self.ready = 0, 0, [], False
        self.source: str | None = None
        self._in_source = False

    def handle_starttag(self, tag: str, attrs: list) -> None:
        a = dict(attrs)
        cls = (a.get("class") or "").split()
        self.ready |= tag == "body" and a.get("data-ready") == "1"
        self.kernels += tag == "li" and "kernel" in cls
        self.graph_nodes += tag == "g" and "node" in cls
        if tag == "svg" and "graph" in cls:
            self.graph_roots.append(int(a["data-root"]))
        if tag == "pre" and a.get("id") == "source":
            self._in_source, self.source = True, ""

    def handle_endtag(self, tag: str) -> None:
        self._in_source &= tag != "pre"

    def handle_data(self, data: str) -> None:
        if self._in_source:
            self.source += data


def png_pixels(path) -> np.ndarray:
    """An 8-bit RGB(A) PNG as a (height, width, channels) array: a few lines instead of a Pillow dependency."""
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    pos, idat = 8, b""
    while pos < len(data):
        (n,), kind = struct.unpack(">I", data[pos : pos + 4]), data[pos + 4 : pos + 8]
        body, pos = data[pos + 8 : pos + 8 + n], pos + 12 + n
        if kind == b"IHDR":
            width, height, depth, ctype = struct.unpack(">IIBB", body[:10])
            assert depth == 8 and ctype in (2, 6), "only 8-bit RGB / RGBA"
        elif kind == b"IDAT":
            idat += body
    bpp = 3 if ctype == 2 else 4
    raw = np.frombuffer(zlib.decompress(idat), np.uint8).reshape(height, width * bpp + 1)
    out = np.zeros((height + 1, width * bpp), np.int64)  # row 0: the zero row above the image
    for y in range(height):
        ftype, line, prev = raw[y, 0], raw[y, 1:].astype(np.int64), out[y]
        if ftype == 0:
            out[y + 1] = line
        elif ftype == 1:  # Sub: a running sum per channel
            out[y + 1] = line.reshape(-1, bpp).cumsum(0).reshape(-1) & 255
        elif ftype == 2:  # Up
            out[y + 1] = (line + prev) & 255
        else:  # Average and Paeth read the byte just decoded: one at a time
            cur, prv = line.tolist(), prev.tolist()
            for i in range(len(cur)):
                a, b, c = (cur[i - bpp], prv[i], prv[i - bpp]) if i >= bpp else (0, prv[i], 0)
                if ftype == 3:
                    cur[i] = (cur[i] + (a + b) // 2) & 255
                else:
                    p = a + b - c
                    pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                    cur[i] = (cur[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
            out[y + 1] = cur
    return out[1:].astype(np.uint8).reshape(height, width, bpp)


@pytest.fixture(scope="module")
def served_run():
    record.clear()
    profile.clear()
    c = round(random.uniform(1, 2), 6)  # a constant no other test compiled: the kernels are built here
    a = np.arange(104, dtype=np.float32).reshape(8, 13)
    with Context(VIZ=1):
        out = ((Tensor(a) @ Tensor(a).T) + c).relu().sum(1).numpy()
    np.testing.assert_allclose(out, np.maximum(a @ a.T + c, 0).sum(1), rtol=1e-5)
    data = record.dump()
    record.clear()  # nothing left for the exit hook to serve
    profile.clear()
    server = serve(data)
    yield data, server.url
    server.stop()


def test_kernel_page_in_chromium(served_run, tmp_path) -> None:
    data, url = served_run
    listed = [i for i, k in enumerate(data["kernels"]) if "duplicate_of" not in k]
    i = next(i for i in listed if data["kernels"][i]["opts"])  # one with opts (the sum over the fresh constant has)
    k = data["kernels"][i]
    dom = _Dom()
    dom.feed(chromium(f"{url}#kernel/{i}", tmp_path / "profile", "--dump-dom"))
    assert dom.ready, "the page's script did not finish"
    assert dom.kernels == len(listed)
    assert dom.source == k["src"]
    assert dom.graph_roots == [k["ast"], k["stages"]["lowered"]["graph"]]  # the AST, then the lowered kernel
    expected = len(subgraph(data["nodes"], k["ast"])) + len(subgraph(data["nodes"], k["stages"]["lowered"]["graph"]))
    assert dom.graph_nodes == expected


def test_rewrite_step_screenshot_is_not_blank(served_run, tmp_path) -> None:
    data, url = served_run
    p = next(i for i, p in enumerate(data["passes"]) if p["steps"])
    shot = tmp_path / "step.png"
    chromium(f"{url}#pass/{p}/1", tmp_path / "profile", f"--screenshot={shot}")
    px = png_pixels(shot)
    assert px.shape[:2] == (600, 800)
    rgb = px[..., :3].reshape(-1, 3).astype(np.int64)
    colours = np.unique(rgb[:, 0] << 16 | rgb[:, 1] << 8 | rgb[:, 2])
    assert len(colours) > 50, f"{len(colours)} colours: the page looks blank"
    assert 0.02 < (rgb != 255).any(1).mean() < 0.9  # some drawing on a mostly white page
