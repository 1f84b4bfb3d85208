"""torch.utils.data's datasets, samplers and DataLoader (`from lazygrad.utils.data import DataLoader, TensorDataset`).

A batch of a `TensorDataset` is one gather of each tensor by the batch's indices (or a view of a run of them when not
shuffled), not a stack of per-sample slices; any other dataset's samples are collated as torch's default_collate
does (tensors stacked, numbers and numpy arrays made tensors, tuples, lists and dicts element by element). A dataset
may define `__getitems__(indices)` to give a whole batch at once, as in torch.

Randomness: shuffles and splits draw their seed from the library's random state, so `Tensor.manual_seed(s)` makes
them repeat (as torch.manual_seed does for torch's); a `generator` (an int seed or a `random.Random`) overrides it.
With `num_workers=0` batches are built in the calling thread (a TensorDataset's batch is one lazy gather, and the
kernels use every core anyway). With `num_workers > 0` there are worker processes as in torch (fork by default on
Linux, or `multiprocessing_context`): the parent iterates the sampler and sends each batch's indices to the workers in
turn, `prefetch_factor` batches ahead per worker; a worker runs `dataset[i]` and `collate_fn` and the parent yields the
batches in sampler order (`in_order=False`: as they come). The default collate stacks in a worker with numpy and the
parent makes each leaf a Tensor, so a worker that indexes numpy data runs no kernel; a lazygrad Tensor in a sample or
in a custom collate_fn's batch is read out in the worker (`.numpy()`, a kernel there) and made a Tensor again in the
parent. `get_worker_info()` shards an IterableDataset; an exception in a worker is raised again in the parent with the
worker's traceback; the workers stop when the iterator is dropped or read to its end (`persistent_workers=True`: when
the loader is dropped). `pin_memory` is taken for torch's signature and ignored: there is no pinned memory on the
CPU, and a host-to-device copy starts from any host buffer."""

from __future__ import annotations

import bisect
import itertools
import math
import multiprocessing
import os
import pickle
import queue
import random
import sys
import traceback
from dataclasses import dataclass
from typing import Any, Callable, Generic, Iterable, Iterator, Sequence, TypeVar

from lazygrad.dtype import dtypes
from lazygrad.tensor import Tensor

T = TypeVar("T")


def _rng(generator: Any) -> random.Random:
    if isinstance(generator, random.Random):
        return generator
    if isinstance(generator, int):
        return random.Random(generator)
    # the library's random state: Tensor.manual_seed makes the order repeat
    return random.Random(int(Tensor.randint(1, low=0, high=2**31 - 1).item()))


class Dataset(Generic[T]):
    def __getitem__(self, index: int) -> T:
        raise NotImplementedError(f"{type(self).__name__} has no __getitem__")

    def __add__(self, other: Dataset) -> ConcatDataset:
        return ConcatDataset([self, other])


class IterableDataset(Dataset[T]):
    def __iter__(self) -> Iterator[T]:
        raise NotImplementedError(f"{type(self).__name__} has no __iter__")


class TensorDataset(Dataset[tuple]):
    """Samples are the i-th rows of the tensors (all of one length along dim 0)."""

    def __init__(self, *tensors: Tensor):
        if not tensors:
            raise ValueError("TensorDataset needs at least one tensor")
        if any(t.shape[0] != tensors[0].shape[0] for t in tensors):
            raise ValueError(f"Size mismatch between tensors: {[t.shape[0] for t in tensors]}")
        self.tensors = tensors

    def __getitem__(self, index: int) -> tuple:
        return tuple(t[index] for t in self.tensors)

    def __getitems__(self, indices: Sequence[int]) -> tuple:
        """A whole batch: a view where the indices are a run, one gather per tensor otherwise."""
        indices = list(indices)
        if indices and indices == list(range(indices[0], indices[0] + len(indices))):
            return tuple(t[indices[0] : indices[0] + len(indices)] for t in self.tensors)
        index = Tensor(indices, dtype=dtypes.int64, device=self.tensors[0].device)
        return tuple(t[index] for t in self.tensors)

    def __len__(self) -> int:
        return self.tensors[0].shape[0]


