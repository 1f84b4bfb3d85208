"""Small versions of the pytorch/examples programs, run under torch and, with only their imports ported, under
lazygrad.torch from the same initial weights (torch's state_dict): every step's loss and output must agree."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from test.test_torch_namespace import _ported


def _scope(src: str) -> dict:
    scope: dict = {}
    exec(compile(src, "<program>", "exec"), scope)
    return scope


def _numpy(x):
    if isinstance(x, dict):
        return {k: _numpy(v) for k, v in x.items()}
    if isinstance(x, (tuple, list)):
        return [_numpy(v) for v in x]
    if hasattr(x, "numpy"):
        return np.asarray(x.detach().numpy() if hasattr(x, "detach") else x.numpy())
    return x


def _check(src: str, *args, rtol: float = 1e-4, atol: float = 1e-5):
    """`src` defines make() (the model, under torch.manual_seed(0)) and main(init, *args); main's results under torch
    and under the ported program, both from torch's initial weights, must agree."""
    ref = _scope(src)
    torch.manual_seed(0)
    init = {k: v.detach().numpy().copy() for k, v in ref["make"]().state_dict().items()}
    want = _numpy(ref["main"](init, *args))
    got = _numpy(_scope(_ported(src))["main"](init, *args))
    _close(got, want, rtol, atol)
    return got


def _close(got, want, rtol, atol):
    if isinstance(want, dict):
        assert got.keys() == want.keys()
        for k in want:
            _close(got[k], want[k], rtol, atol)
    elif isinstance(want, (list, tuple)) and not all(isinstance(w, (int, float)) for w in want):
        assert len(got) == len(want)
        for g, w in zip(got, want):
            _close(g, w, rtol, atol)
    else:
        np.testing.assert_allclose(np.asarray(got, dtype=np.float64), np.asarray(want, dtype=np.float64), rtol, atol)


WORD_LM = """
import math

import torch
import torch.nn as nn
import torch.nn.functional as F


class RNNModel(nn.Module):
    def __init__(self, ntoken, ninp, nhid, nlayers, dropout=0.0, tie_weights=True):
        super().__init__()
        self.drop = nn.Dropout(dropout)
        self.encoder = nn.Embedding(ntoken, ninp)
        self.rnn = nn.LSTM(ninp, nhid, nlayers, dropout=dropout)
        self.decoder = nn.Linear(nhid, ntoken)
        if tie_weights:
            self.decoder.weight = self.encoder.weight
        self.init_weights()
        self.nhid, self.nlayers = nhid, nlayers

    def init_weights(self):
        initrange = 0.1
        nn.init.uniform_(self.encoder.weight, -initrange, initrange)
        nn.init.zeros_(self.decoder.bias)

    def forward(self, input, hidden):
        emb = self.drop(self.encoder(input))
        output, hidden = self.rnn(emb, hidden)
        output = self.drop(output)
        decoded = self.decoder(output).view(-1, self.decoder.out_features)
        return F.log_softmax(decoded, dim=1), hidden

    def init_hidden(self, bsz):
        weight = next(self.parameters())
        return (weight.new_zeros(self.nlayers, bsz, self.nhid), weight.new_zeros(self.nlayers, bsz, self.nhid))


class PositionalEncoding(nn.Module):
    def __init__(self, d_model, dropout=0.0, max_len=64):
        super().__init__()
        self.dropout = nn.Dropout(p=dropout)
        pe = torch.zeros(max_len, d_model)
        position = torch.arange(0, max_len, dtype=torch.float).unsqueeze(1)
        div_term = torch.exp(torch.arange(0, d_model, 2).float() * (-math.log(10000.0) / d_model))
        pe[:, 0::2] = torch.sin(position * div_term)
        pe[:, 1::2] = torch.cos(position * div_term)
        pe = pe.unsqueeze(0).transpose(0, 1)
        self.register_buffer("pe", pe)

    def forward(self, x):
        x = x + self.pe[: x.size(0), :]
        return self.dropout(x)


class TransformerModel(nn.Module):
    def __init__(self, ntoken, ninp, nhead, nhid, nlayers, dropout=0.0):
        super().__init__()
        self.model_type = "Transformer"
        self.src_mask = None
        self.pos_encoder = PositionalEncoding(ninp, dropout)
        layer = nn.TransformerEncoderLayer(ninp, nhead, nhid, dropout)
        self.transformer_encoder = nn.TransformerEncoder(layer, nlayers, enable_nested_tensor=False)
        self.encoder = nn.Embedding(ntoken, ninp)
        self.ninp = ninp
        self.decoder = nn.Linear(ninp, ntoken)

    def _generate_square_subsequent_mask(self, sz):
        return torch.log(torch.tril(torch.ones(sz, sz)))

    def forward(self, src, has_mask=True):
        if has_mask:
            if self.src_mask is None or self.src_mask.size(0) != len(src):
                self.src_mask = self._generate_square_subsequent_mask(len(src)).to(src.device)
        else:
            self.src_mask = None
        src = self.encoder(src) * math.sqrt(self.ninp)
        src = self.pos_encoder(src)
        output = self.transformer_encoder(src, self.src_mask)
        return F.log_softmax(self.decoder(output), dim=-1)


def batchify(data, bsz):
    nbatch = data.size(0) // bsz
    data = data.narrow(0, 0, nbatch * bsz)
    return data.view(bsz, -1).t().contiguous()


def get_batch(source, i, bptt=5):
    seq_len = min(bptt, len(source) - 1 - i)
    data = source[i : i + seq_len]
    target = source[i + 1 : i + 1 + seq_len].view(-1)
    return data, target


def repackage_hidden(h):
    if isinstance(h, torch.Tensor):
        return h.detach()
    return tuple(repackage_hidden(v) for v in h)


def make(kind="LSTM"):
    if kind == "LSTM":
        return RNNModel(13, 8, 8, 2)
    return TransformerModel(13, 8, 2, 16, 2)


def main(init, kind, tokens):
    model = make(kind)
    model.load_state_dict({k: torch.from_numpy(v) for k, v in init.items()})
    criterion = nn.NLLLoss()
    train_data = batchify(torch.tensor(tokens), 3)
    lr, losses = 2.0, []
    model.train()
    if kind == "LSTM":
        hidden = model.init_hidden(3)
    for batch, i in enumerate(range(0, train_data.size(0) - 1, 5)):
        data, targets = get_batch(train_data, i)
        model.zero_grad()
        if kind == "Transformer":
            output = model(data).view(-1, 13)
        else:
            hidden = repackage_hidden(hidden)
            output, hidden = model(data, hidden)
        loss = criterion(output, targets)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 0.25)
        for p in model.parameters():
            p.data.add_(p.grad, alpha=-lr)
        losses.append(loss.item())
    model.eval()
    total_loss = 0.0
    with torch.no_grad():
        hidden = model.init_hidden(3) if kind == "LSTM" else None
        for i in range(0, train_data.size(0) - 1, 5):
            data, targets = get_batch(train_data, i)
            if kind == "Transformer":
                output = model(data).view(-1, 13)
            else:
                output, hidden = model(data, hidden)
                hidden = repackage_hidden(hidden)
            total_loss += len(data) * criterion(output, targets).item()
    return losses, math.exp(total_loss / (len(train_data) - 1))
"""


