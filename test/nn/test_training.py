"""datasets.digits and a short training run of the digits example: the loss goes down and every step runs the same,
small number of kernels."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

from lazygrad import GlobalCounters, Tensor, dtypes, nn
from lazygrad.examples.digits import DigitsCNN, accuracy, make_step
from lazygrad.nn.datasets import digits


def test_digits_dataset() -> None:
    X_train, Y_train, X_test, Y_test = digits()
    assert X_train.shape == (1438, 1, 8, 8) and X_test.shape == (359, 1, 8, 8)
    assert Y_train.shape == (1438,) and Y_test.shape == (359,)
    assert X_train.dtype == dtypes.float32 and Y_train.dtype == dtypes.int32
    x = X_train.numpy()
    assert x.min() == 0.0 and x.max() == 1.0
    assert sorted(set(Y_test.tolist())) == list(range(10))
    again = digits()
    np.testing.assert_array_equal(again[1].numpy(), Y_train.numpy())  # the split is fixed


def test_digits_names_the_missing_package(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "sklearn.datasets", None)
    with pytest.raises(ImportError, match="pip install scikit-learn"):
        digits()


def test_short_training_run() -> None:
    X_train, Y_train, X_test, Y_test = digits()
    Tensor.manual_seed(0)
    model = DigitsCNN()
    opt = nn.optim.Adam(nn.state.get_parameters(model), lr=3e-3)
    step = make_step(model, opt, jit=False)
    xs, ys = X_train.numpy(), Y_train.numpy()
    rng = np.random.default_rng(0)
    losses, kernels = [], []
    for _ in range(12):
        idx = rng.integers(0, len(ys), 32)
        before = GlobalCounters.kernel_count
        loss, _ = step(Tensor(np.ascontiguousarray(xs[idx])), Tensor(np.ascontiguousarray(ys[idx])))
        kernels.append(GlobalCounters.kernel_count - before)
        losses.append(loss.item())
    assert np.mean(losses[-4:]) < 0.75 * np.mean(losses[:4]), losses
    # forward, backward and the Adam update of 8 tensors (plus batchnorm statistics) in one schedule per step; the
    # first step also stores what the layers' lazy initial values left pending
    assert len(set(kernels[1:])) == 1 and kernels[1] <= 70, kernels
    assert accuracy(model, X_test, Y_test) > 0.5


def test_demo_main_prints_its_report(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    from lazygrad.examples import digits as demo

    out = tmp_path / "w.safetensors"
    monkeypatch.setattr(sys, "argv", ["digits", "--steps", "3", "--bs", "32", "--out", str(out)])
    demo.main()
    text = capsys.readouterr().out
    for line in ("test accuracy:", "ms/step", "kernels per step:", f"weights saved to {out}"):
        assert line in text, text
    assert sorted(nn.state.safe_load(out)) == sorted(nn.state.get_state_dict(DigitsCNN()))


def test_own_progress_bar_without_tqdm(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture) -> None:
    from lazygrad.examples.digits import progress

    monkeypatch.setitem(sys.modules, "tqdm", None)
    bar = progress(range(4), 4)
    seen = []
    for i in bar:
        seen.append(i)
        bar.set_postfix_str(f"loss {i}")
    out = capsys.readouterr().out
    assert seen == [0, 1, 2, 3] and "4/4" in out and "loss 3" in out and out.endswith("\n")


@pytest.mark.parametrize("fashion", [False, True])
def test_mnist_reads_the_idx_files(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fashion: bool) -> None:
    """tinygrad's nn.datasets.mnist over a directory of the four gzipped IDX files (a file:// URL: no network in
    tests), with small made-up sets of the real layout."""
    import gzip
    import struct

    from lazygrad import helpers

    monkeypatch.setattr(helpers, "_cache_dir", tmp_path / "cache")
    rng = np.random.default_rng(0)
    sets = {}
    for part, n in (("train", 5), ("t10k", 3)):
        images, labels = rng.integers(0, 256, (n, 28, 28), dtype=np.uint8), rng.integers(0, 10, n, dtype=np.uint8)
        (tmp_path / f"{part}-images-idx3-ubyte.gz").write_bytes(
            gzip.compress(struct.pack(">IIII", 2051, n, 28, 28) + images.tobytes())
        )
        (tmp_path / f"{part}-labels-idx1-ubyte.gz").write_bytes(
            gzip.compress(struct.pack(">II", 2049, n) + labels.tobytes())
        )
        sets[part] = (images, labels)
    monkeypatch.setenv("FASHION_MNIST_URL" if fashion else "MNIST_URL", tmp_path.as_uri())
    X_train, Y_train, X_test, Y_test = nn.datasets.mnist(fashion=fashion)
    assert X_train.shape == (5, 1, 28, 28) and X_test.shape == (3, 1, 28, 28) and X_train.dtype == dtypes.uint8
    np.testing.assert_array_equal(X_train.numpy()[:, 0], sets["train"][0])
    np.testing.assert_array_equal(Y_train.numpy(), sets["train"][1])
    np.testing.assert_array_equal(X_test.numpy()[:, 0], sets["t10k"][0])
    np.testing.assert_array_equal(Y_test.numpy(), sets["t10k"][1])
