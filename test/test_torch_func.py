"""torch.func's transforms (lazygrad.func, also lazygrad.torch.func) against torch.func: values of gradients,
Jacobians, Hessians, jvp/vjp and vmap, their nesting, trees of arguments, and the errors torch raises."""

import numpy as np
import pytest

torch = pytest.importorskip("torch")
import torch.func as tf  # noqa: E402

import lazygrad.torch as lt  # noqa: E402
from lazygrad import Tensor  # noqa: E402
from lazygrad import func as lf  # noqa: E402


def _pair(*shape: int, seed: int = 0) -> tuple[Tensor, "torch.Tensor"]:
    a = np.random.default_rng(seed).standard_normal(shape).astype(np.float32)
    return Tensor(a), torch.tensor(a)


def _close(ours, theirs, tol: float = 1e-4) -> None:  # noqa: ANN001
    if isinstance(theirs, (tuple, list)):
        assert isinstance(ours, (tuple, list)) and len(ours) == len(theirs)
        for o, t in zip(ours, theirs):
            _close(o, t, tol)
    elif isinstance(theirs, dict):
        assert set(ours) == set(theirs)
        for k in theirs:
            _close(ours[k], theirs[k], tol)
    else:
        assert tuple(ours.shape) == tuple(theirs.shape)
        np.testing.assert_allclose(ours.numpy(), theirs.detach().numpy(), rtol=tol, atol=tol)


def _f(x, w):  # noqa: ANN001, ANN202
    return ((x @ w).tanh() * x.sum()).square().sum()


@pytest.mark.parametrize("argnums", [0, 1, (0, 1)])
def test_grad_and_grad_and_value(argnums) -> None:  # noqa: ANN001
    (x, tx), (w, tw) = _pair(3, 4), _pair(4, 2, seed=1)
    _close(lf.grad(_f, argnums)(x, w), tf.grad(_f, argnums)(tx, tw))
    g, v = lf.grad_and_value(_f, argnums)(x, w)
    tg, tv = tf.grad_and_value(_f, argnums)(tx, tw)
    _close(g, tg)
    _close(v, tv)
    assert not v.requires_grad and not (g[0] if isinstance(g, tuple) else g).requires_grad


def test_grad_nests_and_has_aux() -> None:
    x, tx = _pair(5)

    def cube(v):  # noqa: ANN001, ANN202
        return (v**3).sum()

    _close(lf.grad(lambda v: lf.grad(cube)(v).sin().sum())(x), tf.grad(lambda v: tf.grad(cube)(v).sin().sum())(tx))
    scalar, tscalar = Tensor(1.7), torch.tensor(1.7)
    _close(lf.grad(lf.grad(lf.grad(lambda v: v.sin())))(scalar), tf.grad(tf.grad(tf.grad(torch.sin)))(tscalar))
    g, aux = lf.grad(lambda v: (cube(v), v * 2), has_aux=True)(x)
    tg, taux = tf.grad(lambda v: (cube(v), v * 2), has_aux=True)(tx)
    _close((g, aux), (tg, taux))


def test_per_sample_gradients_of_a_model_by_vmap_of_grad_over_a_dict_of_parameters() -> None:
    """torch's per-sample-gradient recipe: vmap(grad(loss)) over functional_call with the parameters as a dict."""
    tmodel = torch.nn.Sequential(torch.nn.Linear(6, 5), torch.nn.Tanh(), torch.nn.Linear(5, 3))
    model = lt.nn.Sequential(lt.nn.Linear(6, 5), lt.nn.Tanh(), lt.nn.Linear(5, 3))
    model.load_state_dict({k: Tensor(v.detach().numpy()) for k, v in tmodel.state_dict().items()})
    (x, tx), (y, ty) = _pair(7, 6), (Tensor([0, 2, 1, 1, 0, 2, 2]), torch.tensor([0, 2, 1, 1, 0, 2, 2]))

    def loss(fc, m, F):  # noqa: ANN001, ANN202, N803
        def compute(params, sample, target):  # noqa: ANN001, ANN202
            out = fc(m, params, (sample.unsqueeze(0),))
            return F.cross_entropy(out, target.unsqueeze(0))

        return compute

    params = {k: v.detach() for k, v in model.named_parameters()}
    tparams = {k: v.detach() for k, v in tmodel.named_parameters()}
    ours = lf.vmap(lf.grad(loss(lf.functional_call, model, lt.nn.functional)), in_dims=(None, 0, 0))(params, x, y)
    theirs = tf.vmap(tf.grad(loss(tf.functional_call, tmodel, torch.nn.functional)), in_dims=(None, 0, 0))(
        tparams, tx, ty
    )
    _close(ours, theirs)


