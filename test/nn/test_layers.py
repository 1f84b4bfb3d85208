"""nn layers against torch.nn with copied weights: forward, gradients of input and parameters, PyTorch parameter
names, default init distributions, running statistics."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch

from lazygrad import Tensor, dtypes, nn
from lazygrad.nn.state import get_state_dict
from lazygrad.uop.ops import Ops
from lazygrad.uop.program import FORWARD_RUN


def copy_from_torch(layer: Any, ref: torch.nn.Module) -> None:
    """Same names, same shapes: every torch parameter and buffer copied into the lazygrad layer."""
    ours = get_state_dict(layer)
    theirs = ref.state_dict()
    assert sorted(ours) == sorted(theirs), f"names {sorted(ours)} != torch {sorted(theirs)}"
    for k, v in theirs.items():
        assert ours[k].shape == tuple(v.shape), k
        ours[k].assign(Tensor(v.numpy().copy()).cast(ours[k].dtype)).realize()


def compare_layer(layer: Any, ref: torch.nn.Module, shape: tuple[int, ...], atol: float = 1e-5, x: Any = None) -> None:
    copy_from_torch(layer, ref)
    rng = np.random.default_rng(0)
    xn = rng.uniform(-2, 2, shape).astype(np.float32) if x is None else x
    is_float = xn.dtype.kind == "f"
    xt = Tensor(xn).requires_grad_() if is_float else Tensor(xn)
    xr = torch.tensor(xn, requires_grad=is_float) if is_float else torch.from_numpy(xn.astype(np.int64))
    out, ref_out = layer(xt), ref(xr)
    np.testing.assert_allclose(out.numpy(), ref_out.detach().numpy(), atol=atol, rtol=1e-4)
    up = rng.standard_normal(tuple(ref_out.shape)).astype(np.float32)
    (out * Tensor(up)).sum().backward()
    (ref_out * torch.from_numpy(up)).sum().backward()
    if is_float:
        np.testing.assert_allclose(xt.grad.numpy(), xr.grad.numpy(), atol=atol * 10, rtol=1e-4)
    params = get_state_dict(layer)
    for name, p in ref.named_parameters():
        np.testing.assert_allclose(params[name].grad.numpy(), p.grad.numpy(), atol=atol * 10, rtol=1e-4, err_msg=name)


@pytest.mark.parametrize("bias", [True, False])
def test_linear(bias: bool) -> None:
    compare_layer(nn.Linear(7, 5, bias=bias), torch.nn.Linear(7, 5, bias=bias), (3, 7))
    compare_layer(nn.Linear(3, 1), torch.nn.Linear(3, 1), (2, 4, 3))


@pytest.mark.parametrize(
    "args,kw,shape",
    [
        ((3, 4, 3), {}, (2, 3, 7, 7)),
        ((2, 6, (3, 2)), dict(stride=2, padding=1), (1, 2, 9, 8)),
        ((4, 4, 3), dict(groups=2, dilation=2, bias=False), (1, 4, 9, 9)),
        ((1, 2, 3), dict(padding="same"), (2, 1, 5, 5)),
    ],
)
def test_conv2d(args: tuple, kw: dict, shape: tuple) -> None:
    compare_layer(nn.Conv2d(*args, **kw), torch.nn.Conv2d(*args, **kw), shape, atol=1e-4)


@pytest.mark.parametrize(
    "args,kw,shape",
    [((3, 4, 3), {}, (2, 3, 10)), ((4, 2, 5), dict(stride=2, padding=2, groups=2), (1, 4, 11))],
)
def test_conv1d(args: tuple, kw: dict, shape: tuple) -> None:
    compare_layer(nn.Conv1d(*args, **kw), torch.nn.Conv1d(*args, **kw), shape, atol=1e-4)


@pytest.mark.parametrize(
    "args,kw,shape",
    [((3, 2, 3), {}, (2, 3, 4, 4)), ((2, 4, 3), dict(stride=2, padding=1, output_padding=1, groups=2), (1, 2, 5, 4))],
)
def test_conv_transpose2d(args: tuple, kw: dict, shape: tuple) -> None:
    compare_layer(nn.ConvTranspose2d(*args, **kw), torch.nn.ConvTranspose2d(*args, **kw), shape, atol=1e-4)


@pytest.mark.parametrize(
    "shape,ref_cls",
    [((6, 3), torch.nn.BatchNorm1d), ((4, 3, 5), torch.nn.BatchNorm1d), ((2, 3, 4, 4), torch.nn.BatchNorm2d)],
)
@pytest.mark.parametrize("momentum", [0.1, None])
def test_batchnorm_train_eval(shape: tuple, ref_cls: Any, momentum: float | None) -> None:
    bn, ref = nn.BatchNorm(3, momentum=momentum), ref_cls(3, momentum=momentum)
    with torch.no_grad():
        ref.weight.uniform_(0.5, 1.5)
        ref.bias.uniform_(-0.5, 0.5)
    with Tensor.train():
        ref.train()
        for seed in range(3):  # the running statistics move with every training batch
            x = np.random.default_rng(seed).uniform(-2, 2, shape).astype(np.float32)
            compare_layer(bn, ref, shape, atol=1e-4, x=x)
            for p in get_state_dict(bn).values():
                p.grad = None
            ref.zero_grad()
    Tensor.realize(*get_state_dict(bn).values())
    np.testing.assert_allclose(bn.running_mean.numpy(), ref.running_mean.numpy(), atol=1e-5)
    np.testing.assert_allclose(bn.running_var.numpy(), ref.running_var.numpy(), atol=1e-5)
    assert bn.num_batches_tracked.item() == 3 and bn.num_batches_tracked.dtype == dtypes.int64
    ref.eval()
    x = np.random.default_rng(7).uniform(-2, 2, shape).astype(np.float32)
    np.testing.assert_allclose(bn(Tensor(x)).numpy(), ref(torch.from_numpy(x)).detach().numpy(), atol=1e-5)


def test_batchnorm_names_aliases_and_errors() -> None:
    assert nn.BatchNorm1d is nn.BatchNorm and nn.BatchNorm2d is nn.BatchNorm
    assert sorted(get_state_dict(nn.BatchNorm2d(4))) == sorted(torch.nn.BatchNorm2d(4).state_dict())
    names = ["num_batches_tracked", "running_mean", "running_var"]
    assert sorted(get_state_dict(nn.BatchNorm(4, affine=False))) == names
    with pytest.raises(ValueError, match="BatchNorm"):
        nn.BatchNorm(3)(Tensor.ones(3))
    # two layers never share memory: updating one leaves the other alone
    a, b = nn.BatchNorm(2), nn.BatchNorm(2)
    with Tensor.train():
        a(Tensor([[1.0, 2.0], [3.0, 5.0]]))
    a.running_mean.realize()
    assert b.running_mean.tolist() == [0.0, 0.0] and a.running_mean.tolist() != [0.0, 0.0]


def test_batchnorm_without_running_stats() -> None:
    compare_layer(
        nn.BatchNorm(3, track_running_stats=False),
        torch.nn.BatchNorm2d(3, track_running_stats=False),
        (2, 3, 4, 4),
        atol=1e-4,
    )


@pytest.mark.parametrize("momentum", [0.1, None])
def test_batchnorm_training_steps_replayed(momentum: float | None) -> None:
    # a training step per batch (forward, backward, the running statistics realized): the layer is a composite, its
    # run kept on its output (from the second step replayed from its program, writes included), and every step still
    # matches torch's
    bn, ref = nn.BatchNorm(4, momentum=momentum), torch.nn.BatchNorm2d(4, momentum=momentum)
    conv = nn.Conv2d(2, 4, 3, padding=1)
    ref_conv = torch.nn.Conv2d(2, 4, 3, padding=1)
    copy_from_torch(conv, ref_conv)
    with torch.no_grad():
        ref.weight.uniform_(0.5, 1.5)
        ref.bias.uniform_(-0.5, 0.5)
    copy_from_torch(bn, ref)
    with Tensor.train():
        ref.train()
        for step in range(4):
            xn = np.random.default_rng(step).uniform(-2, 2, (3, 2, 5, 5)).astype(np.float32)
            out = bn(conv(Tensor(xn)))
            ref_out = ref(ref_conv(torch.from_numpy(xn)))
            assert FORWARD_RUN in out.uop.__dict__
            out.square().sum().backward()
            ref_out.square().sum().backward()
            Tensor.realize(out, bn.weight.grad, conv.weight.grad, *get_state_dict(bn).values())
            np.testing.assert_allclose(out.numpy(), ref_out.detach().numpy(), atol=1e-4, rtol=1e-4)
            np.testing.assert_allclose(bn.weight.grad.numpy(), ref.weight.grad.numpy(), atol=1e-3, rtol=1e-4)
            np.testing.assert_allclose(conv.weight.grad.numpy(), ref_conv.weight.grad.numpy(), atol=1e-3, rtol=1e-4)
            np.testing.assert_allclose(bn.running_mean.numpy(), ref.running_mean.numpy(), atol=1e-5)
            np.testing.assert_allclose(bn.running_var.numpy(), ref.running_var.numpy(), atol=1e-5)
            assert bn.num_batches_tracked.item() == step + 1
            for p in [*get_state_dict(bn).values(), *get_state_dict(conv).values()]:
                p.grad = None
            ref.zero_grad()
            ref_conv.zero_grad()
    ref.eval()
    xn = np.random.default_rng(9).uniform(-2, 2, (3, 4, 5, 5)).astype(np.float32)
    np.testing.assert_allclose(bn(Tensor(xn)).numpy(), ref(torch.from_numpy(xn)).detach().numpy(), atol=1e-5)


@pytest.mark.parametrize("momentum", [0.1, None])
def test_batchnorm_under_an_optimizer_of_parameters_alone(monkeypatch, momentum: float | None) -> None:
    """torch's loop: the optimizer holds the parameters, not the layer's buffers. Its step realized the running
    statistics (they read the convolution's weights it overwrites) and not the count, which reads nothing it writes:
    the count grew a chain of pending writes two nodes a step and the layer's code ran every step (its count was no
    buffer to replay over). The step now stores the counts the layers wrote since the last one (nn
    take_pending_counts), in its own schedule; the layer replays from its program and every value stays torch's."""
    from lazygrad.nn import optim
    from lazygrad.nn.state import get_parameters

    bn, ref = nn.BatchNorm(4, momentum=momentum), torch.nn.BatchNorm2d(4, momentum=momentum)
    conv, ref_conv = nn.Conv2d(2, 4, 3, padding=1), torch.nn.Conv2d(2, 4, 3, padding=1)
    copy_from_torch(conv, ref_conv)
    copy_from_torch(bn, ref)
    opt = optim.SGD(get_parameters([conv, bn.weight, bn.bias]), lr=0.1, momentum=0.9)
    ref_opt = torch.optim.SGD([*ref_conv.parameters(), *ref.parameters()], lr=0.1, momentum=0.9)
    means = [0]
    mean = Tensor.mean

    def counted(*args, **kwargs):
        means[0] += 1
        return mean(*args, **kwargs)

    monkeypatch.setattr(Tensor, "mean", counted)
    sizes = []
    with Tensor.train():
        ref.train()
        for step in range(5):
            xn = np.random.default_rng(step).uniform(-2, 2, (3, 2, 5, 5)).astype(np.float32)
            opt.zero_grad()
            ref_opt.zero_grad()
            bn(conv(Tensor(xn))).square().mean().backward()
            ref(ref_conv(torch.from_numpy(xn))).square().mean().backward()
            opt.step()
            ref_opt.step()
            assert bn.num_batches_tracked._plain_buffer() is not None
            sizes.append(len(bn.num_batches_tracked.uop.toposort))
            if step == 1:
                means[0] = 0
    assert means[0] == 3  # the loss's mean only: the layer's code ran in its first two steps
    assert len(set(sizes)) == 1
    np.testing.assert_allclose(conv.weight.numpy(), ref_conv.weight.detach().numpy(), atol=1e-5, rtol=1e-4)
    np.testing.assert_allclose(bn.weight.numpy(), ref.weight.detach().numpy(), atol=1e-5, rtol=1e-4)
    np.testing.assert_allclose(bn.running_mean.numpy(), ref.running_mean.numpy(), atol=1e-5)
    np.testing.assert_allclose(bn.running_var.numpy(), ref.running_var.numpy(), atol=1e-5)
    assert bn.num_batches_tracked.item() == 5 and bn.num_batches_tracked.dtype == dtypes.int64