class Subset(Dataset[T]):
    def __init__(self, dataset: Dataset[T], indices: Sequence[int]):
        self.dataset, self.indices = dataset, list(indices)

    def __getitem__(self, index: int | list[int]) -> Any:
        if isinstance(index, list):
            return self.dataset[[self.indices[i] for i in index]]  # type: ignore[index]
        return self.dataset[self.indices[index]]

    def __getitems__(self, indices: Sequence[int]) -> Any:
        inner = [self.indices[i] for i in indices]
        if hasattr(self.dataset, "__getitems__"):
            return self.dataset.__getitems__(inner)
        return [self.dataset[i] for i in inner]

    def __len__(self) -> int:
        return len(self.indices)


class ConcatDataset(Dataset[T]):
    def __init__(self, datasets: Iterable[Dataset]):
        self.datasets = list(datasets)
        if not self.datasets:
            raise ValueError("datasets should not be an empty iterable")
        self.cumulative_sizes, total = [], 0
        for d in self.datasets:
            total += len(d)  # type: ignore[arg-type]
            self.cumulative_sizes.append(total)

    def __len__(self) -> int:
        return self.cumulative_sizes[-1]

    def __getitem__(self, index: int) -> T:
        if index < 0:
            if -index > len(self):
                raise ValueError("absolute value of index should not exceed dataset length")
            index += len(self)
        which = bisect.bisect_right(self.cumulative_sizes, index)
        start = self.cumulative_sizes[which - 1] if which else 0
        return self.datasets[which][index - start]


def random_split(dataset: Dataset, lengths: Sequence[int | float], generator: Any = None) -> list[Subset]:
    """torch's: lengths as counts summing to len(dataset), or fractions summing to 1 (the remainder spread one by
    one over the first parts)."""
    n = len(dataset)  # type: ignore[arg-type]
    if math.isclose(sum(lengths), 1) and sum(lengths) <= 1:
        counts = [int(math.floor(n * f)) for f in lengths]
        for i in range(n - sum(counts)):
            counts[i % len(counts)] += 1
    else:
        counts = [int(x) for x in lengths]
    if sum(counts) != n:
        raise ValueError("Sum of input lengths does not equal the length of the input dataset!")
    order = list(range(n))
    _rng(generator).shuffle(order)
    out, start = [], 0
    for c in counts:
        out.append(Subset(dataset, order[start : start + c]))
        start += c
    return out


# *** samplers ***


class Sampler(Generic[T]):
    def __iter__(self) -> Iterator[T]:
        raise NotImplementedError

    def __len__(self) -> int:
        raise TypeError(f"{type(self).__name__} has no length")


class SequentialSampler(Sampler[int]):
    def __init__(self, data_source: Any):
        self.data_source = data_source

    def __iter__(self) -> Iterator[int]:
        return iter(range(len(self.data_source)))

    def __len__(self) -> int:
        return len(self.data_source)


class RandomSampler(Sampler[int]):
    def __init__(
        self, data_source: Any, replacement: bool = False, num_samples: int | None = None, generator: Any = None
    ):
        self.data_source, self.replacement, self.generator = data_source, replacement, generator
        self._num_samples = num_samples
        if num_samples is not None and num_samples <= 0:
            raise ValueError(f"num_samples should be a positive integer value, but got num_samples={num_samples}")

    @property
    def num_samples(self) -> int:
        return len(self.data_source) if self._num_samples is None else self._num_samples

    def __iter__(self) -> Iterator[int]:
        rng, n = _rng(self.generator), len(self.data_source)
        if self.replacement:
            return iter([rng.randrange(n) for _ in range(self.num_samples)])
        out: list[int] = []
        while len(out) < self.num_samples:
            order = list(range(n))
            rng.shuffle(order)
            out += order
        return iter(out[: self.num_samples])

    def __len__(self) -> int:
        return self.num_samples


class SubsetRandomSampler(Sampler[int]):
    def __init__(self, indices: Sequence[int], generator: Any = None):
        self.indices, self.generator = list(indices), generator

    def __iter__(self) -> Iterator[int]:
        order = list(self.indices)
        _rng(self.generator).shuffle(order)
        return iter(order)

    def __len__(self) -> int:
        return len(self.indices)


