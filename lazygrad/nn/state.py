"""State dicts (dotted names, as torch) and the safetensors file format, written from its spec.

A safetensors file is: 8 bytes little-endian header length N, N bytes of JSON {name: {dtype, shape, data_offsets:
[begin, end]}, optional "__metadata__": {str: str}}, then the raw little-endian data, offsets relative to its start.
Reading checks every field before any tensor is made. Tensors may be stored in any order and with gaps between them
(nothing is read from a gap), but no two may share bytes: the format has no aliasing, so an overlap is a broken file.
"""

from __future__ import annotations

import ctypes
import functools
import json
import mmap
import os
import struct
from typing import Any

from lazygrad.device import Buffer, Device
from lazygrad.dtype import DType, dtypes
from lazygrad.helpers import prod
from lazygrad.tensor import Tensor
from lazygrad.uop.ops import UOp

SAFETENSORS_DTYPES: dict[str, DType] = {
    "BOOL": dtypes.bool,
    "U8": dtypes.uint8,
    "I8": dtypes.int8,
    "U16": dtypes.uint16,
    "I16": dtypes.int16,
    "U32": dtypes.uint32,
    "I32": dtypes.int32,
    "U64": dtypes.uint64,
    "I64": dtypes.int64,
    "F16": dtypes.float16,
    "BF16": dtypes.bfloat16,
    "F32": dtypes.float32,
    "F64": dtypes.float64,
}
_DTYPE_NAMES = {v: k for k, v in SAFETENSORS_DTYPES.items()}
SAFETENSORS_MAX_HEADER = 100_000_000  # the safetensors library's own limit on the JSON header


class LoadError(ValueError):
    """A model file that cannot be read: the message names the file, the tensor and what is wrong with it."""


# *** walking objects for tensors ***


def get_state_dict(obj: Any, prefix: str = "") -> dict[str, Tensor]:
    """Every Tensor reachable from obj through attributes, lists, tuples and dicts, by dotted path ("fc.0.weight")."""
    out: dict[str, Tensor] = {}
    _walk(obj, prefix, out, set())
    return out


def _walk(obj: Any, prefix: str, out: dict[str, Tensor], seen: set[int]) -> None:
    if isinstance(obj, Tensor):
        out[prefix.rstrip(".")] = obj
        return
    if id(obj) in seen:
        return
    seen.add(id(obj))
    if isinstance(obj, (list, tuple)):
        for i, x in enumerate(obj):
            _walk(x, f"{prefix}{i}.", out, seen)
    elif isinstance(obj, dict):
        for k, v in obj.items():
            _walk(v, f"{prefix}{k}.", out, seen)
    elif hasattr(obj, "__dict__") and not isinstance(obj, type):
        _walk(vars(obj), prefix, out, seen)


def get_parameters(obj: Any) -> list[Tensor]:
    """Every distinct Tensor reachable from obj (parameters and buffers such as running statistics)."""
    return list({id(t): t for t in get_state_dict(obj).values()}.values())


