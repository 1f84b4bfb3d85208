"""Small data sets for examples and tests, as Tensors."""

from __future__ import annotations

import random

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
