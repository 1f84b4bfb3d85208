"""lazygrad.torch: torch's namespace. A PyTorch program's source, its imports of `torch` rewritten to
`lazygrad.torch` and nothing else, must compute what it computes under torch; each top-level function must give
torch's value for torch's arguments."""

from __future__ import annotations

import re

import numpy as np
import pytest
import torch

import lazygrad.torch as lt

PROGRAM = """
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.optim.lr_scheduler import StepLR
from torch.utils.data import DataLoader, TensorDataset


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(1, 4, 3, padding=1, bias=False)  # (a bias before BatchNorm has no gradient)
        self.norm = nn.BatchNorm2d(4)
        self.fc = nn.Linear(4 * 4 * 4, 3)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.norm(self.conv(x))), 2)
        return self.fc(torch.flatten(x, 1))


def main(init, xs, ys, path):
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    torch.manual_seed(0)
    model = Net().to(device)
    model.load_state_dict({k: torch.from_numpy(v) for k, v in init.items()})
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    sched = StepLR(opt, step_size=2, gamma=0.5)
    data = TensorDataset(torch.tensor(xs, dtype=torch.float32), torch.tensor(ys, dtype=torch.long))
    losses = []
    for epoch in range(3):
        model.train()
        for x, y in DataLoader(data, batch_size=8):
            x, y = x.to(device), y.to(device)
            opt.zero_grad()
            out = model(x)
            loss = F.cross_entropy(out, y) + 0.01 * torch.sum(torch.square(model.fc.weight))
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 5.0)
            opt.step()
            losses.append(loss.item())
        sched.step()
    torch.save(model.state_dict(), path)
    model.load_state_dict(torch.load(path))
    model.eval()
    with torch.no_grad():
        logits = model(torch.from_numpy(xs).float())
        probs = torch.softmax(logits, dim=1)
        top, pred = torch.max(probs, 1)
        correct = (pred == torch.from_numpy(ys)).sum().item()
        spread = torch.std(torch.cat([top, top.mean(0, keepdim=True)]), 0, True).item()
    return losses, correct, spread
"""


LM_PROGRAM = """
import math

import torch
from torch import nn
from torch.nn import functional as F


class Block(nn.Module):
    def __init__(self, d, heads):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(approximate="tanh"), nn.Linear(4 * d, d))

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(d, dim=2)
        q, k, v = (z.view(b, t, self.heads, d // self.heads).transpose(1, 2) for z in (q, k, v))
        att = (q @ k.transpose(-2, -1)) / math.sqrt(k.size(-1))
        mask = torch.triu(torch.ones(t, t, dtype=torch.bool), diagonal=1)
        att = torch.softmax(att.masked_fill(mask, float("-inf")), dim=-1)
        y = (att @ v).transpose(1, 2).contiguous().view(b, t, d)
        x = x + self.proj(y)
        return x + self.mlp(self.ln2(x))


class LM(nn.Module):
    def __init__(self, vocab, d, t):
        super().__init__()
        self.tok = nn.Embedding(vocab, d)
        self.pos = nn.Parameter(torch.zeros(1, t, d))
        self.block = Block(d, 2)
        self.head = nn.Linear(d, vocab, bias=False)

    def forward(self, idx, targets=None):
        x = self.block(self.tok(idx) + self.pos[:, : idx.size(1)])
        logits = self.head(x)
        if targets is None:
            return logits, None
        return logits, F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))


@torch.no_grad()
def generate(model, idx, n):
    for _ in range(n):
        logits, _ = model(idx[:, -8:])
        nxt = torch.argmax(logits[:, -1, :], dim=-1, keepdim=True)
        idx = torch.cat((idx, nxt), dim=1)
    return idx


def main(init, tokens):
    model = LM(11, 16, 8)
    model.load_state_dict({k: torch.tensor(v) for k, v in init.items()})
    decay = [p for n, p in model.named_parameters() if p.dim() >= 2]
    rest = [p for n, p in model.named_parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": rest, "weight_decay": 0.0}], lr=3e-3)
    data = torch.tensor(tokens)
    losses = []
    for step in range(6):
        i = torch.arange(4) * 3 + step
        x = torch.stack([data[j : j + 8] for j in i.tolist()])
        y = torch.stack([data[j + 1 : j + 9] for j in i.tolist()])
        _, loss = model(x, y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        losses.append(loss.item())
    return losses, generate(model, torch.zeros((1, 1), dtype=torch.long), 6).tolist()
"""


