"""Ops and forms that tinygrad 0.14 programs use (and torch programs, where torch has them): in-place operators,
newton_schulz, torch's gradients at domain edges, multinomial, random-number argument checks, reshape(None), stack of
a sequence, negative padding in the non-constant pad modes, scatter's checks, 0-d softmax, var with no degrees of
freedom, idiv, 0-d einsum, unknown dtype names. Every value is checked against torch or numpy."""

import math

import numpy as np
import pytest
import torch

from lazygrad import Tensor
from lazygrad.dtype import dtypes

# *** in-place operators write into the tensor's memory, as torch's ***


@pytest.mark.parametrize(
    "op", ["__iadd__", "__isub__", "__imul__", "__itruediv__", "__ifloordiv__", "__imod__", "__ipow__"]
)
def test_inplace_float_ops_match_torch(op: str) -> None:
    x = np.array([[1.5, -2.0, 3.0], [0.5, 7.0, -1.25]], np.float32)
    y = np.array([2.0, -3.0, 0.5], np.float32)
    t, tt = Tensor(x), torch.tensor(x)
    alias, talias = t, tt
    out, tout = getattr(t, op)(Tensor(y)), getattr(tt, op)(torch.tensor(y))
    assert out is t and alias is t and tout is tt
    np.testing.assert_allclose(alias.numpy(), talias.numpy(), rtol=1e-6)


@pytest.mark.parametrize("op", ["__iand__", "__ior__", "__ixor__", "__ilshift__", "__irshift__", "__iadd__"])
def test_inplace_int_ops_match_torch(op: str) -> None:
    x = np.array([5, 12, 7, 0, 255], np.int32)
    t, tt = Tensor(x), torch.tensor(x)
    getattr(t, op)(3)
    getattr(tt, op)(3)
    np.testing.assert_array_equal(t.numpy(), tt.numpy())


def test_inplace_through_a_view_and_matmul() -> None:
    x = Tensor.ones(4, 4).contiguous()
    v = x[1:3]
    v *= 3
    want = np.ones((4, 4), np.float32)
    want[1:3] *= 3
    np.testing.assert_array_equal(x.numpy(), want)
    a = np.arange(9, dtype=np.float32).reshape(3, 3)
    m = Tensor(a.copy())
    m @= Tensor(a.T.copy())
    np.testing.assert_allclose(m.numpy(), a @ a.T)


def test_inplace_errors_as_torch() -> None:
    i = Tensor([1, 2])
    with pytest.raises(RuntimeError, match="can't be cast"):
        i += 0.5  # torch: result type Float can't be cast to the desired output type
    with pytest.raises(RuntimeError, match="in-place"):
        w = Tensor([1.0], requires_grad=True)
        w -= 1
    with pytest.raises(RuntimeError, match="shape"):
        s = Tensor([1.0, 2.0])
        s += Tensor.ones(3, 2)
    w = Tensor([1.0, 2.0], requires_grad=True)
    with Tensor.no_grad():
        w -= 0.5  # the optimizer-step form torch allows
    assert w.tolist() == [0.5, 1.5]


# *** newton_schulz, gradients at the domain edges ***


@pytest.mark.parametrize("shape", [(4, 4), (3, 7), (7, 3), (2, 5, 5)])
def test_newton_schulz_orthogonalizes(shape: tuple[int, ...]) -> None:
    a = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    u, _, vh = np.linalg.svd(a.astype(np.float64), full_matrices=False)
    out = Tensor(a).newton_schulz(60, (1.5, -0.5)).numpy()
    np.testing.assert_allclose(out, u @ vh, atol=2e-3)