@pytest.mark.parametrize("kind", ["LSTM", "Transformer"])
def test_word_language_model(kind):
    tokens = (np.arange(48) * 5 % 13).tolist()
    ref = _scope(WORD_LM)
    torch.manual_seed(0)
    init = {k: v.detach().numpy().copy() for k, v in ref["make"](kind).state_dict().items()}
    want = ref["main"](init, kind, tokens)
    got = _scope(_ported(WORD_LM))["main"](init, kind, tokens)
    _close(got, want, 1e-4, 1e-5)


TIME_SEQUENCE = """
import numpy as np
import torch
import torch.nn as nn
import torch.optim as optim

DTYPE = torch.float  # (the example's double: lazygrad's float64 exp is a long composite, 4x the graph)

class Sequence(nn.Module):
    def __init__(self):
        super().__init__()
        self.lstm1 = nn.LSTMCell(1, 8)
        self.lstm2 = nn.LSTMCell(8, 8)
        self.linear = nn.Linear(8, 1)

    def forward(self, input, future=0):
        outputs = []
        h_t = torch.zeros(input.size(0), 8, dtype=DTYPE)
        c_t = torch.zeros(input.size(0), 8, dtype=DTYPE)
        h_t2 = torch.zeros(input.size(0), 8, dtype=DTYPE)
        c_t2 = torch.zeros(input.size(0), 8, dtype=DTYPE)
        for input_t in input.split(1, dim=1):
            h_t, c_t = self.lstm1(input_t, (h_t, c_t))
            h_t2, c_t2 = self.lstm2(h_t, (h_t2, c_t2))
            output = self.linear(h_t2)
            outputs += [output]
        for i in range(future):
            h_t, c_t = self.lstm1(output, (h_t, c_t))
            h_t2, c_t2 = self.lstm2(h_t, (h_t2, c_t2))
            output = self.linear(h_t2)
            outputs += [output]
        return torch.cat(outputs, dim=1)


def make():
    return Sequence().to(DTYPE)


def main(init, data):
    input = torch.from_numpy(data[1:, :-1])
    target = torch.from_numpy(data[1:, 1:])
    test_input = torch.from_numpy(data[:1, :-1])
    test_target = torch.from_numpy(data[:1, 1:])
    seq = make()
    seq.load_state_dict({k: torch.from_numpy(v) for k, v in init.items()})
    criterion = nn.MSELoss()
    optimizer = optim.LBFGS(seq.parameters(), lr=0.8, max_iter=3)
    losses, preds = [], []
    for i in range(2):
        def closure():
            optimizer.zero_grad()
            out = seq(input)
            loss = criterion(out, target)
            losses.append(loss.item())
            loss.backward()
            return loss

        optimizer.step(closure)
        with torch.no_grad():
            future = 2
            pred = seq(test_input, future=future)
            loss = criterion(pred[:, :-future], test_target)
            losses.append(loss.item())
            preds.append(pred.detach().numpy())
    return losses, preds
"""


def test_time_sequence_prediction():
    rng = np.random.default_rng(0)
    x = np.arange(7)[None, :] + rng.integers(-4, 4, (3, 1))
    data = np.sin(x / 4.0).astype(np.float32)
    _check(TIME_SEQUENCE, data)


REINFORCE = """
from collections import namedtuple

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.optim as optim
from torch.distributions import Categorical

SavedAction = namedtuple("SavedAction", ["log_prob", "value"])
eps = np.finfo(np.float32).eps.item()


class Corridor:
    \"\"\"Walk left or right on 5 cells; reward 1 at the right end, -0.1 a step; 6 steps at most.\"\"\"

    def reset(self):
        self.pos, self.t = 2, 0
        return self.obs()

    def obs(self):
        return np.eye(5, dtype=np.float32)[self.pos]

    def step(self, action):
        self.pos = min(max(self.pos + (1 if action == 1 else -1), 0), 4)
        self.t += 1
        done = self.pos == 4 or self.t == 6
        return self.obs(), (1.0 if self.pos == 4 else -0.1), done


class Policy(nn.Module):
    def __init__(self):
        super().__init__()
        self.affine1 = nn.Linear(5, 16)
        self.dropout = nn.Dropout(p=0.0)
        self.affine2 = nn.Linear(16, 2)
        self.value_head = nn.Linear(16, 1)
        self.saved_log_probs, self.saved_actions, self.rewards = [], [], []

    def forward(self, x):
        x = F.relu(self.dropout(self.affine1(x)))
        return F.softmax(self.affine2(x), dim=1), self.value_head(x)


def make():
    return Policy()


def main(init, critic, actions, gamma=0.9):
    policy = make()
    policy.load_state_dict({k: torch.from_numpy(v) for k, v in init.items()})
    optimizer = optim.Adam(policy.parameters(), lr=1e-2)
    env, actions, losses = Corridor(), list(actions) if actions is not None else None, []
    for episode in range(3):
        state, ep_reward = env.reset(), 0
        for t in range(1, 10):
            state = torch.from_numpy(state).float().unsqueeze(0)
            probs, state_value = policy(state)
            m = Categorical(probs)
            action = m.sample() if actions is None else torch.tensor([actions.pop(0)])
            policy.saved_log_probs.append(m.log_prob(action))
            policy.saved_actions.append(SavedAction(m.log_prob(action), state_value))
            state, reward, done = env.step(action.item())
            policy.rewards.append(reward)
            ep_reward += reward
            if done:
                break
        R, returns = 0, []
        for r in policy.rewards[::-1]:
            R = r + gamma * R
            returns.insert(0, R)
        returns = torch.tensor(returns)
        returns = (returns - returns.mean()) / (returns.std() + eps)
        if critic:
            policy_losses, value_losses = [], []
            for (log_prob, value), R in zip(policy.saved_actions, returns):
                advantage = R - value.item()
                policy_losses.append(-log_prob * advantage)
                value_losses.append(F.smooth_l1_loss(value, torch.tensor([[R]])))
            loss = torch.stack(policy_losses).sum() + torch.stack(value_losses).sum()
        else:
            policy_loss = []
            for log_prob, R in zip(policy.saved_log_probs, returns):
                policy_loss.append(-log_prob * R)
            loss = torch.cat(policy_loss).sum()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
        del policy.rewards[:], policy.saved_log_probs[:], policy.saved_actions[:]
    return losses
"""


@pytest.mark.parametrize("critic", [False, True], ids=["reinforce", "actor_critic"])
def test_reinforcement_learning(critic):
    actions = [1, 0, 1, 1, 1, 0, 0, 1, 1, 0, 1, 1, 1, 1, 0, 1, 1, 1, 1, 1, 1, 1, 1, 1]
    _check(REINFORCE, critic, actions)
    losses = _scope(_ported(REINFORCE))["main"](_init(REINFORCE), critic, None)  # the actions sampled
    assert len(losses) == 3 and np.isfinite(losses).all()


def _init(src: str) -> dict:
    torch.manual_seed(0)
    return {k: v.detach().numpy().copy() for k, v in _scope(src)["make"]().state_dict().items()}


