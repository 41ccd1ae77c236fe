"""scripts/launch.py: failure propagation, clean-up, Ctrl-C, the example, bad cluster files."""

import hashlib
from launching import REPO

MXNET_EXAMPLE = REPO / "tests" / "third_party" / "mxnet" / "image-classification"
VENDORED = {   # sha256 of MXNet 1.9.1's files, as released
    "train_mnist.py": "eb8d377c4a529d4dda7828bd00ad7a970fa673d9d5cb04b6f87ef520f3fe959d",
    "common/fit.py": "0ea20265d72d1d72d17baf417743ff5cb93bf4e3788b5498e6f4f6a5e42105b8",
    "common/util.py": "3fad74490c816dd15706f604946729622529045f64f5f1948d9bb3ad77ccad71",
    "common/find_mxnet.py": "172e8321ce07515d6b06f7c32dc5118fa86b3dacfb86bd62cf1fd7e0e5b11ffe",
    "symbols/mlp.py": "00f14e5fa44c563deef0772a9a376194469baf498f839622b510f941979f8c4e",
}


def test_the_vendored_examples_are_unmodified():
    for name, digest in VENDORED.items():
        assert hashlib.sha256((MXNET_EXAMPLE / name).read_bytes()).hexdigest() == digest, name


ALONE = """
import mxnet as mx
from mxnet import gluon
IMPORT
net = gluon.nn.Dense(1)
net.initialize()
trainer = gluon.Trainer(net.collect_params(), "sgd", kvstore=STORE)
with mx.autograd.record():
    loss = net(mx.nd.ones((2, 3))).sum()
loss.backward()
trainer.step(2)
print("trained alone", flush=True)
"""
