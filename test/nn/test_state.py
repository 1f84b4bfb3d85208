"""State dicts and safetensors: names as torch's, load_state_dict's checks, files read and written by the
`safetensors` package both ways, memory-mapped loading, and a model round trip with identical outputs."""

from __future__ import annotations

import json
import mmap
import struct
from pathlib import Path

import numpy as np
import pytest
import safetensors.numpy
import safetensors.torch
import torch

from lazygrad import Tensor, dtypes, nn
from lazygrad.nn.state import (
    LoadError,
    get_parameters,
    get_state_dict,
    load_state_dict,
    safe_load,
    safe_load_metadata,
    safe_save,
    torch_load,
)


class Net:
    def __init__(self) -> None:
        self.conv = nn.Conv2d(1, 4, 3, padding=1)
        self.bn = nn.BatchNorm2d(4)
        self.layers = [nn.Linear(4 * 16, 8), nn.Linear(8, 3)]
        self.act = Tensor.relu  # not a tensor: ignored

    def __call__(self, x: Tensor) -> Tensor:
        x = self.bn(self.conv(x)).relu().max_pool2d()
        return x.flatten(1).sequential([self.layers[0], Tensor.relu, self.layers[1]])


class TorchNet(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(1, 4, 3, padding=1)
        self.bn = torch.nn.BatchNorm2d(4)
        self.layers = torch.nn.ModuleList([torch.nn.Linear(4 * 16, 8), torch.nn.Linear(8, 3)])


def test_names_match_torch() -> None:
    assert sorted(get_state_dict(Net())) == sorted(TorchNet().state_dict())
    sd = get_state_dict({"a": [nn.Linear(2, 2)], "b": (Tensor([1.0]),)}, prefix="m.")
    assert sorted(sd) == ["m.a.0.bias", "m.a.0.weight", "m.b.0"]


def test_get_parameters_distinct() -> None:
    lin = nn.Linear(2, 3)
    params = get_parameters([lin, lin, {"again": lin.weight}])
    assert len(params) == 2 and {id(p) for p in params} == {id(lin.weight), id(lin.bias)}


def test_load_state_dict_from_torch_and_outputs_match() -> None:
    ref, net = TorchNet().eval(), Net()
    load_state_dict(net, {k: Tensor(v.numpy().copy()) for k, v in ref.state_dict().items()})
    x = np.random.default_rng(0).standard_normal((2, 1, 8, 8)).astype(np.float32)
    xr = torch.nn.functional.max_pool2d(ref.bn(ref.conv(torch.from_numpy(x))).relu(), 2).flatten(1)
    xr = ref.layers[1](ref.layers[0](xr).relu())
    np.testing.assert_allclose(net(Tensor(x)).numpy(), xr.detach().numpy(), atol=1e-5)


def test_load_state_dict_errors_name_every_key() -> None:
    net = Net()
    sd = get_state_dict(Net())
    del sd["conv.bias"], sd["layers.1.weight"]
    sd["extra.weight"] = Tensor([1.0])
    sd["bn.weight"] = Tensor.ones(5)
    sd["layers.0.bias"] = Tensor.ones(2)
    with pytest.raises(ValueError) as e:
        load_state_dict(net, sd)
    msg = str(e.value)
    for key in ("conv.bias", "layers.1.weight", "extra.weight", "bn.weight", "layers.0.bias", "(4,)", "(5,)"):
        assert key in msg, (key, msg)
    # strict=False skips missing and unexpected keys, but a wrong shape is still an error
    with pytest.raises(ValueError, match="bn.weight"):
        load_state_dict(net, sd, strict=False)
    del sd["bn.weight"], sd["layers.0.bias"]
    before = net.conv.bias.numpy()
    load_state_dict(net, sd, strict=False)
    np.testing.assert_array_equal(net.conv.bias.numpy(), before)
    np.testing.assert_array_equal(net.conv.weight.numpy(), sd["conv.weight"].numpy())


def test_load_state_dict_copies_and_casts() -> None:
    lin = nn.Linear(2, 2)
    src = {"weight": Tensor([[1.0, 2.0], [3.0, 4.0]], dtype=dtypes.float64), "bias": Tensor([0.5, 0.5])}
    load_state_dict(lin, src)
    assert lin.weight.dtype == dtypes.float32 and lin.weight.tolist() == [[1.0, 2.0], [3.0, 4.0]]
    lin.bias.assign(Tensor([9.0, 9.0])).realize()
    assert src["bias"].tolist() == [0.5, 0.5]  # the model holds a copy


DTYPES = ["float32", "float64", "float16", "int8", "uint8", "int16", "int32", "int64", "uint32", "bool"]


def _arrays() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    out = {name: (rng.standard_normal((3, 5)) * 10).astype(name) for name in DTYPES}
    out["scalar"] = np.array(3.5, dtype=np.float32)
    out["empty"] = np.zeros((0, 4), dtype=np.float32)
    out["odd"] = np.arange(7, dtype=np.int8)  # leaves the next tensor unaligned in the file
    out["after_odd"] = np.arange(3, dtype=np.float64)
    return out


def test_safe_save_read_by_safetensors(tmp_path: Path) -> None:
    arrays = _arrays()
    safe_save({k: Tensor(v) for k, v in arrays.items()}, tmp_path / "a.safetensors", metadata={"format": "np"})
    back = safetensors.numpy.load_file(str(tmp_path / "a.safetensors"))
    assert sorted(back) == sorted(arrays)
    for k, v in arrays.items():
        assert back[k].dtype == v.dtype and back[k].shape == v.shape, k
        np.testing.assert_array_equal(back[k], v)
    with safetensors.safe_open(str(tmp_path / "a.safetensors"), "np") as f:
        assert f.metadata() == {"format": "np"}


def test_safe_load_reads_safetensors_files(tmp_path: Path) -> None:
    arrays = _arrays()
    safetensors.numpy.save_file(arrays, str(tmp_path / "b.safetensors"), metadata={"k": "v"})
    loaded = safe_load(tmp_path / "b.safetensors")
    assert sorted(loaded) == sorted(arrays)
    for k, v in arrays.items():
        assert loaded[k].shape == v.shape and loaded[k].dtype.name == v.dtype.name, k
        np.testing.assert_array_equal(loaded[k].numpy(), v)
    header, _ = safe_load_metadata(tmp_path / "b.safetensors")
    assert header["__metadata__"] == {"k": "v"}


def test_bfloat16_both_ways(tmp_path: Path) -> None:
    t = torch.tensor([1.5, -2.25, 3e5, 1e-3], dtype=torch.bfloat16)
    safetensors.torch.save_file({"x": t}, str(tmp_path / "bf.safetensors"))
    x = safe_load(tmp_path / "bf.safetensors")["x"]
    assert x.dtype == dtypes.bfloat16
    np.testing.assert_array_equal(x.numpy(), t.float().numpy())
    safe_save({"y": x * 2}, tmp_path / "bf2.safetensors")
    y = safetensors.torch.load_file(str(tmp_path / "bf2.safetensors"))["y"]
    assert torch.equal(y, t * 2)


@pytest.mark.usefixtures("default_device_cpu")  # (a CPU tensor maps the file; others copy it in)
def test_safe_load_is_memory_mapped_and_copy_on_write(tmp_path: Path) -> None:
    path = tmp_path / "m.safetensors"
    safetensors.numpy.save_file({"w": np.arange(16, dtype=np.float32)}, str(path))
    w = safe_load(path)["w"]
    buf = w._plain_buffer()
    assert buf is not None and isinstance(buf._external, mmap.mmap)  # points into the file's pages, no copy
    w.assign(w * 0 - 1).realize()
    assert w.tolist() == [-1.0] * 16
    np.testing.assert_array_equal(safetensors.numpy.load_file(str(path))["w"], np.arange(16))  # file unchanged


def test_safe_load_rejects_bad_files(tmp_path: Path) -> None:
    (tmp_path / "short").write_bytes(b"\x01\x02")
    with pytest.raises(ValueError, match="not a safetensors file"):
        safe_load(tmp_path / "short")
    (tmp_path / "big").write_bytes(struct.pack("<Q", 10**6) + b"{}")
    with pytest.raises(ValueError, match="runs past the end"):
        safe_load(tmp_path / "big")
    (tmp_path / "json").write_bytes(struct.pack("<Q", 3) + b"{{{")
    with pytest.raises(ValueError, match="JSON"):
        safe_load(tmp_path / "json")
    header = json.dumps({"x": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]}}).encode()
    (tmp_path / "trunc").write_bytes(struct.pack("<Q", len(header)) + header + b"\x00" * 8)
    with pytest.raises(ValueError, match="truncated"):
        safe_load(tmp_path / "trunc")
    header = json.dumps({"x": {"dtype": "F32", "shape": [4], "data_offsets": [0, 12]}}).encode()
    (tmp_path / "size").write_bytes(struct.pack("<Q", len(header)) + header + b"\x00" * 16)
    with pytest.raises(ValueError, match="data_offsets"):
        safe_load(tmp_path / "size")


