"""lazygrad.utils.data against torch.utils.data: batches and their collated structure, samplers, splits, the
DistributedSampler's shares, reproducible shuffles, and that a TensorDataset batch is one gather, not a stack."""

from __future__ import annotations

import collections
import gc
import os
import pickle
import sys
import time

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


# *** worker processes (num_workers > 0) ***


class Counted(lud.Dataset):
    """Each sample says which worker made it and how many kernels that worker ran so far."""

    def __len__(self) -> int:
        return 9

    def __getitem__(self, i: int):
        info = lud.get_worker_info()
        return i, info.id if info else -1, info.num_workers if info else 0, GlobalCounters.kernel_count


class Shards(tud.IterableDataset):
    """Each worker takes every num_workers-th number (torch's recipe for an IterableDataset with workers)."""

    def __init__(self, get_info, n: int):
        self.get_info, self.n = get_info, n

    def __iter__(self):
        info = self.get_info()
        return iter(range(info.id, self.n, info.num_workers))


class LudShards(Shards, lud.IterableDataset):
    pass


class Failing(lud.Dataset):
    def __len__(self) -> int:
        return 8

    def __getitem__(self, i: int):
        if i == 5:
            raise KeyError(f"no sample {i}")
        return i


class TensorRows(lud.Dataset):
    def __init__(self, x: Tensor):
        self.x = x

    def __len__(self) -> int:
        return self.x.shape[0]

    def __getitem__(self, i: int):
        return self.x[i] * 2, i


def _reset_counters(worker_id: int) -> None:
    GlobalCounters.reset()


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with open(f"/proc/{pid}/stat") as f:  # a zombie is not a running worker
        return f.read().split()[2] != "Z"


@pytest.mark.parametrize("context", ["fork", "spawn"])
def test_workers_give_torchs_batches_in_sampler_order(context: str) -> None:
    ours = list(lud.DataLoader(Squares(11), batch_size=3, num_workers=2, multiprocessing_context=context))
    ref = list(tud.DataLoader(TorchSquares(11), batch_size=3, num_workers=2))
    assert len(ours) == len(ref) == 4
    for a, b in zip(ours, ref):
        _same(a, b)


def test_workers_shuffle_as_one_process_and_run_no_kernel() -> None:
    one = [b[0].tolist() for b in lud.DataLoader(Counted(), batch_size=2, shuffle=True, generator=7)]
    batches = list(
        lud.DataLoader(
            Counted(), batch_size=2, shuffle=True, generator=7, num_workers=3, worker_init_fn=_reset_counters
        )
    )
    assert [b[0].tolist() for b in batches] == one
    assert [b[1].tolist() for b in batches] == [[w, w] for w in [0, 1, 2, 0, 1]][:4] + [[1]]
    assert all(b[2].tolist() == [3] * len(b[2].tolist()) for b in batches)
    assert all(n == 0 for b in batches for n in b[3].tolist())  # numpy in, numpy collated: no kernel in a worker
    assert lud.get_worker_info() is None


@pytest.mark.parametrize(
    "workers, batch_size, drop_last", [(1, 2, False), (3, 2, False), (3, 2, True), (2, None, False)]
)
def test_iterable_dataset_sharded_by_worker_info_as_torch(workers: int, batch_size, drop_last: bool) -> None:
    kwargs = {"batch_size": batch_size, "drop_last": drop_last, "num_workers": workers}
    ours = lud.DataLoader(LudShards(lud.get_worker_info, 11), **kwargs)
    ref = tud.DataLoader(Shards(tud.get_worker_info, 11), **kwargs)
    assert [b.tolist() if isinstance(b, Tensor) else b for b in ours] == [
        b.tolist() if isinstance(b, torch.Tensor) else b for b in ref
    ]


def test_worker_exception_reraised_with_its_traceback() -> None:
    for lib in (lud, tud):
        it = iter(lib.DataLoader(Failing(), batch_size=2, num_workers=2))
        with pytest.raises(KeyError) as info:
            list(it)
        if lib is tud:  # torch's shutdown from the garbage collector waits 5 s a worker
            it._shutdown_workers()
        text = str(info.value)
        assert "Caught KeyError in DataLoader worker process 0" in text
        assert 'raise KeyError(f"no sample {i}")' in text and "no sample 5" in text


def test_workers_shut_down_when_the_iterator_is_dropped() -> None:
    loader = lud.DataLoader(Squares(40), batch_size=2, num_workers=2)
    it = iter(loader)
    next(it)
    pids = [w.pid for w in it.workers]
    assert all(_alive(p) for p in pids)
    del it
    gc.collect()
    assert not any(_alive(p) for p in pids)
    it = iter(loader)
    pids = [w.pid for w in it.workers]
    assert len(list(it)) == 20
    assert not any(_alive(p) for p in pids)  # all read: shut down at the end


