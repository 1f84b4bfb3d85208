"""A PyTorch training program with its imports changed: nn.Module, DataLoader, Adam with a scheduler, train/eval and
no_grad, as a torch user writes them. The torch spelling of each changed line is in its comment.

    python examples/pytorch_digits.py        (needs scikit-learn for the digits)
"""

import lazygrad.nn as nn  # import torch.nn as nn
import lazygrad.nn.functional as F  # import torch.nn.functional as F
from lazygrad import Tensor  # import torch
from lazygrad.nn.datasets import digits
from lazygrad.nn.optim import Adam, lr_scheduler  # from torch.optim import Adam, lr_scheduler
from lazygrad.utils.data import DataLoader, TensorDataset  # from torch.utils.data import DataLoader, TensorDataset


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(1, 16, 3, padding=1)
        self.bn1 = nn.BatchNorm2d(16)
        self.conv2 = nn.Conv2d(16, 32, 3, padding=1)
        self.dropout = nn.Dropout(0.1)
        self.fc = nn.Linear(32 * 2 * 2, 10)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.bn1(self.conv1(x))), 2)
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        return self.fc(self.dropout(x.flatten(1)))


def train(epochs: int = 4, batch_size: int = 64, log: bool = True) -> float:
    Tensor.manual_seed(0)  # torch.manual_seed(0)
    x_train, y_train, x_test, y_test = digits()
    loader = DataLoader(TensorDataset(x_train, y_train), batch_size=batch_size, shuffle=True, drop_last=True)
    model = Net()
    opt = Adam(model.parameters(), lr=3e-3, betas=(0.9, 0.99))
    sched = lr_scheduler.OneCycleLR(opt, max_lr=3e-3, total_steps=epochs * len(loader))
    loss_fn = nn.CrossEntropyLoss(label_smoothing=0.05)
    for epoch in range(epochs):
        model.train()
        for xb, yb in loader:
            opt.zero_grad()
            loss = loss_fn(model(xb), yb)
            loss.backward()
            opt.step()
            sched.step()
        model.eval()
        with Tensor.no_grad():  # with torch.no_grad():
            accuracy = (model(x_test).argmax(dim=1) == y_test).float().mean().item() * 100
        if log:
            print(
                f"epoch {epoch}: loss {loss.item():.3f}, test accuracy {accuracy:.1f}%, lr {sched.get_last_lr()[0]:.2e}"
            )
    return accuracy


if __name__ == "__main__":
    train()
