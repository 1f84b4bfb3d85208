"""torch.nn's recurrent layers: RNNCell, GRUCell (LSTMCell is in nn/__init__.py) and the multi-layer RNN, LSTM and GRU
with torch's arguments (num_layers, bias, batch_first, dropout between layers, bidirectional, LSTM's proj_size),
parameter names (`weight_ih_l0`, `bias_hh_l1_reverse`, ...), initialization U(-1/sqrt(hidden), 1/sqrt(hidden)), gate
order and shapes of outputs and states. A sequence is unrolled step by step into one lazy graph: it fuses and
schedules like any other, its length fixed per graph (TinyJit replays a step of fixed length)."""

from __future__ import annotations

import math
from typing import Any

from lazygrad.nn import _uniform
from lazygrad.nn import functional as F
from lazygrad.nn.module import Module
from lazygrad.nn.utils.rnn import PackedSequence, _padded_sorted
from lazygrad.tensor import ArgumentError, Tensor


def _rnn_step(
    x: Tensor, h: Tensor, w_ih: Tensor, w_hh: Tensor, b_ih: Tensor | None, b_hh: Tensor | None, nonlinearity: str
) -> Tensor:
    pre = x.linear(w_ih, b_ih) + h.linear(w_hh, b_hh)
    return pre.tanh() if nonlinearity == "tanh" else pre.relu()


def _gru_step(x: Tensor, h: Tensor, w_ih: Tensor, w_hh: Tensor, b_ih: Tensor | None, b_hh: Tensor | None) -> Tensor:
    # torch's gate order (reset, update, new); the new gate's hidden part is multiplied by the reset gate after its bias
    ri, zi, ni = x.linear(w_ih, b_ih).chunk(3, -1)
    rh, zh, nh = h.linear(w_hh, b_hh).chunk(3, -1)
    r, z = (ri + rh).sigmoid(), (zi + zh).sigmoid()
    n = (ni + r * nh).tanh()
    return (1 - z) * n + z * h


def _lstm_step(
    x: Tensor,
    h: Tensor,
    c: Tensor,
    w_ih: Tensor,
    w_hh: Tensor,
    b_ih: Tensor | None,
    b_hh: Tensor | None,
    w_hr: Tensor | None,
) -> tuple[Tensor, Tensor]:
    i, f, g, o = (x.linear(w_ih, b_ih) + h.linear(w_hh, b_hh)).chunk(4, -1)
    c = f.sigmoid() * c + i.sigmoid() * g.tanh()
    h = o.sigmoid() * c.tanh()
    return (h if w_hr is None else h.linear(w_hr)), c


class RNNCell(Module):
    def __init__(
        self,
        input_size: int,
        hidden_size: int,
        bias: bool = True,
        nonlinearity: str = "tanh",
    ):
        super().__init__()
        if nonlinearity not in ("tanh", "relu"):
            raise ValueError(f"Unknown nonlinearity '{nonlinearity}'. Select from 'tanh' or 'relu'.")
        self.input_size, self.hidden_size, self.nonlinearity, self.bias = input_size, hidden_size, nonlinearity, bias
        bound = 1 / math.sqrt(hidden_size)
        self.weight_ih = _uniform((hidden_size, input_size), bound)
        self.weight_hh = _uniform((hidden_size, hidden_size), bound)
        self.bias_ih = _uniform((hidden_size,), bound) if bias else None
        self.bias_hh = _uniform((hidden_size,), bound) if bias else None

    def forward(self, x: Tensor, hx: Tensor | None = None) -> Tensor:
        h = Tensor.zeros(*x.shape[:-1], self.hidden_size, dtype=x.dtype, device=x.device) if hx is None else hx
        return _rnn_step(x, h, self.weight_ih, self.weight_hh, self.bias_ih, self.bias_hh, self.nonlinearity)

    def extra_repr(self) -> str:
        out = f"{self.input_size}, {self.hidden_size}" + ("" if self.bias else ", bias=False")
        return out + ("" if self.nonlinearity == "tanh" else f", nonlinearity={self.nonlinearity}")