def test_newton_schulz_quintic_matches_torch_muon_formula() -> None:
    a = np.random.default_rng(1).standard_normal((6, 9)).astype(np.float32)
    c = (3.4445, -4.775, 2.0315)
    x = torch.tensor(a)
    x = x / (x.norm() + 1e-7)
    for _ in range(5):
        g = x @ x.T
        x = c[0] * x + (c[1] * g + c[2] * g @ g) @ x
    np.testing.assert_allclose(Tensor(a).newton_schulz(5, c).numpy(), x.numpy(), atol=1e-5)
    with pytest.raises(ValueError, match="matrix"):
        Tensor([1.0, 2.0]).newton_schulz(1, (1.0,))


@pytest.mark.parametrize(
    "name,vals",
    [("asin", [-1.0, 1.0, 0.5]), ("acos", [-1.0, 1.0, 0.0]), ("acosh", [1.0, 2.0]), ("atanh", [-1.0, 1.0, 0.3])],
)
def test_gradient_at_domain_edges_as_torch(name: str, vals: list[float]) -> None:
    t = Tensor(vals, requires_grad=True)
    getattr(t, name)().sum().backward()
    tt = torch.tensor(vals, requires_grad=True)
    getattr(tt, name)().sum().backward()
    np.testing.assert_allclose(t.grad.numpy(), tt.grad.numpy(), rtol=1e-5)  # +-inf where torch has them, not NaN


# *** tensors, buffers, devices ***


def test_equal_graphs_realized_by_two_tensors_get_two_buffers() -> None:
    a = Tensor([1.0, 2.0])
    c, d = a + 1, a + 1
    c.realize()
    d.realize()
    assert c.uop.buffer is not d.uop.buffer  # torch's tensors share memory only as views
    c.assign(Tensor([9.0, 9.0])).realize()
    assert d.tolist() == [2.0, 3.0]
    assert (a * 2).uop.realized is None
    with pytest.raises(RuntimeError, match="not in memory"):
        (a * 2).uop.buffer


def test_to_in_place() -> None:
    t = Tensor([1.0, 2.0])
    assert t.to_("CPU") is t and t.device == "CPU" and t.tolist() == [1.0, 2.0]


# *** random numbers ***


def test_multinomial_frequencies_and_shapes() -> None:
    Tensor.manual_seed(0)
    w = Tensor([1.0, 0.0, 3.0])
    s = w.multinomial(4000, replacement=True)
    assert s.shape == (4000,) and s.dtype == dtypes.default_int
    counts = np.bincount(s.numpy(), minlength=3) / 4000
    np.testing.assert_allclose(counts, [0.25, 0.0, 0.75], atol=0.03)
    rows = Tensor([[1.0, 1.0, 1.0, 1.0], [0.0, 0.0, 5.0, 1.0]]).multinomial(2)
    assert rows.shape == (2, 2)
    r = rows.numpy()
    assert len(set(r[0])) == 2 and set(r[1]) == {2, 3}  # without replacement: distinct, never a zero weight
    for bad in (lambda: Tensor(1.0).multinomial(), lambda: w.multinomial(4), lambda: w.multinomial(0)):
        with pytest.raises(RuntimeError):  # as torch
            bad()


def test_random_argument_checks_and_dtypes() -> None:
    with pytest.raises(TypeError):
        Tensor.randint(3, low=0.5, high=4)
    with pytest.raises(TypeError):
        Tensor.randint(3, high=4, dtype=dtypes.float32)
    u = Tensor.uniform(1000, low=-3, high=5, dtype=dtypes.int32).numpy()
    assert u.dtype == np.int32 and u.min() >= -3 and u.max() <= 4 and len(set(u.tolist())) == 8
    for dt in (dtypes.float16, dtypes.bfloat16):
        h = Tensor.rand(20000, dtype=dt).float().numpy()
        assert h.max() < 1.0 and h.min() >= 0.0 and abs(h.mean() - 0.5) < 0.02


# *** shapes and indexing ***


def test_reshape_none_keeps_the_dim() -> None:
    a = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    np.testing.assert_array_equal(Tensor(a).reshape(None, None, 2, 2).numpy(), a.reshape(2, 3, 2, 2))
    np.testing.assert_array_equal(Tensor(a).reshape((None, -1)).numpy(), a.reshape(2, -1))