def test_batchnorm_replay_copies_a_shifted_read() -> None:
    # replayed over an input that reads a running statistic at other positions, the write takes assign's copy of the
    # value first (as the layer's code does), and the statistics come out as computed from the old values
    bn = nn.BatchNorm(3)
    noise = np.random.default_rng(0).uniform(-1, 1, (2, 3, 2, 2)).astype(np.float32)
    with Tensor.train():
        for _ in range(2):  # recorded, then replayed, over an input that reads no statistic
            bn(Tensor(noise) + 0)
            Tensor.realize(*get_state_dict(bn).values())
        assert bn.running_mean.uop.op is Ops.BUFFER
        old_mean, old_var = bn.running_mean.numpy(), bn.running_var.numpy()
        x = Tensor(noise) + bn.running_mean.flip(0).reshape(1, 3, 1, 1)
        bn(x)
        assert bn.running_mean.uop.op is Ops.ASSIGN and bn.running_mean.uop.src[1].op is Ops.CONTIGUOUS
        Tensor.realize(*get_state_dict(bn).values())
    xn = noise + old_mean[::-1].reshape(1, 3, 1, 1)
    mean, var = xn.mean((0, 2, 3)), xn.var((0, 2, 3), ddof=1)
    np.testing.assert_allclose(bn.running_mean.numpy(), 0.9 * old_mean + 0.1 * mean, atol=1e-6)
    np.testing.assert_allclose(bn.running_var.numpy(), 0.9 * old_var + 0.1 * var, atol=1e-6)