def _entry(shape: object = (2, 3), dtype: object = "F32", offsets: object = (0, 24)) -> dict:
    return {"dtype": dtype, "shape": list(shape) if isinstance(shape, tuple) else shape, "data_offsets": offsets}


def _safetensors(header: object, data: bytes = b"\0" * 24, length: int | None = None) -> bytes:
    raw = header if isinstance(header, bytes) else json.dumps(header).encode()
    return struct.pack("<Q", len(raw) if length is None else length) + raw + data


_DEEP = b"[" * 100_000 + b"]" * 100_000
# (file bytes, what the error must say); every message also names the file
CORRUPT_SAFETENSORS = {
    "empty file": (b"", "not a safetensors file"),
    "shorter than the length": (b"\x01\x02", "not a safetensors file"),
    "header past the end": (_safetensors({}, b"", length=10**6), "runs past the end"),
    "header length 2**64-1": (_safetensors({}, b"", length=2**64 - 1), "runs past the end"),
    "header not JSON": (_safetensors(b"{{{", b""), "not valid JSON"),
    "header not UTF-8": (_safetensors(b'{"\xff": 1}', b""), "not valid JSON"),
    "header a list": (_safetensors([], b""), "must be a JSON object, not list"),
    "header a number": (_safetensors(b"3", b""), "must be a JSON object, not int"),
    "header nested deeply": (_safetensors(_DEEP, b""), "nests JSON too deeply"),
    "entry nested deeply": (_safetensors(b'{"w": ' + _DEEP + b"}", b""), "nests JSON too deeply"),
    "integer of 5000 digits": (_safetensors(b'{"w": {"shape": [' + b"9" * 5000 + b"]}}", b""), "not valid JSON"),
    "name twice": (_safetensors(b'{"w": 1, "w": 2}', b""), "names 'w' twice"),
    "metadata a list": (_safetensors({"__metadata__": ["a"], "w": _entry()}), "__metadata__ must map"),
    "metadata value an int": (_safetensors({"__metadata__": {"a": 1}, "w": _entry()}), "__metadata__ must map"),
    "entry a number": (_safetensors({"w": 3}), "'w': expected an object"),
    "entry without offsets": (_safetensors({"w": {"dtype": "F32", "shape": [2, 3]}}), "'w': no data_offsets"),
    "unknown dtype": (_safetensors({"w": _entry(dtype="F8")}), "'w': unknown dtype 'F8'"),
    "dtype a list": (_safetensors({"w": _entry(dtype=["F32"])}), "'w': unknown dtype"),
    "shape a string": (_safetensors({"w": _entry(shape="2,3")}), "'w': shape '2,3' is not a list"),
    "shape of floats": (_safetensors({"w": _entry(shape=[2.0, 3.0])}), "'w': shape .* non-negative integers"),
    "negative shape": (_safetensors({"w": _entry(shape=[-2, -3])}), "'w': shape .* non-negative integers"),
    "shape of bools": (_safetensors({"w": _entry(shape=[True, 3])}), "'w': shape .* non-negative integers"),
    "shape with null": (_safetensors({"w": _entry(shape=[None])}), "'w': shape .* non-negative integers"),
    "shape with NaN": (_safetensors(b'{"w": {"dtype": "F32", "shape": [NaN], "data_offsets": [0, 4]}}'), "'w': shape"),
    "offsets of one": (_safetensors({"w": _entry(offsets=[0])}), "'w': data_offsets .* two integers"),
    "offsets of three": (_safetensors({"w": _entry(offsets=[0, 12, 24])}), "'w': data_offsets .* two integers"),
    "offsets a string": (_safetensors({"w": _entry(offsets="0:24")}), "'w': data_offsets .* two integers"),
    "offsets an object": (_safetensors({"w": _entry(offsets={"begin": 0})}), "'w': data_offsets .* two integers"),
    "offsets of floats": (_safetensors({"w": _entry(offsets=[0.0, 24.0])}), "'w': data_offsets .* two integers"),
    "negative offsets": (_safetensors({"w": _entry(offsets=[-24, 0])}), "'w': data_offsets .* 0 <= begin <= end"),
    "reversed offsets": (_safetensors({"w": _entry(offsets=[24, 0])}), "'w': data_offsets .* 0 <= begin <= end"),
    "offsets too short": (
        _safetensors({"w": _entry(offsets=[0, 12])}),
        r"tensor 'w': data_offsets \[0, 12\] hold 12 bytes, shape \(2, 3\) float32 needs 24",
    ),
    "shape of 2**124 elements": (
        _safetensors({"w": _entry(shape=(2**62, 2**62))}),
        r"'w': data_offsets \[0, 24\] hold 24 bytes, shape .* needs 85070591730234615865843651857942052864",
    ),
    "data truncated": (_safetensors({"w": _entry()}, b"\0" * 20), "'w': data_offsets .* run past the 20 bytes"),
    "offsets past the end": (_safetensors({"w": _entry(offsets=[2**70, 2**70 + 24])}), "'w': .* run past"),
    "overlapping tensors": (
        _safetensors({"a": _entry(offsets=[0, 24]), "b": _entry(offsets=[16, 40])}, b"\0" * 40),
        r"tensors 'a' \(data_offsets \[0, 24\]\) and 'b' \(data_offsets \[16, 40\]\) overlap",
    ),
}