class WeightedRandomSampler(Sampler[int]):
    def __init__(self, weights: Sequence[float], num_samples: int, replacement: bool = True, generator: Any = None):
        if isinstance(weights, Tensor):
            weights = weights.tolist()
        self.weights, self.num_samples, self.replacement, self.generator = (
            list(weights),
            num_samples,
            replacement,
            generator,
        )
        if not replacement and num_samples > len(self.weights):
            raise ValueError("num_samples must not exceed the number of weights without replacement")

    def __iter__(self) -> Iterator[int]:
        rng = _rng(self.generator)
        if self.replacement:
            return iter(rng.choices(range(len(self.weights)), weights=self.weights, k=self.num_samples))
        # without replacement: keys u^(1/w) (Efraimidis-Spirakis), the largest num_samples
        keys = [(rng.random() ** (1 / w) if w > 0 else -1.0, i) for i, w in enumerate(self.weights)]
        return iter([i for _, i in sorted(keys, reverse=True)[: self.num_samples]])

    def __len__(self) -> int:
        return self.num_samples


class BatchSampler(Sampler[list[int]]):
    def __init__(self, sampler: Iterable[int], batch_size: int, drop_last: bool):
        if not isinstance(batch_size, int) or isinstance(batch_size, bool) or batch_size <= 0:
            raise ValueError(f"batch_size should be a positive integer value, but got batch_size={batch_size}")
        self.sampler, self.batch_size, self.drop_last = sampler, batch_size, drop_last

    def __iter__(self) -> Iterator[list[int]]:
        batch: list[int] = []
        for i in self.sampler:
            batch.append(i)
            if len(batch) == self.batch_size:
                yield batch
                batch = []
        if batch and not self.drop_last:
            yield batch

    def __len__(self) -> int:
        n = len(self.sampler)  # type: ignore[arg-type]
        return n // self.batch_size if self.drop_last else -(-n // self.batch_size)


class DistributedSampler(Sampler[int]):
    """torch's: this rank's share (every num_replicas-th index of one global order, padded by wrapping around to a
    multiple of the world, or cut with drop_last); shuffled by seed + epoch (`set_epoch` each epoch). The rank and
    world default to lazygrad.distributed's."""

    def __init__(
        self,
        dataset: Any,
        num_replicas: int | None = None,
        rank: int | None = None,
        shuffle: bool = True,
        seed: int = 0,
        drop_last: bool = False,
    ):
        from lazygrad import distributed

        self.dataset, self.shuffle, self.seed, self.drop_last = dataset, shuffle, seed, drop_last
        self.num_replicas = distributed.world_size() if num_replicas is None else num_replicas
        self.rank = distributed.rank() if rank is None else rank
        if not 0 <= self.rank < self.num_replicas:
            raise ValueError(f"Invalid rank {self.rank}, rank should be in the interval [0, {self.num_replicas - 1}]")
        self.epoch = 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def __iter__(self) -> Iterator[int]:
        from lazygrad.distributed import shard_indices

        n = len(self.dataset)
        return iter(shard_indices(n, self.shuffle, self.seed, self.epoch, self.drop_last, self.rank, self.num_replicas))

    def __len__(self) -> int:
        n = len(self.dataset)
        return n // self.num_replicas if self.drop_last else -(-n // self.num_replicas)


# *** collation and the loader ***


def default_collate(batch: list[Any]) -> Any:
    """torch's default_collate: a list of samples -> one batch of the same structure."""
    return _collate(batch, _tensor_leaf)


def _tensor_leaf(kind: str, batch: list[Any]) -> Tensor:
    if kind == "tensor":
        return Tensor.stack(list(batch), dim=0)
    if kind == "numpy":  # arrays and numpy scalars: data in, as Tensor(np.stack(...))
        import numpy as np

        return Tensor(np.stack([np.asarray(b) for b in batch]))
    return Tensor(list(batch), dtype={"bool": dtypes.bool, "int": dtypes.int64, "float": dtypes.float64}[kind])


