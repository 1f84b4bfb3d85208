"""torch.distributions' most used families over lazy tensors: Normal, Uniform, Bernoulli, Categorical,
OneHotCategorical, and Independent over any of them (moments, log_prob, entropy, sample, rsample where the family is
reparameterizable) and kl_divergence between two of one family. Parameters broadcast as torch's; sample(shape) draws
shape + batch_shape values from lazygrad's generator, so Tensor.manual_seed makes the draws repeatable (not torch's
numbers: another generator)."""

from __future__ import annotations

import math
from typing import Any, Sequence

from lazygrad.dtype import dtypes
from lazygrad.tensor import Tensor, _broadcast_shape


def _tensor(x: Any, like: Tensor | None = None) -> Tensor:
    if isinstance(x, Tensor):
        return x if dtypes.is_float(x.dtype) else x.float()
    return Tensor(float(x), device=None if like is None else like.device)


def _broadcast(*xs: Tensor) -> list[Tensor]:
    shape: tuple[int, ...] = ()
    for x in xs:
        shape = _broadcast_shape(shape, x.shape)
    return [x.expand(shape) if x.shape != shape else x for x in xs]


class Distribution:
    has_rsample = False
    batch_shape: tuple[int, ...] = ()
    event_shape: tuple[int, ...] = ()

    def _extended(self, sample_shape: Sequence[int]) -> tuple[int, ...]:
        return tuple(sample_shape) + self.batch_shape + self.event_shape

    def sample(self, sample_shape: Sequence[int] = ()) -> Tensor:
        with Tensor.no_grad():
            return self.rsample(sample_shape).detach() if self.has_rsample else self._draw(sample_shape)

    def rsample(self, sample_shape: Sequence[int] = ()) -> Tensor:
        raise NotImplementedError(f"{type(self).__name__} has no reparameterized sample (rsample)")

    def _draw(self, sample_shape: Sequence[int]) -> Tensor:
        raise NotImplementedError

    @property
    def stddev(self) -> Tensor:
        return self.variance.sqrt()

    def __repr__(self) -> str:
        return f"{type(self).__name__}(batch_shape={self.batch_shape})"


class Normal(Distribution):
    has_rsample = True

    def __init__(self, loc: Any, scale: Any, validate_args: bool | None = None):
        self.loc, self.scale = _broadcast(_tensor(loc), _tensor(scale))
        self.batch_shape = self.loc.shape

    @property
    def mean(self) -> Tensor:
        return self.loc

    @property
    def mode(self) -> Tensor:
        return self.loc

    @property
    def variance(self) -> Tensor:
        return self.scale.square()

    def rsample(self, sample_shape: Sequence[int] = ()) -> Tensor:
        eps = Tensor.randn(*self._extended(sample_shape), dtype=self.loc.dtype, device=self.loc.device)
        return self.loc + eps * self.scale

    def log_prob(self, value: Any) -> Tensor:
        v = _tensor(value, self.loc)
        return -((v - self.loc).square()) / (2 * self.variance) - self.scale.log() - math.log(math.sqrt(2 * math.pi))

    def cdf(self, value: Any) -> Tensor:
        return 0.5 * (1 + ((_tensor(value, self.loc) - self.loc) / (self.scale * math.sqrt(2))).erf())

    def entropy(self) -> Tensor:
        return 0.5 + 0.5 * math.log(2 * math.pi) + self.scale.log()


class Uniform(Distribution):
    has_rsample = True

    def __init__(self, low: Any, high: Any, validate_args: bool | None = None):
        self.low, self.high = _broadcast(_tensor(low), _tensor(high))
        self.batch_shape = self.low.shape

    @property
    def mean(self) -> Tensor:
        return (self.low + self.high) / 2

    @property
    def variance(self) -> Tensor:
        return (self.high - self.low).square() / 12

    def rsample(self, sample_shape: Sequence[int] = ()) -> Tensor:
        u = Tensor.rand(*self._extended(sample_shape), dtype=self.low.dtype, device=self.low.device)
        return self.low + u * (self.high - self.low)

    def log_prob(self, value: Any) -> Tensor:
        v = _tensor(value, self.low)
        inside = (v >= self.low) & (v < self.high)
        return inside.where(-(self.high - self.low).log(), float("-inf"))

    def entropy(self) -> Tensor:
        return (self.high - self.low).log()


