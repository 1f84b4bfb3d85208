"""lazygrad.utils.data against torch.utils.data: batches and their collated structure, samplers, splits, the
DistributedSampler's shares, reproducible shuffles, and that a TensorDataset batch is one gather, not a stack."""

from __future__ import annotations

import collections

import numpy as np
import pytest
import torch
import torch.utils.data as tud

import lazygrad.utils.data as lud
from lazygrad import GlobalCounters, Tensor, dtypes


class Squares(lud.Dataset):
    """A map-style dataset of mixed samples: (numpy row, int label, float, dict)."""

    def __init__(self, n: int):
        self.n = n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int):
        row = np.arange(3, dtype=np.float32) + i
        return row, i * i, float(i) / 2, {"id": i, "vec": row * 2}


class TorchSquares(tud.Dataset):
    def __init__(self, n: int):
        self.inner = Squares(n)

    def __len__(self) -> int:
        return len(self.inner)

    def __getitem__(self, i: int):
        return self.inner[i]


def _same(ours, ref) -> None:
    if isinstance(ref, torch.Tensor):
        assert isinstance(ours, Tensor) and ours.shape == tuple(ref.shape)
        np.testing.assert_array_equal(ours.numpy(), ref.numpy())
        assert str(ours.dtype.name) in str(ref.dtype) or (ours.dtype == dtypes.float64 and ref.dtype == torch.float64)
    elif isinstance(ref, dict):
        assert list(ours) == list(ref)
        for k in ref:
            _same(ours[k], ref[k])
    elif isinstance(ref, (list, tuple)):
        assert len(ours) == len(ref)
        for a, b in zip(ours, ref):
            _same(a, b)
    else:
        assert ours == ref


@pytest.mark.parametrize("batch_size, drop_last", [(4, False), (4, True), (1, False), (7, False)])
def test_loader_batches_match_torchs_default_collate(batch_size: int, drop_last: bool) -> None:
    ours = lud.DataLoader(Squares(10), batch_size=batch_size, drop_last=drop_last)
    ref = tud.DataLoader(TorchSquares(10), batch_size=batch_size, drop_last=drop_last)
    assert len(ours) == len(ref)
    batches = list(ours)
    assert len(batches) == len(ref)
    for a, b in zip(batches, ref):
        _same(a, b)


def test_tensor_dataset_batch_is_one_gather_and_covers_everything() -> None:
    x = Tensor(np.arange(40, dtype=np.float32).reshape(20, 2))
    y = Tensor(np.arange(20))
    Tensor.manual_seed(3)
    loader = lud.DataLoader(lud.TensorDataset(x, y), batch_size=6, shuffle=True)
    seen = []
    for xb, yb in loader:
        np.testing.assert_array_equal(xb.numpy()[:, 0], yb.numpy() * 2)
        seen += yb.tolist()
    assert sorted(seen) == list(range(20))
    # a shuffled batch of a TensorDataset: one gather kernel per tensor, not a stack of 6 slices
    xb, yb = next(iter(loader))
    GlobalCounters.reset()
    Tensor.realize(xb, yb)
    assert GlobalCounters.kernel_count <= 2
    # the same seed, the same order
    Tensor.manual_seed(3)
    assert [b[1].tolist() for b in lud.DataLoader(lud.TensorDataset(x, y), batch_size=6, shuffle=True)][0] == seen[:6]
    # in order: views of runs, no kernel at all
    xb, _ = next(iter(lud.DataLoader(lud.TensorDataset(x, y), batch_size=5)))
    np.testing.assert_array_equal(xb.numpy(), np.arange(10, dtype=np.float32).reshape(5, 2))