def load_state_dict(
    model: Any,
    state_dict: dict[str, Tensor],
    strict: bool = True,
    verbose: bool = False,
    consume: bool = False,
    realize: bool = True,
) -> list[Tensor]:
    """Copy state_dict into the model's tensors (in place, realized together unless realize=False) and return them.
    Missing, unexpected (strict only) or mis-shaped keys are one error naming all of them; a shape () and a shape (1,)
    fit each other, and torch's `num_batches_tracked` counters are skipped where the model keeps none (a BatchNorm
    without running statistics), as tinygrad's. consume=True deletes each key from state_dict once copied (tinygrad's:
    the source's memory can go while a big model loads). verbose is accepted for tinygrad's signature."""
    own = get_state_dict(model)
    missing = sorted(k for k in own if k not in state_dict)
    unexpected = sorted(k for k in state_dict if k not in own and not k.endswith("num_batches_tracked"))
    shapes = [
        f"Shape mismatch in layer `{k}`: Expected shape {own[k].shape}, but found {state_dict[k].shape} in state dict."
        for k in own
        if k in state_dict and own[k].shape != state_dict[k].shape and {own[k].shape, state_dict[k].shape} != {(), (1,)}
    ]
    problems = []
    if strict and missing:
        problems.append(f"missing keys: {', '.join(missing)}")
    if strict and unexpected:
        problems.append(f"unexpected keys: {', '.join(unexpected)}")
    if shapes:
        problems.append(" ".join(shapes))
    if problems:
        raise ValueError(f"load_state_dict into {type(model).__name__}: " + " | ".join(problems))
    targets = []
    for k, t in own.items():
        if k not in state_dict:
            continue
        v = state_dict.pop(k) if consume else state_dict[k]
        if v.device != t.device:
            v = Tensor(v.data(), dtype=v.dtype, device=t.device).reshape(v.shape)
        v = v.cast(t.dtype) if v.dtype != t.dtype else v
        v = v.reshape(t.shape) if v.shape != t.shape else v
        # a copy, as torch's: a tensor not yet in memory gets a buffer of its own rather than sharing the source's
        if not t.uop.is_realized:
            v = Tensor.empty(t.shape, dtype=t.dtype, device=t.device).assign(v)
        targets.append(t.assign(v))
    if targets and realize:
        Tensor.realize(*targets)
    return targets


# *** safetensors ***


def safe_save(state_dict: dict[str, Tensor], path: str | os.PathLike, metadata: dict[str, str] | None = None) -> None:
    header: dict[str, Any] = {}
    if metadata:
        header["__metadata__"] = {str(k): str(v) for k, v in metadata.items()}
    offset = 0
    for name, t in state_dict.items():
        if t.dtype not in _DTYPE_NAMES:
            raise TypeError(f"safe_save: {name} has dtype {t.dtype}, which safetensors cannot store")
        offsets = [offset, offset + t.nbytes]
        header[name] = {"dtype": _DTYPE_NAMES[t.dtype], "shape": list(t.shape), "data_offsets": offsets}
        offset += t.nbytes
    raw = json.dumps(header, separators=(",", ":")).encode()
    raw += b" " * (-len(raw) % 8)  # the spec allows trailing spaces; 8-byte alignment keeps the data aligned
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(raw)))
        f.write(raw)
        for t in state_dict.values():
            if t.numel():
                f.write(t.data())


def safe_load_metadata(path: str | os.PathLike) -> tuple[dict[str, Any], int]:
    """The parsed JSON header of a safetensors file and the file offset where the data starts."""
    path = os.fspath(path)
    with open(path, "rb") as f:
        head = f.read(8)
        size = os.fstat(f.fileno()).st_size
        if len(head) < 8:
            raise LoadError(f"{path}: not a safetensors file (only {len(head)} bytes, the header length needs 8)")
        (n,) = struct.unpack("<Q", head)
        if n > size - 8:
            raise LoadError(f"{path}: header length {n} runs past the end of the file ({size} bytes); truncated?")
        if n > SAFETENSORS_MAX_HEADER:
            raise LoadError(f"{path}: header length {n} is over the format's limit of {SAFETENSORS_MAX_HEADER}")
        raw = f.read(n)
    try:
        header = json.loads(raw, object_pairs_hook=functools.partial(_unique_keys, path))
    except RecursionError:
        raise LoadError(f"{path}: the safetensors header nests JSON too deeply to be a header") from None
    except LoadError:
        raise
    except ValueError as e:  # not UTF-8, not JSON, an integer too long to convert
        raise LoadError(f"{path}: the safetensors header is not valid JSON ({e})") from None
    if not isinstance(header, dict):
        raise LoadError(f"{path}: the safetensors header must be a JSON object, not {type(header).__name__}")
    meta = header.get("__metadata__", {})
    if not isinstance(meta, dict) or not all(isinstance(v, str) for v in meta.values()):
        raise LoadError(f"{path}: __metadata__ must map names to strings, got {meta!r:.200}")
    data_size = size - 8 - n
    spans = sorted(
        (*_check_entry(path, name, info, data_size), name) for name, info in header.items() if name != "__metadata__"
    )
    prev: tuple[int, int, str] | None = None
    for span in spans:
        if span[0] == span[1]:
            continue  # an empty tensor holds no bytes to share
        if prev is not None and span[0] < prev[1]:
            raise LoadError(
                f"{path}: tensors {prev[2]!r} (data_offsets {list(prev[:2])}) and {span[2]!r} "
                f"(data_offsets {list(span[:2])}) overlap"
            )
        prev = span
    return header, 8 + n


