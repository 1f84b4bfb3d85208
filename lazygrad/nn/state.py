"""State dicts (dotted names, as torch) and the safetensors file format, written from its spec.

A safetensors file is: 8 bytes little-endian header length N, N bytes of JSON {name: {dtype, shape, data_offsets:
[begin, end]}, optional "__metadata__": {str: str}}, then the raw little-endian data, offsets relative to its start.
Reading checks every field before any tensor is made. Tensors may be stored in any order and with gaps between them
(nothing is read from a gap), but no two may share bytes: the format has no aliasing, so an overlap is a broken file.
"""

from __future__ import annotations

import collections
import ctypes
import functools
import itertools
import json
import mmap
import os
import pickle
import struct
import zipfile
from typing import IO, Any, Callable

from lazygrad.device import Buffer, Device
from lazygrad.dtype import DType, dtypes
from lazygrad.helpers import prod
from lazygrad.tensor import Tensor
from lazygrad.uop.ops import Ops, UOp

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


def get_state_dict(obj: Any, prefix: str = "", tensor_type: type = Tensor) -> dict[str, Tensor]:
    """Every Tensor reachable from obj through attributes, lists, tuples and dicts, by dotted path ("fc.0.weight").
    tensor_type (tinygrad's) must be Tensor: the walk finds tensors only."""
    if tensor_type is not Tensor:
        raise TypeError(f"get_state_dict finds Tensors, not {tensor_type.__name__}")
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
            v = Tensor(v._raw_data(), dtype=v.dtype, device=t.device).reshape(v.shape)
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
                f.write(t._raw_data())


def file_path(source: str | os.PathLike | Tensor) -> str:
    """The file a loader reads: a path, or (as tinygrad's loaders take) a DISK tensor of a whole file, such as
    `Tensor(pathlib.Path(...))` or `Tensor.from_url(...)`."""
    if not isinstance(source, Tensor):
        return os.fspath(source)
    if not source._on_disk:
        raise TypeError(f"a loader reads a file: got a tensor on {source.device}; pass its path or a DISK tensor")
    path = source.device.split(":", 1)[1]
    if source.uop.op is not Ops.BUFFER or source.dtype != dtypes.uint8 or source.numel() != os.path.getsize(path):
        raise TypeError(f"a loader reads a whole file as it is: {path} is read through a view or cast; pass the path")
    return path


def safe_load_metadata(path: str | os.PathLike | Tensor) -> tuple[dict[str, Any], int]:
    """The parsed JSON header of a safetensors file and the file offset where the data starts."""
    path = file_path(path)
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


def safe_load(path: str | os.PathLike | Tensor, device: str | None = None) -> dict[str, Tensor]:
    """Tensors of a safetensors file. On the CPU they point into a memory map of the file, read only when used."""
    path = file_path(path)
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
        out[name] = _file_tensor(device, dt, shape, mm, base + begin, functools.partial(_read, path, begin, end))
    return out


def _read(path: str | os.PathLike, begin: int, end: int) -> bytes:
    with open(path, "rb") as f:
        f.seek(begin)
        return f.read(end - begin)


def _file_tensor(
    device: str, dtype: DType, shape: tuple[int, ...], mm: mmap.mmap | None, address: int, read: Callable[[], Any]
) -> Tensor:
    """A tensor of bytes of a model file: on the CPU over the file's memory map at `address` (no copy, read when
    used) where that is aligned for the dtype, else a buffer of `device` filled with read()'s bytes."""
    n = prod(shape)
    if mm is not None and n and address % dtype.itemsize == 0:
        buf = Buffer("CPU", n, dtype, external=mm, external_ptr=address, shape=shape)
    else:
        buf = Buffer(device, n, dtype, shape=shape)
        if n:
            buf.copyin(memoryview(read()))
    return Tensor(UOp.buffer_view(buf, shape))


def _map(path: str | os.PathLike) -> mmap.mmap:
    with open(path, "rb") as f:
        # copy-on-write: writable (so ctypes can take its address) yet an in-place update never reaches the file
        return mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_COPY)


# *** torch.save files ***

