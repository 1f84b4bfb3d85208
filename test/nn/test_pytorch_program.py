"""One PyTorch training program run twice, as written for torch and with its imports changed to lazygrad's: a
bidirectional LSTM over packed variable-length sequences, an EmbeddingBag, AdamW with OneCycleLR (momentum cycling),
gradient clipping and a GradScaler. From torch's initial weights, each step's loss must be torch's."""

from __future__ import annotations

import types

import numpy as np
import torch

V, E, H, C, B, L = 20, 8, 16, 3, 6, 9
LENGTHS = [9, 7, 7, 5, 3, 2]


def _libraries(which: str) -> types.SimpleNamespace:
    if which == "torch":
        import torch.nn as nn
        import torch.nn.functional as F
        from torch.amp import GradScaler
        from torch.nn.utils.rnn import pack_padded_sequence
        from torch.optim import AdamW
        from torch.optim.lr_scheduler import OneCycleLR

        tensor_type, tensor = torch, torch.tensor
    else:
        from lazygrad.nn.optim.lr_scheduler import OneCycleLR

        import lazygrad.nn as nn
        import lazygrad.nn.functional as F
        from lazygrad import Tensor
        from lazygrad.amp import GradScaler
        from lazygrad.nn.optim import AdamW
        from lazygrad.nn.utils.rnn import pack_padded_sequence

        tensor_type, tensor = Tensor, Tensor
    return types.SimpleNamespace(
        T=tensor_type,
        tensor=tensor,
        nn=nn,
        F=F,
        GradScaler=GradScaler,
        AdamW=AdamW,
        OneCycleLR=OneCycleLR,
        pack_padded_sequence=pack_padded_sequence,
    )


