"""torch.nn.utils.rnn: padding helpers and packed sequences (the RNN layers take a PackedSequence as torch's do)."""

from __future__ import annotations

from typing import Any, NamedTuple, Sequence

from lazygrad.dtype import dtypes
from lazygrad.tensor import ArgumentError, Tensor


def pad_sequence(
    sequences: Sequence[Tensor], batch_first: bool = False, padding_value: float = 0.0, padding_side: str = "right"
) -> Tensor:
    """Sequences (L_i, *) padded to the longest: (L, B, *), or (B, L, *) with batch_first."""
    if not sequences:
        raise ArgumentError("pad_sequence: received an empty list of sequences")
    if padding_side not in ("left", "right"):
        raise ArgumentError(f"Expected padding_side to be one of left or right, but got {padding_side}.")
    longest = max(s.shape[0] for s in sequences)
    rest = sequences[0].shape[1:]
    if any(s.shape[1:] != rest for s in sequences):
        raise ArgumentError(f"pad_sequence: trailing dims differ: {[s.shape for s in sequences]}")
    padded = []
    for s in sequences:
        extra = longest - s.shape[0]
        side = (0, extra) if padding_side == "right" else (extra, 0)
        padded.append(s.pad([side] + [(0, 0)] * len(rest), value=padding_value))
    return Tensor.stack(padded, dim=0 if batch_first else 1)


def unpad_sequence(
    padded_sequences: Tensor, lengths: Tensor | Sequence[int], batch_first: bool = False
) -> list[Tensor]:
    x = padded_sequences if batch_first else padded_sequences.transpose(0, 1)
    ls = lengths.tolist() if isinstance(lengths, Tensor) else list(lengths)
    return [x[i, : int(n)] for i, n in enumerate(ls)]


class PackedSequence(NamedTuple):
    """torch's layout: `data` holds the sequences' steps time-major, at step t the first batch_sizes[t] sequences
    of the batch sorted by decreasing length (those still running); sorted_indices orders the caller's batch that way
    (None where the batch came sorted), unsorted_indices undoes it."""

    data: Tensor
    batch_sizes: Tensor
    sorted_indices: Tensor | None = None
    unsorted_indices: Tensor | None = None

    def to(self, *args: Any, **kwargs: Any) -> PackedSequence:
        return self._replace(data=self.data.to(*args, **kwargs))

    def float(self) -> PackedSequence:
        return self._replace(data=self.data.float())

    def double(self) -> PackedSequence:
        return self._replace(data=self.data.double())

    def half(self) -> PackedSequence:
        return self._replace(data=self.data.half())

    @property
    def is_cuda(self) -> bool:
        return self.data.device.startswith("CUDA")

    def sizes(self) -> list[int]:
        """batch_sizes as numbers (read from their tensor: the packing functions made it from host values)."""
        return [int(n) for n in self.batch_sizes.tolist()]

    def lengths(self) -> list[int]:
        """Each sorted sequence's length."""
        sizes = self.sizes()
        return [sum(1 for n in sizes if n > b) for b in range(sizes[0] if sizes else 0)]


def _host_lengths(lengths: Tensor | Sequence[int]) -> list[int]:
    return [int(n) for n in (lengths.tolist() if isinstance(lengths, Tensor) else lengths)]


