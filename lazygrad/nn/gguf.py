"""The GGUF file format (llama.cpp's model files), read from its spec, and dequantization as lazygrad kernels.

A GGUF file is: magic "GGUF", uint32 version (2 or 3), uint64 tensor count, uint64 metadata count; the metadata
key/values (a key is a uint64-length-prefixed UTF-8 string, a value a uint32 type tag then the value, arrays nested as
element type, uint64 count, elements); one info per tensor (name, uint32 n_dims, uint64 dims fastest-first, uint32
ggml type, uint64 offset); padding to `general.alignment` (default 32); the tensor data, each at its offset.

Quantized tensors are stored as blocks of 32 values, or (the K-quants) super-blocks of 256. A QuantizedMatrix keeps
them packed (views of the raw block bytes, on the CPU pointing into a memory map of the file): its dequantization is a
lazy graph over those bytes, and, for the 32-value types, its `linear(x)` a matmul that reads the packed bytes once:
for one row of x (a decode step) as llama.cpp computes it, x quantized to int8 per block (the K-quants: per
super-block) and integer dot products; for more rows decoding the blocks in float32 inside its reduce loop (the
K-quants: x times their dequantization).
"""

from __future__ import annotations

import ctypes
import functools
import mmap
import os
import struct
from dataclasses import dataclass
from typing import Any, Callable

from lazygrad.device import Buffer, Device
from lazygrad.dtype import DType, dtypes
from lazygrad.helpers import prod
from lazygrad.nn.packed import PanelMatrix, float32_panel_width
from lazygrad.nn.state import LoadError, file_path
from lazygrad.tensor import Tensor
from lazygrad.uop.ops import Ops, UOp

GGUF_MAGIC = b"GGUF"
GGUF_DEFAULT_ALIGNMENT = 32

# metadata value type tag -> struct format of a scalar (STRING=8 and ARRAY=9 are read by hand)
_SCALAR_FORMATS = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}
_STRING, _ARRAY = 8, 9
_MAX_ARRAY_DEPTH = 8  # arrays of arrays: a reader that follows any depth would overflow the stack on a crafted file
_MAX_DIMS = 4  # GGML_MAX_DIMS
# the fewest bytes a metadata entry (key length, type) and a tensor info (name length, n_dims, type, offset) take
_MIN_KV_BYTES, _MIN_INFO_BYTES = 8 + 4, 8 + 4 + 4 + 8


# *** quantized blocks: a block of 32 values is codes (small integers) with a float16 scale d and an offset m ***
# value = code * d + m. A type's `parts` reads a block's fields through `view(dtype)`, the block bytes seen as that
# dtype, (..., blocks, block bytes / itemsize), and returns d, m (None: 0), each (..., blocks, 1), and the codes as
# float32 pieces (..., blocks, n) that cover the block's values in order. Fields are read through a view of their own
# dtype rather than bitcast from bytes: a load of int8 or half is one instruction, and the C compiler vectorizes it.
# The 4-bit types keep the low and the high nibbles as two pieces instead of concatenating them: a concatenation is
# padding, and a matmul over padded codes loads every byte behind a mask; two pieces pair with the two halves of x.

QuantParts = tuple[Tensor, "Tensor | None", list[Tensor]]
BlockView = Callable[[DType], Tensor]


def _nibbles(qs: Tensor) -> list[Tensor]:
    """16 bytes -> the low nibbles (values 0..15 of the block) and the high nibbles (values 16..31). In float32
    arithmetic, exact for bytes, rather than & 15 and >> 4: the C renderer has vector casts and multiplies, not vector
    shifts, and a byte split into lanes of scalar ops is slower than the whole float path."""
    q = qs.cast(dtypes.float32)
    hi = (q * (1 / 16)).cast(dtypes.int32).cast(dtypes.float32)
    return [q - hi * 16, hi]


def _parts_q8_0(view: BlockView) -> QuantParts:  # block: f16 scale, 32 int8
    return view(dtypes.float16)[..., :1].float(), None, [view(dtypes.int8)[..., 2:].cast(dtypes.float32)]


def _parts_q4_0(view: BlockView) -> QuantParts:  # block: f16 scale, 16 bytes of nibbles, value = (q - 8) * scale
    return view(dtypes.float16)[..., :1].float(), None, [q - 8 for q in _nibbles(view(dtypes.uint8)[..., 2:])]


def _parts_q4_1(view: BlockView) -> QuantParts:  # block: f16 scale, f16 min, 16 bytes of nibbles
    f16 = view(dtypes.float16)
    return f16[..., :1].float(), f16[..., 1:2].float(), _nibbles(view(dtypes.uint8)[..., 4:])


# *** K-quant super-blocks: 256 values in sub-blocks of 16 or 32, each with its own integer scale (and min) ***
# A type's `decode` reads a super-block's fields through `view(dtype)` as above and returns its float32 values
# (..., blocks, 256) in order. Products are formed as (d * scale) * q - (dmin * min), as ggml does: d * scale and
# d * scale * q are exact in float32 (at most 11 + 7 + 5 significant bits), so the one rounding is that of the
# subtraction, the same whether or not the compiler fuses it into a multiply-add.


def _scales_mins_k4(sc: Tensor) -> tuple[Tensor, Tensor]:
    """12 bytes -> the 6-bit scales and mins of 8 sub-blocks, each (..., 8, 1). Bytes 0..3 hold scales 0..3 in their low
    6 bits, bytes 4..7 mins 0..3; sub-blocks 4..7 take their low 4 bits from the nibbles of bytes 8..11 (scale low, min
    high) and their top 2 bits from the top bits of bytes 0..3 (scale) and 4..7 (min)."""
    (s_lo, m_lo), (s_hi, m_hi) = _scale_min_k4(sc[..., 0:4], sc[..., 4:8], sc[..., 8:12])
    scales, mins = s_lo.cat(s_hi, dim=-1), m_lo.cat(m_hi, dim=-1)
    return scales.cast(dtypes.float32).unsqueeze(-1), mins.cast(dtypes.float32).unsqueeze(-1)


def _scale_min_k4(lo: Tensor, mid: Tensor, hi: Tensor) -> tuple[tuple[Tensor, Tensor], tuple[Tensor, Tensor]]:
    """(scale, min) of sub-block j and of sub-block j + 4 from bytes j (lo), 4 + j (mid) and 8 + j (hi) of the 12."""
    return (lo & 63, mid & 63), ((hi & 15) | ((lo >> 6) << 4), (hi >> 4) | ((mid >> 6) << 4))


def _nibbles_k(qs: Tensor) -> Tensor:
    """128 bytes -> (..., 8, 32) 4-bit codes: chunk c of 32 bytes holds sub-block 2c in its low nibbles, 2c+1 in its
    high ones."""
    qs = qs.unflatten(-1, (4, 32))
    return (qs & 15).stack(qs >> 4, dim=-2).flatten(-3, -2)


def _decode_k(view: BlockView, codes: Tensor) -> Tensor:  # Q4_K, Q5_K: f16 d, f16 dmin, 12 bytes scales, codes
    f16 = view(dtypes.float16)
    d, dmin = f16[..., 0:1].float().unsqueeze(-1), f16[..., 1:2].float().unsqueeze(-1)
    scales, mins = _scales_mins_k4(view(dtypes.uint8)[..., 4:16].cast(dtypes.int32))
    return ((d * scales) * codes.cast(dtypes.float32) - dmin * mins).flatten(-2)


def _decode_q4_k(view: BlockView) -> Tensor:  # 144 bytes: d, dmin, scales, 128 bytes of nibbles
    return _decode_k(view, _nibbles_k(view(dtypes.uint8)[..., 16:144]))


def _decode_q5_k(view: BlockView) -> Tensor:  # 176 bytes: d, dmin, scales, 32 bytes of high bits, 128 of nibbles
    u8 = view(dtypes.uint8)
    qh = u8[..., 16:48]
    high = Tensor.stack(*[(qh >> j) & 1 for j in range(8)], dim=-2)  # bit j of byte i: value 32j + i
    return _decode_k(view, _nibbles_k(u8[..., 48:176]) | (high << 4))


def _decode_q6_k(view: BlockView) -> Tensor:  # 210 bytes: 128 of low nibbles, 64 of 2-bit highs, 16 int8 scales, f16 d
    u8 = view(dtypes.uint8)
    ql, qh = u8[..., 0:128].unflatten(-1, (2, 2, 32)), u8[..., 128:192].unflatten(-1, (2, 32))
    # quarter k (32 values) of each half: the low nibbles of the half's ql bytes 0..31 (k=0), 32..63 (k=1), their
    # high nibbles (k=2, 3); the top 2 bits are bits 2k, 2k+1 of the half's qh bytes
    low = (ql & 15).stack(ql >> 4, dim=-3).flatten(-3, -2)  # (..., half, quarter, 32)
    high = Tensor.stack(*[(qh >> (2 * k)) & 3 for k in range(4)], dim=-2)
    q = ((low | (high << 4)).cast(dtypes.int32) - 32).cast(dtypes.float32).flatten(-3).unflatten(-1, (16, 16))
    d = view(dtypes.float16)[..., 104:105].float().unsqueeze(-1)
    scales = view(dtypes.int8)[..., 192:208].cast(dtypes.float32).unsqueeze(-1)
    return ((d * scales) * q).flatten(-2)