def _unique_keys(path: str, pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """A JSON object whose every name is new: json.loads would keep the last of two tensors of the same name."""
    seen: set[str] = set()
    for k, _ in pairs:
        if k in seen:
            raise LoadError(f"{path}: the safetensors header names {k!r:.200} twice")
        seen.add(k)
    return dict(pairs)


def _is_int(x: Any) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def _check_entry(path: str, name: str, info: Any, data_size: int) -> tuple[int, int]:
    """(begin, end) of a header entry, relative to the data, once every field of it is checked."""
    where = f"{path}: tensor {name!r}"
    if not isinstance(info, dict):
        raise LoadError(f"{where}: expected an object with dtype, shape and data_offsets, got {info!r:.200}")
    if missing := [k for k in ("dtype", "shape", "data_offsets") if k not in info]:
        raise LoadError(f"{where}: no {', '.join(missing)} (an entry needs dtype, shape and data_offsets)")
    dtype, shape, offsets = info["dtype"], info["shape"], info["data_offsets"]
    if not isinstance(dtype, str) or dtype not in SAFETENSORS_DTYPES:
        raise LoadError(f"{where}: unknown dtype {dtype!r:.100} (known: {', '.join(SAFETENSORS_DTYPES)})")
    if not isinstance(shape, list) or not all(_is_int(d) and d >= 0 for d in shape):
        raise LoadError(f"{where}: shape {shape!r:.200} is not a list of non-negative integers")
    if not isinstance(offsets, list) or len(offsets) != 2 or not all(_is_int(o) for o in offsets):
        raise LoadError(f"{where}: data_offsets {offsets!r:.200} must be two integers [begin, end]")
    begin, end = offsets
    if not 0 <= begin <= end:
        raise LoadError(f"{where}: data_offsets {offsets} must satisfy 0 <= begin <= end")
    dt = SAFETENSORS_DTYPES[dtype]
    nbytes = prod(shape) * dt.itemsize
    if end - begin != nbytes:
        raise LoadError(
            f"{where}: data_offsets {offsets} hold {end - begin} bytes, shape {tuple(shape)} {dt.name} needs {nbytes}"
        )
    if end > data_size:
        raise LoadError(f"{where}: data_offsets {offsets} run past the {data_size} bytes of data; truncated?")
    return begin, end


def safe_load(path: str | os.PathLike, device: str | None = None) -> dict[str, Tensor]:
    """Tensors of a safetensors file. On the CPU they point into a memory map of the file, read only when used."""
    header, start = safe_load_metadata(path)
    entries = {k: v for k, v in header.items() if k != "__metadata__"}
    device = Device.canonicalize(device)
    has_data = any(v["data_offsets"][1] > v["data_offsets"][0] for v in entries.values())
    mm = _map(path) if device == "CPU" and has_data else None
    base = ctypes.addressof(ctypes.c_char.from_buffer(mm)) if mm is not None else 0
    out = {}
    for name, info in entries.items():
        dt, shape = SAFETENSORS_DTYPES[info["dtype"]], tuple(info["shape"])
        begin, end = (start + o for o in info["data_offsets"])
        if mm is not None and end > begin and (base + begin) % dt.itemsize == 0:
            buf = Buffer("CPU", prod(shape), dt, external=mm, external_ptr=base + begin, shape=shape)
        else:
            buf = Buffer(device, prod(shape), dt, shape=shape)
            if end > begin:
                with open(path, "rb") as f:
                    f.seek(begin)
                    buf.copyin(memoryview(f.read(end - begin)))
        out[name] = Tensor(UOp.buffer_view(buf, shape))
    return out


def _map(path: str | os.PathLike) -> mmap.mmap:
    with open(path, "rb") as f:
        # copy-on-write: writable (so ctypes can take its address) yet an in-place update never reaches the file
        return mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_COPY)