@pytest.mark.parametrize("case", list(CORRUPT_SAFETENSORS))
def test_corrupt_safetensors_named_errors(tmp_path: Path, case: str) -> None:
    raw, message = CORRUPT_SAFETENSORS[case]
    path = tmp_path / "model.safetensors"
    path.write_bytes(raw)
    with pytest.raises(LoadError, match=message) as info:
        safe_load(path)
    assert str(info.value).startswith(f"{path}: "), str(info.value)
    assert isinstance(info.value, ValueError)


def test_safetensors_order_and_gaps_are_allowed(tmp_path: Path) -> None:
    # tensors stored in another order than the header lists them, a gap between them, an empty tensor among them
    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    b = np.arange(4, dtype=np.int16)
    header = {
        "__metadata__": {"format": "pt"},
        "a": _entry((2, 3), "F32", [16, 40]),
        "e": _entry((0, 5), "F32", [8, 8]),
        "b": _entry((4,), "I16", [0, 8]),
    }
    path = tmp_path / "ok.safetensors"
    path.write_bytes(_safetensors(header, b.tobytes() + b"\xff" * 8 + a.tobytes()))
    out = safe_load(path)
    np.testing.assert_array_equal(out["a"].numpy(), a)
    np.testing.assert_array_equal(out["b"].numpy(), b)
    assert out["e"].shape == (0, 5)