@pytest.mark.parametrize("shape,norm", [((4, 6), 6), ((2, 3, 4), (3, 4))])
def test_layernorm(shape: tuple, norm: Any) -> None:
    ref = torch.nn.LayerNorm(norm)
    with torch.no_grad():
        ref.weight.uniform_(0.5, 1.5)
        ref.bias.uniform_(-0.5, 0.5)
    compare_layer(nn.LayerNorm(norm), ref, shape, atol=1e-4)
    compare_layer(
        nn.LayerNorm(norm, elementwise_affine=False),
        torch.nn.LayerNorm(norm, elementwise_affine=False),
        shape,
        atol=1e-4,
    )
    compare_layer(nn.LayerNorm(norm, bias=False), torch.nn.LayerNorm(norm, bias=False), shape, atol=1e-4)
    with pytest.raises(ValueError, match="LayerNorm"):
        nn.LayerNorm(5)(Tensor.ones(2, 4))


@pytest.mark.parametrize("groups,channels,shape", [(2, 4, (2, 4, 3, 3)), (3, 6, (1, 6, 5)), (1, 3, (2, 3, 4))])
def test_groupnorm(groups: int, channels: int, shape: tuple) -> None:
    ref = torch.nn.GroupNorm(groups, channels)
    with torch.no_grad():
        ref.weight.uniform_(0.5, 1.5)
        ref.bias.uniform_(-0.5, 0.5)
    compare_layer(nn.GroupNorm(groups, channels), ref, shape, atol=1e-4)
    compare_layer(
        nn.GroupNorm(groups, channels, affine=False),
        torch.nn.GroupNorm(groups, channels, affine=False),
        shape,
        atol=1e-4,
    )
    with pytest.raises(ValueError, match="divide"):
        nn.GroupNorm(4, 6)