def test_persistent_workers_serve_every_epoch() -> None:
    loader = lud.DataLoader(LudShards(lud.get_worker_info, 5), batch_size=2, num_workers=2, persistent_workers=True)
    first = iter(loader)
    pids = [w.pid for w in first.workers]
    assert [b.tolist() for b in first] == [[0, 2], [1, 3], [4]]
    next(iter(loader))  # an epoch left early
    assert [b.tolist() for b in loader] == [[0, 2], [1, 3], [4]]
    assert [w.pid for w in loader._workers.workers] == pids and all(_alive(p) for p in pids)
    del loader, first
    gc.collect()
    assert not any(_alive(p) for p in pids)


def test_prefetch_factor_bounds_the_batches_asked_ahead() -> None:
    for factor in (1, 3):
        it = iter(lud.DataLoader(Squares(40), batch_size=2, num_workers=2, prefetch_factor=factor))
        assert len(it.pending) == 2 * factor
        next(it)
        assert len(it.pending) == 2 * factor


def test_tensor_samples_after_threaded_kernels_in_the_parent() -> None:
    a = Tensor.rand(256, 256)
    (a @ a).realize()  # the parent's thread team has run: a forked worker must not wait for its threads
    x = Tensor.arange(12).reshape(6, 2).float()
    got = list(lud.DataLoader(TensorRows(x), batch_size=4, num_workers=2))
    assert [b[0].tolist() for b in got] == [[[0, 2], [4, 6], [8, 10], [12, 14]], [[16, 18], [20, 22]]]
    assert got[0][0].dtype == dtypes.float32 and got[1][1].tolist() == [4, 5]


def test_worker_argument_errors_as_torch() -> None:
    for lib, data in ((lud, Squares(4)), (tud, TorchSquares(4))):
        for kwargs, cls, match in [
            ({"timeout": -1}, ValueError, "timeout option should be non-negative"),
            ({"prefetch_factor": 2}, ValueError, "prefetch_factor option could only be specified"),
            ({"num_workers": 1, "prefetch_factor": -1}, ValueError, "prefetch_factor option should be non-negative"),
            ({"persistent_workers": True}, ValueError, "persistent_workers option needs num_workers > 0"),
            ({"multiprocessing_context": "fork"}, ValueError, "multi-process loading"),
            ({"num_workers": 1, "multiprocessing_context": "nope"}, ValueError, "valid start method"),
            ({"num_workers": 1, "multiprocessing_context": 3}, TypeError, "valid context object"),
        ]:
            with pytest.raises(cls, match=match):
                lib.DataLoader(data, **kwargs)


class Slow(lud.Dataset):
    def __len__(self) -> int:
        return 2

    def __getitem__(self, i: int):
        time.sleep(1.5)
        return i


def test_timeout_raises_in_the_parent() -> None:
    with pytest.raises(RuntimeError, match="DataLoader timed out after 0.5 seconds"):
        next(iter(lud.DataLoader(Slow(), num_workers=1, timeout=0.5)))


class BatchesOnly(lud.TensorDataset):
    def __getitem__(self, index: int) -> tuple:
        raise AssertionError("a TensorDataset batch read sample by sample")


def test_tensor_dataset_batches_in_workers_as_in_one_process() -> None:
    """A worker fetches a TensorDataset batch as the calling thread does: one gather per tensor (a stack of per-sample
    reads ran a kernel per sample in the worker: 31 s for 32 batches of 64, 0.3-0.6 s now)."""
    x, y = Tensor.rand(40, 3).realize(), Tensor.arange(40).realize()
    kwargs = {"batch_size": 6, "shuffle": True, "generator": 3}
    one = [[t.numpy() for t in b] for b in lud.DataLoader(BatchesOnly(x, y), **kwargs)]
    two = [[t.numpy() for t in b] for b in lud.DataLoader(BatchesOnly(x, y), num_workers=2, **kwargs)]
    assert len(one) == len(two) == 7
    for a, b in zip(one, two):
        np.testing.assert_array_equal(a[0], b[0])
        np.testing.assert_array_equal(a[1], b[1])
        assert b[0].dtype == np.float32


def test_unbatched_and_out_of_order_workers() -> None:
    samples = [b[1] for b in lud.DataLoader(Squares(5), batch_size=None, num_workers=2)]
    assert samples == [0, 1, 4, 9, 16]
    loader = lud.DataLoader(Squares(9), batch_size=2, num_workers=2, in_order=False)
    assert sorted(v for b in loader for v in b[1].tolist()) == [i * i for i in range(9)]


def test_spawn_of_an_unpicklable_collate_fails_cleanly(monkeypatch: pytest.MonkeyPatch) -> None:
    """The spawn's pickling error, as torch's, and no error from the iterator's __del__ over the unstarted worker."""
    unraisable: list = []
    monkeypatch.setattr(sys, "unraisablehook", unraisable.append)
    with pytest.raises((pickle.PicklingError, AttributeError), match="pickle"):
        next(iter(lud.DataLoader(Squares(4), num_workers=1, multiprocessing_context="spawn", collate_fn=lambda b: b)))
    gc.collect()
    assert not unraisable