def test_model_round_trip_identical_outputs(tmp_path: Path) -> None:
    Tensor.manual_seed(1)
    net = Net()
    with Tensor.train():  # move the running statistics away from their initial values
        net(Tensor.rand(4, 1, 8, 8)).sum().backward()
    Tensor.realize(*get_parameters(net))
    safe_save(get_state_dict(net), tmp_path / "net.safetensors")
    fresh = Net()
    load_state_dict(fresh, safe_load(tmp_path / "net.safetensors"))
    x = Tensor.rand(3, 1, 8, 8).realize()
    np.testing.assert_array_equal(fresh(x).numpy(), net(x).numpy())
    assert fresh.bn.num_batches_tracked.item() == 1


def test_load_state_dict_tinygrad_options() -> None:
    """tinygrad's load_state_dict: returns the loaded tensors, realize=False leaves them lazy, consume=True empties
    the source, () and (1,) fit each other, torch's num_batches_tracked is skipped where the model keeps none."""
    lin = nn.Linear(3, 2, bias=False)
    src = Tensor.full((2, 3), 2, dtype=dtypes.uint8).contiguous().realize()
    sd = {"weight": src.float() * 0.5}
    loaded = load_state_dict(lin, sd, realize=False, consume=True)
    assert sd == {} and len(loaded) == 1 and not lin.weight.uop.is_realized
    assert lin.weight.tolist() == [[1.0] * 3] * 2
    bn = nn.BatchNorm(1, track_running_stats=False)
    load_state_dict(bn, {"weight": Tensor([2.0]), "bias": Tensor(3.0), "num_batches_tracked": Tensor.ones(1)})
    assert bn.weight.tolist() == [2.0] and bn.bias.tolist() == [3.0]
    shape_error = r"Shape mismatch in layer `weight`: Expected shape \(2, 3\), but found \(3, 3\)"
    with pytest.raises(ValueError, match=shape_error):
        load_state_dict(lin, {"weight": Tensor.ones(3, 3)})