SUPER_RESOLUTION = """
import math

import torch
import torch.nn as nn
import torch.nn.init as init
import torch.optim as optim


class Net(nn.Module):
    def __init__(self, upscale_factor):
        super().__init__()
        self.relu = nn.ReLU()
        self.conv1 = nn.Conv2d(1, 8, (5, 5), (1, 1), (2, 2))
        self.conv2 = nn.Conv2d(8, 8, (3, 3), (1, 1), (1, 1))
        self.conv3 = nn.Conv2d(8, 4, (3, 3), (1, 1), (1, 1))
        self.conv4 = nn.Conv2d(4, upscale_factor**2, (3, 3), (1, 1), (1, 1))
        self.pixel_shuffle = nn.PixelShuffle(upscale_factor)
        self._initialize_weights()

    def forward(self, x):
        x = self.relu(self.conv1(x))
        x = self.relu(self.conv2(x))
        x = self.relu(self.conv3(x))
        return self.pixel_shuffle(self.conv4(x))

    def _initialize_weights(self):
        init.orthogonal_(self.conv1.weight, init.calculate_gain("relu"))
        init.orthogonal_(self.conv2.weight, init.calculate_gain("relu"))
        init.orthogonal_(self.conv3.weight, init.calculate_gain("relu"))
        init.orthogonal_(self.conv4.weight)


def make():
    return Net(upscale_factor=2)


def main(init, hr):
    model = make()
    model.load_state_dict({k: torch.from_numpy(v) for k, v in init.items()})
    criterion = nn.MSELoss()
    optimizer = optim.Adam(model.parameters(), lr=1e-3)
    target = torch.from_numpy(hr)
    input = torch.nn.functional.avg_pool2d(target, 2)
    losses, psnrs = [], []
    for epoch in range(3):
        optimizer.zero_grad()
        loss = criterion(model(input), target)
        losses.append(loss.item())
        loss.backward()
        optimizer.step()
        with torch.no_grad():
            mse = criterion(model(input), target)
            psnrs.append(10 * math.log10(1 / mse.item()))
    return losses, psnrs
"""


def test_super_resolution():
    hr = np.random.default_rng(0).random((2, 1, 8, 8), dtype=np.float32)
    _check(SUPER_RESOLUTION, hr)


FAST_NEURAL_STYLE = """
import torch
import torch.nn as nn


class ConvLayer(nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size, stride):
        super().__init__()
        self.reflection_pad = nn.ReflectionPad2d(kernel_size // 2)
        self.conv2d = nn.Conv2d(in_channels, out_channels, kernel_size, stride)

    def forward(self, x):
        return self.conv2d(self.reflection_pad(x))


class ResidualBlock(nn.Module):
    def __init__(self, channels):
        super().__init__()
        self.conv1 = ConvLayer(channels, channels, kernel_size=3, stride=1)
        self.in1 = nn.InstanceNorm2d(channels, affine=True)
        self.conv2 = ConvLayer(channels, channels, kernel_size=3, stride=1)
        self.in2 = nn.InstanceNorm2d(channels, affine=True)
        self.relu = nn.ReLU()

    def forward(self, x):
        residual = x
        out = self.relu(self.in1(self.conv1(x)))
        return self.in2(self.conv2(out)) + residual


class UpsampleConvLayer(nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size, stride, upsample=None):
        super().__init__()
        self.upsample = upsample
        self.reflection_pad = nn.ReflectionPad2d(kernel_size // 2)
        self.conv2d = nn.Conv2d(in_channels, out_channels, kernel_size, stride)

    def forward(self, x):
        if self.upsample:
            x = torch.nn.functional.interpolate(x, mode="nearest", scale_factor=self.upsample)
        return self.conv2d(self.reflection_pad(x))


class TransformerNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = ConvLayer(3, 4, kernel_size=3, stride=1)
        self.in1 = nn.InstanceNorm2d(4, affine=True)
        self.conv2 = ConvLayer(4, 8, kernel_size=3, stride=2)
        self.in2 = nn.InstanceNorm2d(8, affine=True)
        self.res1 = ResidualBlock(8)
        self.deconv1 = UpsampleConvLayer(8, 4, kernel_size=3, stride=1, upsample=2)
        self.in3 = nn.InstanceNorm2d(4, affine=True)
        self.deconv2 = UpsampleConvLayer(4, 3, kernel_size=3, stride=1)
        self.relu = nn.ReLU()

    def forward(self, X):
        y = self.relu(self.in1(self.conv1(X)))
        y = self.relu(self.in2(self.conv2(y)))
        y = self.res1(y)
        y = self.relu(self.in3(self.deconv1(y)))
        return self.deconv2(y)


class Vgg(nn.Module):
    def __init__(self, requires_grad=False):
        super().__init__()
        self.slice1 = nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.ReLU(inplace=True))
        self.slice2 = nn.Sequential(nn.MaxPool2d(kernel_size=2, stride=2), nn.Conv2d(4, 8, 3, padding=1), nn.ReLU())
        if not requires_grad:
            for param in self.parameters():
                param.requires_grad = False

    def forward(self, X):
        h1 = self.slice1(X)
        h2 = self.slice2(h1)
        return h1, h2


class Both(nn.Module):
    def __init__(self):
        super().__init__()
        self.transformer, self.vgg = TransformerNet(), Vgg()


def gram_matrix(y):
    (b, ch, h, w) = y.size()
    features = y.view(b, ch, w * h)
    features_t = features.transpose(1, 2)
    return features.bmm(features_t) / (ch * h * w)


def normalize_batch(batch):
    mean = batch.new_tensor([0.485, 0.456, 0.406]).view(-1, 1, 1)
    std = batch.new_tensor([0.229, 0.224, 0.225]).view(-1, 1, 1)
    batch = batch.div_(255.0)
    return (batch - mean) / std


def make():
    return Both()


def main(init, images, style_image):
    both = make()
    both.load_state_dict({k: torch.from_numpy(v) for k, v in init.items()})
    transformer, vgg = both.transformer, both.vgg
    optimizer = torch.optim.Adam(transformer.parameters(), 1e-3)
    mse_loss = torch.nn.MSELoss()
    style = torch.from_numpy(style_image).repeat(2, 1, 1, 1)
    features_style = vgg(normalize_batch(style))
    gram_style = [gram_matrix(y) for y in features_style]
    losses = []
    transformer.train()
    for x in torch.from_numpy(images).split(2):
        n_batch = len(x)
        optimizer.zero_grad()
        y = transformer(x)
        y = normalize_batch(y)
        x = normalize_batch(x.clone())
        features_y, features_x = vgg(y), vgg(x)
        content_loss = 1e5 * mse_loss(features_y[1], features_x[1])
        style_loss = 0.0
        for ft_y, gm_s in zip(features_y, gram_style):
            gm_y = gram_matrix(ft_y)
            style_loss += mse_loss(gm_y, gm_s[:n_batch, :, :])
        style_loss *= 1e10
        total_loss = content_loss + style_loss
        total_loss.backward()
        optimizer.step()
        losses.append([content_loss.item(), style_loss.item()])
    return losses
"""


def test_fast_neural_style():
    rng = np.random.default_rng(0)
    images = (rng.random((4, 3, 8, 8)) * 255).astype(np.float32)
    style = (rng.random((1, 3, 8, 8)) * 255).astype(np.float32)
    _check(FAST_NEURAL_STYLE, images, style, rtol=2e-4)