def _train(lib: types.SimpleNamespace, init: dict[str, np.ndarray] | None) -> tuple[list[float], dict]:
    nn, F = lib.nn, lib.F

    class Net(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.emb = nn.Embedding(V, E, padding_idx=0)
            self.bag = nn.EmbeddingBag(V, 4, mode="mean")
            self.rnn = nn.LSTM(E, H, batch_first=True, bidirectional=True)
            self.head = nn.Sequential(nn.Linear(2 * H + 4, 12), nn.GELU(), nn.Linear(12, C))

        def forward(self, x, lengths):
            packed = lib.pack_padded_sequence(self.emb(x), lengths, batch_first=True, enforce_sorted=False)
            _, (h, _) = self.rnn(packed)
            return self.head(lib.T.cat([h[0], h[1], self.bag(x)], 1))

    net = Net()
    if init is not None:
        net.load_state_dict({k: lib.tensor(v) for k, v in init.items()})
    start = {k: v.detach().numpy().copy() for k, v in net.state_dict().items()}
    opt = lib.AdamW(net.parameters(), lr=1e-2, weight_decay=0.01)
    sched = lib.OneCycleLR(opt, max_lr=0.05, total_steps=12)
    scaler = lib.GradScaler("cpu", init_scale=256.0, growth_interval=3)
    rng = np.random.default_rng(0)
    x, y = lib.tensor(rng.integers(1, V, (B, L))), lib.tensor(rng.integers(0, C, B))
    losses = []
    for _ in range(12):
        opt.zero_grad()
        loss = F.cross_entropy(net(x, LENGTHS), y, label_smoothing=0.1)
        scaler.scale(loss).backward()
        scaler.unscale_(opt)
        nn.utils.clip_grad_norm_(net.parameters(), 1.0)
        scaler.step(opt)
        scaler.update()
        sched.step()
        losses.append(float(loss.item()))
    return losses, start


def test_a_pytorch_program_trains_as_under_torch() -> None:
    torch.manual_seed(0)
    want, init = _train(_libraries("torch"), None)
    got, _ = _train(_libraries("lazygrad"), init)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
    assert want[-1] < 0.5 * want[0]  # (it learns: the comparison is not of two flat curves)


def _train_transformer(lib: types.SimpleNamespace, init: dict[str, np.ndarray] | None) -> tuple[list[float], dict]:
    """A tiny causal language model: embedding + positional parameter, a TransformerEncoder with a causal mask,
    weight tying, AdamW with a warmup LambdaLR, two micro-batches accumulated per step."""
    nn, F, T = lib.nn, lib.F, lib.T
    vocab, dim, ctx = 11, 16, 7

    class LM(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.tok = nn.Embedding(vocab, dim)
            self.pos = nn.Parameter(T.zeros(ctx, dim))
            layer = nn.TransformerEncoderLayer(dim, 2, 32, dropout=0.0, batch_first=True, norm_first=True)
            self.body = nn.TransformerEncoder(layer, 2)
            self.norm = nn.LayerNorm(dim)

        def forward(self, x):
            mask = nn.Transformer.generate_square_subsequent_mask(x.shape[1])
            h = self.body(self.tok(x) + self.pos[: x.shape[1]], mask=mask, is_causal=True)
            return self.norm(h) @ self.tok.weight.T

    net = LM()
    if init is not None:
        net.load_state_dict({k: lib.tensor(v) for k, v in init.items()})
    start = {k: v.detach().numpy().copy() for k, v in net.state_dict().items()}
    opt = lib.AdamW(net.parameters(), lr=3e-3)
    sched = lib.LambdaLR(opt, lambda s: min(1.0, (s + 1) / 3))
    rng = np.random.default_rng(1)
    data = rng.integers(0, vocab, (4, ctx + 1))
    losses = []
    for _ in range(8):
        opt.zero_grad()
        total = 0.0
        for half in (data[:2], data[2:]):
            x, y = lib.tensor(half[:, :-1]), lib.tensor(half[:, 1:])
            loss = F.cross_entropy(net(x).reshape(-1, vocab), y.reshape(-1)) / 2
            loss.backward()
            total += float(loss.item())
        opt.step()
        sched.step()
        losses.append(total)
    return losses, start


def test_a_pytorch_transformer_program_trains_as_under_torch() -> None:
    torch.manual_seed(0)
    torch_lib, ours_lib = _libraries("torch"), _libraries("lazygrad")
    torch_lib.LambdaLR = torch.optim.lr_scheduler.LambdaLR
    from lazygrad.nn.optim import lr_scheduler

    ours_lib.LambdaLR = lr_scheduler.LambdaLR
    want, init = _train_transformer(torch_lib, None)
    got, _ = _train_transformer(ours_lib, init)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
    assert want[-1] < 0.8 * want[0]


def _train_cnn(lib: types.SimpleNamespace, init: dict[str, np.ndarray] | None) -> tuple[list[float], dict]:
    """A small residual CNN: Conv2d/BatchNorm2d/ReLU(inplace)/MaxPool2d, a residual block with GroupNorm and SiLU,
    AdaptiveAvgPool2d, Dropout(0) and Linear; SGD with nesterov momentum and weight decay, CosineAnnealingLR; the eval
    mode's outputs (running statistics) under no_grad after training."""
    nn, F = lib.nn, lib.F

    class Block(nn.Module):
        def __init__(self, c: int) -> None:
            super().__init__()
            self.conv1, self.conv2 = nn.Conv2d(c, c, 3, padding=1, bias=False), nn.Conv2d(c, c, 3, padding=1)
            self.norm = nn.GroupNorm(2, c)

        def forward(self, x):
            return F.silu(x + self.conv2(F.silu(self.norm(self.conv1(x)))))

    class Net(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.stem = nn.Sequential(nn.Conv2d(2, 8, 3, stride=1, padding=1), nn.BatchNorm2d(8), nn.ReLU(inplace=True))
            self.pool = nn.MaxPool2d(2)
            self.block = Block(8)
            self.head = nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Dropout(0.0), nn.Linear(8, 4))

        def forward(self, x):
            return self.head(self.block(self.pool(self.stem(x))))

    net = Net()
    if init is not None:
        net.load_state_dict({k: lib.tensor(v) for k, v in init.items()})
    start = {k: v.detach().numpy().copy() for k, v in net.state_dict().items()}
    opt = lib.SGD(net.parameters(), lr=0.05, momentum=0.9, nesterov=True, weight_decay=1e-4)
    sched = lib.CosineAnnealingLR(opt, T_max=6)
    rng = np.random.default_rng(2)
    x = lib.tensor(rng.standard_normal((8, 2, 8, 8)).astype(np.float32))
    y = lib.tensor(rng.integers(0, 4, 8))
    losses = []
    net.train()
    for _ in range(6):
        opt.zero_grad()
        loss = F.cross_entropy(net(x), y)
        loss.backward()
        opt.step()
        sched.step()
        losses.append(float(loss.item()))
    net.eval()
    with lib.no_grad():
        losses += net(x).flatten().tolist()
    return losses, start


def test_a_pytorch_cnn_program_trains_as_under_torch() -> None:
    torch.manual_seed(0)
    torch_lib, ours_lib = _libraries("torch"), _libraries("lazygrad")
    from lazygrad import Tensor
    from lazygrad.nn.optim import SGD, lr_scheduler

    torch_lib.SGD, torch_lib.CosineAnnealingLR, torch_lib.no_grad = (
        torch.optim.SGD,
        torch.optim.lr_scheduler.CosineAnnealingLR,
        torch.no_grad,
    )
    ours_lib.SGD, ours_lib.CosineAnnealingLR, ours_lib.no_grad = SGD, lr_scheduler.CosineAnnealingLR, Tensor.no_grad
    want, init = _train_cnn(torch_lib, None)
    got, _ = _train_cnn(ours_lib, init)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
    assert want[5] < 0.9 * want[0]


def _train_policy(lib: types.SimpleNamespace, init: dict[str, np.ndarray] | None) -> tuple[list[float], dict]:
    """A policy-gradient update (REINFORCE with an entropy bonus) and a VAE-style Gaussian term: Categorical over a
    small policy net's logits, log_prob of given actions weighted by returns, Normal's rsample with given noise and
    kl_divergence to a standard normal; RMSprop (centered, momentum) on the policy, Adagrad on the Gaussian head."""
    nn, D = lib.nn, lib.distributions
    net, head = nn.Sequential(nn.Linear(4, 16), nn.Tanh(), nn.Linear(16, 3)), nn.Linear(4, 4)
    if init is not None:
        net.load_state_dict({k: lib.tensor(v) for k, v in init["net"].items()})
        head.load_state_dict({k: lib.tensor(v) for k, v in init["head"].items()})
    start = {
        m: {k: v.detach().numpy().copy() for k, v in mod.state_dict().items()}
        for m, mod in (("net", net), ("head", head))
    }
    opt = lib.RMSprop(net.parameters(), lr=0.01, momentum=0.5, centered=True)
    opt2 = lib.Adagrad(head.parameters(), lr=0.05, lr_decay=0.1)
    rng = np.random.default_rng(3)
    obs, actions = lib.tensor(rng.standard_normal((16, 4)).astype(np.float32)), lib.tensor(rng.integers(0, 3, 16))
    returns, noise = (lib.tensor(rng.standard_normal(s).astype(np.float32)) for s in ((16,), (16, 2)))
    losses = []
    for _ in range(6):
        opt.zero_grad(), opt2.zero_grad()
        dist = D.Categorical(logits=net(obs))
        policy = -(dist.log_prob(actions) * returns).mean() - 0.01 * dist.entropy().mean()
        stats = head(obs)
        mu, std = stats[:, :2], stats[:, 2:].exp()
        z = mu + std * noise
        normal = D.Normal(mu, std)
        gauss = D.kl_divergence(normal, D.Normal(mu * 0, std * 0 + 1)).sum(1).mean() + (z * z).mean()
        (policy + gauss).backward()
        opt.step(), opt2.step()
        losses.append(float((policy + gauss).item()))
    return losses, start


def test_a_pytorch_policy_gradient_program_trains_as_under_torch() -> None:
    import torch.distributions

    import lazygrad.distributions
    from lazygrad.nn.optim import Adagrad, RMSprop

    torch.manual_seed(0)
    torch_lib, ours_lib = _libraries("torch"), _libraries("lazygrad")
    torch_lib.distributions, torch_lib.RMSprop, torch_lib.Adagrad = (
        torch.distributions,
        torch.optim.RMSprop,
        torch.optim.Adagrad,
    )
    ours_lib.distributions, ours_lib.RMSprop, ours_lib.Adagrad = lazygrad.distributions, RMSprop, Adagrad
    want, init = _train_policy(torch_lib, None)
    got, _ = _train_policy(ours_lib, init)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
    assert want[-1] < want[0]