def test_samplers_splits_and_concat() -> None:
    data = Squares(10)
    assert list(lud.SequentialSampler(data)) == list(range(10))
    assert sorted(lud.RandomSampler(data, generator=1)) == list(range(10))
    assert len(list(lud.RandomSampler(data, replacement=True, num_samples=25, generator=2))) == 25
    assert list(lud.BatchSampler(range(7), 3, drop_last=False)) == list(tud.BatchSampler(range(7), 3, False))
    assert len(lud.BatchSampler(range(7), 3, drop_last=True)) == 2
    parts = lud.random_split(data, [0.5, 0.3, 0.2], generator=0)
    assert [len(p) for p in parts] == [len(p) for p in tud.random_split(range(10), [0.5, 0.3, 0.2])]
    assert sorted(i for p in parts for i in p.indices) == list(range(10))
    with pytest.raises(ValueError, match="Sum of input lengths"):
        lud.random_split(data, [3, 3])
    both = data + Squares(3)
    assert len(both) == 13 and both[11][1] == 1 and both[-1][1] == 4
    weighted = collections.Counter(lud.WeightedRandomSampler([0.0, 1.0, 3.0], 4000, generator=5))
    assert weighted[0] == 0 and 2.5 < weighted[2] / weighted[1] < 3.5
    picked = list(lud.WeightedRandomSampler([1.0, 0.0, 1.0, 1.0], 3, replacement=False, generator=6))
    assert sorted(picked) == [0, 2, 3]


@pytest.mark.parametrize("n, world, drop_last", [(10, 3, False), (10, 3, True), (4, 4, False), (2, 3, False)])
def test_distributed_sampler_shares_match_torch(n: int, world: int, drop_last: bool) -> None:
    for rank in range(world):
        ours = lud.DistributedSampler(range(n), world, rank, shuffle=False, drop_last=drop_last)
        ref = tud.DistributedSampler(range(n), world, rank, shuffle=False, drop_last=drop_last)
        assert list(ours) == list(ref) and len(ours) == len(ref)
    shuffled = [lud.DistributedSampler(range(n), world, r, seed=4, drop_last=drop_last) for r in range(world)]
    shares = [list(s) for s in shuffled]
    assert {len(s) for s in shares} == {len(shuffled[0])}
    if drop_last:
        assert len(set(sum(shares, []))) == len(sum(shares, []))  # no index twice
    else:
        assert set(sum(shares, [])) == set(range(n))


def test_iterable_dataset_and_errors() -> None:
    class Count(lud.IterableDataset):
        def __iter__(self):
            return iter(range(7))

    batches = [b.tolist() for b in lud.DataLoader(Count(), batch_size=3)]
    assert batches == [[0, 1, 2], [3, 4, 5], [6]]
    with pytest.raises(ValueError, match="IterableDataset"):
        lud.DataLoader(Count(), shuffle=True)
    with pytest.raises(ValueError, match="mutually exclusive"):
        lud.DataLoader(Squares(4), sampler=lud.SequentialSampler(range(4)), shuffle=True)
    with pytest.raises(ValueError, match="batch_size"):
        lud.BatchSampler(range(3), 0, False)
    with pytest.raises(ValueError, match="Size mismatch"):
        lud.TensorDataset(Tensor.ones(3), Tensor.ones(4))
    assert [x[1] for x in lud.DataLoader(Squares(3), batch_size=None)] == [0, 1, 4]


def test_checkpoint_functions_run_their_function() -> None:
    from lazygrad import Tensor, nn
    from lazygrad.utils.checkpoint import checkpoint, checkpoint_sequential

    x = Tensor([1.0, -2.0, 3.0], requires_grad=True)
    out = checkpoint(lambda t, k: (t * k).relu(), x, 2.0, use_reentrant=False)
    out.sum().backward()
    assert out.tolist() == [2.0, 0.0, 6.0] and x.grad.tolist() == [2.0, 0.0, 2.0]
    seq = nn.Sequential(nn.ReLU(), nn.Identity())
    assert checkpoint_sequential(seq, 2, Tensor([-1.0, 1.0])).tolist() == [0.0, 1.0]
