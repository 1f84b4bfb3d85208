"""lazygrad.distributions against torch.distributions: log_prob, entropy, moments and kl_divergence (values and
gradients), sample shapes and sample statistics, rsample's reparameterized gradient."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.distributions as TD

import lazygrad.distributions as D
from lazygrad import Tensor
from test.opcheck import randn


def _pair(name: str, **params: np.ndarray) -> tuple[D.Distribution, TD.Distribution, dict, dict]:
    ours_p = {k: Tensor(v, requires_grad=True) for k, v in params.items()}
    ref_p = {k: torch.tensor(v, requires_grad=True) for k, v in params.items()}
    return getattr(D, name)(**ours_p), getattr(TD, name)(**ref_p), ours_p, ref_p


_FAMILIES = {
    "Normal": (dict(loc=randn(3, 4), scale=np.abs(randn(4, seed=1)) + 0.2), randn(3, 4, seed=2)),
    "Uniform": (
        dict(low=randn(3) - 2, high=randn(3, seed=1) + 2),
        (randn(3) - 2) + (randn(3, seed=1) + 4 - randn(3)) * np.linspace(0.1, 0.9, 6).reshape(2, 3).astype(np.float32),
    ),
    "Bernoulli": (dict(logits=randn(5) * 3), (randn(5, seed=2) > 0).astype(np.float32)),
    "Categorical": (dict(logits=randn(2, 6)), np.array([[0, 5], [3, 3], [1, 2]])),
}


@pytest.mark.parametrize("name", list(_FAMILIES))
def test_family_matches_torch(name: str) -> None:
    params, value = _FAMILIES[name]
    ours, ref, ours_p, ref_p = _pair(name, **params)
    assert ours.batch_shape == tuple(ref.batch_shape)
    value_t = torch.tensor(value)
    got = ours.log_prob(Tensor(value)).sum() + ours.entropy().sum()
    want = ref.log_prob(value_t).sum() + ref.entropy().sum()
    np.testing.assert_allclose(got.numpy(), want.detach().numpy(), rtol=1e-5, atol=1e-5)
    got.backward()
    want.backward()
    for k in ours_p:
        np.testing.assert_allclose(ours_p[k].grad.numpy(), ref_p[k].grad.numpy(), rtol=1e-4, atol=1e-5, err_msg=k)
    if name != "Categorical":
        np.testing.assert_allclose(ours.mean.numpy(), ref.mean.detach().numpy(), rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(ours.variance.numpy(), ref.variance.detach().numpy(), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("name", list(_FAMILIES))
def test_kl_divergence_matches_torch(name: str) -> None:
    params, _ = _FAMILIES[name]
    other = {k: v * 0.7 + (0.1 if k != "high" else 3.0) for k, v in params.items()}
    if name == "Uniform":
        other = {"low": params["low"] - 1, "high": params["high"] + 1}
    p, tp, p_params, tp_params = _pair(name, **params)
    q, tq, _, _ = _pair(name, **other)
    got, want = D.kl_divergence(p, q), TD.kl_divergence(tp, tq)
    np.testing.assert_allclose(got.numpy(), want.detach().numpy(), rtol=1e-5, atol=1e-6)
    if name != "Uniform":
        got.sum().backward()
        want.sum().backward()
        for k in p_params:
            np.testing.assert_allclose(p_params[k].grad.numpy(), tp_params[k].grad.numpy(), rtol=1e-4, atol=1e-5)


def test_samples_have_the_family_statistics_and_rsample_gradients() -> None:
    Tensor.manual_seed(0)
    loc, scale = Tensor([1.0, -2.0], requires_grad=True), Tensor([0.5, 2.0], requires_grad=True)
    normal = D.Normal(loc, scale)
    draws = normal.rsample((20000,))
    assert draws.shape == (20000, 2)
    np.testing.assert_allclose(draws.mean(0).numpy(), [1.0, -2.0], atol=0.05)
    np.testing.assert_allclose(draws.std(0).numpy(), [0.5, 2.0], rtol=0.03)
    draws.mean(0).sum().backward()  # d mean(loc + eps * scale) / d loc = 1
    np.testing.assert_allclose(loc.grad.numpy(), [1.0, 1.0], rtol=1e-5)
    probs = np.array([0.1, 0.6, 0.3], np.float32)
    cat = D.Categorical(probs=Tensor(probs)).sample((30000,))
    assert cat.shape == (30000,)
    np.testing.assert_allclose(np.bincount(cat.numpy(), minlength=3) / 30000, probs, atol=0.015)
    bern = D.Bernoulli(probs=Tensor([0.2, 0.9])).sample((20000,))
    np.testing.assert_allclose(bern.mean(0).numpy(), [0.2, 0.9], atol=0.015)
    assert not D.Bernoulli(probs=Tensor([0.5])).has_rsample
    with pytest.raises(NotImplementedError, match="rsample"):
        D.Categorical(logits=Tensor([0.0, 1.0])).rsample()
    with pytest.raises(ValueError, match="probs"):
        D.Categorical()
    onehot = D.OneHotCategorical(logits=Tensor([[0.0, 2.0, 1.0]])).sample((5,))
    assert onehot.shape == (5, 1, 3) and (onehot.sum(-1).numpy() == 1).all()


@pytest.mark.parametrize("n", [0, 1, 2])
def test_independent_normal_against_torch(n):
    import lazygrad.torch as lt

    rng = np.random.default_rng(0)
    loc, scale = rng.standard_normal((3, 4)).astype(np.float32), rng.random((3, 4)).astype(np.float32) + 0.5
    value = rng.standard_normal((2, 3, 4)).astype(np.float32)
    out = []
    for m in (torch, lt):
        d = m.distributions.Independent(m.distributions.Normal(m.tensor(loc), m.tensor(scale)), n)
        q = m.distributions.Independent(m.distributions.Normal(m.tensor(loc) + 1, m.tensor(scale)), n)
        kl = m.distributions.kl_divergence(d, q)
        out.append((tuple(d.batch_shape), tuple(d.event_shape), d.log_prob(m.tensor(value)), d.entropy(), kl))
        assert tuple(d.rsample((5,)).shape) == (5, 3, 4) and d.has_rsample
    assert out[1][:2] == out[0][:2]
    for g, w in zip(out[1][2:], out[0][2:]):
        np.testing.assert_allclose(g.numpy(), w.numpy(), rtol=1e-5, atol=1e-5)


def test_independent_refuses_too_many_dims():
    import lazygrad.torch as lt

    for m in (torch, lt):
        with pytest.raises(ValueError, match="reinterpreted_batch_ndims"):
            m.distributions.Independent(m.distributions.Normal(m.zeros(3), m.ones(3)), 2)