@pytest.mark.parametrize("transform", ["jacrev", "jacfwd"])
def test_jacobians(transform: str) -> None:
    (x, tx), (w, tw) = _pair(3, 2), _pair(2, 4, seed=1)

    def f(a, b):  # noqa: ANN001, ANN202
        return (a @ b).sigmoid() * a.sum()

    for argnums in (0, 1, (0, 1)):
        _close(getattr(lf, transform)(f, argnums)(x, w), getattr(tf, transform)(f, argnums)(tx, tw))


def test_hessian_and_jacobians_nested() -> None:
    x, tx = _pair(4)

    def f(v):  # noqa: ANN001, ANN202
        return (v.sin() * v.square()).sum() + v.prod()

    _close(lf.hessian(f)(x), tf.hessian(f)(tx))
    _close(lf.jacrev(lf.jacrev(f))(x), tf.jacrev(tf.jacrev(f))(tx))
    _close(lf.jacfwd(lf.jacfwd(f))(x), tf.jacfwd(tf.jacfwd(f))(tx))


def test_vjp_and_jvp() -> None:
    (x, tx), (w, tw), (u, tu) = _pair(3, 4), _pair(3, 4, seed=1), _pair(3, 4, seed=2)

    def f(a, b):  # noqa: ANN001, ANN202
        return (a * b).exp(), a - b.square()

    out, back = lf.vjp(f, x, w)
    tout, tback = tf.vjp(f, tx, tw)
    _close(out, tout)
    _close(back((u, x)), tback((tu, tx)))
    _close(lf.jvp(f, (x, w), (u, w)), tf.jvp(f, (tx, tw), (tu, tw)))
    with pytest.raises(RuntimeError):
        lf.jvp(f, (x, w), (u,))


@pytest.mark.parametrize(
    "in_dims,out_dims,shape_a,shape_b",
    [
        (0, 0, (4, 5, 3), (4, 5, 3)),
        (1, 0, (5, 4, 3), (5, 4, 3)),
        ((0, None), 1, (4, 5, 3), (5, 3)),
        ((1, 0), -1, (5, 4, 3), (4, 5, 3)),
        ((None, 1), (1, 0), (5, 3), (5, 4, 3)),
    ],
)
def test_vmap_dims(in_dims, out_dims, shape_a, shape_b) -> None:  # noqa: ANN001
    (a, ta), (b, tb) = _pair(*shape_a), _pair(*shape_b, seed=1)

    def f(x, y):  # noqa: ANN001, ANN202
        return (x * y).sum(-1).relu(), x.mean(0)

    _close(lf.vmap(f, in_dims, out_dims)(a, b), tf.vmap(f, in_dims, out_dims)(ta, tb))


def test_vmap_nested_and_torch_vmap_name() -> None:
    (a, ta), (b, tb) = _pair(3, 4), _pair(5, 4, seed=1)
    dot = lambda x, y: (x * y).sum()  # noqa: E731
    _close(lt.vmap(lt.vmap(dot, (None, 0)), (0, None))(a, b), torch.vmap(torch.vmap(dot, (None, 0)), (0, None))(ta, tb))


def test_vmap_errors_and_randomness() -> None:
    a, b = Tensor.ones(3, 2), Tensor.ones(4, 2)
    with pytest.raises(ValueError, match="same size"):
        lf.vmap(lambda x, y: x + y)(a, b)
    with pytest.raises(ValueError, match="in_dims"):
        lf.vmap(lambda x, y: x + y, in_dims=(0,))(a, b)
    with pytest.raises(ValueError):
        lf.vmap(lambda x: x, in_dims=None)(a)
    with pytest.raises(RuntimeError, match="randomness"):
        lf.vmap(lambda x: x + Tensor.rand(2))(a)
    same = lf.vmap(lambda x: x + Tensor.rand(2), randomness="same")(a).numpy()
    assert (same == same[0]).all()
    different = lf.vmap(lambda x: x + Tensor.rand(2), randomness="different")(a).numpy()
    assert len({tuple(r) for r in different}) == 3
    after = Tensor.rand(2).numpy()  # drawn after "same" rewound the stream: new numbers
    assert not any(np.allclose(after, r - 1) for r in np.concatenate([same, different]))