@pytest.mark.parametrize("eps", [None, 1e-6])
def test_rmsnorm(eps: float | None) -> None:
    ref = torch.nn.RMSNorm(8, eps=eps)
    with torch.no_grad():
        ref.weight.uniform_(0.5, 1.5)
    compare_layer(nn.RMSNorm(8, eps=eps), ref, (3, 5, 8), atol=1e-5)
    compare_layer(
        nn.RMSNorm((2, 4), elementwise_affine=False), torch.nn.RMSNorm((2, 4), elementwise_affine=False), (3, 2, 4)
    )


def test_embedding() -> None:
    idx = np.array([[0, 3, 9], [9, 9, 1]], dtype=np.int32)
    compare_layer(nn.Embedding(10, 4), torch.nn.Embedding(10, 4), idx.shape, x=idx)
    with pytest.raises(TypeError, match="integer"):
        nn.Embedding(3, 2)(Tensor([0.5]))


def test_default_init_matches_torch_distributions() -> None:
    Tensor.manual_seed(0)
    lin = nn.Linear(400, 300)
    w = lin.weight.numpy()
    bound = 1 / np.sqrt(400)
    assert np.abs(w).max() <= bound and np.abs(w).max() > 0.99 * bound
    assert abs(w.std() - bound / np.sqrt(3)) < 0.01 * bound  # uniform(-b, b) has std b/sqrt(3)
    conv = nn.Conv2d(8, 16, 3, groups=2)
    assert np.abs(conv.weight.numpy()).max() <= 1 / np.sqrt(4 * 9)
    emb = nn.Embedding(1000, 64).weight.numpy()
    assert abs(emb.mean()) < 0.02 and abs(emb.std() - 1) < 0.02  # N(0, 1), as torch
    assert nn.LayerNorm(5).weight.tolist() == [1.0] * 5 and nn.LayerNorm(5).bias.tolist() == [0.0] * 5
    # two layers never share a buffer, even when their initial values are the same expression
    a, b = nn.LayerNorm(3), nn.LayerNorm(3)
    a.weight.assign(Tensor([2.0, 2.0, 2.0])).realize()
    assert b.weight.tolist() == [1.0, 1.0, 1.0]


def test_layer_argument_errors() -> None:
    with pytest.raises(ValueError, match="groups"):
        nn.Conv2d(3, 4, 3, groups=2)
    with pytest.raises(ValueError, match="groups"):
        nn.ConvTranspose2d(4, 3, 3, groups=2)