def test_stack_takes_a_sequence() -> None:
    xs = [np.full((2, 3), i, np.float32) for i in range(3)]
    for dim in (-1, 0, 2):
        want = torch.stack([torch.tensor(x) for x in xs], dim).numpy()
        np.testing.assert_array_equal(Tensor.stack([Tensor(x) for x in xs], dim=dim).numpy(), want)
        np.testing.assert_array_equal(Tensor.stack(*[Tensor(x) for x in xs], dim=dim).numpy(), want)
    with pytest.raises(ValueError):
        Tensor.stack((Tensor([1, 2]), Tensor([3, 4])), Tensor([5, 6]))
    with pytest.raises(IndexError):
        Tensor.stack([Tensor.ones(2, 3)], dim=7)


@pytest.mark.parametrize("mode", ["reflect", "replicate"])
@pytest.mark.parametrize("pad", [(3, -3, 0, -3), (3, -5, 1, -5), (-1, 2, 2, -1), (0, 0, 0, -5), (1, -4, 0, 0)])
def test_negative_padding_in_the_other_modes(mode: str, pad: tuple[int, ...]) -> None:
    x = np.random.default_rng(2).standard_normal((1, 2, 5, 5)).astype(np.float32)
    want = torch.nn.functional.pad(torch.tensor(x), pad, mode=mode).numpy()
    np.testing.assert_array_equal(Tensor(x).pad(pad, mode=mode).numpy(), want)


def test_pad_mode_errors() -> None:
    x = Tensor.ones(1, 1, 5, 5)
    with pytest.raises(NotImplementedError):  # torch's class for an unknown mode
        x.pad((1, 1), mode="typo")
    with pytest.raises(NotImplementedError):  # torch reads outside the tensor here: no answer to match
        x.pad((3, -5, 1, -5), mode="circular")
    with pytest.raises(RuntimeError):
        x.pad((3, 5), mode="reflect")


def test_scatter_checks_as_torch() -> None:
    idx = torch.randint(3, (3, 4, 5))
    ours = Tensor(idx.numpy().astype(np.int32))
    for self_shape, src_shape in [((2, 3, 10), (10, 10, 10)), ((10, 3, 10), (10, 3, 10))]:
        with pytest.raises(RuntimeError):
            torch.zeros(self_shape).scatter(1, idx, torch.zeros(src_shape))
        with pytest.raises(RuntimeError):
            Tensor.zeros(self_shape).scatter(1, ours, Tensor.zeros(src_shape))
    with pytest.raises(RuntimeError):  # torch: self's and src's dtypes must agree
        Tensor.zeros(3, 4, 5).half().scatter(1, ours, Tensor.zeros(3, 4, 5))
    with pytest.raises(RuntimeError):
        Tensor.zeros(4, 5, 6).half().scatter_reduce(0, ours, Tensor.zeros(4, 5, 6), reduce="sum")


# *** reductions and arithmetic ***


@pytest.mark.parametrize("axis", [0, -1])
def test_softmax_of_a_0d_tensor(axis: int) -> None:
    t = Tensor(2.5, requires_grad=True)
    ls = t.log_softmax(axis)
    tt = torch.tensor(2.5, requires_grad=True)
    tls = torch.log_softmax(tt, axis)
    assert ls.shape == () and ls.item() == tls.item() and t.softmax(axis).item() == torch.softmax(tt, axis).item()
    ls.backward()
    tls.backward()
    assert abs(t.grad.item() - tt.grad.item()) < 1e-6
    with pytest.raises(IndexError):
        t.softmax(1)
    with pytest.raises(IndexError):
        t.cumsum(1)
    with pytest.raises(IndexError):
        Tensor([1.0, 2.0]).cumsum(-2)