def test_grad_errors_as_torch() -> None:
    x = Tensor.ones(3)
    with pytest.raises(RuntimeError, match="scalar"):
        lf.grad(lambda v: v * 2)(x)
    with pytest.raises(RuntimeError, match="argnums"):
        lf.grad(lambda v: v.sum(), argnums=1)(x)
    with pytest.raises(RuntimeError, match="floating"):
        lf.grad(lambda v: v.sum())(Tensor([1, 2]))


def test_vmap_batches_one_trace_and_falls_back_where_it_cannot() -> None:
    """A mapped function is traced once and its graph batched: the kernels of a batch of 16 are those of a batch of 2.
    A function that reads its input's values (.item()) runs slice by slice, with the same results as a loop."""
    from lazygrad import GlobalCounters

    w = Tensor(np.random.default_rng(1).standard_normal((5, 3)).astype(np.float32))

    def per_sample(x):  # noqa: ANN001, ANN202
        return lf.grad(lambda v: ((v @ w).relu() ** 2).sum() / v.shape[0])(x)

    kernels = []
    for batch in (2, 16):
        xs = Tensor(np.random.default_rng(batch).standard_normal((batch, 4, 5)).astype(np.float32)).realize()
        out = lf.vmap(per_sample)(xs)
        GlobalCounters.reset()
        out.realize()
        kernels.append(GlobalCounters.kernel_count)
        loop = Tensor.stack(*[per_sample(xs[i]) for i in range(batch)])
        np.testing.assert_allclose(out.numpy(), loop.numpy(), rtol=1e-5, atol=1e-6)
    assert kernels[0] == kernels[1]

    xs = Tensor([[1.0, -2.0], [3.0, 4.0], [-5.0, 6.0]])
    picked = lf.vmap(lambda v: v * 2 if v.sum().item() > 0 else v * -1)(xs)
    assert picked.tolist() == [[-1.0, 2.0], [6.0, 8.0], [-10.0, 12.0]]
    indexed = lf.vmap(lambda v: v[int(v.argmax().item())])(xs)  # (an index read from the values)
    assert indexed.tolist() == [1.0, 4.0, 6.0]


def test_vmap_gradients_flow_back_through_the_mapped_function() -> None:
    """vmap's result is a graph of its inputs and of the tensors the function closes over: a loss of it
    differentiates to both, as torch's."""
    (x, tx), (w, tw) = _pair(6, 4), _pair(4, 3, seed=1)
    x.requires_grad_(True)
    w.requires_grad_(True)
    tx.requires_grad_(True)
    tw.requires_grad_(True)
    lf.vmap(lambda v: (v @ w).tanh().sum())(x).square().sum().backward()
    tf.vmap(lambda v: (v @ tw).tanh().sum())(tx).square().sum().backward()
    _close((x.grad, w.grad), (tx.grad, tw.grad))


def test_maml_second_order_meta_learning_as_torch() -> None:
    """MAML with torch.func: an inner step's gradient (grad of functional_call over a dict of detached leaves that
    share the parameters' memory), an outer loss of the adapted weights differentiated through it (second order),
    Adam on the leaves. The outer losses equal torch's."""
    rng = np.random.default_rng(0)
    tasks = [[rng.uniform(-3, 3, (5, 1)).astype(np.float32) for _ in range(2)] for _ in range(3)]

    def run(lib, state=None):  # noqa: ANN001, ANN202
        net = lib.nn.Sequential(lib.nn.Linear(1, 16), lib.nn.Tanh(), lib.nn.Linear(16, 1))
        if state is not None:
            net.load_state_dict({k: lib.tensor(v) for k, v in state.items()})
        start = {k: v.detach().numpy().copy() for k, v in net.state_dict().items()}

        def loss_fn(params, x, y):  # noqa: ANN001, ANN202
            return ((lib.func.functional_call(net, params, (x,)) - y) ** 2).mean()

        params = {k: v.detach().requires_grad_() for k, v in net.named_parameters()}
        opt = lib.optim.Adam(params.values(), lr=1e-2)
        losses = []
        for xs, xq in tasks:
            xs_t, xq_t = lib.tensor(xs), lib.tensor(xq)
            g = lib.func.grad(loss_fn)(params, xs_t, xs_t.sin())
            fast = {k: params[k] - 0.1 * g[k] for k in params}
            outer = loss_fn(fast, xq_t, xq_t.sin())
            opt.zero_grad()
            outer.backward()
            opt.step()
            losses.append(outer.item())
        return start, losses

    start, theirs = run(torch)
    _, ours = run(lt, start)
    np.testing.assert_allclose(ours, theirs, rtol=1e-4)
