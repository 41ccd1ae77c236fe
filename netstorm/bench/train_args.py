"""``bench.py --mode train``'s flags (the same for every system): the workload and its
hyper-parameters, the target, per-system iteration counts, and the settings of the sync
modes and compression types the systems run with; how they become each worker's command
line, the cluster's ``[sync]`` (:class:`SyncConfig`) and ``[compression]``
(:class:`CompressionConfig`) tables. Pure (no MXNet)."""
from __future__ import annotations

import argparse
import math
import sys

from netstorm.geoserver.config.compression import CompressionConfig, CompressionError
from netstorm.geoserver.config.sync import SyncConfig

from .systems import COMPRESSED, SYNCED
from .workloads import HYPER_PARAMETERS, WORKLOADS, resolve

__all__ = ["DILOCO_FLAGS", "LM_FLAGS", "MOMENTUM", "STREAMING_COMPRESSION", "SYNC_FLAGS",
           "add_train_arguments", "check_compression", "check_train_args",
           "compression_params", "eval_every_of", "hyper_parameters", "iters_of",
           "mixed_worker_args", "parse_iters_for", "steps_per_wan_round", "sync_settings",
           "worker_args"]

SYNC_FLAGS = (          # the sync modes' settings in train mode: flag, default, help
    ("--k1", 4, "netstorm-hfa: local steps between a DC's synchronizations"),
    ("--k2", 2, "netstorm-hfa: DC rounds between synchronizations across the WAN"),
    ("--staleness", 2, "netstorm-mixed: rounds a DC may run ahead of the slowest"),
    ("--max-steps", 8, "netstorm-esync: most local steps a fast worker takes per round"))
DILOCO_FLAGS = (        # flag, type, default, help (netstorm-diloco*, netstorm-streaming)
    ("--h", int, 50, "diloco: inner (local) steps per outer round; torch-post-local-sgd: "
                     "steps per model average"),
    ("--outer-lr", float, 0.7, "diloco: the outer optimizer's learning rate (Nesterov SGD)"),
    ("--outer-momentum", float, 0.9, "diloco: the outer optimizer's momentum"),
    ("--fragments", int, 4, "netstorm-streaming: fragments of the model, each synchronized "
                            "on its own schedule (streaming DiLoCo)"),
    ("--delay", int, 5, "netstorm-streaming: inner steps a fragment's outer result may "
                        "arrive late"),
    ("--mix", float, 0.5, "netstorm-streaming: weight of the local fragment when the outer "
                          "result is mixed in (0: take the outer result)"))
LM_FLAGS = (            # flag, default, help (the lm workload's size)
    ("--layers", 2, "lm: transformer blocks"),
    ("--heads", 4, "lm: attention heads (a divisor of --hidden)"),
    ("--seq-len", 32, "lm: tokens per sample"),
    ("--vocab", 8192, "lm: vocabulary size (the most frequent training words)"),
    ("--eval-tokens", 4096, "lm: validation tokens per evaluation (the same ones each time)"))
MOMENTUM = 0.9      # train mode's SGD momentum (in compression with --momentum-correction)
STREAMING_COMPRESSION = ("none", "fp16", "int8", "topk2bit")