def _ported(src: str) -> str:
    """The porting rule of lazygrad.torch's docstring: `torch` in the import statements becomes `lazygrad.torch`."""
    src = re.sub(r"^(\s*)import torch$", r"\1import lazygrad.torch as torch", src, flags=re.M)
    src = re.sub(r"^(\s*)import torch\.", r"\1import lazygrad.torch.", src, flags=re.M)
    return re.sub(r"^(\s*)from torch([. ])", r"\1from lazygrad.torch\2", src, flags=re.M)


def _run(src: str, *args):
    scope: dict = {}
    exec(compile(src, "<program>", "exec"), scope)
    return scope["main"](*args)


def test_a_torch_program_runs_with_its_imports_ported(tmp_path):
    rng = np.random.default_rng(0)
    xs = rng.standard_normal((24, 1, 8, 8)).astype(np.float32)
    ys = rng.integers(0, 3, 24)
    torch.manual_seed(0)
    ref_scope: dict = {}
    exec(compile(PROGRAM, "<program>", "exec"), ref_scope)
    init = {k: v.detach().numpy().copy() for k, v in ref_scope["Net"]().state_dict().items()}
    want = _run(PROGRAM, init, xs, ys, tmp_path / "torch.pt")
    ported = _ported(PROGRAM)
    assert "import lazygrad.torch as torch" in ported and "from lazygrad.torch.utils.data import" in ported
    got = _run(ported, init, xs, ys, tmp_path / "lazygrad.pt")
    np.testing.assert_allclose(got[0], want[0], rtol=2e-4, atol=2e-5)  # 9 steps' losses
    assert got[1] == want[1]
    np.testing.assert_allclose(got[2], want[2], rtol=1e-4)


def test_a_torch_language_model_runs_with_its_imports_ported():
    tokens = (np.arange(40) * 7 % 11).tolist()
    torch.manual_seed(0)
    ref: dict = {}
    exec(compile(LM_PROGRAM, "<program>", "exec"), ref)
    init = {k: v.detach().numpy().copy() for k, v in ref["LM"](11, 16, 8).state_dict().items()}
    init["pos"] = np.random.default_rng(1).standard_normal((1, 8, 16)).astype(np.float32) * 0.1
    want_losses, want_tokens = _run(LM_PROGRAM, init, tokens)
    ported = _ported(LM_PROGRAM)
    assert "from lazygrad.torch import nn" in ported and "from lazygrad.torch.nn import functional" in ported
    got_losses, got_tokens = _run(ported, init, tokens)
    np.testing.assert_allclose(got_losses, want_losses, rtol=1e-4, atol=1e-5)
    assert got_tokens == want_tokens


def _both(expr: str, **arrays: np.ndarray):
    """`expr` evaluated with `torch` bound to torch and to lazygrad.torch, over the same arrays as tensors."""
    out = []
    for mod in (torch, lt):
        env = {"torch": mod, "np": np, **{k: mod.tensor(v) for k, v in arrays.items()}}
        out.append(eval(expr, env))
    return out


def _values(x):
    if isinstance(x, (tuple, list)):
        return [_values(v) for v in x]
    if hasattr(x, "numpy"):
        return np.asarray(x.detach().numpy() if hasattr(x, "detach") else x.numpy())
    return x


_A = np.array([[1.0, 5.0, 2.0], [3.0, -2.0, 4.0]], np.float32)
_B = np.array([[0.5, 6.0, 1.0], [3.0, 1.0, -4.0]], np.float32)