SIAMESE = """
import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.optim as optim
from torch.optim.lr_scheduler import StepLR


class SiameseNetwork(nn.Module):
    def __init__(self):
        super().__init__()
        self.cnn = nn.Sequential(
            nn.Conv2d(1, 4, 3), nn.BatchNorm2d(4), nn.ReLU(inplace=True), nn.AdaptiveAvgPool2d((1, 1))
        )
        self.fc = nn.Sequential(nn.Linear(8, 8), nn.ReLU(inplace=True), nn.Linear(8, 1))
        self.sigmoid = nn.Sigmoid()
        self.cnn.apply(self.init_weights)
        self.fc.apply(self.init_weights)

    def init_weights(self, m):
        if isinstance(m, nn.Linear):
            torch.nn.init.xavier_uniform_(m.weight)
            m.bias.data.fill_(0.01)

    def forward_once(self, x):
        output = self.cnn(x)
        return output.view(output.size()[0], -1)

    def forward(self, input1, input2):
        output1 = self.forward_once(input1)
        output2 = self.forward_once(input2)
        output = torch.cat((output1, output2), 1)
        output = self.fc(output)
        return self.sigmoid(output)


def make():
    return SiameseNetwork()


def main(init, a, b, targets):
    model = make()
    model.load_state_dict({k: torch.from_numpy(v) for k, v in init.items()})
    optimizer = optim.Adadelta(model.parameters(), lr=1.0)
    scheduler = StepLR(optimizer, step_size=1, gamma=0.7)
    criterion = nn.BCELoss()
    images_1, images_2, targets = torch.from_numpy(a), torch.from_numpy(b), torch.from_numpy(targets)
    losses = []
    for epoch in range(3):
        model.train()
        optimizer.zero_grad()
        outputs = model(images_1, images_2).squeeze()
        loss = criterion(outputs, targets)
        loss.backward()
        optimizer.step()
        scheduler.step()
        losses.append(loss.item())
    model.eval()
    with torch.no_grad():
        outputs = model(images_1, images_2).squeeze()
        test_loss = criterion(outputs, targets).sum().item()
        pred = torch.where(outputs > 0.5, 1, 0)
        correct = pred.eq(targets.view_as(pred)).sum().item()
    return losses, test_loss, correct, torch.flatten(outputs)
"""


def test_siamese_network():
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((2, 6, 1, 6, 6), dtype=np.float32)
    targets = (rng.random(6) > 0.5).astype(np.float32)
    _check(SIAMESE, a, b, targets)


MNIST_RNN = """
import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.optim as optim
from torch.optim.lr_scheduler import StepLR


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.rnn = nn.LSTM(input_size=6, hidden_size=8, batch_first=True)
        self.batchnorm = nn.BatchNorm1d(8)
        self.dropout1 = nn.Dropout2d(0.0)
        self.dropout2 = nn.Dropout(0.0)
        self.fc1 = nn.Linear(8, 8)
        self.fc2 = nn.Linear(8, 3)

    def forward(self, input):
        input = input.reshape(-1, 6, 6)
        output, hidden = self.rnn(input)
        output = output[:, -1, :]
        output = self.batchnorm(output)
        output = self.dropout1(output)
        output = self.fc1(output)
        output = F.relu(output)
        output = self.dropout2(output)
        output = self.fc2(output)
        return F.log_softmax(output, dim=1)


def make():
    return Net()


def main(init, images, labels):
    model = make()
    model.load_state_dict({k: torch.from_numpy(v) for k, v in init.items()})
    optimizer = optim.Adadelta(model.parameters(), lr=0.1)
    scheduler = StepLR(optimizer, step_size=1, gamma=0.7)
    data, target = torch.from_numpy(images), torch.from_numpy(labels)
    losses = []
    for epoch in range(2):
        model.train()
        for x, y in zip(data.split(4), target.split(4)):
            optimizer.zero_grad()
            loss = F.nll_loss(model(x), y)
            loss.backward()
            optimizer.step()
            losses.append(loss.item())
        scheduler.step()
    model.eval()
    test_loss, correct = 0, 0
    with torch.no_grad():
        output = model(data)
        test_loss += F.nll_loss(output, target, reduction="sum").item()
        pred = output.argmax(dim=1, keepdim=True)
        correct += pred.eq(target.view_as(pred)).sum().item()
    return losses, test_loss, correct
"""


def test_mnist_rnn():
    rng = np.random.default_rng(0)
    images = rng.standard_normal((8, 1, 6, 6), dtype=np.float32)
    labels = rng.integers(0, 3, 8)
    _check(MNIST_RNN, images, labels)


VISION_TRANSFORMER = """
import torch
import torch.nn as nn
import torch.nn.functional as F


class PatchEmbedding(nn.Module):
    def __init__(self, img_size, patch_size, in_channels, embed_dim):
        super().__init__()
        self.num_patches = (img_size // patch_size) ** 2
        self.projection = nn.Conv2d(in_channels, embed_dim, kernel_size=patch_size, stride=patch_size)

    def forward(self, x):
        x = self.projection(x)
        x = x.flatten(2)
        return x.transpose(1, 2)


class MLP(nn.Module):
    def __init__(self, in_features, hidden_features, drop=0.0):
        super().__init__()
        self.fc1 = nn.Linear(in_features, hidden_features)
        self.act = nn.GELU()
        self.fc2 = nn.Linear(hidden_features, in_features)
        self.drop = nn.Dropout(drop)

    def forward(self, x):
        return self.drop(self.fc2(self.drop(self.act(self.fc1(x)))))


class TransformerEncoderLayer(nn.Module):
    def __init__(self, embed_dim, num_heads, mlp_dim, drop=0.0):
        super().__init__()
        self.norm1 = nn.LayerNorm(embed_dim)
        self.attn = nn.MultiheadAttention(embed_dim, num_heads, dropout=drop, batch_first=True)
        self.norm2 = nn.LayerNorm(embed_dim)
        self.mlp = MLP(embed_dim, mlp_dim, drop)

    def forward(self, x):
        h = self.norm1(x)
        x = x + self.attn(h, h, h)[0]
        return x + self.mlp(self.norm2(x))


class VisionTransformer(nn.Module):
    def __init__(self, img_size=8, patch_size=4, in_channels=3, num_classes=5, embed_dim=16, depth=2, num_heads=2):
        super().__init__()
        self.patch_embed = PatchEmbedding(img_size, patch_size, in_channels, embed_dim)
        self.cls_token = nn.Parameter(torch.randn(1, 1, embed_dim))
        self.pos_embed = nn.Parameter(torch.randn(1, 1 + self.patch_embed.num_patches, embed_dim))
        self.dropout = nn.Dropout(0.0)
        layers = [TransformerEncoderLayer(embed_dim, num_heads, 2 * embed_dim) for _ in range(depth)]
        self.layers = nn.ModuleList(layers)
        self.norm = nn.LayerNorm(embed_dim)
        self.head = nn.Linear(embed_dim, num_classes)

    def forward(self, x):
        x = self.patch_embed(x)
        batch_size = x.size(0)
        cls_tokens = self.cls_token.expand(batch_size, -1, -1)
        x = torch.cat((cls_tokens, x), dim=1)
        x = self.dropout(x + self.pos_embed)
        for layer in self.layers:
            x = layer(x)
        x = self.norm(x)
        return self.head(x[:, 0])


def make():
    return VisionTransformer()


def main(init, images, labels):
    model = make()
    model.load_state_dict({k: torch.from_numpy(v) for k, v in init.items()})
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.05)
    criterion = nn.CrossEntropyLoss(label_smoothing=0.1)
    x, y = torch.from_numpy(images), torch.from_numpy(labels)
    losses = []
    for step in range(3):
        optimizer.zero_grad()
        loss = criterion(model(x), y)
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    model.eval()
    with torch.no_grad():
        _, predicted = torch.max(model(x).data, 1)
        correct = (predicted == y).sum().item()
    return losses, correct
"""