def _logits_and_probs(probs: Any, logits: Any, binary: bool) -> tuple[Tensor, Tensor]:
    if (probs is None) == (logits is None):
        raise ValueError("Either `probs` or `logits` must be specified, but not both.")
    if logits is not None:
        lg = _tensor(logits)
        if binary:
            return lg, lg.sigmoid()
        lg = lg - lg.logsumexp(-1, keepdim=True)  # normalized, as torch's
        return lg, lg.exp()
    p = _tensor(probs)
    eps = 1.1920928955078125e-07 if p.dtype == dtypes.float32 else 2.220446049250313e-16  # torch's clamp_probs
    if binary:
        q = p.clip(eps, 1 - eps)
        return q.log() - (1 - q).log(), p
    p = p / p.sum(-1, keepdim=True)
    return p.clip(eps, 1 - eps).log(), p


class Bernoulli(Distribution):
    def __init__(self, probs: Any = None, logits: Any = None, validate_args: bool | None = None):
        self.logits, self.probs = _logits_and_probs(probs, logits, binary=True)
        self.batch_shape = self.logits.shape

    @property
    def mean(self) -> Tensor:
        return self.probs

    @property
    def variance(self) -> Tensor:
        return self.probs * (1 - self.probs)

    def _draw(self, sample_shape: Sequence[int]) -> Tensor:
        u = Tensor.rand(*self._extended(sample_shape), device=self.probs.device)
        return (u < self.probs).cast(self.probs.dtype)

    def log_prob(self, value: Any) -> Tensor:
        v = _tensor(value, self.logits)
        # -BCE with logits: v * l - softplus(l), finite for large |l|
        return v * self.logits - self.logits.softplus()

    def entropy(self) -> Tensor:
        return self.logits.softplus() - self.probs * self.logits


class Categorical(Distribution):
    def __init__(self, probs: Any = None, logits: Any = None, validate_args: bool | None = None):
        self.logits, self.probs = _logits_and_probs(probs, logits, binary=False)
        self.batch_shape = self.logits.shape[:-1]
        self._num_events = self.logits.shape[-1]

    @property
    def param_shape(self) -> tuple[int, ...]:
        return self.logits.shape

    @property
    def mean(self) -> Tensor:
        return Tensor.full(self.batch_shape, float("nan"), device=self.logits.device)

    @property
    def mode(self) -> Tensor:
        return self.probs.argmax(-1)

    @property
    def variance(self) -> Tensor:
        return Tensor.full(self.batch_shape, float("nan"), device=self.logits.device)

    def _draw(self, sample_shape: Sequence[int]) -> Tensor:
        n = math.prod(sample_shape)
        flat = self.probs.reshape(-1, self._num_events)
        drawn = flat.multinomial(max(n, 1), replacement=True)[:, :n]  # (batch, n)
        return drawn.T.reshape(*sample_shape, *self.batch_shape).cast(dtypes.int64)

    def log_prob(self, value: Any) -> Tensor:
        v = value if isinstance(value, Tensor) else Tensor(value)
        v = v.cast(dtypes.int64)
        shape = _broadcast_shape(v.shape, self.batch_shape)
        lg = self.logits.expand(*shape, self._num_events) if shape != self.batch_shape else self.logits
        return lg.gather(-1, v.expand(shape).unsqueeze(-1)).squeeze(-1)

    def entropy(self) -> Tensor:
        low = float(dtypes.min(self.logits.dtype))
        return -(self.probs * self.logits.clip(low, None)).sum(-1)