def _torch_files_state() -> dict:
    torch.manual_seed(0)
    big = torch.randn(6, 4)
    sd = {
        "w": torch.randn(3, 4),
        "ints": torch.arange(5),
        "half": torch.randn(3).half(),
        "bf16": torch.randn(3).bfloat16(),
        "int8": torch.tensor([-3, 4, 127], dtype=torch.int8),
        "bool": torch.tensor([True, False]),
        "transposed": torch.randn(3, 5).t(),  # a permuted layout: a view of the storage
        "rows": big[2:4],  # an offset into a shared storage
        "cols": big[:, 1:3],  # gaps between rows: gathered a row's run at a time
        "stepped": big[::2, ::3],  # gaps between elements: gathered one by one
        "transposed_cols": big.t()[1:3],  # a slice of a transposed storage
        "expanded": torch.randn(3, 1).expand(3, 4),  # stride 0
        "param": torch.nn.Parameter(torch.randn(2)),
        "scalar": torch.tensor(2.5),
        "empty": torch.zeros(0, 3),
        "nested": {"list": [torch.ones(2), 3, "text"], "tuple": (1.5, torch.full((2,), 7))},
    }
    sd["row_of_w"] = sd["w"][1]
    return sd


def _same(out, ref) -> None:
    if isinstance(ref, torch.Tensor):
        assert isinstance(out, Tensor) and out.shape == tuple(ref.shape)
        assert out.dtype.name == str(ref.dtype).removeprefix("torch."), (out.dtype, ref.dtype)
        np.testing.assert_array_equal(out.float().numpy(), ref.detach().float().numpy())
    elif isinstance(ref, dict):
        assert set(out) == set(ref)
        for k in ref:
            _same(out[k], ref[k])
    elif isinstance(ref, (list, tuple)):
        assert type(out) is type(ref) and len(out) == len(ref)
        for a, b in zip(out, ref):
            _same(a, b)
    else:
        assert out == ref


@pytest.mark.parametrize("zip_format", [True, False], ids=["zip", "legacy"])
def test_torch_load_reads_torch_save_files(tmp_path: Path, zip_format: bool) -> None:
    """tinygrad's torch_load: a torch.save file (the zip format, and the legacy one before torch 1.6) read without
    torch, every dtype, view layout and container as torch.load gives it."""
    path = tmp_path / "m.pt"
    sd = _torch_files_state()
    torch.save(sd, path, _use_new_zipfile_serialization=zip_format)
    _same(torch_load(path), torch.load(path))
    _same(torch_load(str(path)), sd)


@pytest.mark.usefixtures("default_device_cpu")  # (a CPU tensor maps the file; others copy it in)
def test_torch_load_maps_the_zip_file_and_loads_a_model(tmp_path: Path) -> None:
    path = tmp_path / "m.pt"
    ref = torch.nn.Sequential(torch.nn.Linear(5, 7), torch.nn.Tanh(), torch.nn.Linear(7, 3))
    torch.save(ref.state_dict(), path)
    sd = torch_load(path)
    buf = sd["0.weight"]._plain_buffer()
    assert buf is not None and isinstance(buf._external, mmap.mmap)  # points into the file's pages, no copy
    x = np.random.default_rng(0).standard_normal((4, 5)).astype(np.float32)
    out = Tensor(x).linear(sd["0.weight"], sd["0.bias"]).tanh().linear(sd["2.weight"], sd["2.bias"])
    np.testing.assert_allclose(out.numpy(), ref(torch.tensor(x)).detach().numpy(), rtol=1e-5, atol=1e-6)
    sd["0.bias"].assign(sd["0.bias"] * 0).realize()  # copy-on-write: the file keeps its values
    np.testing.assert_array_equal(torch.load(path)["0.bias"].numpy(), ref.state_dict()["0.bias"].numpy())