# the storage classes a torch.save pickle names (torch.FloatStorage, ...) and torch's dtype objects (torch.uint16,
# named by the newer _rebuild_tensor_v3 beside an untyped storage)
_TORCH_STORAGES: dict[str, DType] = {
    "FloatStorage": dtypes.float32,
    "DoubleStorage": dtypes.float64,
    "HalfStorage": dtypes.float16,
    "BFloat16Storage": dtypes.bfloat16,
    "LongStorage": dtypes.int64,
    "IntStorage": dtypes.int32,
    "ShortStorage": dtypes.int16,
    "CharStorage": dtypes.int8,
    "ByteStorage": dtypes.uint8,
    "BoolStorage": dtypes.bool,
}
_TORCH_DTYPES: dict[str, DType] = {
    **{n: getattr(dtypes, n) for n in ("float32", "float64", "float16", "bfloat16", "bool")},
    **{n: getattr(dtypes, n) for n in ("int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64")},
    "float": dtypes.float32,
    "double": dtypes.float64,
    "half": dtypes.float16,
    "long": dtypes.int64,
    "int": dtypes.int32,
    "short": dtypes.int16,
}
_LEGACY_MAGIC = 0x1950A86A20F9469CFC6C  # the first pickle of a torch.save file from before torch 1.6


class _UntypedStorage:
    """torch.storage.UntypedStorage as a pickle names it: bytes whose dtype the tensor rebuilt over them gives."""


class _Storage:
    """One storage of the file: where its bytes are (a memory map of the file, or bytes read), its dtype (None for an
    untyped storage) and the 1-d tensor over it, made once for all the views of it."""

    def __init__(self, name: str, dtype: DType | None, device: str) -> None:
        self.name, self.dtype, self.device = name, dtype, device
        self.data: Any = None  # a memoryview of its bytes
        self.mapped: tuple[mmap.mmap, int] | None = None  # where they are the file's memory map: (map, address)
        self.flat: Tensor | None = None

    def as_flat(self, dtype: DType) -> Tensor:
        if self.flat is None:
            n = len(self.data) // dtype.itemsize
            mm, address = self.mapped or (None, 0)
            self.flat = _file_tensor(self.device, dtype, (n,), mm, address, lambda: self.data[: n * dtype.itemsize])
        return self.flat


class _Rebuild:
    """A tensor of the file not made yet: a legacy file's bytes come after the pickle that names its tensors."""

    def __init__(self, *args: Any) -> None:  # _rebuild_tensor's
        self.args = args


def _rebuild_tensor(storage: _Storage, offset: int, size: tuple, stride: tuple, *rest: Any) -> Tensor:
    """torch._utils._rebuild_tensor_v2 / v3: the view (offset, size, stride) of the storage. A layout that is a
    permutation of a packed block (contiguous, transposed, a slice along the first dims; dims of size 1 and repeated
    dims of stride 0 anywhere) is a view of the storage's tensor; a layout with gaps or overlaps between elements is
    gathered from the file's bytes first."""
    dtype = next((a for a in rest if isinstance(a, DType)), None) or storage.dtype
    if dtype is None:
        raise LoadError(f"torch file: storage {storage.name} is untyped and its tensor names no dtype")
    size, stride = tuple(size), tuple(stride)
    if prod(size) == 0:
        return Tensor.zeros(size, dtype=dtype, device=storage.device)
    dims = [d for d in range(len(size)) if size[d] > 1 and stride[d] != 0]
    order = sorted(dims, key=lambda d: -stride[d])
    packed, expected = True, 1
    for d in reversed(order):
        packed &= stride[d] == expected
        expected *= size[d]
    if packed:
        t = storage.as_flat(dtype)[offset : offset + expected].reshape([size[d] for d in order])
        t = t.permute(sorted(range(len(order)), key=lambda i: order[i]))  # the file's dim order
        t = t.reshape([size[d] if d in dims else 1 for d in range(len(size))])
        return t.expand(size).contiguous() if t.shape != size else t
    item, raw = dtype.itemsize, storage.data
    # a run of the last dim at a time where it is contiguous (a slice of columns), else element by element
    run = size[-1] if stride[-1] == 1 else 1
    outer = [range(n) for n in (size[:-1] if run > 1 else size)]
    out = bytearray()
    for idx in itertools.product(*outer):
        at = (offset + sum(i * s for i, s in zip(idx, stride))) * item
        out += raw[at : at + run * item]
    return Tensor(bytes(out), device=storage.device).bitcast(dtype).reshape(size)