def test_var_std_without_degrees_of_freedom_as_torch() -> None:
    x = np.random.default_rng(3).standard_normal((1, 2, 3, 1, 5)).astype(np.float32)
    for axis, correction in [((0, 3), 1), ((0, 3), 5), ((0, 4), 5), ((0, 4), 1)]:
        with pytest.warns(UserWarning) if correction >= (5 if 4 in axis else 1) else _no_warning():
            ours = Tensor(x).var(axis, correction=correction).numpy()
            ours_std = Tensor(x).std(axis, correction=correction).numpy()
        want = torch.tensor(x).var(axis, correction=correction).numpy()
        np.testing.assert_allclose(ours, want, rtol=1e-5)  # inf where the sum is nonzero, NaN where it is 0
        np.testing.assert_allclose(ours_std, torch.tensor(x).std(axis, correction=correction).numpy(), rtol=1e-5)


class _no_warning:
    def __enter__(self) -> None:
        pass

    def __exit__(self, *a: object) -> None:
        pass


def test_idiv_truncates() -> None:
    a, b = [-4, 7, 5, 4, -7, 8], [2, -3, 8, -2, 3, 5]
    want = torch.div(torch.tensor(a), torch.tensor(b), rounding_mode="trunc").numpy()
    np.testing.assert_array_equal(Tensor(a).idiv(Tensor(b)).numpy(), want)
    assert Tensor(-5).idiv(2).item() == -2 and Tensor(-1).contiguous().idiv(4).item() == 0
    assert Tensor(2**64 - 1, dtype=dtypes.uint64).idiv(1).item() == 2**64 - 1


def test_einsum_of_a_0d_operand() -> None:
    assert Tensor.einsum("->", Tensor(3.5)).item() == torch.einsum("->", torch.tensor(3.5)).item()
    assert Tensor.einsum(",->", Tensor(2.0), Tensor(3.0)).item() == 6.0


def test_unknown_dtype_name_is_type_and_attribute_error() -> None:
    with pytest.raises(TypeError):  # torch's class
        Tensor([1.0, 2.0]).sum(dtype="")
    with pytest.raises(AttributeError):  # tinygrad's (getattr(dtypes, name))
        Tensor([1.0, 2.0]).prod(dtype="typo")


def test_linspace_rejects_bool_and_negative_steps() -> None:
    with pytest.raises(RuntimeError):
        torch.linspace(5, 10, 3, dtype=torch.bool)
    with pytest.raises(RuntimeError):
        Tensor.linspace(5, 10, 3, dtype="bool")
    with pytest.raises(RuntimeError):
        Tensor.linspace(1, 2, -1)
    want = torch.linspace(5.5, -5.5, 10).numpy()
    np.testing.assert_allclose(Tensor.linspace(5.5, -5.5, 10).numpy(), want, rtol=1e-6)
    assert math.isclose(Tensor.linspace(5, 10, 1).item(), 5.0)


# *** making tensors, leaves and their gradients ***


def test_equal_constant_leaves_get_their_own_gradients() -> None:
    w1, w2 = Tensor(3.5, requires_grad=True), Tensor(3.5, requires_grad=True)
    (w1 * w2 + w1).backward()
    t1, t2 = torch.tensor(3.5, requires_grad=True), torch.tensor(3.5, requires_grad=True)
    (t1 * t2 + t1).backward()
    assert (w1.grad.item(), w2.grad.item()) == (t1.grad.item(), t2.grad.item()) == (4.5, 3.5)
    a, b = Tensor.ones(3, requires_grad=True), Tensor.ones(3, requires_grad=True)
    (a * 2 + b).sum().backward()
    assert a.grad.tolist() == [2.0] * 3 and b.grad.tolist() == [1.0] * 3