# *** integer dot products: a decode step's matrix-vector product as llama.cpp computes it ***
# x is quantized to int8 per block of 32 (`quantize_blocks`), and each block's dot product with the weight's codes is
# an integer sum of 8-bit products, the form the C compiler's vectorizer turns into vpdpbusd (unsigned x signed bytes).
# A type's `int_parts` reads its blocks (through `view(dtype)` as above) as pieces of codes, each (..., *B, V), which
# pair with x's values in order: piece p of B-index b with x's piece (b, p) of V values (x seen as (*B, pieces, V));
# and a scale and an offset (None: 0) (..., *B, n): n = 1, one for all pieces (they then make one block of 32 of x),
# or one per piece (each a block of 32 of x, or of 16, half a block: Q6_K); value = code * scale + offset. A byte's
# two nibbles are two pieces, so one loop over the bytes keeps two accumulators (two vpdpbusd a vector of bytes, no
# byte shuffling). Codes are unsigned where a type's are biased (Q4_0's code - 8 goes with the offset): gcc 12
# vectorizes a signed nibble times a signed byte into vpdpbusd as if the nibble were unsigned, a wrong result.

IntParts = tuple[list[Tensor], Tensor, "Tensor | None"]


def _nibble_pieces(qs: Tensor) -> list[Tensor]:
    # in uint8: gcc recognises (int)(u8 >> 4) * (int)s8 as a dot product, not the same shift of a widened byte
    return [qs & 15, qs >> 4]


def _int_parts_q8_0(view: BlockView) -> IntParts:
    return [view(dtypes.int8)[..., 2:]], view(dtypes.float16)[..., :1].float(), None


def _int_parts_q4_0(view: BlockView) -> IntParts:
    d = view(dtypes.float16)[..., :1].float()
    return _nibble_pieces(view(dtypes.uint8)[..., 2:]), d, d * -8


def _int_parts_q4_1(view: BlockView) -> IntParts:
    f16 = view(dtypes.float16)
    return _nibble_pieces(view(dtypes.uint8)[..., 4:]), f16[..., :1].float(), f16[..., 1:2].float()


def _int_parts_q4_k(view: BlockView) -> IntParts:
    """Super-blocks of 8 sub-blocks of 32: chunk c of the 128 code bytes holds sub-block 2c in its low nibbles and
    2c + 1 in its high ones, so B is (super-blocks, 4 chunks) with a piece per nibble; value = d * scale * q - dmin *
    min."""
    f16 = view(dtypes.float16)
    d, dmin = f16[..., 0:1].float().unsqueeze(-1), f16[..., 1:2].float().unsqueeze(-1)
    scales, mins = _scales_mins_k4(view(dtypes.uint8)[..., 4:16].cast(dtypes.int32))
    shape = (*scales.shape[:-2], 4, 2)
    pieces = _nibble_pieces(view(dtypes.uint8)[..., 16:144].unflatten(-1, (4, 32)))
    return pieces, d * scales.reshape(shape), -(dmin * mins.reshape(shape))