def _unpickler(path: str, file: Any, persistent_load: Callable[[tuple], _Storage], rebuild: Callable) -> Any:
    """A pickle reader of torch.save's data that makes only plain data and tensors (as torch's weights_only=True)."""

    class Unpickler(pickle.Unpickler):
        def find_class(self, module: str, name: str) -> Any:
            if module == "collections" and name == "OrderedDict":
                return collections.OrderedDict
            if module == "torch._utils" and name in ("_rebuild_tensor_v2", "_rebuild_tensor_v3"):
                return rebuild
            if module == "torch._utils" and name == "_rebuild_parameter":
                return lambda data, requires_grad, hooks, *_: data
            if module == "torch" and name in _TORCH_STORAGES:
                return _TORCH_STORAGES[name]
            if module == "torch" and name in _TORCH_DTYPES:
                return _TORCH_DTYPES[name]
            if module == "torch.storage" and name == "UntypedStorage":
                return _UntypedStorage
            raise LoadError(f"{path}: the file names {module}.{name}, which torch_load does not unpickle")

        def persistent_load(self, pid: Any) -> Any:
            return persistent_load(pid)

    return Unpickler(file)


def _storage_dtype(path: str, kind: Any) -> DType | None:
    if isinstance(kind, DType):
        return kind
    if kind is _UntypedStorage:
        return None
    raise LoadError(f"{path}: unknown storage type {kind!r}")


def torch_load(path: str | os.PathLike | Tensor, device: str | None = None) -> Any:
    """The object a `torch.save` file holds (usually a state dict: names to tensors), read without torch (tinygrad's
    torch_load). Reads the zip format (torch >= 1.6) and the legacy one before it; only plain data and tensors are
    unpickled, as torch's `weights_only=True`: anything else is a LoadError naming it. On the CPU a zip file's
    tensors point into a memory map of the file (copy-on-write), read only when used."""
    path = file_path(path)
    device = Device.canonicalize(device)
    storages: dict[str, _Storage] = {}
    if zipfile.is_zipfile(path):
        with zipfile.ZipFile(path) as zf:
            pkl = [n for n in zf.namelist() if n == "data.pkl" or n.endswith("/data.pkl")]
            if not pkl:
                raise LoadError(f"{path}: a zip archive without data.pkl is not a torch.save file")
            prefix = pkl[0][: -len("data.pkl")]
            infos = {i.filename: i for i in zf.infolist()}
            mm = _map(path) if device == "CPU" else None
            base = ctypes.addressof(ctypes.c_char.from_buffer(mm)) if mm is not None and len(mm) else 0

            def zip_storage(pid: tuple) -> _Storage:
                _, kind, key = pid[:3]
                if key not in storages:
                    if (info := infos.get(f"{prefix}data/{key}")) is None:
                        raise LoadError(f"{path}: storage {key} is missing from the archive")
                    st = storages[key] = _Storage(key, _storage_dtype(path, kind), device)
                    if mm is not None and info.compress_type == zipfile.ZIP_STORED and info.file_size:
                        # the local header: 30 bytes, then the name and the extra field, whose lengths it gives
                        name_len, extra_len = struct.unpack(
                            "<HH", mm[info.header_offset + 26 : info.header_offset + 30]
                        )
                        start = info.header_offset + 30 + name_len + extra_len
                        st.data = memoryview(mm)[start : start + info.file_size]
                        st.mapped = (mm, base + start)
                    else:
                        st.data = memoryview(zf.read(info))
                return storages[key]

            with zf.open(pkl[0]) as f:
                return _unpickler(path, f, zip_storage, _rebuild_tensor).load()
    with open(path, "rb") as f:
        try:
            magic = pickle.load(f)
        except Exception as e:
            raise LoadError(f"{path}: not a torch.save file ({type(e).__name__}: {e})") from None
        if magic != _LEGACY_MAGIC:
            raise LoadError(f"{path}: not a torch.save file (neither a zip archive nor the legacy format)")
        pickle.load(f), pickle.load(f)  # the protocol version and the system info

        def legacy_storage(pid: tuple) -> _Storage:
            _, kind, key = pid[:3]
            if key not in storages:
                storages[key] = _Storage(key, _storage_dtype(path, kind), device)
            return storages[key]

        result = _unpickler(path, f, legacy_storage, _Rebuild).load()
        for key in pickle.load(f):  # then each storage: its element count, then its bytes
            (count,) = struct.unpack("<q", f.read(8))
            st = storages[key]
            if st.dtype is None:
                raise LoadError(f"{path}: storage {key} of the legacy file is untyped")
            st.data = memoryview(f.read(count * st.dtype.itemsize))
    return _rebuilt(result)


