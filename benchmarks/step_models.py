"""The benchmark models, shared by the step-time and checkpoint benchmarks (and the DeepSpeed side)."""
import torch
from torch import nn


def make_model(width: int, layers: int) -> nn.Module:
    """An MLP of ``layers`` Linear+GELU blocks (about 1.05M parameters at 512 x 4)."""
    torch.manual_seed(0)
    mods = []
    for _ in range(layers):
        mods += [nn.Linear(width, width), nn.GELU()]
    return nn.Sequential(*mods, nn.Linear(width, 1))


class ResMLP(nn.Module):
    """Issue 10's benchmark shape: a residual MLP of 4 Linear and 3 LayerNorm layers, 325,464
    parameters (width 284)."""
    WIDTH = 284

    def __init__(self, width: int = WIDTH):
        super().__init__()
        torch.manual_seed(0)
        self.lins = nn.ModuleList(nn.Linear(width, width) for _ in range(4))
        self.norms = nn.ModuleList(nn.LayerNorm(width) for _ in range(3))

    def forward(self, x):
        x = self.lins[0](x)
        for lin, norm in zip(self.lins[1:], self.norms):
            x = x + lin(norm(torch.relu(x)))
        return x