def pack_padded_sequence(
    input: Tensor, lengths: Tensor | Sequence[int], batch_first: bool = False, enforce_sorted: bool = True
) -> PackedSequence:
    """A padded batch (T, B, *) (or (B, T, *) with batch_first) packed: the lengths are read on the host, as torch
    reads them from a CPU tensor."""
    sizes = _host_lengths(lengths)
    x = input.transpose(0, 1) if batch_first else input
    if len(sizes) != x.shape[1]:
        raise ArgumentError(f"pack_padded_sequence: {len(sizes)} lengths for a batch of {x.shape[1]}")
    if any(n <= 0 for n in sizes):
        raise RuntimeError(
            "Length of all samples has to be greater than 0, but found an element in 'lengths' that is <= 0"
        )
    if max(sizes, default=0) > x.shape[0]:
        raise ArgumentError(f"pack_padded_sequence: a length of {max(sizes)} in a batch of {x.shape[0]} steps")
    order = sorted(range(len(sizes)), key=lambda b: -sizes[b])  # stable: torch's sort keeps ties in order
    if enforce_sorted:
        if any(a < b for a, b in zip(sizes, sizes[1:])):
            raise RuntimeError(
                "`lengths` array must be sorted in decreasing order when `enforce_sorted` is True. You can pass "
                "`enforce_sorted=False` to pack_padded_sequence and/or pack_sequence to sidestep this requirement "
                "if you do not need ONNX exportability."
            )
        order, sorted_indices, unsorted_indices = list(range(len(sizes))), None, None
    else:
        unsorted = [0] * len(order)
        for i, b in enumerate(order):
            unsorted[b] = i
        sorted_indices = Tensor(order, dtype=dtypes.int64, device=input.device)
        unsorted_indices = Tensor(unsorted, dtype=dtypes.int64, device=input.device)
        x = x[:, sorted_indices]
    ordered = [sizes[b] for b in order]
    batch_sizes = [sum(1 for n in ordered if n > t) for t in range(ordered[0] if ordered else 0)]
    data = Tensor.cat(*[x[t, :n] for t, n in enumerate(batch_sizes)], dim=0)
    return PackedSequence(data, Tensor(batch_sizes, dtype=dtypes.int64), sorted_indices, unsorted_indices)


def _padded_sorted(sequence: PackedSequence, padding_value: float, total_length: int | None) -> Tensor:
    """The packed steps as (T, B, *) in the packed (sorted) batch order, padded with padding_value."""
    sizes = sequence.sizes()
    steps = len(sizes) if total_length is None else total_length
    data, batch, offset, rows = sequence.data, sizes[0], 0, []
    rest = [(0, 0)] * (data.ndim - 1)
    for n in sizes:
        rows.append(data[offset : offset + n].pad([(0, batch - n)] + rest, value=padding_value))
        offset += n
    rows += [Tensor.full((batch, *data.shape[1:]), padding_value, dtype=data.dtype, device=data.device)] * (
        steps - len(sizes)
    )
    return Tensor.stack(rows, dim=0)


def pad_packed_sequence(
    sequence: PackedSequence, batch_first: bool = False, padding_value: float = 0.0, total_length: int | None = None
) -> tuple[Tensor, Tensor]:
    """The inverse of pack_padded_sequence: (padded batch in the caller's order, its lengths as int64)."""
    longest = len(sequence.sizes())
    if total_length is not None and total_length < longest:
        raise ValueError(
            "Expected total_length to be at least the length of the longest sequence in input, but got "
            f"total_length={total_length} and max sequence length being {longest}"
        )
    padded = _padded_sorted(sequence, padding_value, total_length)
    lengths = sequence.lengths()
    if sequence.unsorted_indices is not None:
        padded = padded[:, sequence.unsorted_indices]
        order = sequence.sorted_indices.tolist()
        unsorted = [0] * len(lengths)
        for i, b in enumerate(order):
            unsorted[b] = lengths[i]
        lengths = unsorted
    return (padded.transpose(0, 1) if batch_first else padded), Tensor(lengths, dtype=dtypes.int64)


def pack_sequence(sequences: Sequence[Tensor], enforce_sorted: bool = True) -> PackedSequence:
    return pack_padded_sequence(pad_sequence(sequences), [s.shape[0] for s in sequences], False, enforce_sorted)


__all__ = [
    "pad_sequence",
    "unpad_sequence",
    "PackedSequence",
    "pack_padded_sequence",
    "pad_packed_sequence",
    "pack_sequence",
]