def add_train_arguments(p: argparse.ArgumentParser) -> None:
    t = p.add_argument_group("train mode (the same for every system; unset: the workload's "
                             "default, docs/benchmarks.md)")
    t.add_argument("--workload", default="mlp-digits", choices=list(WORKLOADS),
                   help="mlp-digits (an MLP on digits), cnn-digits (a small conv net on "
                        "digits) or lm (a transformer language model on the Python docs)")
    t.add_argument("--data", default=None,
                   help="digits workloads: 'digits' (scikit-learn's, bundled) or a directory "
                        "of MNIST IDX files; lm: 'python-docs' (Debian's python3.11-doc) or "
                        "a directory of HTML files")
    t.add_argument("--target-accuracy", type=float, default=None,
                   help="test accuracy whose first crossing is each system's time to target")
    t.add_argument("--target-loss", type=float, default=None,
                   help="lm: validation loss (nats/token) whose first crossing is each "
                        "system's time to target")
    t.add_argument("--target-from", default=None, metavar="SYSTEM",
                   help="the target is the final quality of SYSTEM in this run (e.g. "
                        "mxnet-1ps: when does each system reach where stock MXNet ends)")
    t.add_argument("--iters-for", default=None, metavar="SYSTEM=N,...",
                   help="iterations of these systems instead of --iters (local-update "
                        "systems can afford many more in the same time)")
    t.add_argument("--hidden", type=int, default=None,
                   help="mlp: hidden width (1024); cnn: dense width (256); lm: model width "
                        "(128)")
    for flag, default, text in LM_FLAGS:
        t.add_argument(flag, type=int, default=default, help=text)
    t.add_argument("--batch-size", type=int, default=None,
                   help="per worker (digits: 32 images; lm: 8 sequences)")
    t.add_argument("--optimizer", "--inner-optimizer", dest="optimizer", default=None,
                   choices=["sgd", "adam"],
                   help="every system's optimizer (on the servers under fsa, on the workers "
                        "under local-update modes); digits: sgd (momentum 0.9), lm: adam")
    t.add_argument("--lr", type=float, default=None,
                   help="learning rate (digits: 0.01; lm: 0.001)")
    t.add_argument("--wd", type=float, default=0.0,
                   help="weight decay (MXNet's: an L2 term in the gradient, Adam included)")
    t.add_argument("--seed", type=int, default=42, help="data order and initial weights")
    t.add_argument("--eval-every", type=int, default=None,
                   help="iterations between evaluations (digits: 5; lm: 50)")
    t.add_argument("--threshold", type=float, default=1.0,
                   help="2bit threshold of mxnet-2bit (default: the best of a sweep on the "
                        "default model; MXNet's own default 0.5 is worse, docs/benchmarks.md)")
    t.add_argument("--ratio", type=float, default=0.1,
                   help="share of elements sent per hop by netstorm-bsc and netstorm-mpq")
    t.add_argument("--warmup-rounds", type=int, default=20,
                   help="bsc/mpq rounds over which the ratio decays from dense to --ratio")
    t.add_argument("--topk-ratio", type=float, default=0.03,
                   help="topk2bit (netstorm-diloco-topk2bit): share of elements sent per "
                        "outer round")
    t.add_argument("--topk-warmup-rounds", type=int, default=0,
                   help="topk2bit: rounds over which the ratio decays from dense")
    t.add_argument("--streaming-compression", default="int8", choices=STREAMING_COMPRESSION,
                   help="netstorm-streaming's compression")
    for flag, default, text in SYNC_FLAGS:
        t.add_argument(flag, type=int, default=default, help=text)
    for flag, kind, default, text in DILOCO_FLAGS:
        t.add_argument(flag, type=kind, default=default, help=text)
    t.add_argument("--momentum-correction", action=argparse.BooleanOptionalAction,
                   default=False, help="bsc/mpq: DGC momentum correction (SGD's momentum "
                                       "0.9 applied inside compression instead)")


def parse_iters_for(text: str | None, systems: list) -> dict:
    """``SYSTEM=N,SYSTEM=N`` -> {system: N}; a ValueError naming ``--iters-for`` if a system
    is not in ``systems`` or N is not a whole number >= 1."""
    out: dict = {}
    for item in filter(None, (p.strip() for p in (text or "").split(","))):
        name, eq, count = item.partition("=")
        name = name.strip()
        if not eq or not count.strip().isdigit() or int(count) < 1:
            raise ValueError(f"--iters-for takes SYSTEM=N,... with N a whole number >= 1, "
                             f"got {item!r}")
        if name not in systems:
            raise ValueError(f"--iters-for names {name!r}, which is not in --systems "
                             f"({', '.join(systems)})")
        out[name] = int(count)
    return out


def iters_of(args, system: str) -> int:
    """The iterations ``system`` runs (``--iters-for``, else ``--iters``)."""
    return (args.iters_for or {}).get(system, args.iters)