def _collate(batch: list[Any], leaf: Callable[[str, list[Any]], Any]) -> Any:
    """The structure of default_collate; `leaf` makes each stacked leaf (a Tensor here, numpy in a worker)."""
    first = batch[0]
    if isinstance(first, Tensor):
        return leaf("tensor", batch)
    for kind, typ in (("bool", bool), ("int", int), ("float", float)):  # bool first: it is an int
        if isinstance(first, typ):
            return leaf(kind, batch)
    if isinstance(first, (str, bytes)):
        return list(batch)
    if type(first).__module__ == "numpy":
        return leaf("numpy", batch)
    if isinstance(first, dict):
        return {k: _collate([b[k] for b in batch], leaf) for k in first}
    if isinstance(first, tuple) and hasattr(first, "_fields"):  # a namedtuple
        return type(first)(*(_collate(list(s), leaf) for s in zip(*batch)))
    if isinstance(first, (tuple, list)):
        if any(len(b) != len(first) for b in batch):
            raise RuntimeError("each element in list of batch should be of equal size")
        return [_collate(list(s), leaf) for s in zip(*batch)]
    raise TypeError(
        f"default_collate: batch must contain tensors, numbers, numpy arrays, dicts or lists; found {type(first)}"
    )


def default_convert(data: Any) -> Any:
    return data


class DataLoader(Generic[T]):
    def __init__(
        self,
        dataset: Dataset[T],
        batch_size: int | None = 1,
        shuffle: bool | None = None,
        sampler: Sampler | Iterable | None = None,
        batch_sampler: Sampler | Iterable | None = None,
        num_workers: int = 0,
        collate_fn: Callable | None = None,
        pin_memory: bool = False,
        drop_last: bool = False,
        timeout: float = 0,
        worker_init_fn: Callable | None = None,
        multiprocessing_context: Any = None,
        generator: Any = None,
        *,
        prefetch_factor: int | None = None,
        persistent_workers: bool = False,
        pin_memory_device: str = "",
        in_order: bool = True,
    ):
        if num_workers < 0:
            raise ValueError("num_workers option should be non-negative; use num_workers=0 to disable multiprocessing.")
        if timeout < 0:
            raise ValueError("timeout option should be non-negative")
        if num_workers == 0 and prefetch_factor is not None:
            raise ValueError(
                "prefetch_factor option could only be specified in multiprocessing."
                "let num_workers > 0 to enable multiprocessing, otherwise set prefetch_factor to None."
            )
        if prefetch_factor is not None and prefetch_factor < 0:
            raise ValueError("prefetch_factor option should be non-negative")
        if persistent_workers and num_workers == 0:
            raise ValueError("persistent_workers option needs num_workers > 0")
        self.dataset, self.batch_size, self.drop_last, self.generator = dataset, batch_size, drop_last, generator
        self.num_workers, self.pin_memory, self.timeout = num_workers, pin_memory, timeout
        self.prefetch_factor = 2 if num_workers > 0 and prefetch_factor is None else prefetch_factor
        self.persistent_workers, self.worker_init_fn, self.in_order = persistent_workers, worker_init_fn, in_order
        self.multiprocessing_context = _mp_context(multiprocessing_context, num_workers)
        self._workers: _WorkerIter | None = None
        iterable = isinstance(dataset, IterableDataset)
        if iterable and (shuffle or sampler is not None or batch_sampler is not None):
            raise ValueError("DataLoader with IterableDataset: expected unspecified shuffle, sampler and batch_sampler")
        if batch_sampler is not None:
            if batch_size != 1 or shuffle or sampler is not None or drop_last:
                raise ValueError(
                    "batch_sampler option is mutually exclusive with batch_size, shuffle, sampler, and drop_last"
                )
            self.batch_size, self.drop_last = None, False
        elif batch_size is None and drop_last:
            raise ValueError("batch_size=None option disables auto-batching and is mutually exclusive with drop_last")
        if sampler is not None and shuffle:
            raise ValueError("sampler option is mutually exclusive with shuffle")
        if sampler is None and not iterable:
            sampler = RandomSampler(dataset, generator=generator) if shuffle else SequentialSampler(dataset)
        if batch_sampler is None and self.batch_size is not None and not iterable:
            batch_sampler = BatchSampler(sampler, self.batch_size, drop_last)  # type: ignore[arg-type]
        self.sampler, self.batch_sampler = sampler, batch_sampler
        self._auto_collation = batch_sampler is not None or (iterable and batch_size is not None)
        self.collate_fn = collate_fn or (default_collate if self._auto_collation else default_convert)

    def __iter__(self) -> Iterator[Any]:
        if self.num_workers == 0:
            return self._batches()
        if not self.persistent_workers:
            return _WorkerIter(self)
        if self._workers is None:
            self._workers = _WorkerIter(self)
        else:
            self._workers.reset()
        return self._workers

    def _batches(self) -> Iterator[Any]:
        if isinstance(self.dataset, IterableDataset):
            yield from self._iter_iterable()
            return
        if self.batch_sampler is None:
            for i in self.sampler:  # type: ignore[union-attr]
                yield self.collate_fn(self.dataset[i])
            return
        for indices in self.batch_sampler:
            yield _fetch(self.dataset, list(indices), self.collate_fn)

    def _iter_iterable(self) -> Iterator[Any]:
        if self.batch_size is None:
            for sample in self.dataset:  # type: ignore[attr-defined]
                yield self.collate_fn(sample)
            return
        batch: list[Any] = []
        for sample in self.dataset:  # type: ignore[attr-defined]
            batch.append(sample)
            if len(batch) == self.batch_size:
                yield self.collate_fn(batch)
                batch = []
        if batch and not self.drop_last:
            yield self.collate_fn(batch)

    def __len__(self) -> int:
        if isinstance(self.dataset, IterableDataset):
            n = len(self.dataset)  # type: ignore[arg-type]
            if self.batch_size is None:
                return n
            return n // self.batch_size if self.drop_last else -(-n // self.batch_size)
        return len(self.batch_sampler if self.batch_sampler is not None else self.sampler)  # type: ignore[arg-type]