def test_vision_transformer():
    rng = np.random.default_rng(0)
    _check(VISION_TRANSFORMER, rng.standard_normal((4, 3, 8, 8), dtype=np.float32), rng.integers(0, 5, 4))


FORWARD_FORWARD = """
import torch
import torch.nn as nn
from torch.optim import Adam


def overlay_y_on_x(x, y, num_classes=3):
    x_ = x.clone()
    x_[:, :num_classes] *= 0.0
    x_[range(x.shape[0]), y] = x.max()
    return x_


class Layer(nn.Linear):
    def __init__(self, in_features, out_features, bias=True, device=None, dtype=None):
        super().__init__(in_features, out_features, bias, device, dtype)
        self.relu = torch.nn.ReLU()
        self.opt = None
        self.threshold = 2.0
        self.num_epochs = 3

    def forward(self, x):
        x_direction = x / (x.norm(2, 1, keepdim=True) + 1e-4)
        return self.relu(torch.mm(x_direction, self.weight.T) + self.bias.unsqueeze(0))

    def train(self, x_pos, x_neg, losses):
        for i in range(self.num_epochs):
            g_pos = self.forward(x_pos).pow(2).mean(1)
            g_neg = self.forward(x_neg).pow(2).mean(1)
            loss = torch.log(1 + torch.exp(torch.cat([-g_pos + self.threshold, g_neg - self.threshold]))).mean()
            self.opt.zero_grad()
            loss.backward()
            self.opt.step()
            losses.append(loss.item())
        return self.forward(x_pos).detach(), self.forward(x_neg).detach()


class Net(torch.nn.Module):
    def __init__(self, dims):
        super().__init__()
        self.layers = nn.ModuleList([Layer(dims[d], dims[d + 1]) for d in range(len(dims) - 1)])

    def predict(self, x):
        goodness_per_label = []
        for label in range(3):
            h = overlay_y_on_x(x, label)
            goodness = []
            for layer in self.layers:
                h = layer(h)
                goodness += [h.pow(2).mean(1)]
            goodness_per_label += [sum(goodness).unsqueeze(1)]
        goodness_per_label = torch.cat(goodness_per_label, 1)
        return goodness_per_label.argmax(1), goodness_per_label

    def train(self, x_pos, x_neg, losses):
        h_pos, h_neg = x_pos, x_neg
        for layer in self.layers:
            layer.opt = Adam(layer.parameters(), lr=0.03)
            h_pos, h_neg = layer.train(h_pos, h_neg, losses)


def make():
    return Net([8, 12, 12])


def main(init, xs, ys, perm):
    net = make()
    net.load_state_dict({k: torch.from_numpy(v) for k, v in init.items()})
    x, y = torch.from_numpy(xs), torch.from_numpy(ys)
    x_pos = overlay_y_on_x(x, y)
    x_neg = overlay_y_on_x(x, y[torch.from_numpy(perm)])
    losses = []
    net.train(x_pos, x_neg, losses)
    pred, goodness = net.predict(x)
    return losses, goodness, 1.0 - pred.eq(y).float().mean().item()
"""


def test_forward_forward():
    rng = np.random.default_rng(0)
    xs = rng.random((6, 8), dtype=np.float32)
    _check(FORWARD_FORWARD, xs, rng.integers(0, 3, 6), rng.permutation(6))


GAT = """
import torch
import torch.nn as nn
import torch.nn.functional as F


class GraphAttentionLayer(nn.Module):
    def __init__(self, in_features, out_features, n_heads, concat=False, dropout=0.0, leaky_relu_slope=0.2):
        super().__init__()
        self.n_heads, self.concat, self.dropout = n_heads, concat, dropout
        if concat:
            assert out_features % n_heads == 0
            self.n_hidden = out_features // n_heads
        else:
            self.n_hidden = out_features
        self.W = nn.Parameter(torch.empty(size=(in_features, self.n_hidden * n_heads)))
        self.a = nn.Parameter(torch.empty(size=(n_heads, 2 * self.n_hidden, 1)))
        self.leakyrelu = nn.LeakyReLU(leaky_relu_slope)
        self.softmax = nn.Softmax(dim=1)
        self.reset_parameters()

    def reset_parameters(self):
        nn.init.xavier_normal_(self.W)
        nn.init.xavier_normal_(self.a)

    def _get_attention_scores(self, h_transformed):
        source_scores = torch.matmul(h_transformed, self.a[:, : self.n_hidden, :])
        target_scores = torch.matmul(h_transformed, self.a[:, self.n_hidden :, :])
        e = source_scores + target_scores.mT
        return self.leakyrelu(e)

    def forward(self, h, adj_mat):
        n_nodes = h.shape[0]
        h_transformed = torch.mm(h, self.W)
        h_transformed = F.dropout(h_transformed, self.dropout, training=self.training)
        h_transformed = h_transformed.view(n_nodes, self.n_heads, self.n_hidden).permute(1, 0, 2)
        e = self._get_attention_scores(h_transformed)
        connectivity_mask = -9e16 * torch.ones_like(e)
        e = torch.where(adj_mat > 0, e, connectivity_mask)
        attention = F.softmax(e, dim=-1)
        attention = F.dropout(attention, self.dropout, training=self.training)
        h_prime = torch.matmul(attention, h_transformed)
        if self.concat:
            return h_prime.permute(1, 0, 2).contiguous().view(n_nodes, self.n_heads * self.n_hidden)
        return h_prime.mean(dim=0)


class GAT(nn.Module):
    def __init__(self, in_features, n_hidden, n_heads, num_classes):
        super().__init__()
        self.gat1 = GraphAttentionLayer(in_features, n_hidden, n_heads, concat=True)
        self.gat2 = GraphAttentionLayer(n_hidden, num_classes, 1, concat=False)

    def forward(self, input_tensor, adj_mat):
        x = self.gat1(input_tensor, adj_mat)
        x = F.elu(x)
        x = self.gat2(x, adj_mat)
        return F.log_softmax(x, dim=1)


def make():
    return GAT(6, 8, 2, 3)


def main(init, features, adj, labels):
    model = make()
    model.load_state_dict({k: torch.from_numpy(v) for k, v in init.items()})
    optimizer = torch.optim.Adam(model.parameters(), lr=5e-3, weight_decay=5e-4)
    criterion = nn.NLLLoss()
    features, adj_mat, labels = torch.from_numpy(features), torch.from_numpy(adj), torch.from_numpy(labels)
    idx = torch.randperm(len(labels))
    idx_train, idx_test = torch.tensor([0, 2, 3, 5, 7]), torch.tensor([1, 4, 6])
    mask = torch.zeros(len(labels), dtype=torch.bool)
    mask[idx_train] = True
    losses = []
    for epoch in range(3):
        model.train()
        optimizer.zero_grad()
        y_hat = model(features, adj_mat)
        loss = criterion(y_hat[idx_train], labels[idx_train]) + 0.0 * criterion(y_hat[mask], labels[mask])
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    model.eval()
    with torch.no_grad():
        y_hat = model(features, adj_mat)
        acc = (y_hat[idx_test].argmax(dim=1) == labels[idx_test]).sum().item() / len(idx_test)
    return losses, acc, y_hat, len(idx)
"""