def test_torch_load_refuses_what_is_not_plain_data(tmp_path: Path) -> None:
    path = tmp_path / "model.pt"
    torch.save(torch.nn.Linear(2, 2), path)  # a whole module: unpickling it would run its class's code
    with pytest.raises(LoadError, match="torch.nn.modules.linear.Linear"):
        torch_load(path)
    (tmp_path / "junk.pt").write_bytes(b"not a torch file")
    with pytest.raises(LoadError, match="not a torch.save file"):
        torch_load(tmp_path / "junk.pt")


def test_loaders_take_a_disk_tensor_of_the_file(tmp_path: Path) -> None:
    """tinygrad's loaders take `Tensor(path)` / `Tensor.from_url(...)` (a DISK tensor of the whole file) as well as
    a path; a view of the file or a tensor in memory is a TypeError naming what to pass."""
    w = np.arange(12, dtype=np.float32).reshape(3, 4)
    safetensors.numpy.save_file({"w": w}, str(tmp_path / "m.safetensors"))
    torch.save({"w": torch.from_numpy(w), "n": 3}, tmp_path / "m.pth")
    st = Tensor(tmp_path / "m.safetensors")
    np.testing.assert_array_equal(nn.state.safe_load(st)["w"].numpy(), w)
    assert nn.state.safe_load_metadata(st)[0]["w"]["shape"] == [3, 4]
    loaded = nn.state.torch_load(Tensor(tmp_path / "m.pth"))
    np.testing.assert_array_equal(loaded["w"].numpy(), w)
    assert loaded["n"] == 3
    with pytest.raises(TypeError, match="whole file"):
        nn.state.safe_load(st[8:])
    with pytest.raises(TypeError, match="DISK tensor"):
        nn.state.torch_load(Tensor([1, 2, 3], dtype=dtypes.uint8))


def test_torch_save_is_read_by_torch_load_and_ours(tmp_path: Path) -> None:
    """A state dict and plain data written by nn.state.torch_save: torch.load reads it (weights_only too) into a torch
    model of the same layers, and torch_load gives the values back; every storage dtype torch has."""
    from lazygrad import nn
    from lazygrad.nn.state import torch_save

    model = nn.Sequential(nn.Conv2d(1, 2, 3), nn.BatchNorm2d(2), nn.Linear(4, 3))
    extra = {
        name: Tensor([1, 0, 1], dtype=getattr(dtypes, name))
        for name in ("float16", "bfloat16", "int8", "uint8", "int16", "int32", "bool", "float64")
    }
    obj = {"model": model.state_dict(), "epoch": 3, "lrs": [0.1, (1, "a")], "extra": extra, "empty": Tensor.zeros(0, 2)}
    path = tmp_path / "ckpt.pt"
    torch_save(obj, path)
    for weights_only in (True, False):
        loaded = torch.load(path, weights_only=weights_only)
        assert loaded["epoch"] == 3 and loaded["lrs"] == [0.1, (1, "a")] and tuple(loaded["empty"].shape) == (0, 2)
        for k, v in model.state_dict().items():
            np.testing.assert_array_equal(loaded["model"][k].numpy(), v.numpy())
        for k, v in extra.items():
            assert str(loaded["extra"][k].dtype) == f"torch.{k}"
            np.testing.assert_array_equal(loaded["extra"][k].float().numpy(), v.float().numpy())
    ref = torch.nn.Sequential(torch.nn.Conv2d(1, 2, 3), torch.nn.BatchNorm2d(2), torch.nn.Linear(4, 3))
    ref.load_state_dict(torch.load(path)["model"])
    back = torch_load(path)
    assert back["epoch"] == 3
    for k, v in model.state_dict().items():
        np.testing.assert_array_equal(back["model"][k].numpy(), v.numpy())