class GRUCell(Module):
    def __init__(self, input_size: int, hidden_size: int, bias: bool = True):
        super().__init__()
        self.input_size, self.hidden_size, self.bias = input_size, hidden_size, bias
        bound = 1 / math.sqrt(hidden_size)
        self.weight_ih = _uniform((3 * hidden_size, input_size), bound)
        self.weight_hh = _uniform((3 * hidden_size, hidden_size), bound)
        self.bias_ih = _uniform((3 * hidden_size,), bound) if bias else None
        self.bias_hh = _uniform((3 * hidden_size,), bound) if bias else None

    def forward(self, x: Tensor, hx: Tensor | None = None) -> Tensor:
        h = Tensor.zeros(*x.shape[:-1], self.hidden_size, dtype=x.dtype, device=x.device) if hx is None else hx
        return _gru_step(x, h, self.weight_ih, self.weight_hh, self.bias_ih, self.bias_hh)

    def extra_repr(self) -> str:
        return f"{self.input_size}, {self.hidden_size}" + ("" if self.bias else ", bias=False")


class _RNNBase(Module):
    mode = "RNN_TANH"
    gates = 1

    def __init__(
        self,
        input_size: int,
        hidden_size: int,
        num_layers: int = 1,
        bias: bool = True,
        batch_first: bool = False,
        dropout: float = 0.0,
        bidirectional: bool = False,
        proj_size: int = 0,
        nonlinearity: str = "tanh",
    ):
        super().__init__()
        if not 0 <= dropout <= 1:
            raise ValueError("dropout should be a number in range [0, 1]")
        if proj_size < 0 or (proj_size and (proj_size >= hidden_size or self.gates != 4)):
            raise ValueError("proj_size has to be a positive integer smaller than hidden_size, and only for LSTM")
        if nonlinearity not in ("tanh", "relu"):
            raise ValueError(f"Unknown nonlinearity '{nonlinearity}'. Select from 'tanh' or 'relu'.")
        self.input_size, self.hidden_size, self.num_layers, self.bias = input_size, hidden_size, num_layers, bias
        self.batch_first, self.dropout, self.bidirectional, self.proj_size = (
            batch_first,
            dropout,
            bidirectional,
            proj_size,
        )
        self.nonlinearity = nonlinearity
        directions = 2 if bidirectional else 1
        out_size = proj_size or hidden_size
        bound = 1 / math.sqrt(hidden_size)
        for layer in range(num_layers):
            for suffix in ("", "_reverse")[:directions]:
                size_in = input_size if layer == 0 else out_size * directions
                name = f"l{layer}{suffix}"
                setattr(self, f"weight_ih_{name}", _uniform((self.gates * hidden_size, size_in), bound))
                setattr(self, f"weight_hh_{name}", _uniform((self.gates * hidden_size, out_size), bound))
                if bias:
                    setattr(self, f"bias_ih_{name}", _uniform((self.gates * hidden_size,), bound))
                    setattr(self, f"bias_hh_{name}", _uniform((self.gates * hidden_size,), bound))
                if proj_size:
                    setattr(self, f"weight_hr_{name}", _uniform((proj_size, hidden_size), bound))

    def extra_repr(self) -> str:
        out = f"{self.input_size}, {self.hidden_size}"
        for name, default in (
            ("proj_size", 0), ("num_layers", 1), ("bias", True), ("batch_first", False), ("dropout", 0.0),
            ("bidirectional", False),
        ):  # fmt: skip
            if getattr(self, name) != default:
                out += f", {name}={getattr(self, name)}"
        return out

    def flatten_parameters(self) -> None:
        """torch's packing of the weights into one cuDNN buffer: lazygrad reads each weight where it is."""

    def _weights(self, name: str) -> tuple[Tensor, Tensor, Tensor | None, Tensor | None]:
        return (
            getattr(self, f"weight_ih_{name}"),
            getattr(self, f"weight_hh_{name}"),
            getattr(self, f"bias_ih_{name}", None),
            getattr(self, f"bias_hh_{name}", None),
        )

    def _run(
        self, xs: list[Tensor], name: str, state: tuple[Tensor, ...], running: list[Tensor] | None
    ) -> tuple[list[Tensor], tuple[Tensor, ...]]:
        """The steps of one layer and direction. `running` (packed sequences): per step, which sequences have not
        ended; an ended one keeps its state, so that the last state is each sequence's own and a reversed pass starts
        at each sequence's own last step."""
        w = self._weights(name)
        outs = []
        for i, x in enumerate(xs):
            if self.gates == 4:
                new = _lstm_step(x, state[0], state[1], *w, getattr(self, f"weight_hr_{name}", None))
            elif self.gates == 3:
                new = (_gru_step(x, state[0], *w),)
            else:
                new = (_rnn_step(x, state[0], *w, self.nonlinearity),)
            state = new if running is None else tuple(running[i].where(a, b) for a, b in zip(new, state))
            outs.append(state[0])
        return outs, state

    def forward(self, input: Tensor | PackedSequence, hx: Any = None) -> tuple[Tensor | PackedSequence, Any]:
        if isinstance(input, PackedSequence):
            return self._forward_packed(input, hx)
        return self._forward(input, hx, None)

    def _forward_packed(self, packed: PackedSequence, hx: Any) -> tuple[PackedSequence, Any]:
        """A packed batch runs padded in its sorted order, each sequence's state frozen after its last step; the
        output is packed the same way, the last states come back in the caller's batch order (as torch)."""
        padded = _padded_sorted(packed, 0.0, None)
        lengths = Tensor(packed.lengths(), device=padded.device).unsqueeze(1)
        running = [lengths > t for t in range(padded.shape[0])]
        order, back = packed.sorted_indices, packed.unsorted_indices
        if hx is not None and order is not None:
            hx = tuple(h[:, order] for h in hx) if self.gates == 4 else hx[:, order]
        output, state = self._forward(padded, hx, running)
        data = Tensor.cat(*[output[t, :n] for t, n in enumerate(packed.sizes())], dim=0)
        if back is not None:
            state = tuple(h[:, back] for h in state) if self.gates == 4 else state[:, back]
        return packed._replace(data=data), state

    def _forward(self, input: Tensor, hx: Any, running: list[Tensor] | None) -> tuple[Tensor, Any]:
        batched = input.ndim == 3
        batch_first = self.batch_first and running is None  # (a packed batch runs time-major)
        if input.ndim not in (2, 3):
            raise ArgumentError(f"{type(self).__name__}: expected a 2-d or 3-d input, got shape {input.shape}")
        x = input if batched else input.unsqueeze(1)
        if batched and batch_first:
            x = x.transpose(0, 1)  # (T, N, C)
        if x.shape[-1] != self.input_size:
            raise ArgumentError(f"{type(self).__name__}: input size {x.shape[-1]} is not input_size {self.input_size}")
        steps, n = x.shape[0], x.shape[1]
        directions = 2 if self.bidirectional else 1
        out_size = self.proj_size or self.hidden_size
        lstm = self.gates == 4
        if hx is None:
            h0 = Tensor.zeros(self.num_layers * directions, n, out_size, dtype=x.dtype, device=x.device)
            c0 = Tensor.zeros(self.num_layers * directions, n, self.hidden_size, dtype=x.dtype, device=x.device)
        else:
            h0, c0 = hx if lstm else (hx, None)
            if not batched:
                h0, c0 = h0.unsqueeze(1), (None if c0 is None else c0.unsqueeze(1))
        layer_in = [x[t] for t in range(steps)]
        last_h, last_c = [], []
        for layer in range(self.num_layers):
            outs_dirs = []
            for d, suffix in enumerate(("", "_reverse")[:directions]):
                k = layer * directions + d
                state = (h0[k], c0[k]) if lstm else (h0[k],)
                seq = layer_in if d == 0 else layer_in[::-1]
                mask = None if running is None else running if d == 0 else running[::-1]
                outs, state = self._run(seq, f"l{layer}{suffix}", state, mask)
                outs_dirs.append(outs if d == 0 else outs[::-1])
                last_h.append(state[0])
                if lstm:
                    last_c.append(state[1])
            layer_in = [Tensor.cat(*[o[t] for o in outs_dirs], dim=-1) for t in range(steps)]
            if self.dropout and layer < self.num_layers - 1 and self._training():
                layer_in = [F.dropout(t, self.dropout) for t in layer_in]
        output = Tensor.stack(layer_in, dim=0)
        h_n = Tensor.stack(last_h, dim=0)
        if batched and batch_first:
            output = output.transpose(0, 1)
        if not batched:
            output, h_n = output.squeeze(1), h_n.squeeze(1)
        if not lstm:
            return output, h_n
        c_n = Tensor.stack(last_c, dim=0)
        return output, (h_n, c_n if batched else c_n.squeeze(1))


class RNN(_RNNBase):
    def __init__(self, *args: Any, **kwargs: Any):
        # torch's positional order: input_size, hidden_size, num_layers, nonlinearity, bias, batch_first, dropout,
        # bidirectional
        names = [
            "input_size",
            "hidden_size",
            "num_layers",
            "nonlinearity",
            "bias",
            "batch_first",
            "dropout",
            "bidirectional",
        ]
        kwargs.update(zip(names, args))
        super().__init__(**kwargs)


class LSTM(_RNNBase):
    gates = 4


class GRU(_RNNBase):
    gates = 3


__all__ = ["RNNCell", "GRUCell", "RNN", "LSTM", "GRU"]