def _fetch(dataset: Any, indices: list[int], collate: Callable) -> Any:
    if hasattr(dataset, "__getitems__") and collate in (default_collate, _numpy_collate):
        batch = dataset.__getitems__(indices)
        # a TensorDataset's batch (or a Subset's of one) is collated already: one gather per tensor
        return list(batch) if _is_batched(dataset) else collate(batch)
    return collate([dataset[i] for i in indices])


def _is_batched(dataset: Any) -> bool:
    """A Subset over a TensorDataset gives a collated batch through __getitems__ too."""
    while isinstance(dataset, Subset):
        dataset = dataset.dataset
    return isinstance(dataset, TensorDataset)


# *** worker processes ***


@dataclass(frozen=True)
class WorkerInfo:
    id: int
    num_workers: int
    seed: int
    dataset: Any


_worker_info: WorkerInfo | None = None


def get_worker_info() -> WorkerInfo | None:
    """In a DataLoader worker: its id, the number of workers, its seed and its copy of the dataset (an
    IterableDataset shards itself by these); None in any other process, as torch."""
    return _worker_info


def _mp_context(context: Any, num_workers: int) -> Any:
    """torch's checks; the default is fork where the platform has it (torch's default on Linux)."""
    if context is None:
        return None
    if num_workers == 0:
        raise ValueError(
            "multiprocessing_context can only be used with multi-process loading (num_workers > 0), "
            f"but got num_workers={num_workers}"
        )
    if isinstance(context, str):
        methods = multiprocessing.get_all_start_methods()
        if context not in methods:
            raise ValueError(
                f"multiprocessing_context option should specify a valid start method in {methods!r}, but got "
                f"multiprocessing_context={context!r}"
            )
        return multiprocessing.get_context(context)
    if not isinstance(context, multiprocessing.context.BaseContext):
        raise TypeError(
            "multiprocessing_context option should be a valid context object or a string specifying the start "
            f"method, but got multiprocessing_context={context}"
        )
    return context


class _Sent:
    """A Tensor leaf of a worker's batch on its way to the parent, as numpy; the parent makes it a Tensor."""

    def __init__(self, array: Any):
        self.array = array


def _numpy_leaf(kind: str, batch: list[Any]) -> _Sent:
    import numpy as np

    if kind == "tensor":
        return _Sent(np.stack([t.numpy() for t in batch]))
    if kind == "numpy":
        return _Sent(np.stack([np.asarray(b) for b in batch]))
    return _Sent(np.array(batch, dtype={"bool": np.bool_, "int": np.int64, "float": np.float64}[kind]))


def _numpy_collate(batch: list[Any]) -> Any:
    """default_collate in a worker: numpy leaves, made Tensors in the parent."""
    return _collate(batch, _numpy_leaf)


def _map_leaves(data: Any, fn: Callable[[Any], Any]) -> Any:
    if isinstance(data, dict):
        return {k: _map_leaves(v, fn) for k, v in data.items()}
    if isinstance(data, tuple) and hasattr(data, "_fields"):
        return type(data)(*(_map_leaves(v, fn) for v in data))
    if isinstance(data, (tuple, list)):
        return type(data)(_map_leaves(v, fn) for v in data)
    return fn(data)


