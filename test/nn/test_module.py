"""nn.Module and the torch-style layers against torch.nn: the same model written once for each framework (only the
import differs), trained side by side; state-dict and parameter names; train/eval modes; hooks; moves and casts;
each layer module's output against torch's."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch

import lazygrad.nn as nn
from lazygrad import Tensor, dtypes
from lazygrad.nn import optim
from test.opcheck import randn


def _net(nnm: Any) -> Any:
    """A small CNN as a torch user writes it: the same source for torch.nn and lazygrad.nn."""

    class Net(nnm.Module):
        def __init__(self) -> None:
            super().__init__()
            self.features = nnm.Sequential(
                nnm.Conv2d(1, 4, 3, padding=1), nnm.BatchNorm2d(4), nnm.ReLU(), nnm.MaxPool2d(2), nnm.Dropout(0.0)
            )
            self.blocks = nnm.ModuleList([nnm.Linear(64, 16), nnm.GELU()])
            self.head = nnm.ModuleDict({"out": nnm.Linear(16, 10)})
            self.register_buffer("scale", (torch if nnm is torch.nn else Tensor).ones(1) * 2, persistent=False)

        def forward(self, x: Any) -> Any:
            x = self.features(x).flatten(1)
            for block in self.blocks:
                x = block(x)
            return self.head["out"](x) * self.scale

    return Net()


def _load_torch_weights(model: nn.Module, ref: torch.nn.Module) -> None:
    model.load_state_dict({k: Tensor(v.numpy()) for k, v in ref.state_dict().items()})


def test_torch_style_model_trains_as_torch() -> None:
    tm, lm = _net(torch.nn), _net(nn)
    assert list(lm.state_dict()) == list(tm.state_dict())
    assert [n for n, _ in lm.named_parameters()] == [n for n, _ in tm.named_parameters()]
    assert [n for n, _ in lm.named_buffers()] == [n for n, _ in tm.named_buffers() if n != "scale"]
    _load_torch_weights(lm, tm)
    t_opt = torch.optim.SGD(tm.parameters(), lr=0.1, momentum=0.9)
    l_opt = optim.SGD(lm.parameters(), lr=0.1, momentum=0.9)
    t_loss, l_loss = torch.nn.CrossEntropyLoss(label_smoothing=0.1), nn.CrossEntropyLoss(label_smoothing=0.1)
    rng = np.random.default_rng(0)
    for _ in range(4):
        x, y = rng.standard_normal((8, 1, 8, 8)).astype(np.float32), rng.integers(0, 10, 8)
        t_opt.zero_grad()
        lt = t_loss(tm(torch.tensor(x)), torch.tensor(y))
        lt.backward()
        t_opt.step()
        l_opt.zero_grad()
        ll = l_loss(lm(Tensor(x)), Tensor(y))
        ll.backward()
        l_opt.step()
        np.testing.assert_allclose(ll.item(), lt.item(), rtol=1e-5)
    for (name, a), b in zip(lm.state_dict().items(), tm.state_dict().values()):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-4, atol=1e-5, err_msg=name)
    lm.eval(), tm.eval()
    x = randn(3, 1, 8, 8, seed=9)
    np.testing.assert_allclose(lm(Tensor(x)).numpy(), tm(torch.tensor(x)).detach().numpy(), rtol=1e-4, atol=1e-5)


def test_training_mode_of_torch_style_models_and_of_layers_alone() -> None:
    model = _net(nn)
    assert model.training and all(m.training for m in model.modules())  # torch's default: training
    bn = nn.BatchNorm2d(3)
    assert bn.training is None  # a layer alone follows Tensor.training, as tinygrad's
    x = Tensor(randn(4, 3, 2, 2) * 3 + 1)
    eval_out = bn(x).numpy()  # running statistics (0, 1): x / sqrt(1 + eps)
    np.testing.assert_allclose(eval_out, x.numpy() / np.sqrt(1 + 1e-5), rtol=1e-5)
    with Tensor.train():
        np.testing.assert_allclose(bn(x).numpy().mean((0, 2, 3)), np.zeros(3), atol=1e-5)
    model.eval()
    assert not any(m.training for m in model.modules())
    assert model.train() is model and model.features[1].training is True
    drop = nn.Sequential(nn.Dropout(0.5))
    assert (drop(Tensor.ones(100)).numpy() == 0).any()
    np.testing.assert_array_equal(drop.eval()(Tensor.ones(100)).numpy(), np.ones(100))


def test_parameters_registration_and_freezing() -> None:
    class M(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.w = nn.Parameter(Tensor.zeros(3))
            self.v = nn.Parameter(Tensor.zeros(3))  # equal lazy values: each parameter still owns its memory
            self.register_parameter("b", Tensor.ones(2))
            self.register_buffer("count", Tensor.zeros(1))
            self.lin = nn.Linear(3, 2)

    m = M()
    assert [n for n, _ in m.named_parameters()] == ["w", "v", "b", "lin.weight", "lin.bias"]
    assert [n for n, _ in m.named_buffers()] == ["count"]
    assert isinstance(m.w, nn.Parameter) and not isinstance(m.count, nn.Parameter)
    opt = optim.SGD(m.parameters(), lr=1.0)
    (m.w * Tensor([1.0, 2.0, 3.0])).sum().backward()
    opt.step()
    np.testing.assert_array_equal(m.w.numpy(), [-1, -2, -3])
    np.testing.assert_array_equal(m.v.numpy(), [0, 0, 0])
    m.requires_grad_(False)
    assert len(list(m.parameters())) == 5 and not any(p.requires_grad for p in m.parameters())
    m.lin.requires_grad_(True)
    assert [n for n, p in m.named_parameters() if p.requires_grad] == ["lin.weight", "lin.bias"]
    assert len(list(m.parameters(recurse=False))) == 3


def test_state_dict_round_trip_and_errors() -> None:
    a, b = _net(nn), _net(nn)
    b.load_state_dict(a.state_dict())
    for (name, x), y in zip(a.state_dict().items(), b.state_dict().values()):
        np.testing.assert_array_equal(x.numpy(), y.numpy(), err_msg=name)
    partial = {k: v for k, v in a.state_dict().items() if not k.startswith("head")}
    with pytest.raises(RuntimeError, match="head.out.weight"):
        b.load_state_dict(partial)
    keys = b.load_state_dict(partial, strict=False)
    assert keys.missing_keys == ["head.out.weight", "head.out.bias"] and keys.unexpected_keys == []


def test_forward_hooks_and_missing_forward() -> None:
    lin = nn.Linear(3, 2)
    seen: list[tuple] = []
    handle = lin.register_forward_hook(lambda mod, args, out: seen.append((mod, args[0].shape, out.shape)))
    pre = lin.register_forward_pre_hook(lambda mod, args: (args[0] * 0,))
    out = lin(Tensor.ones(4, 3))
    assert seen == [(lin, (4, 3), (4, 2))]
    np.testing.assert_allclose(out.numpy(), np.broadcast_to(lin.bias.numpy(), (4, 2)))
    handle.remove(), pre.remove()
    lin(Tensor.ones(4, 3))
    assert len(seen) == 1

    # a layer subclass whose __call__ calls its parent's: the hook runs once a call
    norm, calls = nn.LayerNorm2d(3), []
    norm.register_forward_hook(lambda *a: calls.append(1))
    np.testing.assert_allclose(
        norm(Tensor(X[:, :3])).numpy(),
        torch.nn.functional.layer_norm(torch.tensor(X[:, :3]).permute(0, 2, 3, 1), (3,)).permute(0, 3, 1, 2),
        atol=1e-5,
    )
    assert calls == [1]

    class NoForward(nn.Module):
        pass

    with pytest.raises(NotImplementedError, match="forward"):
        NoForward()(Tensor.ones(1))


def test_moves_and_casts_keep_each_tensor() -> None:
    model = nn.Sequential(nn.Linear(3, 4), nn.BatchNorm1d(4))
    weight, counter = model[0].weight, model[1].num_batches_tracked
    assert model.half() is model and model[0].weight is weight
    assert weight.dtype == dtypes.float16 and counter.dtype == dtypes.int64  # only floats are cast
    model.to(dtypes.float32).to("CPU")
    assert weight.dtype == dtypes.float32 and model[0].weight is weight


def test_sequential_and_containers_index_like_torch() -> None:
    seq = nn.Sequential(nn.Linear(2, 3), nn.ReLU(), nn.Linear(3, 1))
    assert len(seq) == 3 and isinstance(seq[-1], nn.Linear) and len(seq[1:]) == 2
    named = nn.Sequential({"fc": nn.Linear(2, 2), "act": nn.Tanh()})
    assert list(named.state_dict()) == ["fc.weight", "fc.bias"]
    with pytest.raises(IndexError):
        seq[3]
    blocks = nn.ModuleList([nn.Linear(2, 2) for _ in range(3)])
    blocks.append(nn.Linear(2, 1))
    assert len(blocks) == 4 and list(blocks.state_dict())[-1] == "3.bias"
    assert "Linear(in_features=2, out_features=1, bias=True)" in repr(blocks)


X = randn(2, 4, 6, 6)
SEQ = randn(2, 4, 9)
# (torch.nn's name, constructor args, constructor kwargs, inputs)
LAYERS: list[tuple[str, tuple, dict, list[np.ndarray]]] = [
    ("ReLU", (), {}, [X]),
    ("LeakyReLU", (0.2,), {}, [X]),
    ("GELU", (), {"approximate": "tanh"}, [X]),
    ("GELU", (), {}, [X]),
    ("ELU", (0.5,), {}, [X]),
    ("Hardtanh", (-0.3, 0.4), {}, [X]),
    ("Softplus", (2.0, 5.0), {}, [X]),
    ("Softmax", (1,), {}, [X]),
    ("LogSoftmax", (), {"dim": -1}, [X]),
    ("Threshold", (0.2, -1.0), {}, [X]),
    ("GLU", (1,), {}, [X]),
    ("Flatten", (), {}, [X]),
    ("Unflatten", (1, (2, 2)), {}, [X]),
    ("Identity", (54,), {"unused": 1}, [X]),
    ("MaxPool2d", (3, 2, 1), {}, [X]),
    ("MaxPool1d", (2,), {"ceil_mode": True}, [SEQ]),
    ("AvgPool2d", (2,), {"count_include_pad": False, "padding": 1}, [X]),
    ("AdaptiveAvgPool2d", ((4, 5),), {}, [X]),
    ("AdaptiveMaxPool2d", (2,), {}, [X]),
    ("ZeroPad2d", ((1, 0, 2, 1),), {}, [X]),
    ("ConstantPad1d", (2, 0.5), {}, [SEQ]),
    ("ReflectionPad2d", (2,), {}, [X]),
    ("ReplicationPad1d", ((1, 3),), {}, [SEQ]),
    ("Upsample", (), {"scale_factor": 2, "mode": "nearest"}, [X]),
    ("PixelShuffle", (2,), {}, [X]),
    ("LocalResponseNorm", (3,), {}, [X]),
    ("Unfold", (3,), {"padding": 1}, [X]),
    ("MSELoss", (), {}, [X, randn(2, 4, 6, 6, seed=1)]),
    ("L1Loss", (), {"reduction": "sum"}, [X, randn(2, 4, 6, 6, seed=1)]),
    ("SmoothL1Loss", (), {"beta": 0.5}, [X, randn(2, 4, 6, 6, seed=1)]),
    ("HuberLoss", ("sum", 0.3), {}, [X, randn(2, 4, 6, 6, seed=1)]),
    ("KLDivLoss", (), {"reduction": "batchmean", "log_target": True}, [X, randn(2, 4, 6, 6, seed=1)]),
    ("MarginRankingLoss", (0.3,), {}, [randn(5), randn(5, seed=1), np.sign(randn(5, seed=2))]),
    ("TripletMarginLoss", (0.5, 1.0), {}, [randn(5, 3), randn(5, 3, seed=1), randn(5, 3, seed=2)]),
    ("PoissonNLLLoss", (False, True), {}, [np.abs(X) + 0.1, np.abs(randn(2, 4, 6, 6, seed=1)) * 3]),
    ("GaussianNLLLoss", (), {"full": True}, [X, randn(2, 4, 6, 6, seed=1), np.abs(X) + 0.5]),
    ("CosineSimilarity", (), {"dim": 2}, [X, randn(2, 4, 6, 6, seed=1)]),
    ("PairwiseDistance", (1.0,), {}, [randn(5, 3), randn(5, 3, seed=1)]),
]


@pytest.mark.parametrize("name, args, kwargs, inputs", LAYERS, ids=[f"{c[0]}-{i}" for i, c in enumerate(LAYERS)])
def test_layer_modules_match_torch(name: str, args: tuple, kwargs: dict, inputs: list[np.ndarray]) -> None:
    ours, ref = getattr(nn, name)(*args, **kwargs), getattr(torch.nn, name)(*args, **kwargs)
    out = ours(*[Tensor(x) for x in inputs])
    want = ref(*[torch.tensor(x) for x in inputs])
    np.testing.assert_allclose(out.numpy(), want.detach().numpy(), rtol=1e-5, atol=1e-5)


def test_loss_modules_with_weights_match_torch() -> None:
    x, y = randn(6, 4), np.array([0, 3, 1, 1, 2, 0])
    w = np.array([0.5, 1.0, 2.0, 1.5], np.float32)
    for cls, kw in (("CrossEntropyLoss", {"ignore_index": 1}), ("NLLLoss", {"reduction": "sum"})):
        ours = getattr(nn, cls)(weight=Tensor(w), **kw)(Tensor(x).log_softmax(1), Tensor(y))
        ref = getattr(torch.nn, cls)(weight=torch.tensor(w), **kw)(torch.tensor(x).log_softmax(1), torch.tensor(y))
        np.testing.assert_allclose(ours.numpy(), ref.numpy(), rtol=1e-5)
    p, t = randn(6, 4), (randn(6, 4, seed=1) > 0).astype(np.float32)
    pos = np.array([1.0, 2.0, 0.5, 3.0], np.float32)
    ours = nn.BCEWithLogitsLoss(pos_weight=Tensor(pos))(Tensor(p), Tensor(t))
    ref = torch.nn.BCEWithLogitsLoss(pos_weight=torch.tensor(pos))(torch.tensor(p), torch.tensor(t))
    np.testing.assert_allclose(ours.numpy(), ref.numpy(), rtol=1e-5)
    ours = nn.BCELoss()(Tensor(p).sigmoid(), Tensor(t))
    np.testing.assert_allclose(ours.numpy(), torch.nn.BCELoss()(torch.tensor(p).sigmoid(), torch.tensor(t)), rtol=1e-5)
    with pytest.raises(ValueError, match="reduction"):
        nn.MSELoss(reduction="avg")


def test_prelu_and_bilinear_parameters_train() -> None:
    prelu = nn.PReLU(4)
    assert [n for n, _ in prelu.named_parameters()] == ["weight"]
    out = prelu(Tensor(X))
    np.testing.assert_allclose(out.numpy(), torch.nn.functional.prelu(torch.tensor(X), torch.full((4,), 0.25)))
    out.sum().backward()
    assert prelu.weight.grad is not None
    bil = nn.Bilinear(3, 2, 5)
    assert bil(Tensor(randn(4, 3)), Tensor(randn(4, 2))).shape == (4, 5)
    assert [n for n, _ in bil.named_parameters()] == ["weight", "bias"]


def test_readme_pytorch_example_runs(tmp_path, monkeypatch) -> None:
    import pathlib

    readme = (pathlib.Path(__file__).parents[2] / "README.md").read_text()
    section = readme[readme.index("### PyTorch programs") :]
    block = section[
        section.index("```python") + len("```python") : section.index("```", section.index("```python") + 9)
    ]
    monkeypatch.chdir(tmp_path)
    exec(compile(block, "README.md", "exec"), {})
    assert (tmp_path / "net.safetensors").exists()


def test_pytorch_digits_example_trains() -> None:
    """examples/pytorch_digits.py, a PyTorch program but for its imports (Module, DataLoader, Adam with OneCycleLR,
    train/eval, no_grad), learns the digits."""
    import runpy
    from pathlib import Path

    pytest.importorskip("sklearn")
    example = runpy.run_path(str(Path(__file__).parents[2] / "examples" / "pytorch_digits.py"))
    assert example["train"](epochs=3, log=False) >= 80.0


def test_layers_take_torchs_factory_and_layer_arguments() -> None:
    lin = nn.Linear(3, 4, device="CPU", dtype=dtypes.float64)
    assert lin.weight.dtype == dtypes.float64 and lin.bias.dtype == dtypes.float64
    assert nn.LSTM(3, 4, dtype=dtypes.float16).weight_ih_l0.dtype == dtypes.float16
    assert nn.MultiheadAttention(4, 2, dtype=dtypes.float64).in_proj_weight.dtype == dtypes.float64
    # padding modes: the same conv as torch's with its weights
    for mode, padding in [("reflect", 1), ("replicate", (1, 2)), ("circular", 1), ("reflect", "same")]:
        ref = torch.nn.Conv2d(2, 3, 3, padding=padding, padding_mode=mode)
        ours = nn.Conv2d(2, 3, 3, padding=padding, padding_mode=mode)
        ours.load_state_dict({k: Tensor(v.detach().numpy()) for k, v in ref.state_dict().items()})
        x = randn(1, 2, 5, 6)
        np.testing.assert_allclose(ours(Tensor(x)).numpy(), ref(torch.tensor(x)).detach().numpy(), atol=1e-5)
    # Embedding's padding row: zero at the start, no gradient, as torch's
    emb = nn.Embedding(5, 3, padding_idx=-1)
    assert emb.padding_idx == 4 and emb.weight.numpy()[4].tolist() == [0, 0, 0]
    emb(Tensor([[4, 1, 4]])).sum().backward()
    assert emb.weight.grad.numpy()[4].tolist() == [0, 0, 0] and emb.weight.grad.numpy()[1].tolist() == [1, 1, 1]
    table = Tensor(randn(4, 2))
    frozen = nn.Embedding.from_pretrained(table)
    assert not frozen.weight.requires_grad and frozen(Tensor([2])).numpy().tolist() == [table.numpy()[2].tolist()]
    with pytest.raises(ValueError, match="padding_mode"):
        nn.Conv2d(1, 1, 3, padding_mode="mirror")


def test_parameter_containers_data_parallel_and_lazy_layers_as_torch() -> None:
    """ParameterList/ParameterDict name their parameters as torch's (state dict keys), DataParallel prefixes
    "module.", lazy layers read their input size at the first call and then hold torch's parameter shapes."""

    def build(mod: Any) -> Any:
        class Net(mod.Module):
            def __init__(self) -> None:
                super().__init__()
                self.scales = mod.ParameterList([mod.Parameter(mod_ones(mod, 3)) for _ in range(2)])
                self.extra = mod.ParameterDict({"shift": mod.Parameter(mod_ones(mod, 3))})
                self.body = mod.Linear(3, 3)

            def forward(self, x: Any) -> Any:
                return self.body(x * self.scales[0] * self.scales[1] + self.extra["shift"])

        return mod.DataParallel(Net())

    def mod_ones(mod: Any, n: int) -> Any:
        return Tensor.ones(n) if mod is nn else torch.ones(n)

    ours, ref = build(nn), build(torch.nn)
    assert list(ours.state_dict()) == list(ref.state_dict())
    assert [n for n, _ in ours.named_parameters()] == [n for n, _ in ref.named_parameters()]
    ours.load_state_dict({k: Tensor(v.detach().numpy()) for k, v in ref.state_dict().items()})
    x = randn(2, 3)
    np.testing.assert_allclose(
        ours(Tensor(x)).numpy(), ref(torch.tensor(x)).detach().numpy(), rtol=1e-5, atol=1e-6
    )  # (float32: the kernels may sum in another order)
    for lazy, shape, want in (
        (nn.LazyLinear(4), (2, 7), {"weight": (4, 7), "bias": (4,)}),
        (nn.LazyConv2d(5, 3, padding=1), (1, 2, 6, 6), {"weight": (5, 2, 3, 3), "bias": (5,)}),
        (nn.LazyBatchNorm1d(1e-3, 0.5), (4, 6), {"weight": (6,), "bias": (6,)}),
    ):
        lazy(Tensor.ones(*shape))
        assert {n: p.shape for n, p in lazy.named_parameters()} == want
    sync = nn.SyncBatchNorm(3, 1e-4, 0.3)
    assert sync.eps == 1e-4 and sync.momentum == 0.3 and nn.SyncBatchNorm.convert_sync_batchnorm(ours) is ours