@pytest.mark.parametrize(
    "expr",
    [
        "torch.max(a)",
        "torch.max(a, 1)",
        "torch.max(a, 0, True)",
        "torch.max(a, dim=1, keepdim=True)",
        "torch.max(a, b)",
        "torch.min(a, 1)",
        "torch.min(a, b)",
        "torch.std(a)",
        "torch.std(a, 1)",
        "torch.std(a, 1, False)",
        "torch.std(a, 0, True, True)",
        "torch.std(a, False)",
        "torch.var(a, dim=1, unbiased=False)",
        "torch.var(a, 1, correction=0)",
        "torch.std_mean(a, 1)",
        "torch.var_mean(a, 0, False)",
        "torch.cat([a, b])",
        "torch.cat((a, b), 1)",
        "torch.concat([a, b], dim=-1)",
        "torch.stack([a, b], 1)",
        "torch.hstack([a, b])",
        "torch.vstack((a, b))",
        "torch.dstack([a, b])",
        "torch.column_stack([a, b])",
        "torch.meshgrid(a[0], b[0], indexing='ij')",
        "torch.broadcast_tensors(a, b[0])",
        "torch.add(2, a)",
        "torch.sub(2, a)",
        "torch.mul(3, a)",
        "torch.pow(2, a)",
        "torch.add(a, b, alpha=2)",
        "torch.where(a > b, a, b)",
        "torch.where(a > 2)",
        "torch.sum(a, 1)",
        "torch.sum(a, (0, 1))",
        "torch.mean(a, 0, True)",
        "torch.prod(a, 1)",
        "torch.softmax(a, 1)",
        "torch.log_softmax(a, dim=0)",
        "torch.sort(a, 1, True)",
        "torch.topk(a, 2, 1)",
        "torch.argmax(a, 1)",
        "torch.cumsum(a, 1)",
        "torch.clamp(a, min=0)",
        "torch.clamp(a, -1, 2)",
        "torch.flatten(a)",
        "torch.transpose(a, 0, 1)",
        "torch.permute(a, (1, 0))",
        "torch.reshape(a, (3, 2))",
        "torch.squeeze(a[None], 0)",
        "torch.unsqueeze(a, 1)",
        "torch.split(a, 1, 1)",
        "torch.chunk(a, 3, 1)",
        "torch.matmul(a, b.T)",
        "torch.exp(a)",
        "torch.abs(a)",
        "torch.sqrt(torch.abs(a))",
        "torch.maximum(a, b)",
        "torch.allclose(a, a + 1e-9)",
        "torch.equal(a, b)",
        "torch.numel(a)",
        "torch.is_tensor(a)",
        "torch.is_floating_point(a)",
        "torch.zeros_like(a)",
        "torch.full_like(a, 7)",
        "torch.einsum('ij,kj->ik', a, b)",
        "torch.zeros(2, 3)",
        "torch.zeros((2, 3), dtype=torch.long)",
        "torch.ones(size=(2,))",
        "torch.full((2, 2), 3.5)",
        "torch.arange(5)",
        "torch.arange(1, 4, 0.5)",
        "torch.linspace(0, 1, 5)",
        "torch.eye(3, 2)",
        "torch.tensor([1, 2, 3]).dtype == torch.int64",
        "torch.tensor([1.0]).dtype == torch.float32",
        "torch.tensor([[True], [False]]).dtype == torch.bool",
        "torch.tensor(np.arange(3, dtype=np.int32)).dtype == torch.int32",
        "torch.as_tensor([2, 3]).dtype == torch.int64",
        "torch.arange(5).dtype == torch.int64",
        "torch.arange(5.0).dtype == torch.float32",
        "torch.full((2,), 3).dtype == torch.int64",
        "torch.hann_window(8)",
        "torch.hann_window(7, periodic=False)",
        "torch.hamming_window(9)",
        "torch.blackman_window(6)",
        "torch.bartlett_window(5, False)",
        "torch.batch_norm(a[None], None, None, torch.zeros(2), torch.ones(2), False, 0.1, 1e-5, False)",
        "torch.embedding(a, torch.tensor([1, 0, 1]))",
        "torch.conv2d(a[None, None], b[None, None, :, :2], padding=1)",
        "torch.layer_norm(a, (3,))",
        "torch.finfo(torch.float32).eps",
        "torch.finfo(torch.float16).max",
        "torch.finfo(torch.bfloat16).tiny",
        "torch.finfo().resolution",
        "torch.iinfo(torch.int16).min",
        "torch.iinfo(torch.uint8).max",
        "torch.FloatTensor([1, 2]).dtype == torch.float32",
        "torch.LongTensor(2, 3).shape",
    ],
)
def test_top_level_function_is_torchs(expr):
    want, got = _both(expr, a=_A, b=_B)
    if isinstance(want, torch.Tensor) and want.dtype == torch.int64:
        got = got.cast("int64") if hasattr(got, "cast") else got  # (lazygrad's indices are int32: values compared)
    w, g = _values(want), _values(got)
    if isinstance(w, list):
        assert len(w) == len(g)
        for x, y in zip(w, g):
            np.testing.assert_allclose(y, x, rtol=1e-5, atol=1e-6)
    else:
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)