def _send_tensor(x: Any) -> Any:
    return _Sent(x.numpy()) if isinstance(x, Tensor) else x


def _receive_tensor(x: Any) -> Any:
    return Tensor(x.array) if isinstance(x, _Sent) else x


class _Failure:
    """An exception raised in a worker, re-raised in the parent with the worker's traceback (as torch's
    ExceptionWrapper: the same class when it takes one message, RuntimeError otherwise)."""

    def __init__(self, worker_id: int):
        typ = sys.exc_info()[0]
        where = f"in DataLoader worker process {worker_id}"
        self.text = f"Caught {typ.__name__} {where}.\nOriginal {traceback.format_exc()}"
        try:
            pickle.dumps(typ)
            self.typ = typ
        except Exception:
            self.typ = RuntimeError

    def reraise(self) -> None:
        try:
            error = self.typ(self.text)
        except Exception:
            raise RuntimeError(self.text) from None
        raise error


_EXHAUSTED = "exhausted"  # an IterableDataset worker has no more batches


def _worker_loop(
    loader: dict, worker_id: int, num_workers: int, seed: int, tasks: Any, results: Any, parent: int
) -> None:
    """One worker: takes (epoch, task id, indices) until None, answers (epoch, task id, pickled batch)."""
    global _worker_info
    dataset = loader["dataset"]
    random.seed(seed)
    Tensor.manual_seed(seed)
    _worker_info = WorkerInfo(worker_id, num_workers, seed, dataset)
    collate = loader["collate_fn"]
    failed = None
    try:
        if loader["worker_init_fn"] is not None:
            loader["worker_init_fn"](worker_id)
    except Exception:
        failed = _Failure(worker_id)  # reported at the first batch, as torch
    epoch, samples = None, None
    try:
        while True:
            if not tasks.poll(1.0):
                if os.getppid() != parent:  # the parent died without shutting us down
                    break
                continue
            task = tasks.recv()
            if task is None:
                break
            task_epoch, task_id, index = task
            if failed is not None:
                results.put((task_epoch, task_id, failed))
                continue
            try:
                if index is None:  # an IterableDataset: the next batch of this worker's own iterator
                    if task_epoch != epoch:
                        epoch, samples = task_epoch, iter(dataset)
                    size = loader["batch_size"] or 1
                    batch = list(itertools.islice(samples, size))
                    if not batch or (loader["drop_last"] and len(batch) < size):
                        samples = iter(())
                        results.put((task_epoch, task_id, _EXHAUSTED))
                        continue
                    data = collate(batch) if loader["batch_size"] is not None else collate(batch[0])
                elif isinstance(index, list):
                    data = _fetch(dataset, index, collate)
                else:
                    data = collate(dataset[index])
                answer: Any = pickle.dumps(_map_leaves(data, _send_tensor), protocol=pickle.HIGHEST_PROTOCOL)
            except Exception:
                answer = _Failure(worker_id)
            results.put((task_epoch, task_id, answer))
    except KeyboardInterrupt:
        pass
    results.cancel_join_thread()  # a batch the parent will not read does not hold up the exit