def _checks(args, workload) -> str:
    """The first reason train mode's flags cannot work, or ''."""
    if args.model is not None and args.model != workload.model:
        return (f"--mode train trains a --workload ({', '.join(WORKLOADS)}), not --model "
                f"{args.model!r}")
    loss = WORKLOADS[args.workload].metric == "loss"
    if args.target_accuracy is not None and loss:
        return f"--target-accuracy: {args.workload} is judged by validation loss: --target-loss"
    if args.target_loss is not None and not loss:
        return f"--target-loss: {args.workload} is judged by test accuracy: --target-accuracy"
    if args.target_accuracy is not None and not 0 < args.target_accuracy <= 1:
        return f"--target-accuracy must be in (0, 1], got {args.target_accuracy}"
    if args.target_loss is not None and not args.target_loss > 0:
        return f"--target-loss must be > 0 (nats/token), got {args.target_loss}"
    given = [f for f, v in (("--target-accuracy", args.target_accuracy),
                            ("--target-loss", args.target_loss),
                            ("--target-from", args.target_from)) if v is not None]
    if len(given) > 1:
        return f"give one target, not {' and '.join(given)}"
    if args.target_from is not None and args.target_from not in args.systems:
        return (f"--target-from names {args.target_from!r}, which is not in --systems "
                f"({', '.join(args.systems)})")
    for flag in ("iters", "batch_size", "eval_every", "seq_len", "layers", "heads",
                 "eval_tokens"):
        if getattr(args, flag) < 1:
            return f"--{flag.replace('_', '-')} must be >= 1, got {getattr(args, flag)}"
    if not args.lr > 0 or args.wd < 0:
        return f"--lr must be > 0 and --wd >= 0, got {args.lr} and {args.wd}"
    if loss and args.hidden % args.heads:
        return f"--hidden {args.hidden} must be a multiple of --heads {args.heads}"
    if loss and args.vocab < 3:
        return f"--vocab must be >= 3 (<unk>, <eos> and a word), got {args.vocab}"
    return ""


def check_train_args(p: argparse.ArgumentParser, args) -> None:
    """Resolve the workload's defaults into ``args`` and refuse what cannot work (with
    ``p.error``, naming the flag); ``args.iters_for`` becomes a dict."""
    workload = resolve(args)
    why = _checks(args, workload)
    if why:
        p.error(why)
    try:
        args.iters_for = parse_iters_for(args.iters_for, args.systems)
    except ValueError as exc:
        p.error(str(exc))
    args.model = args.workload
    outer = [s for s in args.systems if SYNCED.get(s) in ("diloco", "streaming")]
    if outer and args.eval_every % args.h:
        print(f"bench: {', '.join(outer)} evaluate every {math.lcm(args.eval_every, args.h)} "
              f"iterations (--eval-every {args.eval_every} rounded up to a multiple of --h "
              f"{args.h}): the global model after an outer round, not one worker's own "
              f"weights between rounds", file=sys.stderr)


def compression_params(args) -> dict:
    """The compression_params of each compression setting the benchmark runs (one each,
    the same for MXNet's and netstorm's systems of that type; ``streaming``:
    netstorm-streaming's, None for dense)."""
    sparse = {"ratio": args.ratio, "warmup_rounds": args.warmup_rounds,
              **({"momentum": MOMENTUM} if args.momentum_correction else {})}
    out = {"2bit": {"type": "2bit", "threshold": args.threshold},
           "fp16": {"type": "fp16"},
           "bsc": {"type": "bsc", **sparse},
           "mpq": {"type": "mpq", **sparse},
           "int8": {"type": "int8"},
           "topk2bit": {"type": "topk2bit", "ratio": args.topk_ratio,
                        "warmup_rounds": args.topk_warmup_rounds}}
    out["streaming"] = out.get(getattr(args, "streaming_compression", "int8"))
    return out


def _diloco(args, streaming: bool) -> SyncConfig:
    params = {"mode": "diloco", "h": args.h, "outer_lr": args.outer_lr,
              "outer_momentum": args.outer_momentum, "fragments": 1}
    if streaming:
        params.update(fragments=args.fragments, delay=args.delay, mix=args.mix)
    where = "--h/--outer-lr/--outer-momentum" + ("/--fragments/--delay/--mix" * streaming)
    return SyncConfig.from_params(params, where=where)


