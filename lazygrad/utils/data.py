"""torch.utils.data's datasets, samplers and DataLoader (`from lazygrad.utils.data import DataLoader, TensorDataset`).

A batch of a `TensorDataset` is one gather of each tensor by the batch's indices (or a view of a run of them when not
shuffled), not a stack of per-sample slices; any other dataset's samples are collated as torch's default_collate
does (tensors stacked, numbers and numpy arrays made tensors, tuples, lists and dicts element by element). A dataset
may define `__getitems__(indices)` to give a whole batch at once, as in torch.

Randomness: shuffles and splits draw their seed from the library's random state, so `Tensor.manual_seed(s)` makes
them repeat (as torch.manual_seed does for torch's); a `generator` (an int seed or a `random.Random`) overrides it.
Batches are built in the calling thread: `num_workers`, `pin_memory`, `prefetch_factor` and `persistent_workers` are
taken for torch's signature (the work per batch is building a lazy graph; the kernels run in parallel anyway)."""

from __future__ import annotations

import bisect
import math
import random
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
    first = batch[0]
    if isinstance(first, Tensor):
        return Tensor.stack(list(batch), dim=0)
    if isinstance(first, bool):
        return Tensor(list(batch), dtype=dtypes.bool)
    if isinstance(first, int):
        return Tensor(list(batch), dtype=dtypes.int64)
    if isinstance(first, float):
        return Tensor(list(batch), dtype=dtypes.float64)
    if isinstance(first, (str, bytes)):
        return list(batch)
    if type(first).__module__ == "numpy":  # arrays and numpy scalars: data in, as Tensor(np.stack(...))
        import numpy as np

        return Tensor(np.stack([np.asarray(b) for b in batch]))
    if isinstance(first, dict):
        return {k: default_collate([b[k] for b in batch]) for k in first}
    if isinstance(first, tuple) and hasattr(first, "_fields"):  # a namedtuple
        return type(first)(*(default_collate(list(s)) for s in zip(*batch)))
    if isinstance(first, (tuple, list)):
        if any(len(b) != len(first) for b in batch):
            raise RuntimeError("each element in list of batch should be of equal size")
        return [default_collate(list(s)) for s in zip(*batch)]
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
        self.dataset, self.batch_size, self.drop_last, self.generator = dataset, batch_size, drop_last, generator
        self.num_workers, self.pin_memory, self.timeout = num_workers, pin_memory, timeout
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
        if worker_init_fn is not None:
            worker_init_fn(0)  # the one "worker" is the calling thread

    def _fetch(self, indices: list[int]) -> Any:
        if hasattr(self.dataset, "__getitems__") and self.collate_fn is default_collate:
            batch = self.dataset.__getitems__(indices)
            # a TensorDataset's batch (or a Subset's of one) is collated already: one gather per tensor
            return list(batch) if _is_batched(self.dataset) else self.collate_fn(batch)
        return self.collate_fn([self.dataset[i] for i in indices])

    def __iter__(self) -> Iterator[Any]:
        if isinstance(self.dataset, IterableDataset):
            yield from self._iter_iterable()
            return
        if self.batch_sampler is None:
            for i in self.sampler:  # type: ignore[union-attr]
                yield self.collate_fn(self.dataset[i])
            return
        for indices in self.batch_sampler:
            yield self._fetch(list(indices))

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


def _is_batched(dataset: Any) -> bool:
    """A Subset over a TensorDataset gives a collated batch through __getitems__ too."""
    while isinstance(dataset, Subset):
        dataset = dataset.dataset
    return isinstance(dataset, TensorDataset)


def get_worker_info() -> None:
    """None: batches are made in the calling process (torch's answer outside a worker)."""
    return None


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
]