@pytest.mark.parametrize(
    "name, args, shape",
    [
        ("Softmax2d", (), (2, 3, 4, 5)),
        ("ChannelShuffle", (2,), (1, 4, 3, 3)),
        ("UpsamplingNearest2d", (None, 2), (1, 2, 3, 3)),
        ("UpsamplingBilinear2d", ((5, 4),), (1, 2, 3, 3)),
        ("LPPool2d", (2, 2), (1, 2, 4, 4)),
        ("AdaptiveMaxPool3d", ((1, 2, 2),), (1, 2, 3, 4, 4)),
        ("AlphaDropout", (0.4,), (3, 4)),  # (eval mode: the identity, as torch's)
    ],
)
def test_more_layers_match_torch(name: str, args: tuple, shape: tuple) -> None:
    x = np.abs(randn(*shape)) + 0.1
    ours, ref = getattr(nn, name)(*args), getattr(torch.nn, name)(*args)
    ours.eval(), ref.eval()
    np.testing.assert_allclose(ours(Tensor(x)).numpy(), ref(torch.tensor(x)).numpy(), rtol=1e-5, atol=1e-6)


def test_tensor_torch_leftovers() -> None:
    t = Tensor([[1.0, 2.0], [3.0, 4.0]])
    assert t.new(2, 3).shape == (2, 3) and t.new([5, 6]).dtype == t.dtype
    assert t.share_memory_() is t and not t.is_shared() and t.data_ptr() != 0
    assert t.swapdims_(0, 1).tolist() == [[1.0, 3.0], [2.0, 4.0]]