def test_named_results_and_out():
    a = lt.tensor(_A)
    values, indices = lt.max(a, 1)
    assert lt.max(a, 1).values.tolist() == values.tolist() == [5.0, 4.0] and indices.tolist() == [1, 2]
    out = lt.zeros(2, 3)
    res = lt.add(a, 1, out=out)
    assert res is out and out.tolist() == (_A + 1).tolist()
    with pytest.raises(RuntimeError, match="does not resize"):
        lt.add(a, 1, out=lt.zeros(3))


def test_bad_input_is_torchs_error():
    with pytest.raises(TypeError, match="must be Tensor, not int"):
        lt.abs(3)
    with pytest.raises(RuntimeError, match="non-empty"):
        lt.cat([])
    with pytest.raises(TypeError, match="integer dtype"):
        lt.iinfo(lt.float32)
    with pytest.raises(TypeError, match="floating-point"):
        lt.set_default_dtype(lt.int32)


def test_normal_with_tensor_moments_takes_their_shape():
    mean, std = lt.zeros(3, 1), lt.ones(4) * 2
    x = lt.normal(mean, std)
    assert x.shape == (3, 4)
    assert lt.normal(0.0, 1.0, (5, 2)).shape == (5, 2)
    with pytest.raises(TypeError, match="size"):
        lt.normal(0.0, 1.0)


def test_generator_splits_alike_on_every_run():
    from lazygrad.torch.utils.data import TensorDataset, random_split

    data = TensorDataset(lt.arange(20))

    def split(seed):
        parts = random_split(data, [0.75, 0.25], generator=lt.Generator().manual_seed(seed))
        return [list(p.indices) for p in parts]

    assert split(42) == split(42) and split(42) != split(43)
    assert sorted(sum(split(42), [])) == list(range(20)) and [len(p) for p in split(42)] == [15, 5]
    assert lt.Generator().manual_seed(7).initial_seed() == 7
    assert lt.randn(3, generator=lt.Generator()).shape == (3,)


def test_submodules_import_as_torchs():
    import lazygrad.torch.nn.functional as F
    from lazygrad.torch.optim.lr_scheduler import OneCycleLR
    from lazygrad.torch.utils.data import DataLoader

    from lazygrad import nn

    assert F is nn.functional and lt.nn is nn and lt.optim.Adam is nn.optim.Adam
    assert OneCycleLR is nn.optim.lr_scheduler.OneCycleLR and DataLoader is lt.utils.data.DataLoader
    assert lt.device("cpu") == "CPU" and lt.device("cpu").type == "cpu" and lt.device("cpu", 1).index == 1
    x = lt.ones(2).to(lt.device("cpu"))
    assert x.device.type == "cpu" and x.device.index is None and isinstance(x.device, lt.device)
    assert x.device == "CPU" and {x.device: 1}["CPU"] == 1  # the name, as a str
    assert lt.compile(len) is len
    assert lt.accelerator.is_available() == lt.cuda.is_available()
    import lazygrad.torch.linalg as tla

    assert tla is lt.linalg and lt.linalg.solve(lt.eye(2) * 2, lt.ones(2)).tolist() == [0.5, 0.5]


@pytest.mark.parametrize(
    "data",
    [
        [1.0, 2.0],
        [0.5, 1e-5],
        [1e9, 1.0],
        [[1, 2], [3, 4]],
        3.25,
        [True, False],
        [float("nan"), float("inf"), 1.5],
        [-1.5, 2.25],
        [[[0.25, -1.0], [3.5, 2.0]], [[1.0, 0.0], [-0.125, 7.0]]],
        [3.0, 100.0],
        list(range(30)),
        [0.1 * i for i in range(40)],
    ],
)
def test_print_shows_values_as_torch(data):
    assert str(lt.tensor(data)) == str(torch.tensor(data))
    assert f"{lt.tensor(data)}" == f"{torch.tensor(data)}"
    if not isinstance(data, list):
        assert f"{lt.tensor(data):.3f} {lt.tensor(data):>8}" == f"{torch.tensor(data):.3f} {torch.tensor(data):>8}"