def test_gat():
    rng = np.random.default_rng(0)
    adj = (rng.random((8, 8)) > 0.6).astype(np.float32)
    adj = np.maximum(np.maximum(adj, adj.T), np.eye(8, dtype=np.float32))
    _check(GAT, rng.standard_normal((8, 6), dtype=np.float32), adj, rng.integers(0, 3, 8))


SEQ2SEQ = """
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch import optim

SOS_token, MAX_LENGTH = 0, 5


class EncoderRNN(nn.Module):
    def __init__(self, input_size, hidden_size, dropout_p=0.0):
        super().__init__()
        self.hidden_size = hidden_size
        self.embedding = nn.Embedding(input_size, hidden_size)
        self.gru = nn.GRU(hidden_size, hidden_size, batch_first=True)
        self.dropout = nn.Dropout(dropout_p)

    def forward(self, input):
        embedded = self.dropout(self.embedding(input))
        output, hidden = self.gru(embedded)
        return output, hidden


class BahdanauAttention(nn.Module):
    def __init__(self, hidden_size):
        super().__init__()
        self.Wa = nn.Linear(hidden_size, hidden_size)
        self.Ua = nn.Linear(hidden_size, hidden_size)
        self.Va = nn.Linear(hidden_size, 1)

    def forward(self, query, keys):
        scores = self.Va(torch.tanh(self.Wa(query) + self.Ua(keys)))
        scores = scores.squeeze(2).unsqueeze(1)
        weights = F.softmax(scores, dim=-1)
        context = torch.bmm(weights, keys)
        return context, weights


class AttnDecoderRNN(nn.Module):
    def __init__(self, hidden_size, output_size, dropout_p=0.0):
        super().__init__()
        self.embedding = nn.Embedding(output_size, hidden_size)
        self.attention = BahdanauAttention(hidden_size)
        self.gru = nn.GRU(2 * hidden_size, hidden_size, batch_first=True)
        self.out = nn.Linear(hidden_size, output_size)
        self.dropout = nn.Dropout(dropout_p)

    def forward(self, encoder_outputs, encoder_hidden, target_tensor=None, teacher=()):
        batch_size = encoder_outputs.size(0)
        decoder_input = torch.empty(batch_size, 1, dtype=torch.long).fill_(SOS_token)
        decoder_hidden = encoder_hidden
        decoder_outputs, attentions = [], []
        for i in range(MAX_LENGTH):
            decoder_output, decoder_hidden, attn_weights = self.forward_step(
                decoder_input, decoder_hidden, encoder_outputs
            )
            decoder_outputs.append(decoder_output)
            attentions.append(attn_weights)
            if target_tensor is not None and i in teacher:
                decoder_input = target_tensor[:, i].unsqueeze(1)  # teacher forcing
            else:
                _, topi = decoder_output.topk(1)
                decoder_input = topi.squeeze(-1).detach()
        decoder_outputs = torch.cat(decoder_outputs, dim=1)
        decoder_outputs = F.log_softmax(decoder_outputs, dim=-1)
        attentions = torch.cat(attentions, dim=1)
        return decoder_outputs, decoder_hidden, attentions

    def forward_step(self, input, hidden, encoder_outputs):
        embedded = self.dropout(self.embedding(input))
        query = hidden.permute(1, 0, 2)
        context, attn_weights = self.attention(query, encoder_outputs)
        input_gru = torch.cat((embedded, context), dim=2)
        output, hidden = self.gru(input_gru, hidden)
        output = self.out(output)
        return output, hidden, attn_weights


class Seq2Seq(nn.Module):
    def __init__(self):
        super().__init__()
        self.encoder, self.decoder = EncoderRNN(7, 8), AttnDecoderRNN(8, 6)


def make():
    return Seq2Seq()


def main(init, src, tgt):
    model = make()
    model.load_state_dict({k: torch.from_numpy(v) for k, v in init.items()})
    encoder, decoder = model.encoder, model.decoder
    encoder_optimizer = optim.Adam(encoder.parameters(), lr=0.01)
    decoder_optimizer = optim.Adam(decoder.parameters(), lr=0.01)
    criterion = nn.NLLLoss()
    input_tensor, target_tensor = torch.from_numpy(src), torch.from_numpy(tgt)
    losses = []
    for epoch in range(3):
        encoder_optimizer.zero_grad()
        decoder_optimizer.zero_grad()
        encoder_outputs, encoder_hidden = encoder(input_tensor)
        teacher = (0, 2, 3) if epoch % 2 == 0 else (1,)
        decoder_outputs, _, _ = decoder(encoder_outputs, encoder_hidden, target_tensor, teacher)
        loss = criterion(decoder_outputs.view(-1, decoder_outputs.size(-1)), target_tensor.view(-1))
        loss.backward()
        encoder_optimizer.step()
        decoder_optimizer.step()
        losses.append(loss.item())
    with torch.no_grad():
        encoder_outputs, encoder_hidden = encoder(input_tensor)
        decoder_outputs, decoder_hidden, attentions = decoder(encoder_outputs, encoder_hidden)
        _, topi = decoder_outputs.topk(1)
        decoded_ids = topi.squeeze()
    return losses, decoded_ids.tolist(), attentions
"""


def test_seq2seq_gru_attention():
    rng = np.random.default_rng(0)
    _check(SEQ2SEQ, rng.integers(1, 7, (3, 5)), rng.integers(1, 6, (3, 5)))


AMP_COMPILE = """
import torch
import torch.nn as nn
import torch.nn.functional as F


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(6, 16), nn.Linear(16, 3)

    def forward(self, x):
        return self.fc2(F.relu(self.fc1(x)))


def make():
    return Net()


@torch.compile
def loss_fn(out, y):
    return F.cross_entropy(out, y)


def main(init, xs, ys):
    model = make()
    model.load_state_dict({k: torch.from_numpy(v) for k, v in init.items()})
    compiled = torch.compile(model, mode="reduce-overhead")
    device = "cuda" if torch.cuda.is_available() else "cpu"
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    scaler = torch.cuda.amp.GradScaler(enabled=False)
    scaler2 = torch.amp.GradScaler("cuda", enabled=False)
    x, y = torch.from_numpy(xs), torch.from_numpy(ys)
    losses = []
    for step in range(3):
        optimizer.zero_grad(set_to_none=True)
        with torch.autocast(device_type=device, dtype=torch.float16, enabled=False):
            out = compiled(x)
            loss = loss_fn(out, y)
        assert out.dtype == torch.float32
        scaler.scale(loss).backward()
        scaler.unscale_(optimizer)
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        scaler.step(optimizer)
        scaler.update()
        losses.append(loss.item())
    assert scaler.get_scale() == 1.0 and not scaler.is_enabled() and scaler2.state_dict() == {}
    return losses
"""


