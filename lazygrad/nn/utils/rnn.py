"""torch.nn.utils.rnn's padding helpers (packed sequences are not offered: pad, and mask with lengths)."""

from __future__ import annotations

from typing import Sequence

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


__all__ = ["pad_sequence", "unpad_sequence"]