def _rebuilt(obj: Any) -> Any:
    """obj with its _Rebuild placeholders made into tensors (containers rebuilt as their own type)."""
    if isinstance(obj, _Rebuild):
        return _rebuild_tensor(*obj.args)
    if isinstance(obj, dict):
        return type(obj)((k, _rebuilt(v)) for k, v in obj.items())
    if isinstance(obj, (list, tuple)):
        return type(obj)(_rebuilt(v) for v in obj)
    return obj


# *** writing torch.save files ***


class _Global:
    """A module-level name (torch._utils._rebuild_tensor_v2, torch.FloatStorage) pickled by name, without torch."""

    def __init__(self, module: str, name: str):
        self.module, self.name = module, name

    def __call__(self, *args: Any) -> Any:  # (pickle asks a reduce's function to be callable; it is never called)
        raise TypeError(f"{self.module}.{self.name} is a name for pickle only")


class _SavedTensor:
    def __init__(self, key: str, t: Tensor):
        self.key, self.t = key, t

    def __reduce__(self) -> Any:
        shape = tuple(self.t.shape)
        strides = tuple(prod(shape[i + 1 :]) for i in range(len(shape)))
        storage = ("storage", self.key, self.t)
        return _Global("torch._utils", "_rebuild_tensor_v2"), (
            storage,
            0,
            shape,
            strides,
            False,
            collections.OrderedDict(),
        )


class _TorchPickler(pickle._Pickler):  # type: ignore[misc]  # the Python pickler: its save() can be extended
    def __init__(self, f: Any, kinds: dict[DType, str]):
        super().__init__(f, protocol=2)
        self.kinds = kinds

    def persistent_id(self, obj: Any) -> Any:
        if isinstance(obj, tuple) and len(obj) == 3 and obj[0] == "storage" and isinstance(obj[2], Tensor):
            t = obj[2]
            return ("storage", _Global("torch", self.kinds[t.dtype]), obj[1], "cpu", t.numel())
        return None

    def save(self, obj: Any, save_persistent_id: bool = True) -> None:
        if isinstance(obj, _Global):
            self.write(pickle.GLOBAL + f"{obj.module}\n{obj.name}\n".encode())
            return
        super().save(obj, save_persistent_id)


def torch_save(obj: Any, path: str | os.PathLike | IO[bytes]) -> None:
    """Write obj (a state dict, or any nesting of dicts, lists, tuples, numbers, strings and tensors) as torch.save's
    zip format, which `torch.load(path)` (weights_only=True too) and `torch_load` read. Tensors are written
    contiguous, from their bytes; no torch is needed."""
    kinds = {dt: name for name, dt in _TORCH_STORAGES.items()}
    tensors: list[Tensor] = []

    def swap(x: Any) -> Any:
        if isinstance(x, Tensor):
            if x.dtype not in kinds:
                raise TypeError(f"torch_save: torch's storage format has no {x.dtype}")
            tensors.append(x)
            return _SavedTensor(str(len(tensors) - 1), x)
        if isinstance(x, dict):
            return type(x)((k, swap(v)) for k, v in x.items())
        if isinstance(x, (list, tuple)):
            return type(x)(swap(v) for v in x)
        return x

    import io

    buf = io.BytesIO()
    _TorchPickler(buf, kinds).dump(swap(obj))
    # (torch's name for the archive's folder where a file object is given)
    name = os.path.splitext(os.path.basename(os.fspath(path)))[0] if isinstance(path, (str, os.PathLike)) else ""
    name = name or "archive"
    with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED) as zf:
        zf.writestr(f"{name}/data.pkl", buf.getvalue())
        zf.writestr(f"{name}/byteorder", "little")
        for i, t in enumerate(tensors):
            zf.writestr(f"{name}/data/{i}", bytes(t.contiguous()._raw_data()) if t.numel() else b"")
        zf.writestr(f"{name}/version", "3\n")