def test_deepcopy_and_pickle_of_a_model_own_their_memory() -> None:
    """copy.deepcopy of a model (an EMA twin, a target network, a best-model snapshot) and a pickle round trip: tensors
    of their own memory, parameters still parameters (with their .grad copied). The copies used to hold the original
    buffers' addresses: training one changed the other, and freeing both gave the allocator one block twice, which it
    handed to two new tensors."""
    import copy
    import gc
    import pickle

    import torch

    torch.manual_seed(0)
    ref = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.BatchNorm1d(3))
    model = nn.Sequential(nn.Linear(4, 3), nn.BatchNorm1d(3))
    model.load_state_dict({k: Tensor(v.numpy()) for k, v in ref.state_dict().items()})
    x = Tensor(np.random.default_rng(0).standard_normal((6, 4)).astype(np.float32))
    model(x).square().sum().backward()  # (in training: the running statistics move too)
    model.eval()
    before = model(x).numpy()
    twin, pickled = copy.deepcopy(model), pickle.loads(pickle.dumps(model))
    model.train()
    assert [n for n, _ in twin.named_parameters()] == [n for n, _ in model.named_parameters()]
    assert all(p.grad is not None and p.grad is not q.grad for p, q in zip(twin.parameters(), model.parameters()))
    opt = nn.optim.SGD(list(model.parameters()), lr=0.5)
    for _ in range(3):
        opt.zero_grad()
        model(x).square().sum().backward()
        opt.step()
    del model, opt
    gc.collect()
    fills = [Tensor.full((3, 4), 7.0).contiguous().realize() for _ in range(8)]  # blocks a double free would reuse
    for copied in (twin, pickled):
        copied.eval()
        np.testing.assert_allclose(copied(x).numpy(), before, rtol=1e-6, atol=1e-6)
    assert all((f.numpy() == 7.0).all() for f in fills)


def test_tensors_computed_from_parameters_are_neither_parameters_nor_state() -> None:
    """A module keeping what it computed (REINFORCE's saved log-probabilities, weight norm's weight) registers it
    neither as a parameter nor in its state dict, as torch's; its parameters and buffers stay."""
    import torch

    import lazygrad.torch as lt

    def names(lib):  # noqa: ANN001, ANN202
        class Policy(lib.nn.Module):
            def __init__(self) -> None:
                super().__init__()
                self.fc = lib.nn.Linear(3, 2)
                self.norm = lib.nn.BatchNorm1d(2)
                self.saved: list = []

            def forward(self, x):  # noqa: ANN001, ANN202
                return self.norm(self.fc(x)).log_softmax(-1)

        p = Policy()
        out = p(lib.ones(4, 3))
        p.saved.append(out[0, 1])
        p.last = out
        return [n for n, _ in p.named_parameters()], sorted(p.state_dict())

    assert names(lt) == names(torch)