class _WorkerIter:
    """The batches of a DataLoader with num_workers > 0. The parent iterates the sampler and hands each batch's
    indices to the workers in turn, at most prefetch_factor batches ahead per worker, and yields the answers in
    sampler order. Workers stop when the iterator is dropped (or, with persistent_workers, the loader)."""

    def __init__(self, loader: DataLoader):
        self.loader, self.iterable = loader, isinstance(loader.dataset, IterableDataset)
        fork = "fork" in multiprocessing.get_all_start_methods()
        ctx = loader.multiprocessing_context or (multiprocessing.get_context("fork") if fork else multiprocessing)
        n = loader.num_workers
        collate = loader.collate_fn
        if collate is default_collate:  # numpy leaves: a worker that only indexes numpy data runs no kernel
            collate = _numpy_collate
        config = {
            "dataset": loader.dataset,
            "collate_fn": collate,
            "batch_size": loader.batch_size,
            "drop_last": loader.drop_last,
            "worker_init_fn": loader.worker_init_fn,
        }
        seed = _rng(loader.generator).randrange(2**62)
        # a pipe per worker, not a Queue: a Queue's feeder thread is closed by its finalizer, and a shutdown
        # from the garbage collector (the iterator in a cycle) found it closed and the workers never told to stop
        pipes = [ctx.Pipe(duplex=False) for _ in range(n)]
        self.results, self.tasks = ctx.Queue(), [send for _, send in pipes]
        self.workers = [
            ctx.Process(
                target=_worker_loop,
                args=(config, i, n, seed + i, pipes[i][0], self.results, os.getpid()),
                daemon=True,
            )
            for i in range(n)
        ]
        for w in self.workers:
            w.start()
        self.epoch = -1
        self.reset()

    def reset(self) -> None:
        self.epoch += 1
        self.sent = 0
        self.pending: dict[int, int] = {}  # task id -> worker
        self.arrived: dict[int, Any] = {}
        self.active = [True] * len(self.workers)
        self.turn = 0
        loader = self.loader
        self.indices = None if self.iterable else iter(loader.batch_sampler or loader.sampler)  # type: ignore[arg-type]
        for _ in range(max(1, loader.prefetch_factor) * len(self.workers)):  # type: ignore[operator]
            self._send()

    def _send(self) -> None:
        n = len(self.workers)
        for k in range(n):
            w = (self.turn + k) % n
            if self.active[w]:
                break
        else:
            return
        index = None
        if self.indices is not None:
            index = next(self.indices, _EXHAUSTED)
            if index is _EXHAUSTED:
                return
            index = list(index) if self.loader.batch_sampler is not None else index
        self.tasks[w].send((self.epoch, self.sent, index))
        self.pending[self.sent] = w
        self.sent += 1
        self.turn = w + 1

    def __iter__(self) -> _WorkerIter:
        return self

    def __next__(self) -> Any:
        while self.pending:
            first = min(self.pending) if self.loader.in_order else next(iter(self.arrived), None)
            if first not in self.arrived:
                self._receive()
                continue
            answer = self.arrived.pop(first)
            del self.pending[first]
            if answer == _EXHAUSTED:
                continue
            self._send()
            if isinstance(answer, _Failure):
                answer.reraise()
            return _map_leaves(pickle.loads(answer), _receive_tensor)
        if not self.loader.persistent_workers:
            self.shutdown()
        raise StopIteration

    def _receive(self) -> None:
        waited, timeout = 0.0, self.loader.timeout
        while True:
            try:
                epoch, task, answer = self.results.get(timeout=1.0 if not timeout else min(1.0, timeout - waited))
                break
            except queue.Empty:
                waited += 1.0 if not timeout else min(1.0, timeout - waited)
                dead = [w.pid for w in self.workers if w.exitcode is not None]
                if dead:
                    raise RuntimeError(f"DataLoader worker (pid(s) {dead}) exited unexpectedly") from None
                if timeout and waited >= timeout:
                    raise RuntimeError(f"DataLoader timed out after {timeout} seconds") from None
        if epoch != self.epoch:  # an answer to an epoch left early (persistent workers)
            return
        if answer == _EXHAUSTED:
            self.active[self.pending[task]] = False
        self.arrived[task] = answer

    def shutdown(self) -> None:
        if not getattr(self, "workers", None):  # (none started: __init__ failed before)
            return
        for send in self.tasks:
            try:
                send.send(None)
            except OSError:  # a worker that died
                pass
        for w in self.workers:
            if w.pid is None:  # never started (a dataset spawn could not pickle)
                continue
            w.join(timeout=5)
            if w.is_alive():
                w.terminate()
                w.join()
        for send in self.tasks:
            send.close()
        self.results.cancel_join_thread()
        self.results.close()
        self.workers = []

    def __del__(self) -> None:
        self.shutdown()

    def __len__(self) -> int:
        return len(self.loader)


__all__ = [
    "Dataset",
    "IterableDataset",
    "TensorDataset",
    "Subset",
    "ConcatDataset",
    "random_split",
    "Sampler",
    "SequentialSampler",
    "RandomSampler",
    "SubsetRandomSampler",
    "WeightedRandomSampler",
    "BatchSampler",
    "DistributedSampler",
    "DataLoader",
    "default_collate",
    "default_convert",
    "get_worker_info",
    "WorkerInfo",
]
