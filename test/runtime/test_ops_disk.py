"""The DISK device: a memory-mapped file as a tensor's storage. Copies in and out read and write the file (checked with
numpy on the same bytes); asking it to compute is an error that says to copy the tensor first."""

import pathlib

import numpy as np
import pytest

from lazygrad import Tensor
from lazygrad.dtype import dtypes


def test_path_loads_file_bytes(tmp_path: pathlib.Path) -> None:
    data = np.arange(37, dtype=np.float32) * 1.5 - 3
    path = tmp_path / "w.bin"
    path.write_bytes(data.tobytes())
    t = Tensor(path)
    assert t.device.startswith("DISK") and t.dtype == dtypes.uint8 and t.shape == (37 * 4,)
    np.testing.assert_array_equal(t.to("CPU").numpy(), np.frombuffer(data.tobytes(), np.uint8))
    f = Tensor(path, dtype=dtypes.float32)
    assert f.shape == (37,)
    np.testing.assert_array_equal(f.to("CPU").numpy(), data)
    # a contiguous slice and a reshape read just that range; a strided view reads through a copy of the file
    np.testing.assert_array_equal(f[5:12].to("CPU").numpy(), data[5:12])
    np.testing.assert_array_equal(f[:36].reshape(6, 6)[1:3].to("CPU").numpy(), data[:36].reshape(6, 6)[1:3])
    np.testing.assert_array_equal(f[:36].reshape(6, 6).T.to("CPU").numpy(), data[:36].reshape(6, 6).T)
    np.testing.assert_array_equal(f.numpy(), data)  # reading a DISK tensor's data copies it out


@pytest.mark.parametrize("n", [0, 1, 13])
def test_empty_and_assign_write_the_file(tmp_path: pathlib.Path, n: int) -> None:
    path = tmp_path / "out.bin"
    t = Tensor.empty(n, dtype=dtypes.int32, device=f"disk:{path}")
    assert t.shape == (n,) and t.device == f"DISK:{path}"
    vals = np.arange(n, dtype=np.int32) * 7 - 2
    t.assign(Tensor(vals))
    if n:  # an empty tensor need not make its file
        assert path.stat().st_size == 4 * n
        np.testing.assert_array_equal(np.frombuffer(path.read_bytes(), np.int32), vals)
    np.testing.assert_array_equal(t.to("CPU").numpy(), vals)


def test_setitem_and_to_disk(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "part.bin"
    t = Tensor.empty(4, 5, dtype=dtypes.float32, device=f"disk:{path}")
    t.assign(Tensor.zeros(4, 5).contiguous())
    t[1:3] = Tensor.ones(2, 5) * 2
    want = np.zeros((4, 5), np.float32)
    want[1:3] = 2
    np.testing.assert_array_equal(np.frombuffer(path.read_bytes(), np.float32).reshape(4, 5), want)
    d = Tensor([[1.0, 2.0], [3.0, 4.0]]).to(f"disk:{tmp_path / 'copy.bin'}").realize()  # the copy is lazy, as any
    np.testing.assert_array_equal(np.fromfile(tmp_path / "copy.bin", np.float32), [1, 2, 3, 4])
    np.testing.assert_array_equal(d.to("CPU").numpy(), [[1, 2], [3, 4]])


def test_disk_does_not_compute(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "c.bin"
    path.write_bytes(np.ones(8, np.float32).tobytes())
    t = Tensor(path, dtype=dtypes.float32)
    with pytest.raises(RuntimeError, match="cannot compute.*to\\('CPU'\\)"):
        (t + 1).realize()
    np.testing.assert_array_equal((t.to("CPU") + 1).numpy(), np.full(8, 2, np.float32))
    with pytest.raises(ValueError, match="same shape"):
        t.assign(Tensor.ones(3))
    with pytest.raises(ValueError, match="contiguous range"):
        t.reshape(2, 4).T.assign(Tensor.ones(4, 2))
    with pytest.raises(ValueError, match="needs a file"):
        Tensor.empty(2, device="disk").to("CPU").realize()
