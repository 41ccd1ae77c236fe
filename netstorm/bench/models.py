"""The models ``bench.py --mode train`` trains, one per workload (netstorm.bench.workloads).

* ``mlp``: Flatten, two ReLU layers of ``hidden`` units, 10 outputs (1.13 M parameters for
  1024 on digits);
* ``cnn``: Conv(32, 3x3)-ReLU-Conv(64, 3x3)-ReLU-MaxPool(2)-Dense(``hidden``)-ReLU-Dense(10)
  (284 K parameters for 256 on the 8x8 digits);
* ``transformer``: a decoder-only language model (GPT-2's layout, pre-LayerNorm): token
  and learned position embeddings, ``layers`` blocks of causal multi-head self-attention
  and a GELU MLP of 4 x ``hidden``, a final LayerNorm and an untied output layer over the
  vocabulary (2.51 M parameters for vocabulary 8192, ``hidden`` 128, 2 layers: nearly all in
  the two vocabulary-wide matrices, whose gradients a WAN must move while only the output
  one costs compute).

Every model is built from ``mx.random.seed(seed)``: the same initial weights on every rank
and for every system.
"""
from __future__ import annotations

import math

import mxnet as mx
from mxnet import gluon
from mxnet.gluon import nn

__all__ = ["MODELS", "CausalSelfAttention", "TransformerLM", "build_model", "parameter_count"]

MODELS = ("mlp", "cnn", "transformer")


class CausalSelfAttention(gluon.HybridBlock):
    """Multi-head self-attention over ``(batch, seq_len, hidden)``, each position seeing
    itself and the positions before it."""

    def __init__(self, hidden: int, heads: int, seq_len: int, **kwargs):
        super().__init__(**kwargs)
        if hidden % heads:
            raise ValueError(f"hidden {hidden} is not a multiple of heads {heads}")
        self.heads, self.seq_len, self.head_dim = heads, seq_len, hidden // heads
        with self.name_scope():
            self.qkv = nn.Dense(3 * hidden, flatten=False)
            self.proj = nn.Dense(hidden, flatten=False)

    def hybrid_forward(self, F, x):
        h, d, t = self.heads, self.head_dim, self.seq_len
        qkv = F.transpose(self.qkv(x).reshape((0, 0, 3, h, d)), axes=(2, 0, 3, 1, 4))
        q, k, v = (part.reshape((-3, 0, 0)) for part in          # (batch * heads, t, d)
                   F.split(qkv, num_outputs=3, axis=0, squeeze_axis=True))
        scores = F.batch_dot(q, k, transpose_b=True) / math.sqrt(d)
        pos = F.arange(t)
        future = F.broadcast_greater(pos.reshape((1, t)), pos.reshape((t, 1)))
        scores = F.broadcast_add(scores, (future * -1e9).reshape((1, t, t)))
        out = F.batch_dot(F.softmax(scores, axis=-1), v).reshape((-4, -1, h, 0, 0))
        return self.proj(F.transpose(out, axes=(0, 2, 1, 3)).reshape((0, 0, -3)))


class _Block(gluon.HybridBlock):
    def __init__(self, hidden: int, heads: int, seq_len: int, **kwargs):
        super().__init__(**kwargs)
        with self.name_scope():
            self.ln1, self.ln2 = nn.LayerNorm(), nn.LayerNorm()
            self.attention = CausalSelfAttention(hidden, heads, seq_len)
            self.fc1 = nn.Dense(4 * hidden, flatten=False)
            self.gelu = nn.GELU()
            self.fc2 = nn.Dense(hidden, flatten=False)

    def hybrid_forward(self, F, x):
        x = x + self.attention(self.ln1(x))
        return x + self.fc2(self.gelu(self.fc1(self.ln2(x))))


class TransformerLM(gluon.HybridBlock):
    """Token ids ``(batch, seq_len)`` -> next-token logits ``(batch, seq_len, vocab)``."""

    def __init__(self, vocab: int, hidden: int, layers: int, heads: int, seq_len: int,
                 **kwargs):
        super().__init__(**kwargs)
        with self.name_scope():
            self.embedding = nn.Embedding(vocab, hidden)
            self.position = self.params.get("position", shape=(1, seq_len, hidden),
                                            init=mx.init.Normal(0.02))
            self.blocks = nn.HybridSequential()
            for _ in range(layers):
                self.blocks.add(_Block(hidden, heads, seq_len))
            self.ln = nn.LayerNorm()
            self.output = nn.Dense(vocab, flatten=False)

    def hybrid_forward(self, F, tokens, position):
        x = F.broadcast_add(self.embedding(tokens), position)
        return self.output(self.ln(self.blocks(x)))


def build_model(name: str, hidden: int, seed: int, vocab: int = 0, layers: int = 2,
                heads: int = 4, seq_len: int = 32):
    """The model ``name`` (one of :data:`MODELS`), initialized from ``seed`` (Xavier; the
    position embeddings N(0, 0.02)) and hybridized. ``vocab``, ``layers``, ``heads`` and
    ``seq_len`` are the transformer's."""
    if name not in MODELS:
        raise ValueError(f"train mode model {name!r} is unknown; known: {', '.join(MODELS)}")
    mx.random.seed(seed)
    if name == "transformer":
        net = TransformerLM(vocab, hidden, layers, heads, seq_len)
    else:
        net = nn.HybridSequential()
        if name == "mlp":
            net.add(nn.Flatten(), nn.Dense(hidden, activation="relu"),
                    nn.Dense(hidden, activation="relu"), nn.Dense(10))
        else:
            net.add(nn.Conv2D(32, 3, padding=1, activation="relu"),
                    nn.Conv2D(64, 3, padding=1, activation="relu"), nn.MaxPool2D(2),
                    nn.Flatten(), nn.Dense(hidden, activation="relu"), nn.Dense(10))
    net.initialize(mx.init.Xavier())
    net.hybridize()
    return net


def parameter_count(net) -> int:
    """Trained parameters (shapes resolved: run a batch first)."""
    return sum(int(p.data().size) for p in net.collect_params().values()
               if p.grad_req != "null")