class OneHotCategorical(Categorical):
    def __init__(self, probs: Any = None, logits: Any = None, validate_args: bool | None = None):
        super().__init__(probs, logits)
        self.event_shape = (self._num_events,)

    def _draw(self, sample_shape: Sequence[int]) -> Tensor:
        return super()._draw(sample_shape).one_hot(self._num_events).cast(self.probs.dtype)

    def log_prob(self, value: Any) -> Tensor:
        return super().log_prob(_tensor(value).argmax(-1))

    @property
    def mean(self) -> Tensor:
        return self.probs

    @property
    def variance(self) -> Tensor:
        return self.probs * (1 - self.probs)


class Independent(Distribution):
    """The base's rightmost `reinterpreted_batch_ndims` batch dims read as event dims: log_prob and entropy summed
    over them (a diagonal Gaussian over vectors is Independent(Normal(mu, sigma), 1))."""

    def __init__(self, base_distribution: Distribution, reinterpreted_batch_ndims: int, validate_args: Any = None):
        n, dims = reinterpreted_batch_ndims, len(base_distribution.batch_shape)
        if not 0 <= n <= dims:
            raise ValueError(
                f"Expected reinterpreted_batch_ndims <= len(base_distribution.batch_shape), actual {n} vs {dims}"
            )
        self.base_dist, self.reinterpreted_batch_ndims = base_distribution, n
        shape = base_distribution.batch_shape + base_distribution.event_shape
        self.batch_shape, self.event_shape = shape[: dims - n], shape[dims - n :]
        self.has_rsample = base_distribution.has_rsample

    def _summed(self, x: Tensor) -> Tensor:
        n = self.reinterpreted_batch_ndims
        return x.sum(tuple(range(-n, 0))) if n else x

    @property
    def mean(self) -> Tensor:
        return self.base_dist.mean  # type: ignore[attr-defined]

    @property
    def mode(self) -> Tensor:
        return self.base_dist.mode  # type: ignore[attr-defined]

    @property
    def variance(self) -> Tensor:
        return self.base_dist.variance  # type: ignore[attr-defined]

    def sample(self, sample_shape: Sequence[int] = ()) -> Tensor:
        return self.base_dist.sample(sample_shape)

    def rsample(self, sample_shape: Sequence[int] = ()) -> Tensor:
        return self.base_dist.rsample(sample_shape)

    def log_prob(self, value: Any) -> Tensor:
        return self._summed(self.base_dist.log_prob(value))  # type: ignore[attr-defined]

    def entropy(self) -> Tensor:
        return self._summed(self.base_dist.entropy())  # type: ignore[attr-defined]


def kl_divergence(p: Distribution, q: Distribution) -> Tensor:
    """KL(p || q) in closed form for two distributions of one family (Normal, Uniform, Bernoulli, Categorical)."""
    if isinstance(p, Normal) and isinstance(q, Normal):
        ratio = (p.scale / q.scale).square()
        return 0.5 * (ratio + ((p.loc - q.loc) / q.scale).square() - 1 - ratio.log())
    if isinstance(p, Categorical) and isinstance(q, Categorical):
        return (p.probs * (p.logits - q.logits)).sum(-1)
    if isinstance(p, Bernoulli) and isinstance(q, Bernoulli):
        return p.probs * (p.logits.softplus().neg() - q.logits.softplus().neg() + p.logits - q.logits) + (
            1 - p.probs
        ) * (q.logits.softplus() - p.logits.softplus())
    if isinstance(p, Independent) and isinstance(q, Independent):
        if p.reinterpreted_batch_ndims != q.reinterpreted_batch_ndims:
            raise NotImplementedError("kl_divergence of Independent distributions over different event dims")
        return p._summed(kl_divergence(p.base_dist, q.base_dist))
    if isinstance(p, Uniform) and isinstance(q, Uniform):
        inside = (q.low <= p.low) & (p.high <= q.high)
        return inside.where(((q.high - q.low) / (p.high - p.low)).log(), float("inf"))
    raise NotImplementedError(f"kl_divergence of {type(p).__name__} and {type(q).__name__} is not offered")