def sync_settings(args, systems=None) -> dict:
    """The SyncConfig of each sync setting that ``systems`` (default ``args.systems``, else
    every setting) run with: hfa from --k1, --k2; mixed from --staleness; esync from
    --max-steps; diloco from --h, --outer-lr, --outer-momentum (one fragment); streaming
    (diloco with fragments) from those and --fragments, --delay, --mix. A SyncError names
    the flags of a setting that cannot work."""
    build = {"hfa": lambda: SyncConfig(mode="hfa", k1=args.k1, k2=args.k2),
             "mixed": lambda: SyncConfig(mode="mixed", staleness=args.staleness),
             "esync": lambda: SyncConfig(mode="esync", max_steps=args.max_steps),
             "diloco": lambda: _diloco(args, streaming=False),
             "streaming": lambda: _diloco(args, streaming=True)}
    if systems is None:
        systems = getattr(args, "systems", None) or list(SYNCED)
    return {name: build[name]() for name in dict.fromkeys(SYNCED[s] for s in systems
                                                          if s in SYNCED)}


def check_compression(args, systems) -> str:
    """The first compression setting of ``systems`` that cannot work, as an error, or ''."""
    for kind in dict.fromkeys(COMPRESSED[s] for s in systems if s in COMPRESSED):
        try:
            CompressionConfig.from_params(compression_params(args)[kind],
                                          where=f"--{kind} settings")
        except CompressionError as exc:
            return str(exc)
    return ""


def mixed_worker_args(args) -> list:
    """netstorm-mixed's optimizer with SGD: MXNet's DCASGD, without momentum (MXNet 1.9.1's
    DCASGD cannot run with it), at the learning rate that gives SGD-with-momentum's
    steady-state step: ``lr / (1 - momentum)``. With Adam: Adam itself, without delay compensation."""
    if getattr(args, "optimizer", "sgd") != "sgd":
        return []
    return ["--optimizer", "dcasgd", "--lr", str(args.lr / (1 - MOMENTUM)), "--momentum", "0"]


def hyper_parameters(args) -> dict:
    """What every system of a train-mode run trained with (the JSON's ``hyper_parameters``)."""
    out = {"workload": args.workload,
           **{k: getattr(args, k) for k in (*HYPER_PARAMETERS, "wd", "seed")}}
    if WORKLOADS[args.workload].metric == "loss":
        out.update({flag[2:].replace("-", "_"): getattr(args, flag[2:].replace("-", "_"))
                    for flag, *_ in LM_FLAGS})
    if args.optimizer == "sgd":
        out["momentum"] = MOMENTUM
    return out


def eval_every_of(args, system: str) -> int | None:
    """How often ``system``'s rank 0 evaluates: ``--eval-every``, except under diloco, where
    it is rounded up to a multiple of ``--h`` (the least common multiple), so that what is
    evaluated is the global model right after an outer round, never one worker's own weights
    between rounds (docs/benchmarks.md). None in comm mode."""
    if args.mode != "train":
        return None
    if SYNCED.get(system) in ("diloco", "streaming"):     # both run sync mode diloco
        return math.lcm(args.eval_every, args.h)
    return args.eval_every


def steps_per_wan_round(args, system: str) -> int | None:
    """Iterations between ``system``'s synchronizations across the WAN when it does not
    synchronize every iteration: ``--h`` under diloco (streamed or not: every fragment
    once per ``h``), ``k1 · k2`` under hfa; else None."""
    sync = SYNCED.get(system)
    if sync in ("diloco", "streaming"):
        return args.h
    if sync == "hfa":
        return args.k1 * args.k2
    return None


def worker_args(args, wan=None, iters: int | None = None,
                eval_every: int | None = None) -> list:
    """A worker's command line (``iters``: this system's, default ``--iters``;
    ``eval_every``: this system's, default ``--eval-every``)."""
    common = ["--model", args.model, "--mode", args.mode,
              "--iters", str(args.iters if iters is None else iters)]
    if args.straggler is not None:
        dc, seconds = args.straggler
        common += ["--straggler-host", wan.dc_address(dc), "--straggler-s", str(seconds)]
    if args.mode == "comm":
        return common
    out = common + ["--workload", args.workload, "--data", args.data, "--hidden",
                    str(args.hidden), "--batch-size", str(args.batch_size), "--optimizer",
                    args.optimizer, "--lr", str(args.lr), "--wd", str(args.wd), "--momentum",
                    str(MOMENTUM), "--seed", str(args.seed), "--eval-every",
                    str(args.eval_every if eval_every is None else eval_every)]
    for flag, *_ in LM_FLAGS:
        out += [flag, str(getattr(args, flag[2:].replace("-", "_")))]
    return out