def test_print_of_large_lazy_and_captured_tensors():
    for shape in ((2000,), (40, 50), (10, 10, 30)):
        assert str(lt.arange(2000.0 if len(shape) < 3 else 3000.0).reshape(shape)) == str(
            torch.arange(2000.0 if len(shape) < 3 else 3000.0).reshape(shape)
        )
    lazy = lt.ones(2, 2) * 3  # realized to be read
    assert str(lazy) == "tensor([[3., 3.],\n        [3., 3.]])"
    assert str(lt.ones(2, requires_grad=True)) == "tensor([1., 1.], requires_grad=True)"
    assert str(lt.ones(2, dtype=lt.float64)) == "tensor([1., 1.], dtype=dtypes.float64)"
    assert str(lt.zeros(0)) == "tensor([])"
    from lazygrad import TinyJit

    shown = []

    @TinyJit
    def step(x):
        y = x + 1
        shown.append(str(y))  # inside a capture the values cannot be read: the graph, no error
        return y.realize()

    for _ in range(3):
        step(lt.ones(2))
    assert shown[0] == "tensor([2., 2.])" and all(s.startswith("<Tensor shape=(2,)") for s in shown[1:2])


def test_one_element_tensors_as_python_numbers_and_indices():
    """float(t), int(t) and t as an index (a slice bound, range(), a list subscript) for one-element tensors, as
    torch's: `data[i : i + 16] for i in torch.randint(...)` ran in torch and raised here."""
    data = lt.arange(20)
    starts = lt.tensor([3, 7])
    windows = [data[i : i + 4].tolist() for i in starts]
    assert windows == [[3, 4, 5, 6], [7, 8, 9, 10]]
    assert float(lt.tensor(2.5)) == 2.5 and int(lt.tensor([7.9])) == 7 and list(range(lt.tensor(3))) == [0, 1, 2]
    assert ["a", "b", "c"][lt.tensor(1)] == "b" and f"{float(lt.ones(1, 1) * 3):.1f}" == "3.0"
    with pytest.raises(TypeError, match="integer tensors of a single element"):
        [1, 2][lt.tensor(1.0)]
    with pytest.raises(TypeError, match="integer tensors of a single element"):
        data[lt.tensor([1, 2]) : 3]
    for bad in (lambda: float(lt.ones(2)), lambda: int(lt.ones(2))):
        with pytest.raises(RuntimeError, match="only one element tensors"):
            bad()


def test_autocast_spellings_as_torchs():
    """torch.autocast("cpu", dtype=...), torch.cpu.amp.autocast() and torch.cuda.amp.autocast() (which leaves CPU
    tensors alone, as torch's), torch.cuda.amp.GradScaler."""
    x = lt.randn(4, 4)
    with lt.autocast("cpu", dtype=lt.bfloat16):
        assert (x @ x).dtype == lt.bfloat16
    with lt.cpu.amp.autocast():
        assert (x @ x).dtype == lt.bfloat16
    with lt.cuda.amp.autocast():
        assert (x @ x).dtype == lt.float32
    with lt.cpu.amp.autocast(enabled=False):
        assert (x @ x).dtype == lt.float32
    assert lt.cuda.amp.GradScaler is lt.amp.GradScaler


def test_jit_and_compiler_decorators_keep_what_they_are_given():
    """torch.jit.script / trace / ignore and torch.compiler.disable (with or without options): the function or
    module itself, which computes what the compiled program would."""

    @lt.jit.script
    def double(x):
        return x * 2

    @lt.compiler.disable(recursive=False)
    def same(x):
        return x

    layer = lt.nn.Linear(2, 2)
    assert lt.jit.trace(layer, lt.ones(1, 2)) is layer and lt.jit.script(layer) is layer
    assert double(lt.ones(2)).tolist() == [2.0, 2.0] and same(3) == 3
    assert not lt.jit.is_scripting() and not lt.compiler.is_compiling()
