"""PyTorch twins of the bench's comm-mode models, built here (no torchvision): ResNet-18
(He et al. 2016, ImageNet, 1000 classes), the same 11.69 M parameters as gluon's
``resnet18_v1`` (62 parameter tensors: convolutions without bias, batch-norm scale and
shift, the classifier), so both frameworks move the same bytes; and the twins of train
mode's models (netstorm.bench.models). Pure: builds modules."""
from __future__ import annotations

import torch
from torch import nn

__all__ = ["TORCH_MODELS", "TransformerLM", "build", "build_train_model", "resnet18"]


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


# ---------------------------------------------------------------- train mode's models
class _CausalBlock(nn.Module):
    """A pre-LayerNorm block: causal multi-head self-attention, a GELU MLP of 4 x hidden."""

    def __init__(self, hidden: int, heads: int):
        super().__init__()
        if hidden % heads:
            raise ValueError(f"hidden {hidden} is not a multiple of heads {heads}")
        self.heads = heads
        self.ln1, self.ln2 = nn.LayerNorm(hidden), nn.LayerNorm(hidden)
        self.qkv, self.proj = nn.Linear(hidden, 3 * hidden), nn.Linear(hidden, hidden)
        self.fc1, self.fc2 = nn.Linear(hidden, 4 * hidden), nn.Linear(4 * hidden, hidden)

    def forward(self, x):
        b, t, c = x.shape
        q, k, v = self.qkv(self.ln1(x)).view(b, t, 3, self.heads, c // self.heads) \
            .permute(2, 0, 3, 1, 4)
        out = nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(out.transpose(1, 2).reshape(b, t, c))
        return x + self.fc2(nn.functional.gelu(self.fc1(self.ln2(x))))


class TransformerLM(nn.Module):
    """gluon's ``netstorm.bench.models.TransformerLM`` in PyTorch: token and learned
    position embeddings, ``layers`` blocks, a final LayerNorm, an untied output layer.
    Token ids ``(batch, seq_len)`` -> logits ``(batch, seq_len, vocab)``."""

    def __init__(self, vocab: int, hidden: int, layers: int, heads: int, seq_len: int):
        super().__init__()
        self.embedding = nn.Embedding(vocab, hidden)
        self.position = nn.Parameter(torch.randn(1, seq_len, hidden) * 0.02)
        self.blocks = nn.Sequential(*(_CausalBlock(hidden, heads) for _ in range(layers)))
        self.ln = nn.LayerNorm(hidden)
        self.output = nn.Linear(hidden, vocab)

    def forward(self, tokens):
        return self.output(self.ln(self.blocks(self.embedding(tokens) + self.position)))


def build_train_model(name: str, hidden: int, seed: int, side: int = 8, vocab: int = 0,
                      layers: int = 2, heads: int = 4, seq_len: int = 32) -> nn.Module:
    """The PyTorch twin of train mode's model ``name`` (netstorm.bench.models: the same
    layers and sizes), initialized from ``seed`` (Xavier-uniform weights, zero biases, as
    gluon's Xavier; the same on every rank and for every PyTorch system). ``side``: the
    digits' image side."""
    torch.manual_seed(seed)
    if name == "transformer":
        net = TransformerLM(vocab, hidden, layers, heads, seq_len)
    elif name == "mlp":
        net = nn.Sequential(nn.Flatten(), nn.Linear(side * side, hidden), nn.ReLU(),
                            nn.Linear(hidden, hidden), nn.ReLU(), nn.Linear(hidden, 10))
    elif name == "cnn":
        net = nn.Sequential(nn.Conv2d(1, 32, 3, padding=1), nn.ReLU(),
                            nn.Conv2d(32, 64, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                            nn.Flatten(), nn.Linear(64 * (side // 2) ** 2, hidden), nn.ReLU(),
                            nn.Linear(hidden, 10))
    else:
        raise ValueError(f"train mode model {name!r} is unknown")
    for module in net.modules():
        if isinstance(module, (nn.Linear, nn.Conv2d, nn.Embedding)):
            nn.init.xavier_uniform_(module.weight)
            if getattr(module, "bias", None) is not None:
                nn.init.zeros_(module.bias)
    return net
