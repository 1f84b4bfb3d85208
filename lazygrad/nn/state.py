"""State dicts (dotted names, as torch) and the safetensors file format, written from its spec.

A safetensors file is: 8 bytes little-endian header length N, N bytes of JSON {name: {dtype, shape, data_offsets:
[begin, end]}, optional "__metadata__": {str: str}}, then the raw little-endian data, offsets relative to its start.
"""

from __future__ import annotations

import ctypes
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


def load_state_dict(model: Any, state_dict: dict[str, Tensor], strict: bool = True) -> None:
    """Copy state_dict into the model's tensors (in place, realized together). Missing, unexpected (strict only) or
    mis-shaped keys are one error naming all of them."""
    own = get_state_dict(model)
    missing = sorted(k for k in own if k not in state_dict)
    unexpected = sorted(k for k in state_dict if k not in own)
    shapes = [
        f"{k}: model {own[k].shape}, state dict {state_dict[k].shape}"
        for k in own
        if k in state_dict and own[k].shape != state_dict[k].shape
    ]
    problems = []
    if strict and missing:
        problems.append(f"missing keys: {', '.join(missing)}")
    if strict and unexpected:
        problems.append(f"unexpected keys: {', '.join(unexpected)}")
    if shapes:
        problems.append(f"shape mismatches: {'; '.join(shapes)}")
    if problems:
        raise ValueError(f"load_state_dict into {type(model).__name__}: " + " | ".join(problems))
    targets = []
    for k, t in own.items():
        if k not in state_dict:
            continue
        v = state_dict[k]
        if v.device != t.device:
            v = Tensor(v.data(), dtype=v.dtype, device=t.device).reshape(v.shape)
        v = v.cast(t.dtype) if v.dtype != t.dtype else v
        # a copy, as torch's: a tensor not yet in memory gets a buffer of its own rather than sharing the source's
        if not t.uop.is_realized:
            v = Tensor.empty(t.shape, dtype=t.dtype, device=t.device).assign(v)
        targets.append(t.assign(v))
    if targets:
        Tensor.realize(*targets)


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
    with open(path, "rb") as f:
        head = f.read(8)
        size = os.fstat(f.fileno()).st_size
        if len(head) < 8:
            raise ValueError(f"{path}: not a safetensors file (only {len(head)} bytes, the header length needs 8)")
        (n,) = struct.unpack("<Q", head)
        if n > size - 8:
            raise ValueError(f"{path}: header length {n} runs past the end of the file ({size} bytes); truncated?")
        try:
            header = json.loads(f.read(n))
        except (UnicodeDecodeError, json.JSONDecodeError) as e:
            raise ValueError(f"{path}: the safetensors header is not valid JSON ({e})") from None
    if not isinstance(header, dict):
        raise ValueError(f"{path}: the safetensors header must be a JSON object")
    data_size = size - 8 - n
    for name, info in header.items():
        if name == "__metadata__":
            continue
        _check_entry(path, name, info, data_size)
    return header, 8 + n


def _check_entry(path: Any, name: str, info: Any, data_size: int) -> None:
    if not isinstance(info, dict) or not {"dtype", "shape", "data_offsets"} <= info.keys():
        raise ValueError(f"{path}: entry {name!r} needs dtype, shape and data_offsets, got {info!r}")
    if info["dtype"] not in SAFETENSORS_DTYPES:
        raise ValueError(f"{path}: entry {name!r} has unsupported dtype {info['dtype']!r}")
    begin, end = info["data_offsets"]
    nbytes = prod(info["shape"]) * SAFETENSORS_DTYPES[info["dtype"]].itemsize
    if not 0 <= begin <= end or end - begin != nbytes:
        raise ValueError(
            f"{path}: entry {name!r} has data_offsets {[begin, end]} for {nbytes} bytes of "
            f"{info['dtype']} {info['shape']}"
        )
    if end > data_size:
        raise ValueError(
            f"{path}: entry {name!r} ends at byte {end} of the data, which has only {data_size}; truncated?"
        )


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
            buf = Buffer("CPU", prod(shape), dt, external=mm, external_ptr=base + begin)
        else:
            buf = Buffer(device, prod(shape), dt)
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
