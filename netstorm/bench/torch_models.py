"""PyTorch twins of the bench's comm-mode models, built here (no torchvision): ResNet-18
(He et al. 2016, ImageNet, 1000 classes), the same 11.69 M parameters as gluon's
``resnet18_v1`` (62 parameter tensors: convolutions without bias, batch-norm scale and
shift, the classifier), so both frameworks move the same bytes. Pure: builds modules."""
from __future__ import annotations

import torch
from torch import nn

__all__ = ["TORCH_MODELS", "build", "resnet18"]


class _Basic(nn.Module):
    """ResNet's basic block: two 3x3 convolutions and the shortcut (a 1x1 convolution when
    the shape changes)."""

    def __init__(self, cin: int, cout: int, stride: int):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.down = None if stride == 1 and cin == cout else nn.Sequential(
            nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x):
        out = torch.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return torch.relu(out + (x if self.down is None else self.down(x)))


def resnet18(classes: int = 1000) -> nn.Module:
    layers = [nn.Conv2d(3, 64, 7, 2, 3, bias=False), nn.BatchNorm2d(64), nn.ReLU(),
              nn.MaxPool2d(3, 2, 1)]
    cin = 64
    for cout, stride in ((64, 1), (128, 2), (256, 2), (512, 2)):
        layers += [_Basic(cin, cout, stride), _Basic(cout, cout, 1)]
        cin = cout
    layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(512, classes)]
    return nn.Sequential(*layers)


TORCH_MODELS = {"resnet18_v1": resnet18}     # the comm-mode --model name -> its builder


def build(model: str) -> nn.Module:
    """The PyTorch twin of comm-mode ``--model``; ValueError naming those there are."""
    builder = TORCH_MODELS.get(model)
    if builder is None:
        raise ValueError(f"the PyTorch systems run comm mode on {', '.join(TORCH_MODELS)} "
                         f"only, not --model {model}")
    return builder()