def test_intermediates_of_no_grad_inputs_get_no_gradient() -> None:
    rng = np.random.default_rng(6)
    xs, ms, ws = (rng.standard_normal(s).astype(np.float32) for s in [(1, 3), (1, 3), (3, 3)])
    x, m, w = Tensor(xs, requires_grad=False), Tensor(ms, requires_grad=False), Tensor(ws, requires_grad=True)
    tmp = x * m
    mm = tmp @ w
    mm.relu().sum().backward()
    assert x.grad is None and m.grad is None and tmp.grad is None
    tw = torch.tensor(ws, requires_grad=True)
    (torch.tensor(xs * ms) @ tw).relu().sum().backward()
    np.testing.assert_allclose(w.grad.numpy(), tw.grad.numpy(), rtol=1e-6)
    assert mm.grad is not None  # an unset intermediate over a leaf that wants a gradient still gets one (tinygrad)
    r = Tensor.rand(3)
    (r * 2).sum().backward()  # an unset tensor over no input set False: filled, as tinygrad does
    assert r.grad.tolist() == [2.0] * 3


def test_making_tensors_as_torch_and_tinygrad() -> None:
    for dt, tdt in [(dtypes.uint8, torch.uint8), (dtypes.uint32, torch.uint32)]:
        data = [-1, 0, 1, 200]
        np.testing.assert_array_equal(Tensor(data, dtype=dt).numpy(), torch.tensor(data, dtype=tdt).numpy())
        with pytest.raises(RuntimeError):
            torch.tensor([-(dtypes.max(dt) + 1)], dtype=tdt)
        with pytest.raises(RuntimeError):
            Tensor([-(dtypes.max(dt) + 1)], dtype=dt)
    data = [np.array([1.0, 2.0, 3.0]), np.array([1, 2, 3]), np.array([4, 5, 6])]
    np.testing.assert_array_equal(Tensor(data).numpy(), np.array(data))
    np.testing.assert_array_equal(Tensor([np.array(1.0), np.array(2.0)]).numpy(), [1.0, 2.0])
    e = Tensor(None)
    assert e.shape == (0,) and e.dtype == dtypes.float32 and e.numpy().size == 0
    with pytest.raises(AttributeError):
        Tensor([3], dtype=(dtypes.int32,))


def test_setitem_into_a_leaf_that_requires_grad() -> None:
    z = Tensor.rand(8, 8, requires_grad=True)
    tz = torch.rand(8, 8, requires_grad=True)
    with pytest.raises(RuntimeError):
        tz[:3] = torch.rand(8)
    with pytest.raises(RuntimeError):  # torch's class; tinygrad's NotImplementedError is one
        z[:3] = Tensor.rand(8)
    with pytest.raises(NotImplementedError):
        z += 1
    with Tensor.no_grad():
        z[:3] = Tensor.zeros(8)
    assert (z[:3] == 0).all().item() and z.requires_grad


def test_assign_from_numpy_and_lists_and_replace() -> None:
    t = Tensor.zeros(2, 3).contiguous().realize()
    a = np.arange(6, dtype=np.float64).reshape(2, 3)
    t.assign(a).realize()  # converted to the tensor's dtype, as torch's copy_ of an array
    assert t.dtype == dtypes.float32 and t.tolist() == a.tolist()
    t.assign([[1, 2, 3], [4, 5, 6]]).realize()
    assert t.tolist() == [[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]]
    t.assign(np.float32(7)).realize()
    assert t.tolist() == [[7.0] * 3] * 2
    p = Tensor.zeros(3)
    assert p.replace(Tensor([1.0, 2.0, 3.0])) is p and p.tolist() == [1.0, 2.0, 3.0]
    with pytest.raises(ValueError):
        p.replace(Tensor.ones(4))


def test_assign_read_before_the_write_in_one_schedule() -> None:
    # tinygrad 0.14 raises a cycle error here; lazygrad orders the read before the write, as torch computes it
    a = Tensor.ones(4).contiguous().realize()
    times_a = a * 3
    a.assign(Tensor.full((4,), 2.0).contiguous())
    np.testing.assert_allclose((a + (times_a - 1)).numpy(), np.full(4, 4.0))
    np.testing.assert_allclose(times_a.numpy(), np.full(4, 3.0))