def test_grad_scaler_disabled_and_compiled_model(monkeypatch):
    # (torch's own compile, for the reference run, builds C++ kernels for a minute: its model runs as it is)
    monkeypatch.setattr(torch, "compile", lambda model=None, **kwargs: model if model is not None else (lambda m: m))
    rng = np.random.default_rng(0)
    _check(AMP_COMPILE, rng.standard_normal((5, 6), dtype=np.float32), rng.integers(0, 3, 5))


CHECKPOINT = """
import torch
import torch.nn as nn
import torch.nn.functional as F


def make():
    return nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 2))


def build(init):
    model = make()
    model.load_state_dict({k: torch.from_numpy(v) for k, v in init.items()})
    optimizer = torch.optim.Adam(model.parameters(), lr=0.05)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=2, gamma=0.5)
    return model, optimizer, scheduler


def train(model, optimizer, scheduler, x, y, epochs):
    losses = []
    for epoch in epochs:
        optimizer.zero_grad()
        loss = F.mse_loss(model(x), y)
        loss.backward()
        optimizer.step()
        scheduler.step()
        losses.append(loss.item())
    return losses


def main(init, xs, ys, path):
    x, y = torch.from_numpy(xs), torch.from_numpy(ys)
    straight = train(*build(init), x, y, range(6))
    model, optimizer, scheduler = build(init)
    first = train(model, optimizer, scheduler, x, y, range(3))
    torch.save(
        {
            "epoch": 3,
            "model_state_dict": model.state_dict(),
            "optimizer_state_dict": optimizer.state_dict(),
            "scheduler_state_dict": scheduler.state_dict(),
            "loss": first[-1],
        },
        path,
    )
    model, optimizer, scheduler = build({k: v * 0 for k, v in init.items()})
    checkpoint = torch.load(path, weights_only=True)
    model.load_state_dict(checkpoint["model_state_dict"])
    optimizer.load_state_dict(checkpoint["optimizer_state_dict"])
    scheduler.load_state_dict(checkpoint["scheduler_state_dict"])
    assert checkpoint["epoch"] == 3 and checkpoint["loss"] == first[-1]
    resumed = train(model, optimizer, scheduler, x, y, range(checkpoint["epoch"], 6))
    return straight, first + resumed, scheduler.get_last_lr()
"""


def test_checkpoint_resume(tmp_path):
    rng = np.random.default_rng(0)
    xs, ys = rng.standard_normal((6, 4), dtype=np.float32), rng.standard_normal((6, 2), dtype=np.float32)
    straight, resumed, _ = _check(CHECKPOINT, xs, ys, str(tmp_path / "ckpt.pt"))
    np.testing.assert_allclose(resumed, straight, rtol=1e-6)


def test_manual_seed_reproducibility():
    import lazygrad.torch as lt

    def run():
        lt.manual_seed(7)
        model = lt.nn.Sequential(lt.nn.Linear(4, 4), lt.nn.Dropout(0.5))
        return [v.numpy() for v in model.state_dict().values()], model(lt.randn(3, 4)).numpy(), lt.randint(0, 9, (5,))

    (w1, out1, r1), (w2, out2, r2) = run(), run()
    for a, b in zip(w1, w2):
        np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(out1, out2)
    assert r1.tolist() == r2.tolist() and r1.dtype == lt.int64
    g1, g2 = lt.Generator().manual_seed(3), lt.Generator().manual_seed(3)
    assert lt.randperm(6, generator=g1).shape == (6,) and g1.initial_seed() == g2.initial_seed() == 3


# *** the gaps the programs met, one at a time against torch ***


@pytest.mark.parametrize(
    "layer, args, names",
    [
        ("Linear", (3, 4), ("in_features", "out_features")),
        ("Conv2d", (2, 4, 3), ("in_channels", "out_channels", "kernel_size")),
        ("Conv1d", (2, 4, 3), ("in_channels", "out_channels", "kernel_size")),
        ("ConvTranspose2d", (2, 4, 3), ("in_channels", "out_channels")),
        ("BatchNorm1d", (5,), ("num_features", "affine", "eps", "momentum")),
        ("LayerNorm", (5,), ("normalized_shape", "elementwise_affine", "eps")),
        ("GroupNorm", (2, 4), ("num_groups", "num_channels", "affine")),
        ("InstanceNorm2d", (3,), ("num_features", "affine")),
        ("LSTMCell", (3, 4, False), ("input_size", "hidden_size", "bias")),
        ("GRUCell", (3, 4), ("input_size", "hidden_size", "bias")),
        ("RNNCell", (3, 4), ("input_size", "hidden_size", "bias")),
    ],
)
def test_layers_keep_torch_size_attributes(layer, args, names):
    import lazygrad.torch as lt

    want, got = getattr(torch.nn, layer)(*args), getattr(lt.nn, layer)(*args)
    for name in names:
        assert getattr(got, name) == getattr(want, name), name


def test_tensor_of_a_list_holding_one_element_tensors():
    import lazygrad.torch as lt

    for make in (
        lambda m: m.tensor([m.tensor(1.5), m.tensor([2.5])]),
        lambda m: m.tensor([[m.tensor(1, dtype=m.int32)], [m.tensor(2, dtype=m.int32)]]),
        lambda m: m.tensor([m.tensor(1.5, dtype=m.float64), 2]),
        lambda m: m.tensor([m.arange(3).sum(), m.tensor(4)]),
    ):
        want, got = make(torch), make(lt)
        assert got.shape == tuple(want.shape) and str(got.dtype).split(".")[-1] == str(want.dtype).split(".")[-1]
        np.testing.assert_array_equal(got.numpy(), want.numpy())
    for m in (torch, lt):
        with pytest.raises(ValueError, match="only one element tensors"):
            m.tensor([m.tensor([1.0, 2.0])])


def test_layers_take_positional_device_and_dtype():
    import lazygrad.torch as lt

    assert lt.nn.Linear(3, 2, True, None, lt.float64).weight.dtype == lt.float64
    assert lt.nn.Linear(3, 2, False, "cpu").bias is None
    assert lt.nn.Conv2d(1, 2, 3, 1, 0, 1, 1, True, "zeros", None, lt.float64).bias.dtype == lt.float64
    assert lt.nn.LayerNorm(4, 1e-5, True, True, "cpu", lt.float16).weight.dtype == lt.float16
    with pytest.raises(TypeError):
        lt.nn.Linear(3, 2, True, None, None, 5)