def _int_parts_q5_k(view: BlockView) -> IntParts:
    """As Q4_K, with a fifth bit per code: a piece per sub-block j of 32 (B is the super-blocks), its codes the
    nibbles of chunk j // 2 (low or high) with bit j of the 32 high-bit bytes on top."""
    f16, u8 = view(dtypes.float16), view(dtypes.uint8)
    d, dmin = f16[..., 0:1].float(), f16[..., 1:2].float()
    scales, mins = _scales_mins_k4(u8[..., 4:16].cast(dtypes.int32))
    qh, qs = u8[..., 16:48], u8[..., 48:176]
    pieces = []
    for j in range(8):
        chunk = qs[..., 32 * (j // 2) : 32 * (j // 2) + 32]
        low = chunk & 15 if j % 2 == 0 else chunk >> 4
        pieces.append(low | (((qh >> j) & 1) << 4))
    return pieces, d * scales[..., 0], -(dmin * mins[..., 0])


def _int_parts_q6_k(view: BlockView) -> IntParts:
    """A piece per sub-block of 16 (B is the super-blocks), each its own int8 scale: codes 0..63 (the low 4 bits
    from ql, the top 2 from qh, as `_decode_q6_k` reads them), value = d * scale * (code - 32)."""
    u8 = view(dtypes.uint8)
    ql, qh = u8[..., 0:128], u8[..., 128:192]
    d = view(dtypes.float16)[..., 104:105].float()
    # the int8 scales read as bytes and sign-extended: a third view of the blocks would be a third kernel argument
    scale = d * ((u8[..., 192:208].cast(dtypes.int32) ^ 128) - 128).cast(dtypes.float32)
    pieces = []
    for n in range(2):  # half of 128 values
        for k in range(4):  # quarter of a half: 32 values, two sub-blocks
            for h in range(2):
                lo = ql[..., 64 * n + 32 * (k % 2) + 16 * h :][..., :16]
                hi = qh[..., 32 * n + 16 * h :][..., :16]
                pieces.append((lo & 15 if k < 2 else lo >> 4) | (((hi >> (2 * k)) & 3) << 4))
    return pieces, scale, scale * -32


def quantize_blocks(x: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """x (..., cols) in blocks of 32 -> int8 codes (..., blocks, 32) with x ~ codes * amax / 127 (rounded half up),
    the block's largest magnitude amax (..., blocks, 1) and its sum (..., blocks, 1), both reduces of one kernel."""
    codes, amax, xsum = _x_codes(x)
    return codes.cast(dtypes.int8).contiguous(), amax, xsum


def _x_codes(x: Tensor, block: int = 32) -> tuple[Tensor, Tensor, Tensor]:
    """x's int8 codes (..., cols / 32, 32) with one amax per `block` values (..., cols / block, 1), and its exact sums
    per 32 (..., cols / 32, 1)."""
    xb = x.reshape(*x.shape[:-1], x.shape[-1] // block, block)
    amax, xsum = xb.abs().max(-1, keepdim=True), x.reshape(*x.shape[:-1], x.shape[-1] // 32, 32).sum(-1, keepdim=True)
    inv = (amax > 0).where(127 / amax, 0)  # an all-zero block: codes 0
    # + 128.5 then truncation: the cast to int truncates toward zero, and the value is positive
    codes = (xb * inv + 128.5).cast(dtypes.int32) - 128
    return (codes if block == 32 else codes.reshape(*x.shape[:-1], x.shape[-1] // 32, 32)), amax, xsum


def _words(codes: Tensor) -> Tensor:
    b = (codes & 255).unflatten(-1, (8, 4))
    return b[..., 0] | (b[..., 1] << 8) | (b[..., 2] << 16) | (b[..., 3] << 24)


def quantize_words(x: Tensor, block: int, sums: int = 4) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """x (..., cols) quantized as `quantize_blocks` with one amax per `block` values: its codes packed four to an
    int32 word, first code in the low byte (..., cols / 32, 8), for DP4A; at each word the sum of the `sums` codes
    (4 or 16) around it (the same shape, stored by the same kernel), the amax (..., cols / block, 1) and x's exact sums
    per 32 (..., cols / 32, 1)."""
    codes, amax, xsum = _x_codes(x, block)
    b = codes.unflatten(-1, (8, 4))
    word_sums = b[..., 0] + b[..., 1] + b[..., 2] + b[..., 3]
    if sums != 4:
        parts = word_sums.unflatten(-1, (32 // sums, sums // 4))
        word_sums = _tree_sum([parts[..., i : i + 1] for i in range(sums // 4)]).expand(parts.shape).flatten(-2)
    return _words(codes).contiguous(), word_sums.contiguous(), amax, xsum


# *** the same dot products four bytes at a time: Ops.DP4A, x86's vpdpbusd ***
# Where a type's codes lie 4-byte aligned in its block, they are read as int32 words: a nibble piece is the word
# masked, the high nibbles left in place (codes times 16, a factor the scale divides out again), paired with x's codes
# packed into words (`quantize_words`). A lane's four products stay apart from the other lanes through the loop over
# blocks (a float vector accumulator, scaled per block), so a row costs one horizontal sum instead of one per block.
# Q4_0's and Q8_0's blocks (18 and 34 bytes: codes not 4-byte aligned) are padded for it. Every type goes through
# `word_terms` below; the 32-value types, where a matrix's rows come in groups of 8, through `group_terms` further
# below instead (a vector over rows).

_LOW_NIBBLES, _HIGH_NIBBLES = 0x0F0F0F0F, 0xF0F0F0F0 - (1 << 32)  # the masks as int32


# Q4_0 blocks padded to 20 bytes where the device has DP4A and the rows do not come in groups of 8 (`gguf_quantized`
# copies them so): the scale, 2 bytes of zeros, the nibbles, now 4-byte aligned. One core, 16384 x 4096: 3.6 ms
# through the byte loop, 2.6 padded (Q4_1's kernel); a decode step reads 11% more bytes.


def _parts_q4_0_padded(view: BlockView) -> QuantParts:
    return view(dtypes.float16)[..., :1].float(), None, [q - 8 for q in _nibbles(view(dtypes.uint8)[..., 4:])]


def _int_parts_q4_0_padded(view: BlockView) -> IntParts:
    d = view(dtypes.float16)[..., :1].float()
    return _nibble_pieces(view(dtypes.uint8)[..., 4:]), d, d * -8


# Q8_0 blocks padded to 36 bytes as Q4_0's (the codes 4-byte aligned), and Q6_K's 210-byte super-blocks to 212 (two
# zero bytes at the end: every field keeps its offset), both for `word_terms` below; a decode step reads 6% and 1%
# more bytes.


def _parts_q8_0_padded(view: BlockView) -> QuantParts:
    return view(dtypes.float16)[..., :1].float(), None, [view(dtypes.int8)[..., 4:].cast(dtypes.float32)]


def _int_parts_q8_0_padded(view: BlockView) -> IntParts:
    return [view(dtypes.int8)[..., 4:]], view(dtypes.float16)[..., :1].float(), None


# *** Q8_0 and the K-quants through DP4A: integer sums per block of the type, one float scaling ***
# x is quantized per block of the type, as llama.cpp quantizes it for each (Q8_0: blocks of 32; the K-quants: one
# amax per super-block of 256, its Q8_K). A type's `word_terms(view, xw, xsums)` gets x's words (1, B, blocks of 32 per
# block of the type, 8) and each word's sum of its four codes, xsums (the same shape), and returns its terms, one per
# block of 32 of x, each its pieces and its integer scale (rows, B, 8) or None (1): a piece is codes as unsigned bytes
# in int32 words (rows, B, 8: a lane per word, one AVX vpdpbusd) with the factor they carry and x's words that pair
# with them (1, B, 8), or (codes None) x's code sums that pair with the codes' bias, an exact integer addend (value =
# (code + bias) * scale: Q8_0's code - 128, Q6_K's code - 32, as llama.cpp sums them); then the float scale of the
# block (rows, B, 8); the mins, None or a coefficient and one per sub-block, each times x's exact sum of that block of
# 32 (the K-quants' dmin * min); and the bias. A block's sub-block sums times their integer scales add up in int32
# (each product below 2^25, their sum below 2^28): one conversion and one float multiply per block, as llama.cpp's own
# kernels. Scales are computed in the lanes, their fields broadcast before any arithmetic (`_lanes`): a reduce reading
# arithmetic through a broadcast has it stored by a kernel of its own (the scheduler's rule), here a number per
# sub-block written and read again; equal in every lane, the lowerer keeps them scalar. Codes are read in place where
# a shift would be needed (the C renderer has no vector shifts): a high nibble is its code times 16, a high bit its
# weight times a power of two, each piece's factor saying which; all pieces' integer sums meet at the largest factor,
# the others multiplied up (a factor counts sixteenths of a code where bits below a code's fifth are read in place:
# the float scale then times 16). 16384 x 4096 on 2 cores (loaded), Q4_K: 4.1 ms through the byte loop, 4.4 with a
# float scaling per sub-block of 32 (a chain of dependent adds), 2.9 summed as a tree, 2.4 with integer scales and
# one float scaling per super-block, 1.9 with 8 lanes instead of 4 (Q6_K: 3.3 -> 2.4 ms, its two sub-blocks of 16 per
# block of x in one term).

WordPiece = tuple["Tensor | None", int, Tensor]
WordTerm = tuple[list[WordPiece], "Tensor | None"]
WordTerms = tuple[list[WordTerm], Tensor, "tuple[Tensor, list[Tensor]] | None", int]
LANES = 8  # int32 lanes of a piece: a block of 32 of x, one AVX vpdpbusd


def _byte_mask(bits: int) -> int:
    """`bits` in each byte of an int32 word, as a signed int32 constant."""
    m = sum(bits << (8 * i) for i in range(4))
    return m - (1 << 32) if m >= 1 << 31 else m


def _lanes(field: Tensor) -> Tensor:
    """A field of each block (..., 1) broadcast to the lanes of its terms."""
    return field.expand(*field.shape[:-1], LANES)


def _byte(w: Tensor, i: int) -> Tensor:
    """Byte i of each block (int32 words w), in the lanes: read from the words the codes come from, a third view of
    the blocks (uint8) would be a third kernel argument over the same memory."""
    return (_lanes(w[..., i // 4 : i // 4 + 1]) >> (8 * (i % 4))) & 255


def _sub(words: Tensor, f: int, xw: Tensor, j: int) -> WordPiece:
    """Eight words of codes that pair with x's block j."""
    return (words, f, xw[..., j, :])


def _word_terms_q8_0_padded(view: BlockView, xw: Tensor, xsums: Tensor) -> WordTerms:
    codes = view(dtypes.int32)[..., 1:] ^ _byte_mask(0x80)  # signed bytes + 128: unsigned
    pieces = [(None, 1, xsums[..., 0, :]), _sub(codes, 1, xw, 0)]
    return [(pieces, None)], _lanes(view(dtypes.float16)[..., :1]).float(), None, -128


def _nibble_terms(view: BlockView, xw: Tensor, d: Tensor, offset: Tensor, times: float) -> WordTerms:
    """Q4_0 and Q4_1 (a 4-byte header, then 16 bytes of nibbles): a block's four words in eight lanes, the low nibbles
    in lanes 0..3 (values 0..15, x's words 0..3) and the high ones in place in lanes 4..7 (values 16..31, times 16),
    one vpdpbusd per block, the lanes' factors (1, 1/16) a constant vector in the float scale; the offset a field of
    the block (`times` it) times x's block sum. 16384 x 4096 on 2 cores (loaded), Q4_1: 1.34 ms with 4 lanes, 1.19."""
    high = Tensor.arange(LANES, device=xw.device) >= LANES // 2
    q = view(dtypes.int32)[..., 1:5]
    words = q.unsqueeze(-2).expand(*q.shape[:-1], 2, 4).flatten(-2) & high.where(_HIGH_NIBBLES, _LOW_NIBBLES)
    scale = _lanes(d) * high.where(1 / 16, 1.0)
    return [([_sub(words, 1, xw, 0)], None)], scale, (_lanes(offset), [times]), 0


def _word_terms_q4_1(view: BlockView, xw: Tensor, xsums: Tensor) -> WordTerms:
    f16 = view(dtypes.float16)
    return _nibble_terms(view, xw, f16[..., :1].float(), f16[..., 1:2].float(), 1.0)


def _word_terms_q4_0_padded(view: BlockView, xw: Tensor, xsums: Tensor) -> WordTerms:
    d = view(dtypes.float16)[..., :1].float()
    return _nibble_terms(view, xw, d, d, -8.0)


def _word_terms_k4(view: BlockView, pieces: Callable[[int], list[WordPiece]], unit: int) -> WordTerms:
    """Q4_K and Q5_K: sub-block j's pieces from `pieces(j)`, value = d * scale_j * code - dmin * min_j, the 6-bit
    scales and mins a sub-block's from its own bytes (no concatenation in the loop)."""
    f16 = view(dtypes.float16)
    d, dmin = _lanes(f16[..., 0:1]).float(), _lanes(f16[..., 1:2]).float()
    b = [_byte(view(dtypes.int32), 4 + i) for i in range(12)]
    pairs = [_scale_min_k4(b[j], b[4 + j], b[8 + j]) for j in range(4)]
    scales_mins = [low for low, _ in pairs] + [high for _, high in pairs]
    terms = [(pieces(j), sc) for j, (sc, _) in enumerate(scales_mins)]
    return terms, d if unit == 1 else d * unit, (-dmin, [mn.cast(dtypes.float32) for _, mn in scales_mins]), 0


def _word_terms_q4_k(view: BlockView, xw: Tensor, xsums: Tensor) -> WordTerms:
    # chunk j // 2 of 8 words: sub-block j in its low nibbles (j even) or its high ones, in place (codes times 16)
    w = view(dtypes.int32)

    def pieces(j: int) -> list[WordPiece]:
        chunk = w[..., 4 + 8 * (j // 2) : 12 + 8 * (j // 2)]
        return [_sub(chunk & _byte_mask(0xF0 if j % 2 else 0x0F), 16 if j % 2 else 1, xw, j)]

    return _word_terms_k4(view, pieces, 1)


def _word_terms_q5_k(view: BlockView, xw: Tensor, xsums: Tensor) -> WordTerms:
    # as Q4_K, the fifth bit of sub-block j's code i bit j of high-bit byte i (words 4..11): a piece of its own, in
    # place (2^j sixteenths of its weight 16)
    w = view(dtypes.int32)

    def pieces(j: int) -> list[WordPiece]:
        chunk = w[..., 12 + 8 * (j // 2) : 20 + 8 * (j // 2)]
        nib = _sub(chunk & _byte_mask(0xF0 if j % 2 else 0x0F), 256 if j % 2 else 16, xw, j)
        return sorted([nib, _sub(w[..., 4:12] & _byte_mask(1 << j), 1 << j, xw, j)], key=lambda p: p[1])

    return _word_terms_k4(view, pieces, 16)


def _word_terms_q6_k(view: BlockView, xw: Tensor, xsums: Tensor) -> WordTerms:
    """A term per quarter (n, k) of 32 values, x's block 4n + k: lanes 0..3 sub-block 8n + 2k, lanes 4..7 the next
    (sub-blocks of 16, each its int8 scale: the term's integer scale differs between the two halves of its lanes).
    A code's low 4 bits are the nibbles of ql (low for quarters 0, 1 of a half, high for 2, 3), its top 2 bits 2k,
    2k + 1 of qh, as `_int_parts_q6_k` reads them; value = d * scale_s * (code - 32). Factors in sixteenths, as
    Q5_K's."""
    w = view(dtypes.int32)
    second = Tensor.arange(LANES, device=w.device) >= LANES // 2  # the lanes of the pair's second sub-block
    terms = []
    for n in range(2):  # half of 128 values
        for k in range(4):  # quarter: 32 values, two sub-blocks of 16
            q = 4 * n + k
            lo = w[..., 16 * n + 8 * (k % 2) :][..., :8] & _byte_mask(0xF0 if k >= 2 else 0x0F)
            hi = w[..., 32 + 8 * n :][..., :8] & _byte_mask(3 << (2 * k))
            xb = xw[..., q, :]
            pieces = [(None, 16, xsums[..., q, :]), (lo, 256 if k >= 2 else 16, xb), (hi, 1 << (2 * k), xb)]
            # the pair's two int8 scales (bytes 192 + 2q, 193 + 2q), each sign-extended in scalars, then one select
            sc0, sc1 = [(_byte(w, 192 + 2 * q + i) ^ 128) - 128 for i in range(2)]
            terms.append((sorted(pieces, key=lambda p: p[1]), second.where(sc1, sc0)))
    return terms, _lanes(view(dtypes.float16)[..., 104:105]).float() * 16, None, -32


def _tree_sum(ts: list[Tensor]) -> Tensor:
    """The sum of tensors as a balanced tree of adds (a chain's latency is the number of terms)."""
    while len(ts) > 1:
        ts = [ts[i] + ts[i + 1] if i + 1 < len(ts) else ts[i] for i in range(0, len(ts), 2)]
    return ts[0]


def dp4a(a: Tensor, b: Tensor, acc: Tensor, lanes: int | None = None) -> Tensor:
    """acc + the dot product of each int32 of a's four bytes (unsigned) with b's (signed), broadcast. lanes: how many
    of its words lie contiguous in a's memory, the vector width the kernel's heuristic gives the op (None: 4)."""
    shape = tuple(max(s) for s in zip(a.shape, b.shape, acc.shape))
    srcs = tuple(t.cast(dtypes.int32).expand(shape).uop for t in (a, b, acc))
    return Tensor(UOp(Ops.DP4A, dtypes.int32, srcs, lanes))


# *** rows in groups of 8: a decode step's matvec with a vector over rows ***
# Where the device has DP4A and a matrix's rows come in groups of 8, every quantized type is copied at load into blocks
# of 8 rows interleaved: per group and block, each field of the 8 rows together, the float16 scales (and mins) as they
# are (8 each), the K-quants' sub-block scales and mins as bytes (8 each: Q4_K's and Q5_K's 6-bit ones unpacked,
# Q6_K's 16 int8 ones), then the code words word by word (Q4_0, Q4_1: 4 words of nibbles; Q8_0: 8 words of codes +
# 128, unsigned as vpdpbusd multiplies them; Q4_K: 32; Q5_K: 8 of high bits, 32; Q6_K: 32 of low bits, 16 of top
# bits), each 8 rows' words contiguous. A vpdpbusd then takes one word of 8 rows and one word of x
# broadcast, a block's integer sums stay in the lanes (one per row), and the scaling is one vector of 8 rows' scales: no
# per-block scalar work, no horizontal sums (llama.cpp's repacked x8 layouts rest on the same idea). 16384 x 4096 on 2
# cores (loaded), Q4_1: 1.34 ms with 4 lanes over a block's words, 1.19 with 8, 0.64 with 8 rows' float16 scales read
# lane by lane, 0.51 with float32 ones (a Q4_1 block 24 bytes, 20 in the file); one core, Q4_K: 1.93 ms with 8 lanes
# over a block's words, 1.17 in groups, Q5_K 2.42 and 2.04. Q6_K so was slower than its 8 lanes over a block's words
# (2.79 against 2.56 ms) until a chain of a sub-block's 4 words added its byte products as int16 (the C renderer's
# `_dp4a_chain`): 1024 x 4096 in cache on one loaded core, 312 us over a block's words, 186 in groups. The float16
# fields are now one vector load and one vcvtph2ps (`ClangRenderer.half_vector_cast`) for 8 rows: every grouped block is
# the file's size but the K-quants' unpacked scales (Q4_K 148 bytes, 144 in the file; Q5_K 180, 176), 8% to 17% fewer
# bytes than with float32 fields (Q4_1 4096 x 4096 on one core: 39.7M instructions a product with float32 fields, 41.2M
# so). Every other product, the dequantization and a row's lookup read the file's blocks as they are
# (`QuantizedMatrix.plain`): from the grouped copy a dequantization's kernel gathers each row's bytes from 8 rows'
# words, 3072 x 576 in 0.42 ms against 0.21.

GROUP = 8  # rows per group: the lanes of one AVX vpdpbusd
GroupTerms = Callable[[BlockView, Tensor, Tensor, Tensor, Tensor], Tensor]


def _grouped_words(view: BlockView, at: int) -> Tensor:
    """The code words from int32 word `at` of a group's block on: (groups, blocks, words, 8 rows)."""
    w = view(dtypes.int32)[..., at:]
    return w.reshape(*w.shape[:2], -1, GROUP)


def _group_scales(view: BlockView, n: int) -> list[Tensor]:
    """The first n float16 fields of 8 rows' blocks as float32, each (groups, blocks, 8)."""
    f = view(dtypes.float16)
    return [f[..., GROUP * i : GROUP * (i + 1)].float() for i in range(n)]


def _group_bytes(view: BlockView, at: int, n: int, dt: DType = dtypes.uint8) -> list[Tensor]:
    """n byte fields (`dt`: unsigned or signed) of 8 rows' blocks from byte `at` of a row's block on, each (groups,
    blocks, 8) in int32."""
    b = view(dt)
    return [b[..., GROUP * (at + i) : GROUP * (at + i + 1)].cast(dtypes.int32) for i in range(n)]


# A grouped type's `group_terms(view, xw, xsums, amax, xsum)` gets x quantized per block of the type (`quantize_words`:
# words (1, blocks, 8 per 32 values), at each word the sum of its 4 codes or (the type's group_sums) the 16 around it
# (the same shape), amax (1, blocks, 1), exact sums per 32 (1, blocks, values / 32)) and returns each block's product
# with each row (groups, blocks, 8 rows). x's numbers are broadcast to the rows (`_to_rows`) before any arithmetic: a
# reduce reading arithmetic through a broadcast has it stored by a kernel of its own.


def _to_rows(t: Tensor, i: int, like: Tensor) -> Tensor:
    """Field i of x's per-block numbers (1, blocks, n) broadcast to the rows of `like` (groups, blocks, 8)."""
    return t[..., i : i + 1].expand(like.shape)


def _nibble_dots(q: Tensor, xw: Tensor, low: list[int], high: list[int]) -> Tensor:
    """Integer dot products times 16 (groups, blocks, 8) of x's words `low` with the low nibbles of q's words (groups,
    blocks, words, 8) and x's words `high` with their high nibbles, in place (16 times their codes): the low ones
    summed first and times 16."""
    acc = Tensor.zeros(*q.shape[:2], GROUP, dtype=dtypes.int32, device=q.device)
    for w, i in enumerate(low):
        acc = dp4a(q[..., w, :] & _LOW_NIBBLES, xw[..., i : i + 1], acc, GROUP)
    acc = acc * 16
    for w, i in enumerate(high):
        acc = dp4a(q[..., w, :] & _HIGH_NIBBLES, xw[..., i : i + 1], acc, GROUP)
    return acc


def _group_terms_q4_0(view: BlockView, xw: Tensor, xsums: Tensor, amax: Tensor, xsum: Tensor) -> Tensor:
    (d,) = _group_scales(view, 1)
    dots = _nibble_dots(_grouped_words(view, 4), xw, [0, 1, 2, 3], [4, 5, 6, 7]).cast(dtypes.float32)
    return d * (dots * (_to_rows(amax, 0, d) * (1 / (127 * 16))) + _to_rows(xsum, 0, d) * -8)


def _group_terms_q4_1(view: BlockView, xw: Tensor, xsums: Tensor, amax: Tensor, xsum: Tensor) -> Tensor:
    d, m = _group_scales(view, 2)
    dots = _nibble_dots(_grouped_words(view, 8), xw, [0, 1, 2, 3], [4, 5, 6, 7]).cast(dtypes.float32)
    return dots * (_to_rows(amax, 0, d) * (1 / (127 * 16))) * d + m * _to_rows(xsum, 0, d)


def _group_terms_q8_0(view: BlockView, xw: Tensor, xsums: Tensor, amax: Tensor, xsum: Tensor) -> Tensor:
    # codes + 128 times x's codes: the dot product plus 128 times the sum of x's codes, taken off first (exact)
    (d,) = _group_scales(view, 1)
    q = _grouped_words(view, 4)
    acc = _tree_sum([_to_rows(xsums, i, d) for i in range(8)]) * -128
    for w in range(8):
        acc = dp4a(q[..., w, :], xw[..., w : w + 1], acc, GROUP)
    return acc.cast(dtypes.float32) * (_to_rows(amax, 0, d) * (1 / 127)) * d


def _group_k4(view: BlockView, amax: Tensor, xsum: Tensor, at: int, sub: Callable[[Tensor, int], Tensor]) -> Tensor:
    """Q4_K and Q5_K: sub-block j's integer sum of 8 rows, sixteen times its codes times x's (`sub(words, j)`, the code
    words from word `at` on), times its 6-bit scale, summed in int32 over the super-block (below 2^30), one float
    scaling; minus dmin times each 6-bit min times x's exact sum of that sub-block."""
    d, dmin = _group_scales(view, 2)
    scales, mins = _group_bytes(view, 4, 8), _group_bytes(view, 12, 8)
    q = _grouped_words(view, at)
    dots = _tree_sum([sub(q, j) * scales[j] for j in range(8)]).cast(dtypes.float32)
    offs = _tree_sum([mins[j].cast(dtypes.float32) * _to_rows(xsum, j, d) for j in range(8)])
    return dots * (_to_rows(amax, 0, d) * (1 / (127 * 16))) * d - dmin * offs


def _nibbles_of(q: Tensor, j: int, xw: Tensor) -> Tensor:
    """Sub-block j's 4-bit codes times x's, times 16: chunk j // 2 of 8 words, its low nibbles (j even) or high ones
    (in place)."""
    chunk = q[..., 8 * (j // 2) : 8 * (j // 2) + 8, :]
    return (
        _dp4a_words(chunk, _LOW_NIBBLES, xw, 8 * j) * 16 if j % 2 == 0 else _dp4a_words(chunk, _HIGH_NIBBLES, xw, 8 * j)
    )


def _group_terms_q4_k(view: BlockView, xw: Tensor, xsums: Tensor, amax: Tensor, xsum: Tensor) -> Tensor:
    return _group_k4(view, amax, xsum, 8 + 32, lambda q, j: _nibbles_of(q, j, xw))


def _group_terms_q5_k(view: BlockView, xw: Tensor, xsums: Tensor, amax: Tensor, xsum: Tensor) -> Tensor:
    # the fifth bit of sub-block j's code i is bit j of high-bit byte i (words 0..7, the nibbles' after them), moved
    # to bit 4 beside the nibble: one byte a 5-bit code, one vpmaddubsw a word where the nibbles and the bits took one
    # each (loop instructions per super-block of 8 rows 694 -> 662)
    def sub(q: Tensor, j: int) -> Tensor:
        chunk = q[..., 8 + 8 * (j // 2) : 16 + 8 * (j // 2), :]
        low = chunk & _LOW_NIBBLES if j % 2 == 0 else (chunk >> 4) & _LOW_NIBBLES
        qh = q[..., :8, :]
        bit = (qh & _byte_mask(1 << j)) * (1 << (4 - j)) if j < 4 else (qh >> (j - 4)) & _byte_mask(16)
        return _dp4a_words(low | bit, None, xw, 8 * j) * 16

    return _group_k4(view, amax, xsum, 8 + 32, sub)


def _group_terms_q6_k(view: BlockView, xw: Tensor, xsums: Tensor, amax: Tensor, xsum: Tensor) -> Tensor:
    """Sub-block s = 8n + 2k + h of 16 values (half n, quarter k, h its first or second 16): its low 4 bits the
    nibbles (low for k < 2, high for k >= 2) of ql words 16n + 8(k % 2) + 4h.., its top 2 bits bits 2k, 2k + 1 of qh
    words 8n + 4h.. (after ql's 32), as `_int_parts_q6_k` reads them, put together into one byte a code (0..63, one
    vpmaddubsw a word); x's words 32n + 8k + 4h... Its integer sum in sixteenths, 16 * (code - 32) times x's codes
    (the bias times x's code sums), times its int8 scale, summed in int32 over the super-block (at most 16 * 16 * 32
    * 127 * 128 * 16 < 2^31), one float scaling. Loop instructions per super-block of 8 rows: 896 with the scales
    xor-ed and subtracted, x's code sums added from four words' for every group of rows and the low and top bits
    multiplied apart; 796 with the scales read as int8 (one vpmovsxbd for 8 rows) and x's codes summed per 16 by x's
    kernel; 764 with one byte a code."""
    (d,) = _group_scales(view, 1)
    scales = _group_bytes(view, 2, 16, dtypes.int8)
    q = _grouped_words(view, 4 + 32)
    terms = []
    for n in range(2):
        for k in range(4):
            for h in range(2):
                lo_at, hi_at, x_at = 16 * n + 8 * (k % 2) + 4 * h, 32 + 8 * n + 4 * h, 32 * n + 8 * k + 4 * h
                ql, qh = q[..., lo_at : lo_at + 4, :], q[..., hi_at : hi_at + 4, :]
                low = ql & _LOW_NIBBLES if k < 2 else (ql >> 4) & _LOW_NIBBLES
                if k < 2:
                    top = (qh & _byte_mask(3 << (2 * k))) * (16 >> (2 * k))
                else:
                    top = (qh >> (2 * k - 4)) & _byte_mask(48)
                bias = _to_rows(xsums, x_at, d) * -512  # x's codes summed per 16 (GGMLType.group_sums)
                dot = _dp4a_words(low | top, None, xw, x_at) * 16 + bias
                terms.append(dot * scales[8 * n + 2 * k + h])
    return _tree_sum(terms).cast(dtypes.float32) * (_to_rows(amax, 0, d) * (1 / (127 * 16))) * d


def _dp4a_words(q: Tensor, mask: int | None, xw: Tensor, at: int) -> Tensor:
    """The dot product (groups, blocks, 8) of x's words at.. with q's words (groups, blocks, words, 8) masked (None:
    as they are)."""
    acc = Tensor.zeros(*q.shape[:2], GROUP, dtype=dtypes.int32, device=q.device)
    for w in range(q.shape[2]):
        word = q[..., w, :] if mask is None else q[..., w, :] & mask
        acc = dp4a(word, xw[..., at + w : at + w + 1], acc, GROUP)
    return acc


# A prompt's product (many rows of x) multiplies float32 weights in panels of 8 rows (`PanelMatrix`: (rows / 8, cols,
# 8), where the device's vectors hold 8 float32). A group's code words are 8 rows side by side already: a type's
# `group_panels(view)` decodes them into that layout in one kernel, a code's byte or nibble a shift of its word in all 8
# lanes at once. From the file's blocks a dequantization then a copy into panels took two kernels and twice the bytes
# (3072 x 576 Q4_1 on one loaded core: 3.1-4.2 ms, 1.9-2.3 from the groups).


@dataclass(frozen=True)
class GroupPanels:
    """A grouped type's decode into panels: `halves` float16 fields of 8 rows (scale, min) before the code words, 8-bit
    codes (8 words) or nibbles (4 words), value = `values(codes, fields)` in float32. `fields(view)` are the decode's
    movement ops alone (views of the blocks, a constant), which a QuantizedMatrix builds once; `decode` is its
    arithmetic, built per product (the whole graph, built per product, took ~2 ms of Python, the movement ops most of
    it: 120 products in a SmolLM2 prompt)."""

    halves: int
    bits: int
    values: Callable[[Tensor, list[Tensor]], Tensor]

    def fields(self, view: BlockView) -> list[Tensor]:
        """The code words and each code's shift in its word, (groups, blocks, 32, 8 rows): a word w's byte i holds value
        4w + i (8-bit codes), or its low nibble value 4w + i and its high one 16 + 4w + i; then the float16 fields
        broadcast the same."""
        q = _grouped_words(view, GROUP * self.halves // 2)
        g, b, words = q.shape[:3]
        per_byte = 32 // (4 * words)  # codes
        shape = (g, b, per_byte, words, 4, GROUP)
        shifts = (
            Tensor.arange(per_byte, device=q.device).reshape(per_byte, 1, 1, 1) * 4
            + Tensor.arange(4, device=q.device).reshape(1, 1, 4, 1) * 8
        )
        spread = [q.reshape(g, b, 1, words, 1, GROUP).expand(shape), shifts.expand(shape)]
        f16 = view(dtypes.float16)
        scales = [f16[..., GROUP * i : GROUP * (i + 1)].unsqueeze(-2) for i in range(self.halves)]
        return [t.reshape(g, b, 32, GROUP) for t in spread] + [t.expand(g, b, 32, GROUP) for t in scales]

    def decode(self, fields: list[Tensor]) -> Tensor:
        """The panels (groups, cols, 8) from `fields`."""
        words, shifts, *scales = fields
        codes = ((words >> shifts) & ((1 << self.bits) - 1)).cast(dtypes.float32)
        values = self.values(codes, [f.float() for f in scales])
        return values.reshape(values.shape[0], -1, GROUP)

    def __call__(self, view: BlockView) -> Tensor:
        return self.decode(self.fields(view))


_group_panels_q4_0 = GroupPanels(1, 4, lambda codes, f: (codes - 8) * f[0])
_group_panels_q4_1 = GroupPanels(2, 4, lambda codes, f: codes * f[0] + f[1])
_group_panels_q8_0 = GroupPanels(1, 8, lambda codes, f: (codes - 128) * f[0])  # stored + 128


def _group_fields_32(halves: int, code_at: int, code_bytes: int, flip: bool) -> GroupFields:
    def fields(plain: QuantizedMatrix) -> tuple[Tensor, Tensor | None, Tensor]:
        codes = plain.view(dtypes.uint8)[..., code_at : code_at + code_bytes]
        return plain.view(dtypes.float16)[..., :halves], None, codes ^ 128 if flip else codes  # signed + 128

    return fields


def _group_fields_k4(codes_end: int) -> GroupFields:
    """Q4_K and Q5_K: d and dmin, the 8 scales and 8 mins unpacked to bytes, the bytes after them (Q5_K: high bits,
    then nibbles)."""

    def fields(plain: QuantizedMatrix) -> tuple[Tensor, Tensor | None, Tensor]:
        u8 = plain.view(dtypes.uint8)
        scales, mins = _scales_mins_k4(u8[..., 4:16].cast(dtypes.int32))
        small = scales.cat(mins, dim=-2)[..., 0].cast(dtypes.uint8)  # (rows, blocks, 16)
        return plain.view(dtypes.float16)[..., :2], small, u8[..., 16:codes_end]

    return fields


def _group_fields_q6_k(plain: QuantizedMatrix) -> tuple[Tensor, Tensor | None, Tensor]:
    """Q6_K: d, the 16 int8 scales as bytes, ql and qh."""
    u8 = plain.view(dtypes.uint8)
    return plain.view(dtypes.float16)[..., 104:105], u8[..., 192:208], u8[..., 0:192]


GroupFields = Callable[["QuantizedMatrix"], tuple[Tensor, "Tensor | None", Tensor]]


def _group_rows(gt: GGMLType, plain: QuantizedMatrix) -> bytes:
    """The blocks of a matrix (rows a multiple of 8) in the grouped layout of gt.grouped, from the type's fields
    (`group_fields`: float16 fields, byte fields or None, code bytes), each field of a group's 8 rows together."""
    assert gt.group_fields is not None
    rows, blocks = plain._blocks
    floats, small, codes = gt.group_fields(plain)
    by_rows = (rows // GROUP, GROUP, blocks)
    parts = [floats.reshape(*by_rows, -1).permute(0, 2, 3, 1).contiguous().bitcast(dtypes.uint8)]
    if small is not None:
        parts.append(small.reshape(*by_rows, -1).permute(0, 2, 3, 1))
    parts.append(codes.reshape(*by_rows, -1, 4).permute(0, 2, 3, 1, 4))
    # each field permuted by a kernel of its own, then one copy side by side (one kernel permuting all of them behind
    # a concatenation's padding took SmolLM2's load from 0.8 to 1.6 s)
    fields = [p.reshape(*by_rows[::2], -1).contiguous() for p in parts]
    Tensor.realize(*fields)
    return fields[0].cat(*fields[1:], dim=-1)._raw_data().tobytes()


@dataclass(frozen=True)
class GGMLType:
    name: str
    block_elems: int
    block_bytes: int
    parts: Callable[[BlockView], QuantParts] | None  # 32-value blocks, which a matmul decodes in its loop
    dtype: DType | None = None  # a plain dtype
    decode: Callable[[BlockView], Tensor] | None = None  # K-quant super-blocks, dequantized to float32
    int_parts: Callable[[BlockView], IntParts] | None = None  # codes and scales for integer dot products
    word_terms: Callable[[BlockView, Tensor, Tensor], WordTerms] | None = None  # DP4A, integer sub-block scales
    padded: GGMLType | None = None  # the blocks copied into a layout with word_terms, where the device has DP4A
    gap_at: int = 2  # where a padded layout inserts its zero bytes
    group_terms: GroupTerms | None = None  # the grouped layout's decode matvec
    group_sums: int = 4  # x's codes per sum that group_terms gets (`quantize_words`)
    grouped: GGMLType | None = None  # the blocks copied into rows in groups of 8, where the device has DP4A
    group_fields: GroupFields | None = None  # a block's fields for the grouped layout
    group_panels: GroupPanels | None = None  # the grouped layout's weights in panels of 8 rows


GGML_TYPES: dict[int, GGMLType] = {
    0: GGMLType("F32", 1, 4, None, dtypes.float32),
    1: GGMLType("F16", 1, 2, None, dtypes.float16),
    2: GGMLType(
        "Q4_0",
        32,
        18,
        _parts_q4_0,
        int_parts=_int_parts_q4_0,
        padded=GGMLType(
            "Q4_0", 32, 20, _parts_q4_0_padded, int_parts=_int_parts_q4_0_padded, word_terms=_word_terms_q4_0_padded
        ),
        grouped=GGMLType("Q4_0", 32, 18, None, group_terms=_group_terms_q4_0, group_panels=_group_panels_q4_0),
        group_fields=_group_fields_32(1, 2, 16, False),
    ),
    3: GGMLType(
        "Q4_1",
        32,
        20,
        _parts_q4_1,
        int_parts=_int_parts_q4_1,
        word_terms=_word_terms_q4_1,
        grouped=GGMLType("Q4_1", 32, 20, None, group_terms=_group_terms_q4_1, group_panels=_group_panels_q4_1),
        group_fields=_group_fields_32(2, 4, 16, False),
    ),
    8: GGMLType(
        "Q8_0",
        32,
        34,
        _parts_q8_0,
        int_parts=_int_parts_q8_0,
        padded=GGMLType(
            "Q8_0", 32, 36, _parts_q8_0_padded, int_parts=_int_parts_q8_0_padded, word_terms=_word_terms_q8_0_padded
        ),
        grouped=GGMLType("Q8_0", 32, 34, None, group_terms=_group_terms_q8_0, group_panels=_group_panels_q8_0),
        group_fields=_group_fields_32(1, 2, 32, True),
    ),
    12: GGMLType(
        "Q4_K",
        256,
        144,
        None,
        decode=_decode_q4_k,
        int_parts=_int_parts_q4_k,
        word_terms=_word_terms_q4_k,
        grouped=GGMLType("Q4_K", 256, 148, None, group_terms=_group_terms_q4_k),
        group_fields=_group_fields_k4(144),
    ),
    13: GGMLType(
        "Q5_K",
        256,
        176,
        None,
        decode=_decode_q5_k,
        int_parts=_int_parts_q5_k,
        word_terms=_word_terms_q5_k,
        grouped=GGMLType("Q5_K", 256, 180, None, group_terms=_group_terms_q5_k),
        group_fields=_group_fields_k4(176),
    ),
    14: GGMLType(
        "Q6_K",
        256,
        210,
        None,
        decode=_decode_q6_k,
        int_parts=_int_parts_q6_k,
        padded=GGMLType(
            "Q6_K", 256, 212, None, decode=_decode_q6_k, int_parts=_int_parts_q6_k, word_terms=_word_terms_q6_k
        ),
        gap_at=210,
        grouped=GGMLType("Q6_K", 256, 210, None, group_terms=_group_terms_q6_k, group_sums=16),
        group_fields=_group_fields_q6_k,
    ),
    30: GGMLType("BF16", 1, 2, None, dtypes.bfloat16),
}
# types the spec defines that this reader cannot dequantize, named in the error
_UNSUPPORTED_NAMES = {
    6: "Q5_0",
    7: "Q5_1",
    9: "Q8_1",
    10: "Q2_K",
    11: "Q3_K",
    15: "Q8_K",
    24: "I8",
    25: "I16",
    26: "I32",
    27: "I64",
    28: "F64",
}


@dataclass(frozen=True)
class GGUFTensorInfo:
    name: str
    shape: tuple[int, ...]  # row-major (the file's dims reversed)
    ggml_type: GGMLType
    offset: int  # absolute file offset
    nbytes: int


class GGUFError(LoadError):
    pass


class _Cursor:
    """Reads little-endian values from the file's bytes; running past the end is a truncated file."""

    def __init__(self, path: str, data: memoryview):
        self.path, self.data, self.pos = path, data, 0

    def take(self, n: int, what: str) -> memoryview:
        if self.pos + n > len(self.data):
            raise GGUFError(
                f"{self.path}: truncated GGUF file: {what} at byte {self.pos} needs {n} bytes, "
                f"the file has {len(self.data)}"
            )
        out = self.data[self.pos : self.pos + n]
        self.pos += n
        return out

    def scalar(self, fmt: str, what: str) -> Any:
        return struct.unpack(fmt, self.take(struct.calcsize(fmt), what))[0]

    def string(self, what: str) -> str:
        raw = self.take(self.scalar("<Q", what), what)
        try:
            return str(raw, "utf-8")
        except UnicodeDecodeError:
            return bytes(raw).decode("utf-8", errors="replace")  # some vocabularies hold partial UTF-8 sequences

    def value(self, tag: int, key: str, depth: int = 0) -> Any:
        if tag in _SCALAR_FORMATS:
            return self.scalar(_SCALAR_FORMATS[tag], key)
        if tag == _STRING:
            return self.string(key)
        if tag == _ARRAY:
            if depth >= _MAX_ARRAY_DEPTH:
                raise GGUFError(f"{self.path}: metadata {key!r} nests arrays more than {_MAX_ARRAY_DEPTH} deep")
            elem, count = self.scalar("<I", key), self.scalar("<Q", key)
            if elem in _SCALAR_FORMATS:  # one unpack for the whole array: token score/type lists are long
                fmt = _SCALAR_FORMATS[elem][1]
                return list(struct.unpack(f"<{count}{fmt}", self.take(count * struct.calcsize(fmt), key)))
            # every element takes at least 8 bytes (a string's length, an array's type and count): a count the rest
            # of the file cannot hold is an error now, not after a loop of 2**60 steps
            self.fits(count, 8, f"metadata {key!r}: {count} array elements")
            return [self.value(elem, key, depth + 1) for _ in range(count)]
        raise GGUFError(f"{self.path}: metadata {key!r} has unknown value type {tag}")

    def fits(self, count: int, min_bytes: int, what: str) -> None:
        left = len(self.data) - self.pos
        if count * min_bytes > left:
            raise GGUFError(
                f"{self.path}: truncated or corrupt GGUF file: {what} need at least {count * min_bytes} bytes, "
                f"{left} are left"
            )


def gguf_read_header(path: str | os.PathLike | Tensor) -> tuple[dict[str, Any], list[GGUFTensorInfo], mmap.mmap]:
    """Metadata, tensor infos and a (copy-on-write) memory map of a GGUF file (a path, or a DISK tensor of it); every
    range is checked against its size."""
    path = file_path(path)
    if not os.path.isfile(path):
        raise FileNotFoundError(f"{path}: no such GGUF file")
    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        if size < 24:
            raise GGUFError(f"{path}: truncated GGUF file: {size} bytes, the header alone needs 24")
        # copy-on-write: writable (so ctypes can take its address) yet an in-place update never reaches the file
        mm = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_COPY)
    cur = _Cursor(path, memoryview(mm))
    magic = bytes(cur.take(4, "magic"))
    if magic != GGUF_MAGIC:
        raise GGUFError(f"{path}: not a GGUF file (magic {magic!r}, expected {GGUF_MAGIC!r})")
    version = cur.scalar("<I", "version")
    if version not in (2, 3):
        raise GGUFError(f"{path}: GGUF version {version} is not supported (2 and 3 are)")
    n_tensors, n_kv = cur.scalar("<Q", "tensor count"), cur.scalar("<Q", "metadata count")
    cur.fits(n_kv, _MIN_KV_BYTES, f"{n_kv} metadata entries")
    cur.fits(n_tensors, _MIN_INFO_BYTES, f"{n_tensors} tensor infos")
    meta: dict[str, Any] = {}
    for _ in range(n_kv):
        key = cur.string("metadata key")
        if key in meta:
            raise GGUFError(f"{path}: metadata key {key!r} appears twice")
        meta[key] = cur.value(cur.scalar("<I", key), key)
    raw_infos = []
    names: set[str] = set()
    for _ in range(n_tensors):
        name = cur.string("tensor name")
        if name in names:
            raise GGUFError(f"{path}: two tensors are named {name!r}")
        names.add(name)
        n_dims = cur.scalar("<I", name)
        if n_dims > _MAX_DIMS:
            raise GGUFError(f"{path}: tensor {name!r} has {n_dims} dimensions, GGUF allows at most {_MAX_DIMS}")
        dims = struct.unpack(f"<{n_dims}Q", cur.take(8 * n_dims, name))
        raw_infos.append((name, tuple(reversed(dims)), cur.scalar("<I", name), cur.scalar("<Q", name)))
    align = meta.get("general.alignment", GGUF_DEFAULT_ALIGNMENT)
    if not isinstance(align, int) or isinstance(align, bool) or align <= 0 or align & (align - 1):
        raise GGUFError(f"{path}: general.alignment is {align!r}; it must be a power of two")
    start = cur.pos + (-cur.pos % align)
    infos = []
    for name, shape, tag, offset in raw_infos:
        if tag not in GGML_TYPES:
            kind = _UNSUPPORTED_NAMES.get(tag, "unknown")
            raise GGUFError(
                f"{path}: tensor {name!r} has {kind} quantization (ggml type {tag}), which is not supported "
                f"(supported: {', '.join(t.name for t in GGML_TYPES.values())})"
            )
        gt = GGML_TYPES[tag]
        if gt.block_elems > 1 and (not shape or shape[-1] % gt.block_elems):
            raise GGUFError(
                f"{path}: tensor {name!r} of shape {shape} has rows of {shape[-1] if shape else 1} values, which do "
                f"not split into {gt.name} blocks of {gt.block_elems}"
            )
        nbytes = prod(shape) // gt.block_elems * gt.block_bytes
        if start + offset + nbytes > size:
            raise GGUFError(
                f"{path}: truncated GGUF file: tensor {name!r} needs bytes {start + offset}.."
                f"{start + offset + nbytes}, "
                f"the file has {size}"
            )
        infos.append(GGUFTensorInfo(name, shape, gt, start + offset, nbytes))
    return meta, infos, mm


def _raw_tensor(mm: mmap.mmap | bytes, offset: int, count: int, dtype: DType, device: str) -> Tensor:
    """`count` elements of `dtype` at an offset of the file's memory map (on the CPU a view into it) or of bytes."""
    if device == "CPU" and isinstance(mm, mmap.mmap) and offset % dtype.itemsize == 0:
        ptr = ctypes.addressof(ctypes.c_char.from_buffer(mm)) + offset
        buf = Buffer("CPU", count, dtype, external=mm, external_ptr=ptr)
    else:
        buf = Buffer(device, count, dtype)
        buf.copyin(memoryview(mm)[offset : offset + count * dtype.itemsize])
    return Tensor(UOp.buffer_view(buf, (count,)))


def _raw_views(data: mmap.mmap | bytes, offset: int, nbytes: int, device: str) -> Callable[[DType], Tensor]:
    """The bytes at `offset` seen as any dtype, flat. On the CPU every view shares one memory (the file's map, or one
    buffer the bytes are copied into): a kernel reading codes and scales touches each cache line once."""
    if device != "CPU":
        return lambda dt: _raw_tensor(data, offset, nbytes // dt.itemsize, dt, device)
    if isinstance(data, mmap.mmap) and offset % 8 == 0:
        owner: Any = data
        ptr = ctypes.addressof(ctypes.c_char.from_buffer(data)) + offset
    else:
        owner = Buffer("CPU", nbytes, dtypes.uint8).copyin(memoryview(data)[offset : offset + nbytes])
        ptr = owner.ptr
    n = nbytes
    return lambda dt: Tensor(
        UOp.buffer_view(Buffer("CPU", n // dt.itemsize, dt, external=owner, external_ptr=ptr), (n // dt.itemsize,))
    )


# rows of x from which a product dequantizes the weight into panels instead of decoding it in the matmul's loop. One
# core, Q4_1 3072 x 576: 4 rows 0.14 ms in the loop vs 0.35 dequantized; 16: 0.38 vs 0.42; 32: 0.69 vs 0.56; 128: 2.96
# vs 1.31 (0.19 of it the dequantization, 0.14 the packing)
_DEQUANTIZE_ROWS = 32


class QuantizedMatrix:
    """A tensor (..., cols) stored as ggml blocks along its rows. `dequantize()` is the float32 tensor as a lazy graph;
    `linear(x)` (blocks of 32 only) is x @ matrix.T as one reduce over the packed blocks: codes, scales and offsets are
    decoded inside the matmul's loop, so a matrix-vector product reads the packed bytes once and writes no float32
    weights."""

    def __init__(
        self,
        gt: GGMLType,
        data: mmap.mmap | bytes,
        offset: int,
        shape: tuple[int, ...],
        device: str,
        plain: QuantizedMatrix | None = None,
    ):
        """plain: the same matrix as the file stores it, where these blocks are a copy only a decode step's product
        reads (rows in groups); every other path reads that."""
        assert gt.dtype is None and shape and shape[-1] % gt.block_elems == 0
        self.gt, self.shape, self.device, self.plain = gt, shape, device, plain
        self.data, self.offset, self.nbytes = data, offset, prod(shape) // gt.block_elems * gt.block_bytes
        self._blocks = (prod(shape[:-1]), shape[-1] // gt.block_elems)
        self._flat = _raw_views(data, offset, self.nbytes, device)
        self._views: dict[DType, Tensor] = {}

    def view(self, dt: DType) -> Tensor:
        """The blocks seen as `dt`: (rows, blocks per row, block bytes / itemsize); rows in groups (`gt.group_terms`):
        a group's block together, (groups, blocks per row, 8 * block bytes / itemsize) (Q4_0's 18 bytes a row are
        no whole int32 words, 8 rows' 144 are)."""
        if dt not in self._views:  # one Buffer per dtype: the same graph node each time it is asked for
            rows, blocks = self._blocks
            group = GROUP if self.gt.group_terms is not None else 1
            self._views[dt] = self._flat(dt).reshape(rows // group, blocks, group * self.gt.block_bytes // dt.itemsize)
        return self._views[dt]

    def dequantize(self, rows: tuple[Any, int] | None = None) -> Tensor:
        """The float32 tensor; rows=(start, n): rows start..start + n - 1 of a matrix only, where start may be a bound
        Variable (one compiled kernel then serves every row: an embedding lookup inside a TinyJit)."""
        if self.plain is not None:
            return self.plain.dequantize(rows)
        view: BlockView = self.view
        shape = self.shape
        if rows is not None:
            start, n = rows
            view = lambda dt: self.view(dt).shrink(((start, start + n), None, None))  # noqa: E731
            shape = (n, *self.shape[1:])
        if self.gt.decode is not None:
            return self.gt.decode(view).reshape(shape)
        assert self.gt.parts is not None
        d, m, codes = self.gt.parts(view)
        w = codes[0].cat(*codes[1:], dim=-1) * d
        return (w if m is None else w + m).reshape(shape)

    def linear(self, x: Tensor) -> Tensor:
        """x (..., cols) @ self.T -> (..., rows), self 2-D. One row of x (decode) as llama.cpp computes it, with x
        quantized to int8 per block and integer dot products (`linear_int8`); a few more as `linear_f32`; from
        _DEQUANTIZE_ROWS rows (a prompt) the weight dequantized and packed into panels first, then multiplied."""
        rows = prod(x.shape[:-1])
        if rows == 1 and (self.gt.int_parts is not None or self.gt.group_terms is not None):
            return self.linear_int8(x)
        if rows >= _DEQUANTIZE_ROWS and self._panel_fields is not None:
            self._check_linear(x, "linear", True)
            assert self.gt.group_panels is not None
            panels = self.gt.group_panels.decode([Tensor(f) for f in self._panel_fields])
            return PanelMatrix.from_panels(panels, self.shape).linear(x)
        if self.plain is not None:
            return self.plain.linear(x)
        if rows >= _DEQUANTIZE_ROWS:
            self._check_linear(x, "linear", True)
            return self._dequantized_panels().linear(x)
        return self.linear_f32(x)

    def _dequantized_panels(self) -> PanelMatrix:
        return PanelMatrix.pack(Tensor(self._dequantized).contiguous())

    @functools.cached_property
    def _dequantized(self) -> UOp:
        """`dequantize()`'s graph, built once for a prompt's products (the K-quants' decode: ~2700-4800 Python calls a
        product to build, 120 products in a SmolLM2 prompt): each product stores it by a `contiguous` of its own, so
        no node held here is realized (one held so would keep its float32 values from one product to the next)."""
        return self.dequantize().uop

    @functools.cached_property
    def _panel_fields(self) -> list[UOp] | None:
        """The movement ops of the grouped blocks' decode into float32 panels (`GroupPanels.fields`), where a prompt's
        product multiplies such panels: views and a constant only, so the graph nodes held here are never stored by a
        kernel (a decoded weight's node, held, would keep its float32 values from one product to the next)."""
        if self.gt.group_panels is None or float32_panel_width(self.shape, self.device) != GROUP:
            return None
        return [f.uop for f in self.gt.group_panels.fields(self.view)]

    def _check_linear(self, x: Tensor, kind: str, supported: bool) -> None:
        if len(self.shape) != 2 or x.shape[-1] != self.shape[1]:
            raise ValueError(f"{kind}: input shape {x.shape} does not match quantized weight shape {self.shape}")
        if not supported:
            raise ValueError(f"{kind}: {self.gt.name} blocks have no packed matmul of this kind; use dequantize()")

    def linear_f32(self, x: Tensor) -> Tensor:
        """x @ self.T in float32, exact to float rounding: for blocks of 32 one kernel, the blocks decoded in its loop
        and the products summed per block (more rows of x: the scheduler may store the dequantized weight first)."""
        if self.plain is not None:
            return self.plain.linear_f32(x)
        self._check_linear(x, "linear", True)
        if self.gt.parts is None:  # super-blocks: x times the dequantized weight
            return self._dequantized_panels().linear(x)
        d, m, codes = self.gt.parts(self.view)
        n = len(codes)
        xb = x.reshape(*x.shape[:-1], 1, self.shape[1] // self.gt.block_elems, n, self.gt.block_elems // n)
        # each piece dequantized in registers and multiplied by its half of x: as many ops per value as factoring the
        # scale out of the block's sum, and no sum of x of its own (the scheduler would store that in a kernel first)
        acc = None
        for i, c in enumerate(codes):
            term = xb[..., i, :] * (c * d if m is None else c * d + m)
            acc = term if acc is None else acc + term
        assert acc is not None
        return acc.sum((-2, -1))

    def linear_int8(self, x: Tensor) -> Tensor:
        """x @ self.T as llama.cpp computes it: x quantized to int8 per block of 32 (`quantize_blocks`), each block's
        dot product summed exactly in int32, then scaled. Two kernels after x's: the scaled dot product of every
        block (its sum a plain loop over bytes, which gcc vectorizes into vpdpbusd), then each row's sum of those."""
        self._check_linear(x, "linear_int8", self.gt.int_parts is not None or self.gt.group_terms is not None)
        if self.gt.group_terms is not None:
            return self._linear_grouped(x)
        assert self.gt.int_parts is not None
        if self.gt.word_terms is not None and Device[self.device].renderer.dp4a_builtins:
            return self._linear_dp4a_terms(x)
        pieces, scale, offset = self.gt.int_parts(self.view)  # [(rows, *B, V)], (rows, *B, n)
        xq, amax, xsum = quantize_blocks(x.reshape(-1, x.shape[-1]))
        if xq.shape[0] != 1:
            raise ValueError(f"linear_int8: x must be one row (a decode step), got shape {x.shape}")
        shape_b, v, n = pieces[0].shape[1:-1], pieces[0].shape[-1], scale.shape[-1]
        xq = xq.reshape(1, *shape_b, len(pieces), v).cast(dtypes.int32)
        if n > 1 and v < 32:  # a scale per piece shorter than x's blocks (Q6_K's 16): x's amax spread over them
            amax = amax.reshape(1, *shape_b, n * v // 32, 1).expand(1, *shape_b, n * v // 32, 32 // v)
            xsum = x.reshape(1, *shape_b, n, v).sum(-1)
        amax, xsum = amax.reshape(1, *shape_b, n), xsum.reshape(1, *shape_b, n)
        # one loop over the codes with an accumulator per piece
        dots = [(c.cast(dtypes.int32) * xq[..., i, :]).sum(-1, dtype=dtypes.int32) for i, c in enumerate(pieces)]
        if scale.shape[-1] == 1:  # the pieces make one block of x: one integer sum
            dots = [sum(dots[1:], dots[0])]
        blocks = None
        for i, dot in enumerate(dots):
            term = dot.cast(dtypes.float32) * (scale[..., i] * amax[..., i]) * (1 / 127)
            if offset is not None:  # the offset times x's exact block sum
                term = term + offset[..., i] * xsum[..., i]
            blocks = term if blocks is None else blocks + term
        assert blocks is not None
        # stored: the sum over blocks would otherwise take the scales into its own kernel, and reading one half per
        # block touches every cache line of the weights a second time
        rows = blocks.contiguous().reshape(self.shape[0], -1).sum(-1)
        return rows.reshape(*x.shape[:-1], self.shape[0])

    def _linear_grouped(self, x: Tensor) -> Tensor:
        """`linear_int8` over rows in groups of 8: one kernel after x's, each block's products with 8 rows a vector."""
        assert self.gt.group_terms is not None
        block = self.gt.block_elems
        xw, xsums, amax, xsum = quantize_words(x.reshape(-1, x.shape[-1]), block, self.gt.group_sums)
        if xw.shape[0] != 1:
            raise ValueError(f"linear_int8: x must be one row (a decode step), got shape {x.shape}")
        blocks = (1, self._blocks[1], -1)
        terms = self.gt.group_terms(self.view, xw.reshape(blocks), xsums.reshape(blocks), amax, xsum.reshape(blocks))
        rows = terms.sum(1).reshape(self.shape[0])
        return rows.reshape(*x.shape[:-1], self.shape[0])

    def _linear_dp4a_terms(self, x: Tensor) -> Tensor:
        """`linear_int8` through DP4A words and integer sub-block scales (`word_terms`): one kernel after x's, the
        scaled lanes of every block summed per row."""
        assert self.gt.word_terms is not None
        block = self.gt.block_elems
        xw, xsums, amax, xsum = quantize_words(x.reshape(-1, x.shape[-1]), block)
        if xw.shape[0] != 1:
            raise ValueError(f"linear_int8: x must be one row (a decode step), got shape {x.shape}")
        per = block // 32  # blocks of 32 of x per block of the type
        xw, xsums, xsum = xw.reshape(1, -1, per, 8), xsums.reshape(1, -1, per, 8), xsum.reshape(1, -1, per)
        terms, scale, mins, bias = self.gt.word_terms(self.view, xw, xsums)
        shape = (self.shape[0], self._blocks[1], scale.shape[-1])
        top = max(f for pieces, _ in terms for _, f, _ in pieces)  # the factor every term's sum is brought to
        sums = []
        for pieces, iscale in terms:
            acc, factor = None, 0
            for words, f, xp in pieces:
                if acc is not None and f != factor:
                    acc = acc * (f // factor)
                if words is None:  # x's code sums times the bias, multiplied after the broadcast
                    acc = xp.expand(shape) * bias if acc is None else acc + xp.expand(shape) * bias
                else:
                    zero = Tensor.zeros(*shape, dtype=dtypes.int32, device=x.device)
                    acc = dp4a(words, xp, zero if acc is None else acc, LANES)
                factor = f
            assert acc is not None
            up = top // factor
            if iscale is not None:  # (the scalar product first: one vector multiply)
                acc = acc * (iscale * up if up != 1 else iscale)
            elif up != 1:
                acc = acc * up
            sums.append(acc)
        # summed as a tree: a chain of dependent vector adds per super-block is a K-quant kernel's bound otherwise
        factors = scale * amax.reshape(1, -1, 1).expand(shape) * (1 / (127 * top))  # equal in every lane: scalar
        lanes = _tree_sum(sums).cast(dtypes.float32) * factors
        if mins is not None:  # each min times x's exact block sum, a share in each lane
            coef, ms = mins
            lanes = lanes + coef * _tree_sum([m * xsum[..., j : j + 1].expand(shape) for j, m in enumerate(ms)]) * (
                1 / shape[-1]
            )
        rows = lanes.reshape(self.shape[0], -1).sum(-1)
        return rows.reshape(*x.shape[:-1], self.shape[0])

    @staticmethod
    def load(
        gt: GGMLType, data: mmap.mmap | bytes, offset: int, shape: tuple[int, ...], device: str
    ) -> QuantizedMatrix:
        """The blocks at `offset` of data as they are, or where the device has DP4A, copied into the type's layout for
        it: a 2-D matrix of rows in groups of 8 into rows in groups (`_group_rows`), else a padded layout (zeros
        inserted at the type's gap_at: after Q4_0's and Q8_0's 2-byte scale, at the end of Q6_K's super-block)."""
        dp4a_device = bool(Device[device].renderer.dp4a_builtins)
        if gt.grouped is not None and dp4a_device and len(shape) == 2 and shape[0] % GROUP == 0:
            plain = QuantizedMatrix(gt, data, offset, shape, device)
            return QuantizedMatrix(gt.grouped, _group_rows(gt, plain), 0, shape, device, plain)
        if gt.padded is None or not dp4a_device:
            return QuantizedMatrix(gt, data, offset, shape, device)
        nbytes = prod(shape) // gt.block_elems * gt.block_bytes
        blocks = _raw_tensor(data, offset, nbytes, dtypes.uint8, "CPU").reshape(-1, gt.block_bytes)
        gap = Tensor.zeros(blocks.shape[0], gt.padded.block_bytes - gt.block_bytes, dtype=dtypes.uint8)
        at = gt.gap_at
        joined = blocks[:, :at].cat(gap, *([blocks[:, at:]] if at < gt.block_bytes else []), dim=1)
        padded = joined._raw_data().tobytes()
        return QuantizedMatrix(gt.padded, padded, 0, shape, device)

    @staticmethod
    def stack(mats: list[QuantizedMatrix]) -> QuantizedMatrix:
        """The rows of 2-D matrices of one type and width, one below the other, in one buffer of packed blocks."""
        first = mats[0]
        if any(m.gt != first.gt or len(m.shape) != 2 or m.shape[1] != first.shape[1] for m in mats):
            raise ValueError(f"cannot stack quantized matrices {[(m.gt.name, m.shape) for m in mats]}")
        raw = b"".join(memoryview(m.data)[m.offset : m.offset + m.nbytes] for m in mats)
        plain = QuantizedMatrix.stack([m.plain for m in mats if m.plain is not None]) if first.plain else None
        shape = (sum(m.shape[0] for m in mats), first.shape[1])
        return QuantizedMatrix(first.gt, raw, 0, shape, first.device, plain)


def gguf_quantized(mm: mmap.mmap | bytes, info: GGUFTensorInfo, device: str | None = None) -> QuantizedMatrix | None:
    """A quantized tensor's packed blocks, for a matmul that decodes them in its loop (None for a tensor stored as a
    plain dtype or as super-blocks with no packed matmul, which load as float32)."""
    if info.ggml_type.parts is None and info.ggml_type.int_parts is None:
        return None
    return QuantizedMatrix.load(info.ggml_type, mm, info.offset, info.shape, Device.canonicalize(device))


def gguf_tensor(mm: mmap.mmap | bytes, info: GGUFTensorInfo, device: str | None = None) -> Tensor:
    """The tensor as float32 (lazy: a quantized tensor is its dequantization graph over the raw block bytes)."""
    device = Device.canonicalize(device)
    gt = info.ggml_type
    if gt.dtype is None:
        return QuantizedMatrix(gt, mm, info.offset, info.shape, device).dequantize()
    return _raw_tensor(mm, info.offset, prod(info.shape), gt.dtype, device).cast(dtypes.float32).reshape(info.shape)


def gguf_load(path: str | os.PathLike | Tensor, device: str | None = None) -> tuple[dict[str, Any], dict[str, Tensor]]:
    """Metadata and float32 tensors (lazy, pointing into a memory map of the file) of a GGUF file."""
    meta, infos, mm = gguf_read_header(path)
    return meta, {info.name: gguf_tensor(mm, info, device) for info in infos}
