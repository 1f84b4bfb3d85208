"""The GGUF reader on files written here byte by byte (from the spec), dequantization against numpy, and errors."""

from __future__ import annotations

import struct

import numpy as np
import pytest

from lazygrad import GlobalCounters, Tensor
from lazygrad.device import Device
from lazygrad.helpers import prod
from lazygrad.nn.gguf import GGML_TYPES, GROUP, GGUFError, QuantizedMatrix, gguf_load, gguf_quantized, gguf_read_header
from lazygrad.nn.packed import float32_panel_width
from lazygrad.uop.ops import UOp

# metadata value type tags of the spec
U8, I8, U16, I16, U32, I32, F32, BOOL, STR, ARR, U64, I64, F64 = range(13)
_FMT = {U8: "B", I8: "b", U16: "H", I16: "h", U32: "I", I32: "i", F32: "f", BOOL: "?", U64: "Q", I64: "q", F64: "d"}
# ggml type id, elements per block, bytes per block
GGML = {
    "F32": (0, 1, 4),
    "F16": (1, 1, 2),
    "Q4_0": (2, 32, 18),
    "Q4_1": (3, 32, 20),
    "Q8_0": (8, 32, 34),
    "BF16": (30, 1, 2),
    "Q4_K": (12, 256, 144),
    "Q5_K": (13, 256, 176),
    "Q6_K": (14, 256, 210),
}
K_QUANTS = ["Q4_K", "Q5_K", "Q6_K"]
# where a block's float16 scales (and mins) lie: random bytes there could be NaN/inf halves
F16_FIELDS = {"Q6_K": slice(208, 210)}


def _str(s: str) -> bytes:
    b = s.encode()
    return struct.pack("<Q", len(b)) + b


def _value(tag: int, v, elem: int | None = None) -> bytes:
    if tag == STR:
        return _str(v)
    if tag == ARR:
        inner_elem = None
        if elem == ARR:  # arrays of arrays: each inner array holds strings here
            inner_elem = STR
        return struct.pack("<IQ", elem, len(v)) + b"".join(_value(elem, x, inner_elem) for x in v)
    return struct.pack("<" + _FMT[tag], v)


def write_gguf(
    path,
    kvs: list[tuple[str, int, object, int | None]],
    tensors: list[tuple[str, tuple[int, ...], str, bytes]],
    alignment: int = 32,
    magic: bytes = b"GGUF",
    version: int = 3,
) -> None:
    out = bytearray(magic + struct.pack("<IQQ", version, len(tensors), len(kvs)))
    for key, tag, v, elem in kvs:
        out += _str(key) + struct.pack("<I", tag) + _value(tag, v, elem)
    offset, blobs = 0, []
    for name, shape, kind, data in tensors:
        out += _str(name) + struct.pack("<I", len(shape)) + struct.pack(f"<{len(shape)}Q", *reversed(shape))
        out += struct.pack("<IQ", GGML[kind][0], offset)
        blobs.append((offset, data))
        offset += len(data) + (-len(data) % alignment)
    out += b"\0" * (-len(out) % alignment)
    start = len(out)
    for off, data in blobs:
        out += b"\0" * (start + off - len(out)) + data
    with open(path, "wb") as f:
        f.write(out)


# *** independent numpy dequantization, written from the block layouts ***