SUBCLASSED_LAYER = """
import torch
import torch.nn as nn


class Scaled(nn.Linear):
    def forward(self, x):
        return super().forward(x) * 2 + self.weight.sum()


class Both(nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = nn.ModuleList()
        self.layers.append(Fitted(3, 3))
        self.scaled = Scaled(3, 2)

    def forward(self, x):
        return self.scaled(self.layers[0](x))


class Fitted(nn.Linear):
    def train(self, x, y):  # (torch's ModuleList.append does not call it)
        return self(x) - y


def make():
    return Both()


def main(init, xs):
    model = make()
    model.load_state_dict({k: torch.from_numpy(v) for k, v in init.items()})
    x = torch.from_numpy(xs)
    seen = []
    model.scaled.register_forward_hook(lambda m, args, out: seen.append(out.shape[-1]))
    out = model(x)
    out.sum().backward()
    return out, model.layers[0].weight.grad, model.layers[0].train(x, x), seen
"""


def test_a_subclassed_layer_runs_its_own_forward_and_train():
    _check(SUBCLASSED_LAYER, np.random.default_rng(0).standard_normal((2, 3), dtype=np.float32))


@pytest.mark.parametrize(
    "expr",
    [
        "torch.bmm(a.reshape(2, 1, 3), b.reshape(2, 3, 1))",
        "torch.instance_norm(a.reshape(1, 2, 3), None, None, None, None, True, 0.1, 1e-5, False)",
        "torch.instance_norm(a.reshape(1, 2, 3), b[0, :2], b[1, :2], None, None, True, 0.1, 1e-5, False)",
        "torch.chain_matmul(a, b.T, a)",
        "torch.randint_like(a, 3).shape",
        "str(torch.randint_like(a, 1, 3).dtype)[-7:]",
        "torch.randint_like(a.long(), 2, 3)",
        "str(torch.promote_types(torch.int8, torch.uint8))[-5:]",
        "str(torch.promote_types(torch.float16, torch.bfloat16))[-7:]",
        "str(torch.result_type(a.long(), 1.0))[-7:]",
        "str(torch.result_type(2, a.double()))[-7:]",
        "str(torch.result_type(a.char(), 1000))[-4:]",
        "str(torch.result_type(1, 2))[-5:]",
        "[torch.can_cast(x, y) for x in (torch.float32, torch.int64, torch.bool) for y in (torch.int8, torch.bool)]",
    ],
)
def test_top_level_functions_the_programs_met(expr):
    from test.test_torch_namespace import _both, _values

    a = np.array([[1.0, 5.0, 2.0], [3.0, -2.0, 4.0]], np.float32)
    b = np.array([[0.5, 6.0, 1.0], [3.0, 1.0, -4.0]], np.float32)
    want, got = (_values(v) for v in _both(expr, a=a, b=b))
    if isinstance(want, (str, list, tuple)):
        assert got == want if isinstance(want, str) else list(got) == list(want)
    else:
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("bias", [True, False])
def test_linear_under_autocast_gives_the_low_dtype_with_its_bias(bias):
    import lazygrad.torch as lt

    rng = np.random.default_rng(0)
    x, w, b = rng.standard_normal((2, 3), np.float32), rng.standard_normal((4, 3), np.float32), rng.standard_normal(4)
    out = []
    for m in (torch, lt):
        args = (m.tensor(x), m.tensor(w), m.tensor(b.astype(np.float32)) if bias else None)
        with m.autocast("cpu", dtype=m.bfloat16):
            y = m.nn.functional.linear(*args)
        out.append((str(y.dtype).split(".")[-1], y.float().detach().numpy()))
    assert out[1][0] == out[0][0] == "bfloat16"
    np.testing.assert_allclose(out[1][1], out[0][1], rtol=2e-2, atol=2e-2)


def test_save_and_load_through_file_objects(tmp_path):
    import io

    import lazygrad.torch as lt

    buf = io.BytesIO()
    lt.save({"w": lt.arange(3.0), "step": 2}, buf)
    buf.seek(0)
    assert torch.load(buf)["w"].tolist() == [0.0, 1.0, 2.0]
    buf.seek(0)
    assert lt.load(buf)["w"].tolist() == [0.0, 1.0, 2.0]
    with open(tmp_path / "t.pt", "wb") as f:
        torch.save([torch.ones(2, dtype=torch.int64)], f)
    with open(tmp_path / "t.pt", "rb") as f:
        back = lt.load(f)[0]
    assert back.tolist() == [1, 1] and back.dtype == lt.int64


def test_rnn_flatten_parameters_is_accepted():
    import lazygrad.torch as lt

    for rnn in (lt.nn.LSTM(3, 4), lt.nn.GRU(3, 4, batch_first=True), lt.nn.RNN(3, 4)):
        assert rnn.flatten_parameters() is None


@pytest.mark.parametrize("name", ["FloatTensor", "DoubleTensor", "HalfTensor", "LongTensor", "IntTensor", "BoolTensor"])
def test_legacy_tensor_types_cast_and_construct(name):
    import lazygrad.torch as lt

    x = np.array([[1.5, -2.0, 0.0]], np.float32)
    want, got = torch.tensor(x).type(getattr(torch, name)), lt.tensor(x).type(getattr(lt, name))
    assert got.type() == want.type() == f"torch.{name}"
    np.testing.assert_array_equal(got.numpy(), want.numpy())
    assert getattr(lt, name)(2, 3).shape == tuple(getattr(torch, name)(2, 3).shape)
    assert getattr(lt, name)([1, 0]).tolist() == getattr(torch, name)([1, 0]).tolist()


def test_memory_formats_are_taken():
    import lazygrad.torch as lt

    x = np.random.default_rng(0).standard_normal((1, 3, 4, 4)).astype(np.float32)
    for fmt in ("channels_last", "contiguous_format", "preserve_format"):
        want = torch.tensor(x).contiguous(memory_format=getattr(torch, fmt))
        got = lt.tensor(x).contiguous(memory_format=getattr(lt, fmt))
        np.testing.assert_array_equal(got.numpy(), want.numpy())
    conv = lt.nn.Conv2d(3, 2, 3).to(memory_format=lt.channels_last)
    assert conv(lt.tensor(x).to(memory_format=lt.channels_last)).shape == (1, 2, 2, 2)
    assert repr(lt.channels_last) == repr(torch.channels_last)


@pytest.mark.parametrize(
    "layer, args",
    [
        ("Embedding", (5, 3)),
        ("Embedding", (5, 3, -1, 1.0)),
        ("LSTM", (3, 4, 2)),
        ("GRU", (3, 4, 1, False, True, 0.5, True)),
        ("LSTMCell", (3, 4)),
        ("GRUCell", (3, 4, False)),
        ("RNNCell", (3, 4, False, "relu")),
        ("LayerNorm", (4,)),
        ("LayerNorm", (4, 1e-5, False)),
        ("GroupNorm", (2, 4, 1e-5, False)),
        ("InstanceNorm2d", (4, 1e-5, 0.1, True)),
        ("Conv2d", (2, 4, 3)),
        ("Conv2d", (2, 4, 3, 2, 1, 2, 2, False, "reflect")),
        ("Conv2d", (2, 4, 3, 1, "same")),
        ("Conv1d", (2, 4, 3)),
        ("ConvTranspose2d", (2, 4, 3, 2, 0, 1)),
    ],
)
def test_layers_print_as_torch_prints_them(layer, args):
    import lazygrad.torch as lt

    assert repr(getattr(lt.nn, layer)(*args)) == repr(getattr(torch.nn, layer)(*args))
