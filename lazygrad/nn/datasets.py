"""Small data sets for examples and tests, as Tensors."""

from __future__ import annotations

import gzip
import os
import random

from lazygrad.helpers import fetch
from lazygrad.tensor import Tensor


def digits(test_fraction: float = 0.2, seed: int = 0) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """scikit-learn's bundled 8x8 handwritten digits (1797 images): X_train, Y_train, X_test, Y_test.

    X is float32 (N, 1, 8, 8) in [0, 1], Y int32 class labels. The split is a fixed permutation made with Python's
    own seeded generator, so it is the same on every machine and scikit-learn version.
    """
    try:
        from sklearn.datasets import load_digits
    except ImportError:
        raise ImportError("digits() needs scikit-learn, which is not installed: pip install scikit-learn") from None
    data = load_digits()
    n = len(data.target)
    order = list(range(n))
    random.Random(seed).shuffle(order)
    n_test = round(n * test_fraction)
    # sklearn hands us numpy arrays: picking rows is data conversion, done before anything becomes a Tensor
    train, test = order[n_test:], order[:n_test]
    images, labels = data.images.astype("float32"), data.target.astype("int32")
    # the images hold integers 0..16
    X_train, X_test = (Tensor(images[idx].reshape(len(idx), 1, 8, 8)) / 16.0 for idx in (train, test))
    return X_train.realize(), Tensor(labels[train]), X_test.realize(), Tensor(labels[test])


# where mnist() downloads from (tinygrad's locations); MNIST_URL / FASHION_MNIST_URL point it elsewhere (a mirror or
# a file:// directory holding the same four files)
MNIST_URL = "https://storage.googleapis.com/cvdf-datasets/mnist/"
FASHION_MNIST_URL = "http://fashion-mnist.s3-website.eu-central-1.amazonaws.com/"


def _idx(url: str, header: int, shape: tuple[int, ...]) -> Tensor:
    """The uint8 items of a gzipped IDX file (MNIST's format: a header, then the bytes), as (n, *shape)."""
    data = gzip.decompress(fetch(url).read_bytes())
    return Tensor(data[header:]).reshape(-1, *shape)


def mnist(device: str | None = None, fashion: bool = False) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """MNIST (or Fashion-MNIST), downloaded once into the cache (helpers.fetch), as tinygrad's: X_train (60000, 1,
    28, 28) and X_test (10000, 1, 28, 28) uint8 pixels, Y_train and Y_test uint8 labels."""
    base = os.getenv("FASHION_MNIST_URL", FASHION_MNIST_URL) if fashion else os.getenv("MNIST_URL", MNIST_URL)
    base = base if base.endswith("/") else base + "/"
    out = (
        _idx(base + "train-images-idx3-ubyte.gz", 16, (1, 28, 28)),
        _idx(base + "train-labels-idx1-ubyte.gz", 8, ()),
        _idx(base + "t10k-images-idx3-ubyte.gz", 16, (1, 28, 28)),
        _idx(base + "t10k-labels-idx1-ubyte.gz", 8, ()),
    )
    return tuple(t.to(device) if device is not None else t for t in out)  # type: ignore[return-value]