def _np_scales_mins_k4(sc: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(blocks, 12) bytes -> the 6-bit scale and min of each of the 8 sub-blocks, one sub-block at a time."""
    sc = sc.astype(np.int64)
    scales, mins = np.zeros((len(sc), 8), np.int64), np.zeros((len(sc), 8), np.int64)
    for j in range(8):
        if j < 4:
            scales[:, j], mins[:, j] = sc[:, j] & 63, sc[:, j + 4] & 63
        else:
            scales[:, j] = (sc[:, j + 4] & 0xF) | ((sc[:, j - 4] >> 6) << 4)
            mins[:, j] = (sc[:, j + 4] >> 4) | ((sc[:, j] >> 6) << 4)
    return scales, mins


def np_dequant_k(kind: str, blocks: np.ndarray) -> np.ndarray:
    """K-quant super-blocks (blocks, bytes) -> (blocks, 256), value by value as the layouts describe them."""
    out = np.zeros((len(blocks), 256), np.float32)
    if kind == "Q6_K":
        ql, qh, sc = blocks[:, :128].astype(np.int64), blocks[:, 128:192].astype(np.int64), blocks[:, 192:208]
        d = blocks[:, 208:210].copy().view(np.float16).astype(np.float32)[:, 0]
        sc = sc.view(np.int8).astype(np.float32)
        for n in range(2):
            for i in range(32):
                l, h = ql[:, 64 * n + i], ql[:, 64 * n + i + 32]
                hb = qh[:, 32 * n + i]
                codes = [l & 0xF, h & 0xF, l >> 4, h >> 4]
                for k, low in enumerate(codes):
                    q = (low | (((hb >> (2 * k)) & 3) << 4)) - 32
                    out[:, 128 * n + 32 * k + i] = (d * sc[:, 8 * n + i // 16 + 2 * k]) * q.astype(np.float32)
        return out
    d = blocks[:, 0:2].copy().view(np.float16).astype(np.float32)[:, 0]
    dmin = blocks[:, 2:4].copy().view(np.float16).astype(np.float32)[:, 0]
    scales, mins = _np_scales_mins_k4(blocks[:, 4:16])
    qh = blocks[:, 16:48].astype(np.int64) if kind == "Q5_K" else np.zeros((len(blocks), 32), np.int64)
    qs = blocks[:, -128:].astype(np.int64)
    for c in range(4):
        for i in range(32):
            for half, low in enumerate((qs[:, 32 * c + i] & 0xF, qs[:, 32 * c + i] >> 4)):
                j = 2 * c + half
                q = (low + 16 * ((qh[:, i] >> j) & 1)).astype(np.float32)
                out[:, 64 * c + 32 * half + i] = (d * scales[:, j].astype(np.float32)) * q - dmin * mins[:, j].astype(
                    np.float32
                )
    return out


def np_dequant(kind: str, raw: bytes, n: int) -> np.ndarray:
    if kind == "F32":
        return np.frombuffer(raw, np.float32).copy()
    if kind == "F16":
        return np.frombuffer(raw, np.float16).astype(np.float32)
    if kind == "BF16":
        return (np.frombuffer(raw, np.uint16).astype(np.uint32) << 16).view(np.float32)
    _, _, size = GGML[kind]
    blocks = np.frombuffer(raw, np.uint8).reshape(-1, size)
    if kind in K_QUANTS:
        return np_dequant_k(kind, blocks).reshape(-1)
    d = blocks[:, 0:2].copy().view(np.float16).astype(np.float32)
    if kind == "Q8_0":
        return (blocks[:, 2:].view(np.int8).astype(np.float32) * d).reshape(-1)
    qs = blocks[:, -16:]
    q = np.concatenate([qs & 0x0F, qs >> 4], axis=1).astype(np.float32)
    if kind == "Q4_0":
        return ((q - 8) * d).reshape(-1)
    m = blocks[:, 2:4].copy().view(np.float16).astype(np.float32)
    return (q * d + m).reshape(-1)


def random_data(kind: str, n: int, rng: np.random.Generator, d_std: float = 0.1) -> bytes:
    if kind == "F32":
        return rng.standard_normal(n).astype(np.float32).tobytes()
    if kind == "F16":
        return rng.standard_normal(n).astype(np.float16).tobytes()
    if kind == "BF16":
        return (rng.standard_normal(n).astype(np.float32).view(np.uint32) >> 16).astype(np.uint16).tobytes()
    _, elems, size = GGML[kind]
    blocks = rng.integers(0, 256, (n // elems, size), dtype=np.uint8)
    field = F16_FIELDS.get(kind, slice(0, 4))
    n_halves = (field.stop - field.start) // 2
    blocks[:, field] = (rng.standard_normal((n // elems, n_halves)) * d_std).astype(np.float16).view(np.uint8)
    return blocks.tobytes()


def _cols(kind: str) -> int:
    return max(64, 2 * GGML[kind][1])  # two blocks a row


@pytest.mark.parametrize("kind", list(GGML))
def test_dequantize_matches_numpy(tmp_path, kind):
    rng = np.random.default_rng(0)
    shape = (6, _cols(kind))
    raw = random_data(kind, prod(shape), rng)
    path = tmp_path / "t.gguf"
    write_gguf(
        path,
        [("general.architecture", STR, "test", None)],
        [("w", shape, kind, raw), ("v", (32,), "F32", random_data("F32", 32, rng))],
    )
    _, tensors = gguf_load(path)
    got = tensors["w"].numpy()
    assert got.shape == shape and got.dtype == np.float32
    np.testing.assert_array_equal(got, np_dequant(kind, raw, prod(shape)).reshape(shape))
    if kind == "Q4_0":  # tinygrad's gguf_load takes a DISK tensor of the file
        np.testing.assert_array_equal(gguf_load(Tensor(path))[1]["w"].numpy(), got)


def _quantized(tmp_path, kind: str, shape: tuple[int, int], seed: int = 0) -> tuple[QuantizedMatrix, np.ndarray]:
    raw = random_data(kind, shape[0] * shape[1], np.random.default_rng(seed))
    path = tmp_path / f"{kind}_{seed}.gguf"
    write_gguf(path, [], [("w", shape, kind, raw)])
    _, infos, mm = gguf_read_header(path)
    q = gguf_quantized(mm, infos[0])
    assert q is not None
    return q, np_dequant(kind, raw, shape[0] * shape[1]).reshape(shape)


@pytest.mark.parametrize("kind", ["Q4_0", "Q4_1", "Q8_0"])
@pytest.mark.parametrize("rows,cols,batch", [(7, 96, 1), (33, 64, 3), (96, 576, 1), (5, 32, 2), (1, 32, 1)])
def test_quantized_linear_one_kernel_over_the_packed_bytes(tmp_path, kind, rows, cols, batch):
    q, w = _quantized(tmp_path, kind, (rows, cols))
    x_np = np.random.default_rng(1).standard_normal((batch, cols)).astype(np.float32)
    x = Tensor(x_np).realize()
    GlobalCounters.reset()
    out = q.linear_f32(x).realize()
    if batch == 1:  # (a batch reads each weight several times: the scheduler may store it dequantized first)
        # the codes are decoded inside the matmul's loop: no kernel dequantizes into a float32 matrix first
        assert GlobalCounters.kernel_count == 1
        # the kernel's buffers: the packed bytes (seen as two dtypes, each view counted at the full size), x and the
        # output; a float32 weight alone would be 4 * rows * cols bytes, 6-7x the packed size of the 4-bit types
        packed = q.nbytes  # (Q4_0's blocks padded to 20 bytes where the device has DP4A)
        assert GlobalCounters.global_mem <= 2 * packed + 4 * (cols + rows)
    np.testing.assert_allclose(out.numpy(), x_np @ w.T, rtol=1e-5, atol=1e-4 * np.abs(w).max() * np.sqrt(cols))
    np.testing.assert_array_equal(q.dequantize().numpy(), w)


def _np_int_parts(kind: str, raw: bytes, rows: int, cols: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Codes (rows, cols // 32, 32) in x's order, and per block of 32 the scale and offset: value = code * scale +
    offset."""
    f16 = lambda b: b.copy().view(np.float16).astype(np.float32)[..., 0]  # noqa: E731
    if kind == "Q6_K":  # pieces of 16: codes 0..63, value = d * scale * (code - 32); the codes from np_dequant_k's
        sb = np.frombuffer(raw, np.uint8).reshape(rows * cols // 256, 210)
        scale = f16(sb[:, 208:210])[:, None] * sb[:, 192:208].view(np.int8).astype(np.float32)
        w = np_dequant_k(kind, sb).reshape(-1, 16, 16)
        codes = np.round(w / np.where(scale == 0, 1, scale)[..., None]).astype(np.int64) + 32
        return codes.reshape(rows, -1, 16), scale.reshape(rows, -1), -32 * scale.reshape(rows, -1)
    if kind == "Q5_K":
        sb = np.frombuffer(raw, np.uint8).reshape(rows * cols // 256, 176)
        scales, mins = _np_scales_mins_k4(sb[:, 4:16])
        qh, qs = sb[:, 16:48].astype(np.int64), sb[:, 48:].astype(np.int64).reshape(-1, 4, 32)
        low = np.stack([qs & 15, qs >> 4], axis=2).reshape(-1, 8, 32)
        codes = low + 16 * ((qh[:, None, :] >> np.arange(8)[None, :, None]) & 1)
        scale = f16(sb[:, 0:2])[:, None] * scales.astype(np.float32)
        offset = -f16(sb[:, 2:4])[:, None] * mins.astype(np.float32)
        return codes.reshape(rows, -1, 32), scale.reshape(rows, -1), offset.reshape(rows, -1)
    if kind == "Q4_K":
        sb = np.frombuffer(raw, np.uint8).reshape(rows * cols // 256, 144)
        scales, mins = _np_scales_mins_k4(sb[:, 4:16])
        qs = sb[:, 16:].astype(np.int64).reshape(-1, 4, 32)
        codes = np.stack([qs & 15, qs >> 4], axis=2)  # chunk c: sub-block 2c low nibbles, 2c + 1 high ones
        scale = f16(sb[:, 0:2])[:, None] * scales.astype(np.float32)
        offset = -f16(sb[:, 2:4])[:, None] * mins.astype(np.float32)
        return codes.reshape(rows, -1, 32), scale.reshape(rows, -1), offset.reshape(rows, -1)
    blocks = np.frombuffer(raw, np.uint8).reshape(rows, cols // 32, -1)
    d = f16(blocks[..., 0:2])
    if kind == "Q8_0":
        return blocks[..., 2:].view(np.int8).astype(np.int64), d, np.zeros_like(d)
    qs = blocks[..., -16:].astype(np.int64)
    codes = np.concatenate([qs & 15, qs >> 4], axis=-1)
    return codes, d, -8 * d if kind == "Q4_0" else f16(blocks[..., 2:4])


def np_linear_int8(kind: str, raw: bytes, shape: tuple[int, int], x: np.ndarray, block: int = 32) -> np.ndarray:
    """llama.cpp's matrix-vector product, in numpy: x (cols,) quantized to int8 per `block` values (largest magnitude
    to 127, rounded half up; llama.cpp's Q8_K for the K-quants: 256), each block of 32's integer dot product with the
    codes, scaled by scale * amax / 127, plus the offset times the sum of x's block of 32 (with x's Q8_K, Q6_K's
    offset -32 is summed with the codes as llama.cpp sums it, exact)."""
    rows, cols = shape
    xb = x.reshape(-1, block)
    amax = np.abs(xb).max(1, keepdims=True)
    inv = np.where(amax > 0, np.float32(127) / np.where(amax > 0, amax, 1), np.float32(0)).astype(np.float32)
    xq = np.trunc(xb * inv + np.float32(128.5)).astype(np.int64) - 128
    xq, amax = xq.reshape(-1, 32), np.repeat(amax[:, 0], block // 32)[:, None]
    codes, scale, offset = _np_int_parts(kind, raw, rows, cols)
    if kind == "Q6_K" and block == 256:  # llama.cpp's own form: code - 32 inside the integer sum
        codes, offset = codes - 32, np.zeros_like(offset)
    v = codes.shape[-1]  # values per piece: 32, or 16 (Q6_K's sub-blocks, half a block of x each)
    xq, xp = xq.reshape(-1, v), x.reshape(-1, v)
    amax = np.repeat(amax[:, 0], 32 // v)
    dot = (codes * xq).sum(-1)  # exact
    out = dot.astype(np.float32) * (scale * amax) * np.float32(1 / 127) + offset * xp.sum(1)
    return out.sum(1)


@pytest.fixture(params=["dp4a", "bytes"])
def int8_path(request, monkeypatch):
    """Both forms of the int8 matvec where this CPU has DP4A: with it, and with the renderer's builtins taken away
    (the byte loop other CPUs get)."""
    renderer = Device[Device.DEFAULT].renderer
    if request.param == "bytes":
        monkeypatch.setattr(renderer, "dp4a_builtins", {})
    elif not renderer.dp4a_builtins:
        pytest.skip("this device has no DP4A vector instruction")
    return request.param


@pytest.mark.parametrize("kind", ["Q4_0", "Q4_1", "Q8_0", *K_QUANTS])
# rows in groups of 8 (with DP4A): one group of one block, two groups of one block, 5 groups whose products
# prefetch past the last group's blocks
@pytest.mark.parametrize("rows,cols", [(7, 96), (96, 576), (1, 32), (33, 64), (8, 32), (16, 32), (40, 512)])
def test_quantized_linear_int8_is_llama_cpp_arithmetic(tmp_path, kind, rows, cols, int8_path):
    # one row of x (a decode step): x quantized to int8, integer dot products per block
    cols = cols * 8 if kind in K_QUANTS else cols  # whole super-blocks of 256
    raw = random_data(kind, rows * cols, np.random.default_rng(0))
    path = tmp_path / "w.gguf"
    write_gguf(path, [], [("w", (rows, cols), kind, raw)])
    _, infos, mm = gguf_read_header(path)
    q = gguf_quantized(mm, infos[0])
    assert q is not None
    w = np_dequant(kind, raw, rows * cols).reshape(rows, cols)
    words = int8_path == "dp4a" and (q.gt.word_terms is not None or q.gt.group_terms is not None)
    # through DP4A words x is quantized as llama.cpp quantizes it for the type: the K-quants per super-block
    block = 256 if words and kind in K_QUANTS else 32
    x_np = np.random.default_rng(1).standard_normal(cols).astype(np.float32)
    x_np[:block] = 0  # an all-zero block of x: codes 0, no division by zero
    x = Tensor(x_np).realize()
    GlobalCounters.reset()
    out = q.linear(x.reshape(1, cols)).realize()
    # x's block maxima and sums, x's codes, the scaled dot product of every block, each row's sum (a matrix of one
    # (super-)block: x's maxima and sums may take a kernel each); no float32 weight. Through DP4A words the dot
    # products and the row sums are one kernel (the K-quants: x's maxima per super-block a reduce of their own)
    one_block = rows * cols == GGML[kind][1]
    kernels = 3 if words else 4
    kernels += kind == "Q6_K" and not words  # x's sums per sub-block of 16, a reduce of their own
    # (words: the K-quants' x maxima per super-block, beside x's sums per block of 32, may take a kernel too)
    extra = one_block or words and kind in K_QUANTS
    assert GlobalCounters.kernel_count == kernels or extra and GlobalCounters.kernel_count == kernels + 1
    packed = q.nbytes
    x_sums = 8 * cols if kind == "Q6_K" or words else 0  # that reduce reads x and writes its sums (words: code sums)
    # a kernel's memory counts each view of the blocks in full (scales, codes; K-quant rows in groups: and bytes)
    views = 3 if q.gt.group_terms is not None and kind in K_QUANTS else 2
    assert GlobalCounters.global_mem <= views * packed + rows * cols // 4 + 16 * cols + 8 * rows + x_sums
    ref = np_linear_int8(kind, raw, (rows, cols), x_np, block)
    scale = np.abs(w).max() * np.abs(x_np).max() * np.sqrt(cols)
    np.testing.assert_allclose(out.numpy()[0], ref, rtol=1e-5, atol=1e-6 * scale)
    # within int8 rounding of the float32 product: each code of x is off by at most half of its block's amax / 127
    amax = np.repeat(np.abs(x_np.reshape(-1, block)).max(1), block)
    np.testing.assert_allclose(
        out.numpy()[0], w @ x_np, atol=0.5 / 127 * (np.abs(w) * amax).sum(1).max() + 1e-6 * scale
    )
    assert q.linear(x).shape == (rows,)


@pytest.mark.parametrize("kind,padded", [("Q8_0", 36), ("Q6_K", 212)])
def test_blocks_padded_for_dp4a_hold_the_same_values(tmp_path, kind, padded, int8_path):
    # where the device has DP4A, Q8_0's 34-byte blocks are copied into 36-byte ones (codes 4-byte aligned, as Q4_0's),
    # Q6_K's 210-byte super-blocks into 212 (zeros at the end)
    shape = (5, 512)
    q, w = _quantized(tmp_path, kind, shape)
    size = padded if int8_path == "dp4a" else GGML[kind][2]
    assert q.gt.block_bytes == size and q.nbytes == shape[0] * shape[1] // GGML[kind][1] * size
    np.testing.assert_array_equal(q.dequantize().numpy(), w)
    np.testing.assert_array_equal(QuantizedMatrix.stack([q, q]).dequantize().numpy(), np.concatenate([w, w]))
    x = np.random.default_rng(2).standard_normal((3, 512)).astype(np.float32)
    np.testing.assert_allclose(q.linear(Tensor(x)).numpy(), x @ w.T, rtol=1e-5, atol=1e-4 * np.abs(x @ w.T).max())


def test_q4_0_blocks_padded_for_dp4a_hold_the_same_values(tmp_path, int8_path):
    # where the device has DP4A, Q4_0's 18-byte blocks are copied into 20-byte ones (codes 4-byte aligned)
    q, w = _quantized(tmp_path, "Q4_0", (5, 64))
    assert q.gt.block_bytes == (20 if int8_path == "dp4a" else 18) and q.nbytes == 5 * 2 * q.gt.block_bytes
    np.testing.assert_array_equal(q.dequantize().numpy(), w)
    np.testing.assert_array_equal(QuantizedMatrix.stack([q, q]).dequantize().numpy(), np.concatenate([w, w]))


@pytest.mark.parametrize("kind", ["Q4_0", "Q4_1", "Q8_0", *K_QUANTS])
def test_rows_in_groups_of_8_hold_the_same_values(tmp_path, kind, int8_path):
    # where the device has DP4A, a matrix whose rows come in groups of 8 is copied into blocks of 8 rows interleaved
    # (the float16 scales as they are) for a decode step's product; every path gives the file's values (dequantization,
    # a row at a bound variable, stacking, products of one row, a few rows and a prompt)
    shape = (24, 512 if kind in K_QUANTS else 96)
    q, w = _quantized(tmp_path, kind, shape)
    grouped = int8_path == "dp4a"
    assert (q.gt.group_terms is not None) == grouped
    if grouped:  # and every path but a decode step's product reads the file's blocks
        assert q.gt.block_bytes == {"Q4_0": 18, "Q4_1": 20, "Q8_0": 34, "Q4_K": 148, "Q5_K": 180, "Q6_K": 210}[kind]
        assert q.plain is not None and q.plain.gt.block_bytes == GGML[kind][2]
    np.testing.assert_array_equal(q.dequantize().numpy(), w)
    token = UOp.variable("token", 0, shape[0] - 1)
    for i in (0, 5, 8, 23):
        np.testing.assert_array_equal(q.dequantize((token.bind(i), 1)).numpy(), w[[i]])
    stacked = QuantizedMatrix.stack([q, q])
    assert stacked.gt == q.gt
    np.testing.assert_array_equal(stacked.dequantize().numpy(), np.concatenate([w, w]))
    for rows in (3, 32):
        x = np.random.default_rng(rows).standard_normal((rows, shape[1])).astype(np.float32)
        ref = x @ w.T
        np.testing.assert_allclose(q.linear(Tensor(x)).numpy(), ref, rtol=1e-5, atol=1e-5 * np.abs(ref).max())
    x = np.random.default_rng(1).standard_normal((1, shape[1])).astype(np.float32)
    block = 256 if kind in K_QUANTS and grouped else 32  # x quantized per super-block for the K-quants' DP4A
    ref = np_linear_int8(kind, random_data(kind, prod(shape), np.random.default_rng(0)), shape, x[0], block)
    for m in (q, stacked):
        out = m.linear(Tensor(x)).numpy()[0]
        np.testing.assert_allclose(out, np.tile(ref, len(out) // len(ref)), rtol=1e-5, atol=1e-5 * np.abs(ref).max())


@pytest.mark.parametrize("kind", ["Q4_0", "Q4_1", "Q8_0", *K_QUANTS])
def test_grouped_decode_prefetches_its_stream(tmp_path, kind):
    # a decode step's product over rows in groups reads 8 rows' blocks a step (160-288 bytes, the K-quants 1216-1696),
    # a few dozen to a few hundred instructions apart: the C kernel prefetches every cache line of a step's window
    # some steps ahead, once each (from memory on 2 AVX2 cores, 16384 x 4096: Q6_K 20 GB/s without, Q4_0 14-15)
    from lazygrad.engine.realize import lower_schedule_item

    if not Device[Device.DEFAULT].renderer.dp4a_builtins or Device.DEFAULT != "CPU":
        pytest.skip("rows in groups of 8 are for CPUs with DP4A")
    q, _ = _quantized(tmp_path, kind, (64, 1024))
    assert q.gt.group_terms is not None
    x = Tensor(np.random.default_rng(0).standard_normal((1, 1024)).astype(np.float32))
    srcs = [ei.runner.spec.src for si in q.linear(x).schedule() if (ei := lower_schedule_item(si)) is not None]
    # the product's byte dot: the emulating helper, or the CPU's VNNI builtin called directly (AVX-512 VNNI)
    marks = ("lg_dp4a", *Device[Device.DEFAULT].renderer.dp4a_builtins.values())
    (product,) = [src for src in srcs if any(m in src for m in marks)]
    step = GROUP * q.gt.block_bytes  # bytes of a group's super-block
    lines = [ln.strip() for ln in product.splitlines() if "__builtin_prefetch" in ln]
    assert len(lines) == len(set(lines)) == -(-step // 64)
    offsets = sorted(int(ln.rsplit("+", 1)[1].split("]")[0]) for ln in lines)  # in int32 words from the step's base
    assert offsets[0] * 4 >= step and offsets[-1] - offsets[0] < step // 4
    assert not any("__builtin_prefetch" in src for src in srcs if src is not product)
    # no other kernel prefetches: a float32 matvec reads its weight densely too, but has no DP4A products
    w = Tensor(np.ones((64, 1024), np.float32)).realize()
    assert not any(
        "__builtin_prefetch" in ei.runner.spec.src for si in (x @ w.T).schedule() if (ei := lower_schedule_item(si))
    )


def test_a_matrix_of_rows_not_in_groups_of_8_keeps_the_blocks(tmp_path, int8_path):
    q, _ = _quantized(tmp_path, "Q4_1", (12, 64))
    assert q.gt.group_terms is None and q.gt.block_bytes == 20


@pytest.mark.parametrize("kind", ["Q4_0", "Q4_1", "Q8_0", *K_QUANTS])
@pytest.mark.parametrize("batch", [(32,), (2, 20)])
def test_quantized_linear_of_a_prompt_multiplies_the_dequantized_weight(tmp_path, kind, batch):
    # from 32 rows of x the weight is dequantized (and packed into panels where the device has them) once, then
    # multiplied as a float32 matrix: exact to float rounding
    q, w = _quantized(tmp_path, kind, (48, 512))
    x_np = np.random.default_rng(1).standard_normal((*batch, 512)).astype(np.float32)
    GlobalCounters.reset()
    out = q.linear(Tensor(x_np)).realize()
    assert GlobalCounters.kernel_count <= 3  # dequantize, pack, multiply
    np.testing.assert_allclose(out.numpy(), x_np @ w.T, rtol=1e-5, atol=1e-4 * np.abs(w).max() * np.sqrt(512))


@pytest.mark.parametrize("kind", ["Q4_1", "Q8_0"])
def test_quantized_stack_is_the_rows_one_below_the_other(tmp_path, kind):
    parts = [_quantized(tmp_path, kind, (rows, 64), seed) for seed, rows in enumerate((6, 2, 3))]
    stacked = QuantizedMatrix.stack([q for q, _ in parts])
    w = np.concatenate([w for _, w in parts])
    assert stacked.shape == (11, 64)
    np.testing.assert_array_equal(stacked.dequantize().numpy(), w)
    x_np = np.random.default_rng(2).standard_normal((1, 64)).astype(np.float32)
    np.testing.assert_allclose(stacked.linear_f32(Tensor(x_np)).numpy(), x_np @ w.T, rtol=1e-5, atol=1e-4)


def test_quantized_linear_shape_errors(tmp_path):
    q, _ = _quantized(tmp_path, "Q4_1", (4, 64))
    with pytest.raises(ValueError, match="does not match quantized weight shape"):
        q.linear(Tensor.ones(1, 32))
    with pytest.raises(ValueError, match="one row"):
        q.linear_int8(Tensor.ones(2, 64))
    other, _ = _quantized(tmp_path, "Q8_0", (4, 64))
    with pytest.raises(ValueError, match="cannot stack"):
        QuantizedMatrix.stack([q, other])


def test_dequantize_matches_gguf_package(tmp_path):
    gguf = pytest.importorskip("gguf")
    rng = np.random.default_rng(1)
    kinds = ["Q4_0", "Q4_1", "Q8_0", "F16", "BF16", *K_QUANTS]
    data = {k: random_data(k, 4 * 512, rng) for k in kinds}
    path = tmp_path / "t.gguf"
    write_gguf(path, [], [(k, (4, 512), k, data[k]) for k in kinds])
    _, tensors = gguf_load(path)
    for t in gguf.GGUFReader(str(path)).tensors:
        ref = gguf.quants.dequantize(t.data, t.tensor_type).reshape(4, 512)
        np.testing.assert_array_equal(tensors[t.name].numpy(), ref.astype(np.float32))


@pytest.mark.parametrize("kind", K_QUANTS)
def test_k_quant_random_blocks_match_gguf_package(kind):
    # every bit pattern of the codes and the packed scales, against the reference's own dequantization; the
    # float16 fields random too, except NaN/inf (and as 16 rows of 3 blocks: shape (16, 768))
    gguf = pytest.importorskip("gguf")
    rng = np.random.default_rng(5)
    blocks = rng.integers(0, 256, (48, GGML[kind][2]), dtype=np.uint8)
    field = F16_FIELDS.get(kind, slice(0, 4))
    halves = blocks[:, field].copy().view(np.float16)
    halves[~np.isfinite(halves)] = 0.5
    blocks[:, field] = halves.view(np.uint8)
    q = QuantizedMatrix(GGML_TYPES[GGML[kind][0]], blocks.tobytes(), 0, (16, 768), "CPU")
    ref = gguf.quants.dequantize(blocks, gguf.GGMLQuantizationType[kind]).reshape(16, 768)
    got = q.dequantize().numpy()
    assert got.dtype == np.float32
    np.testing.assert_array_equal(got, ref.astype(np.float32))
    np.testing.assert_array_equal(got.reshape(-1, 256), np_dequant_k(kind, blocks))


@pytest.mark.parametrize("kind", K_QUANTS)
def test_k_quant_file_written_by_gguf_package(tmp_path, kind):
    # a file from the reference writer, read through the public loader: a 3-D tensor of the K-quant beside an F32 one;
    # every K-quant has a packed matmul: gguf_quantized keeps the blocks packed
    gguf = pytest.importorskip("gguf")
    rng = np.random.default_rng(6)
    shape = (2, 3, 512)
    raw = np.frombuffer(random_data(kind, prod(shape), rng), np.uint8).reshape(2, 3, 2 * GGML[kind][2])
    bias = rng.standard_normal(7).astype(np.float32)
    path = tmp_path / "k.gguf"
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_tensor("w", raw, raw_dtype=gguf.GGMLQuantizationType[kind])  # the shape in bytes: 2 blocks a row
    writer.add_tensor("b", bias)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    meta, tensors = gguf_load(path)
    assert meta["general.architecture"] == "llama"
    got = tensors["w"].numpy()
    assert got.shape == shape and got.dtype == np.float32
    np.testing.assert_array_equal(got, np_dequant_k(kind, raw.reshape(-1, GGML[kind][2])).reshape(shape))
    np.testing.assert_array_equal(tensors["b"].numpy(), bias)
    _, infos, mm = gguf_read_header(path)
    assert [i.ggml_type.name for i in infos] == [kind, "F32"]
    assert gguf_quantized(mm, infos[0]) is not None


@pytest.mark.parametrize("kind", K_QUANTS)
@pytest.mark.parametrize("shape", [(2, 128), (300,), (4, 2, 384)])
def test_k_quant_rows_not_whole_super_blocks(tmp_path, kind, shape):
    path = tmp_path / "odd.gguf"
    write_gguf(path, [], [("blk.0.ffn_down.weight", shape, kind, bytes(GGML[kind][2] * 4))])
    with pytest.raises(GGUFError, match=rf"odd\.gguf: tensor 'blk\.0\.ffn_down\.weight' .*{kind} blocks of 256"):
        gguf_load(path)


def test_llama_of_mixed_k_quants_loads_both_ways(tmp_path):
    # a Q4_K_M-style file (Q4_K, Q5_K and Q6_K matrices, one Q8_0): quantized=True keeps them packed, but for q, k and
    # v of two types, which stack as float32; both loads give the same logits, and the embedding rows are the Q6_K
    # table's rows
    from lazygrad.models.llama import load_llama

    rng = np.random.default_rng(7)
    dim, kv, vocab = 256, 128, 16
    kvs = [("general.architecture", STR, "llama", None)] + [
        (f"llama.{k}", U32, v, None)
        for k, v in [
            ("embedding_length", dim),
            ("block_count", 1),
            ("attention.head_count", 4),
            ("attention.head_count_kv", 2),
            ("feed_forward_length", dim),
            ("vocab_size", vocab),
            ("context_length", 32),
        ]
    ]
    kvs.append(("llama.attention.layer_norm_rms_epsilon", F32, 1e-5, None))
    mats = {
        "token_embd": ((vocab, dim), "Q6_K"),
        "output": ((vocab, dim), "Q6_K"),
        "blk.0.attn_q": ((dim, dim), "Q4_K"),
        "blk.0.attn_k": ((kv, dim), "Q4_K"),
        "blk.0.attn_v": ((kv, dim), "Q6_K"),
        "blk.0.attn_output": ((dim, dim), "Q4_K"),
        "blk.0.ffn_gate": ((dim, dim), "Q4_K"),
        "blk.0.ffn_up": ((dim, dim), "Q5_K"),
        "blk.0.ffn_down": ((dim, dim), "Q8_0"),
    }
    tensors = [
        (f"{n}.weight", shape, kind, random_data(kind, prod(shape), rng, 0.001)) for n, (shape, kind) in mats.items()
    ]
    for n in ("output_norm", "blk.0.attn_norm", "blk.0.ffn_norm"):
        tensors.append((f"{n}.weight", (dim,), "F32", np.ones(dim, np.float32).tobytes()))
    path = tmp_path / "tiny-q4_k_m.gguf"
    write_gguf(path, kvs, tensors)
    logits = []
    for quantized in (False, True):
        model, _ = load_llama(path, max_context=16, quantized=quantized)
        logits.append(model([1, 2, 3], 0, all_logits=True).numpy())
    assert logits[0].shape == (3, vocab) and np.isfinite(logits[0]).all() and logits[0].std() > 1e-3, logits[0]
    np.testing.assert_allclose(logits[1], logits[0], rtol=1e-4, atol=1e-4 * np.abs(logits[0]).max())
    embd = np_dequant("Q6_K", tensors[0][3], vocab * dim).reshape(vocab, dim)
    np.testing.assert_array_equal(model.embed_rows([3, 0]).numpy(), embd[[3, 0]])
    # a decode step reads its row in place, at a bound variable's offset
    for i in (3, 0, vocab - 1):
        np.testing.assert_array_equal(model.embed_rows.row(model.token_var.bind(i)).numpy(), embd[[i]])
    with pytest.raises(IndexError, match="outside the vocabulary"):
        model([vocab], 3)


@pytest.mark.parametrize("kind", K_QUANTS)
def test_k_quant_linear_of_several_rows_multiplies_the_dequantized_weight(kind):
    blocks = np.frombuffer(random_data(kind, 3 * 512, np.random.default_rng(3)), np.uint8)
    q = QuantizedMatrix(GGML_TYPES[GGML[kind][0]], blocks.tobytes(), 0, (3, 512), "CPU")
    w = np_dequant_k(kind, blocks.reshape(-1, GGML[kind][2])).reshape(3, 512)
    x = np.random.default_rng(4).standard_normal((5, 512)).astype(np.float32)
    np.testing.assert_allclose(q.linear(Tensor(x)).numpy(), x @ w.T, rtol=1e-5, atol=1e-4 * np.abs(x @ w.T).max())


def test_metadata_all_types_and_alignment(tmp_path):
    kvs = [
        ("u8", U8, 200, None),
        ("i8", I8, -5, None),
        ("u16", U16, 60000, None),
        ("i16", I16, -30000, None),
        ("u32", U32, 4_000_000_000, None),
        ("i32", I32, -2_000_000_000, None),
        ("f32", F32, 1.5, None),
        ("bool", BOOL, True, None),
        ("str", STR, "héllo", None),
        ("u64", U64, 2**63 + 1, None),
        ("i64", I64, -(2**62), None),
        ("f64", F64, 0.1, None),
        ("ints", ARR, [1, -2, 3], I32),
        ("strs", ARR, ["a", "", "ü"], STR),
        ("nested", ARR, [["x", "y"], []], ARR),
        ("general.alignment", U32, 64, None),
    ]
    rng = np.random.default_rng(2)
    raws = [random_data("F32", 3, rng), random_data("Q8_0", 32, rng)]
    path = tmp_path / "t.gguf"
    write_gguf(path, kvs, [("a", (3,), "F32", raws[0]), ("b", (1, 32), "Q8_0", raws[1])], alignment=64)
    meta, infos, _ = gguf_read_header(path)
    expected = {k: v for k, _, v, _ in kvs}
    expected["f32"], expected["f64"] = 1.5, 0.1
    assert meta == expected
    assert [(i.name, i.shape, i.ggml_type.name, i.offset % 64) for i in infos] == [
        ("a", (3,), "F32", 0),
        ("b", (1, 32), "Q8_0", 0),
    ]
    _, tensors = gguf_load(path)
    np.testing.assert_array_equal(tensors["a"].numpy(), np.frombuffer(raws[0], np.float32))
    np.testing.assert_array_equal(tensors["b"].numpy().reshape(-1), np_dequant("Q8_0", raws[1], 32))


def _good_file(path) -> bytes:
    write_gguf(
        path, [("k", STR, "v", None)], [("w", (2, 32), "Q4_1", random_data("Q4_1", 64, np.random.default_rng(3)))]
    )
    return path.read_bytes()


def test_missing_file_names_it(tmp_path):
    with pytest.raises(FileNotFoundError, match="nope.gguf"):
        gguf_load(tmp_path / "nope.gguf")


def test_wrong_magic(tmp_path):
    path = tmp_path / "bad.gguf"
    path.write_bytes(b"GGML" + _good_file(path)[4:])
    with pytest.raises(GGUFError, match=r"bad\.gguf.*not a GGUF file.*magic"):
        gguf_load(path)


@pytest.mark.parametrize("keep", [10, 40, 90, -10])  # in the header, the metadata, the tensor infos, the data
def test_truncated_file(tmp_path, keep):
    path = tmp_path / "cut.gguf"
    path.write_bytes(_good_file(path)[:keep])
    with pytest.raises(GGUFError, match=r"cut\.gguf.*truncated"):
        gguf_load(path)


def test_unknown_quant_type(tmp_path):
    path = tmp_path / "q.gguf"
    raw = bytearray(_good_file(path))
    type_at = raw.index(b"w", 24) + 1 + 4 + 16  # after the name: n_dims (4 bytes), two dims (16 bytes)
    raw[type_at : type_at + 4] = struct.pack("<I", 10)  # Q2_K
    path.write_bytes(bytes(raw))
    with pytest.raises(GGUFError, match=r"q\.gguf.*'w'.*Q2_K"):
        gguf_load(path)
    raw[type_at : type_at + 4] = struct.pack("<I", 99)
    path.write_bytes(bytes(raw))
    with pytest.raises(GGUFError, match=r"q\.gguf.*unknown.*99"):
        gguf_load(path)


def test_unsupported_version(tmp_path):
    path = tmp_path / "v.gguf"
    write_gguf(path, [], [], version=1)
    with pytest.raises(GGUFError, match="version 1"):
        gguf_load(path)


# *** hostile files: every corruption is a GGUFError (a ValueError) naming the file, never an internal error ***

_INFO = 24 + 9 + 4 + 9  # _good_file: header, then the one metadata entry "k" = "v", then the tensor info of "w"
_NDIMS, _TYPE, _OFFSET = _INFO + 9, _INFO + 9 + 4 + 16, _INFO + 9 + 4 + 16 + 4


def _patched(at: int, fmt: str, value: int):
    def make(path) -> bytes:
        raw = bytearray(_good_file(path))
        raw[at : at + struct.calcsize(fmt)] = struct.pack(fmt, value)
        return bytes(raw)

    return make


def _with_kvs(*kvs, tensors: bool = True):
    def make(path) -> bytes:
        w = [("w", (2, 32), "Q4_1", random_data("Q4_1", 64, np.random.default_rng(3)))] if tensors else []
        write_gguf(path, list(kvs), w)
        return path.read_bytes()

    return make


def _nested_arrays(path) -> bytes:
    value = struct.pack("<IQ", ARR, 1) * 10_000 + struct.pack("<IQ", U8, 0)
    return b"GGUF" + struct.pack("<IQQ", 3, 0, 1) + _str("deep") + struct.pack("<I", ARR) + value


def _two_tensors_named_w(path) -> bytes:
    data = random_data("F32", 4, np.random.default_rng(0))
    write_gguf(path, [], [("w", (4,), "F32", data), ("w", (4,), "F32", data)])
    return path.read_bytes()


HOSTILE_GGUF = {
    "alignment 0": (_with_kvs(("general.alignment", U32, 0, None)), "general.alignment is 0; .* power of two"),
    "alignment 48": (_with_kvs(("general.alignment", U32, 48, None)), "general.alignment is 48"),
    "alignment a string": (_with_kvs(("general.alignment", STR, "32", None)), "general.alignment is '32'"),
    "version 4": (_patched(4, "<I", 4), "GGUF version 4 is not supported"),
    "2**60 tensors": (_patched(8, "<Q", 2**60), "1152921504606846976 tensor infos need at least"),
    "2**60 metadata entries": (_patched(16, "<Q", 2**60), "1152921504606846976 metadata entries need at least"),
    "key 2**63 bytes long": (_patched(24, "<Q", 2**63), "truncated"),
    "unknown value type": (_patched(24 + 9, "<I", 13), "metadata 'k' has unknown value type 13"),
    "arrays nested 10000 deep": (_nested_arrays, "'deep' nests arrays more than 8 deep"),
    "array of 2**60 strings": (
        lambda path: b"GGUF" + struct.pack("<IQQ", 3, 0, 1) + _str("s") + struct.pack("<IIQ", ARR, STR, 2**60),
        "metadata 's': 1152921504606846976 array elements need at least",
    ),
    "metadata key twice": (_with_kvs(("k", U8, 1, None), ("k", U8, 2, None)), "metadata key 'k' appears twice"),
    "2**31 dims": (_patched(_NDIMS, "<I", 2**31), "'w' has 2147483648 dimensions, GGUF allows at most 4"),
    "unknown ggml type": (_patched(_TYPE, "<I", 1000), r"'w' has unknown quantization \(ggml type 1000\)"),
    "offset outside the file": (_patched(_OFFSET, "<Q", 2**40), "tensor 'w' needs bytes"),
    "offset 2**64-1": (_patched(_OFFSET, "<Q", 2**64 - 1), "tensor 'w' needs bytes"),
    "dims of 2**40 rows": (_patched(_NDIMS + 4 + 8, "<Q", 2**40), "tensor 'w' needs bytes"),
    "two tensors named w": (_two_tensors_named_w, "two tensors are named 'w'"),
}


@pytest.mark.parametrize("case", list(HOSTILE_GGUF))
def test_hostile_gguf_named_errors(tmp_path, case):
    make, message = HOSTILE_GGUF[case]
    path = tmp_path / "model.gguf"
    path.write_bytes(make(path))
    with pytest.raises(GGUFError, match=message) as info:
        gguf_load(path)
    assert str(info.value).startswith(f"{path}: ") and isinstance(info.value, ValueError), str(info.value)


@pytest.mark.parametrize("kind", ["Q4_0", "Q4_1", "Q8_0"])
@pytest.mark.parametrize(
    "shape,batch,extreme", [((48, 512), (32,), False), ((8, 32), (2, 20), False), ((16, 96), (40,), True)]
)
def test_grouped_prompt_decodes_the_groups_into_panels(tmp_path, kind, shape, batch, extreme):
    # rows in groups of 8 hold a panel's 8 rows side by side: a prompt's product decodes the groups into float32
    # panels (one kernel) and multiplies them, instead of dequantizing the file's blocks and copying them into panels
    if extreme:  # float16 scales (and mins) at the ends of their range: subnormal, the smallest normal, the largest
        _, elems, size = GGML[kind]
        blocks = np.frombuffer(random_data(kind, prod(shape), np.random.default_rng(2)), np.uint8).copy()
        blocks = blocks.reshape(-1, size)
        halves = np.array([2**-24, -(2**-24), 3 * 2**-20, 2**-14, 65504.0, -65504.0, 0.0, -0.0], np.float16)
        fields = np.resize(halves, (len(blocks), 2 if kind == "Q4_1" else 1))
        blocks[:, : 2 * fields.shape[1]] = fields.view(np.uint8)
        path = tmp_path / "extreme.gguf"
        write_gguf(path, [], [("w", shape, kind, blocks.tobytes())])
        _, infos, mm = gguf_read_header(path)
        q, w = gguf_quantized(mm, infos[0]), np_dequant(kind, blocks.tobytes(), prod(shape)).reshape(shape)
        assert q is not None and np.abs(w).max() > 60000 and 0 < np.abs(w[w != 0]).min() < 2**-20
    else:
        q, w = _quantized(tmp_path, kind, shape)
    if q.gt.group_panels is None or float32_panel_width(shape, q.device) != GROUP:
        pytest.skip("panels of 8 rows from groups of 8 rows are for devices with DP4A and 8-float vectors")
    panels = q.gt.group_panels(q.view).numpy()
    np.testing.assert_array_equal(panels, w.reshape(-1, GROUP, shape[1]).transpose(0, 2, 1))
    x_np = np.random.default_rng(1).standard_normal((*batch, shape[1])).astype(np.float32)
    GlobalCounters.reset()
    out = q.linear(Tensor(x_np)).realize()
    assert GlobalCounters.kernel_count == 2  # the panels, the product
    np.testing.assert_allclose(out.numpy(), x_np @ w.T, rtol=1e-5, atol=1e-4 * np.abs(w).max() * np.sqrt(shape[1]))


def _python_calls(fn) -> int:
    """Python function calls fn makes (C calls not counted), the collector kept off."""
    import gc
    import sys

    calls = [0]

    def count(frame, event, arg) -> None:
        calls[0] += event == "call"

    gc.collect()
    gc.disable()
    sys.setprofile(count)
    try:
        fn()
    finally:
        sys.setprofile(None)
        gc.enable()
    return calls[0]


@pytest.mark.parametrize("kind", ["Q4_0", "Q4_1", "Q8_0"])
def test_grouped_prompt_builds_its_decode_graph_once_and_decodes_each_product(tmp_path, kind):
    # a prompt's product builds the panels' movement ops once per matrix (views and a constant, which no kernel
    # stores): the graph of a product is a few ops (~600 Python calls, ~2500 building it whole); and the float32
    # panels are decoded again by each product, not kept on a node the matrix holds
    from lazygrad.schedule.kernelize import REALIZED_ENTRY

    q, w = _quantized(tmp_path, kind, (24, 96))
    if q.gt.group_panels is None or float32_panel_width(q.shape, q.device) != GROUP:
        pytest.skip("panels of 8 rows from groups of 8 rows are for devices with DP4A and 8-float vectors")
    x_np = np.random.default_rng(1).standard_normal((33, 96)).astype(np.float32)
    x = Tensor(x_np).realize()
    q.linear(x).realize()
    assert _python_calls(lambda: q.linear(x)) < 1000
    for _ in range(2):
        GlobalCounters.reset()
        out = q.linear(x).realize()
        assert GlobalCounters.kernel_count == 2  # the panels, the product
        np.testing.assert_allclose(out.numpy(), x_np @ w.T, rtol=1e-5, atol=1e-4 * np.abs(w).max() * np.sqrt(96))
    seen, stack = set(), list(q._panel_fields)
    while stack:
        if (node := stack.pop()) not in seen:
            seen.add(node)
            assert REALIZED_ENTRY not in node.__dict__, node.op
            stack.extend(node.src)


# float16 scales (and mins) at the ends of their range: subnormal, the smallest normal, the largest, zeros
_EXTREME_HALVES = [2**-24, -(2**-24), 3 * 2**-20, 2**-14, 65504.0, -65504.0, 0.0, -0.0, 0.0078, -1.5]


@pytest.mark.parametrize("kind", ["Q4_0", "Q4_1", "Q8_0", *K_QUANTS])
@pytest.mark.parametrize("special", [False, True])
def test_grouped_decode_reads_the_float16_scales_as_stored(tmp_path, kind, special):
    # rows in groups of 8 keep the file's float16 scales (and mins): a group's block is the file's size (the K-quants:
    # plus their unpacked sub-block scales), and a decode step's product converts 8 rows' fields in one vcvtph2ps where
    # the CPU has F16C; values equal llama.cpp's arithmetic at the ends of float16's range (infinity and NaN: the rows
    # that are not finite, inf or NaN as the order of operations makes them)
    from lazygrad.engine.realize import lower_schedule_item

    if not Device[Device.DEFAULT].renderer.dp4a_builtins or Device.DEFAULT != "CPU":
        pytest.skip("rows in groups of 8 are for CPUs with DP4A")
    _, elems, size = GGML[kind]
    shape = (24, 512 if kind in K_QUANTS else 96)
    blocks = np.frombuffer(random_data(kind, prod(shape), np.random.default_rng(3)), np.uint8).copy().reshape(-1, size)
    halves = np.array(_EXTREME_HALVES + ([np.inf, -np.inf, np.nan] if special else []), np.float16)
    field = F16_FIELDS.get(kind, slice(0, 4 if kind in ("Q4_1", "Q4_K", "Q5_K") else 2))
    n = (field.stop - field.start) // 2
    blocks[:, field] = np.resize(halves, (len(blocks), n)).view(np.uint8)
    raw = blocks.tobytes()
    path = tmp_path / "w.gguf"
    write_gguf(path, [], [("w", shape, kind, raw)])
    _, infos, mm = gguf_read_header(path)
    q = gguf_quantized(mm, infos[0])
    assert q is not None and q.gt.group_terms is not None
    assert q.gt.block_bytes == {"Q4_0": 18, "Q4_1": 20, "Q8_0": 34, "Q4_K": 148, "Q5_K": 180, "Q6_K": 210}[kind]
    x_np = np.random.default_rng(4).standard_normal((1, shape[1])).astype(np.float32)
    out = q.linear(Tensor(x_np)).numpy()[0]
    block = 256 if kind in K_QUANTS else 32
    with np.errstate(all="ignore"):
        ref = np_linear_int8(kind, raw, shape, x_np[0], block)
    fin = np.isfinite(ref)
    assert np.array_equal(np.isfinite(out), fin) and fin.sum() >= (1 if special else shape[0])
    np.testing.assert_allclose(out[fin], ref[fin], rtol=1e-5, atol=1e-5 * np.abs(ref[fin]).max())
    if Device[Device.DEFAULT].renderer.half_vector_cast:  # (a shape the heuristic gives a vector over 8 rows)
        big, _ = _quantized(tmp_path, kind, (64, 2048 if kind in K_QUANTS else 1024))
        x = Tensor(np.ones((1, big.shape[1]), np.float32))
        srcs = [ei.runner.spec.src for si in big.linear(x).schedule() if (ei := lower_schedule_item(si))]
        assert any("__builtin_ia32_vcvtph2ps256" in src for src in srcs)
        assert not any("_Float16 val" in src for src in srcs)  # no float16 loaded lane by lane


@pytest.mark.parametrize("sums", [4, 16])
def test_quantize_words_sums_codes_around_each_word(sums):
    # x's codes per word and the sum of the `sums` codes around each word (Q6_K's grouped product takes its
    # sub-blocks' sums of 16 from there, one number where it added four)
    from lazygrad.nn.gguf import quantize_words

    x = np.random.default_rng(0).standard_normal((1, 512)).astype(np.float32)
    words, word_sums, amax, _ = quantize_words(Tensor(x), 256, sums)
    codes = words.numpy().view(np.int8).reshape(1, 16, 32).astype(np.int64)
    ref = np.repeat(codes.reshape(1, 16, 32 // sums, sums).sum(-1), sums // 4, axis=-1)
    np.testing.assert_array_equal(word_sums.numpy(), ref)
    np.testing.assert_allclose(amax.numpy().reshape(-1), np.abs(x).reshape(2, 256).max(1))


@pytest.mark.parametrize("kind", K_QUANTS)
def test_k_quant_prompt_builds_its_dequantization_graph_once(tmp_path, kind):
    # a prompt's product over a K-quant matrix dequantizes its super-blocks into float32 panels: the dequantization's
    # graph is built once per matrix (~2700-4800 Python calls a product to build, ~240 calls a product now), stored by
    # each product's own kernels, so no node the matrix holds is realized (its float32 values are not kept)
    from lazygrad.schedule.kernelize import REALIZED_ENTRY

    q, w = _quantized(tmp_path, kind, (24, 512))
    x_np = np.random.default_rng(1).standard_normal((33, 512)).astype(np.float32)
    x = Tensor(x_np).realize()
    q.linear(x).realize()
    assert _python_calls(lambda: q.linear(x)) < 1000
    for _ in range(2):
        GlobalCounters.reset()
        out = q.linear(x).realize()
        assert GlobalCounters.kernel_count == 3  # the dequantization, the panels, the product
        np.testing.assert_allclose(out.numpy(), x_np @ w.T, rtol=1e-5, atol=1e-4 * np.abs(w).max() * np.sqrt(512))
    held = (q.plain or q)._dequantized
    seen, stack = set(), [held]
    while stack:
        if (node := stack.pop()) not in seen:
            seen.add(node)
            assert REALIZED_ENTRY not in node.__dict__, node.op
            stack.extend(node.src)
