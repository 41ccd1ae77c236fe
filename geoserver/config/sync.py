"""How the cluster synchronizes: one typed setting for the whole cluster (``[sync]``).

Pure. The cluster file's ``[sync]`` table becomes a :class:`SyncConfig`, checked here once
with errors that name the field; the scheduler sends it to every node in WELCOME (inside
:class:`~netstorm.geoserver.config.settings.RuntimeSettings`). docs/sync.md says what each mode
does and when to use it.

- ``fsa``: fully synchronous (the default): every round, every worker's gradient is summed
  across all DCs before anyone goes on.
- ``hfa``: hierarchical frequency aggregation: a worker takes ``k1`` optimizer steps of its
  own, then its DC sums its workers' model deltas; every ``k2`` such DC rounds the DCs sum
  their deltas across the WAN (along the policy's trees). The model moves by the *average*
  of the workers' deltas (model averaging), so ``k1 = k2 = 1`` is ``fsa`` with SGD on the
  gradient averaged over the workers.
- ``mixed``: synchronous inside a DC, asynchronous across DCs: a DC applies its own sum at
  once and the other DCs' sums as they arrive (delay-compensated with MXNet's DCASGD), never
  running more than ``staleness`` rounds ahead of the slowest DC.
- ``esync``: like ``hfa`` with ``k2 = 1``, but each worker's number of local steps is set
  every round so that all arrive at the synchronization together (fast workers take more,
  up to ``max_steps``; the slowest takes one).
- ``diloco``: an outer optimizer over local steps (DiLoCo): a worker takes ``h`` inner
  steps of its own optimizer, the pseudo-gradients (start weights minus local weights) are
  averaged over every worker along the trees, and every DC server applies the same outer
  Nesterov step (``outer_lr``, ``outer_momentum``). With ``fragments`` P > 1 the model is
  synchronized in P fragments at staggered steps (streaming DiLoCo); a fragment's result may
  arrive ``delay`` inner steps late, and is then mixed into the local weights with factor
  ``mix`` (the local share).
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, fields

from .tables import check_kind, chosen_params

__all__ = ["MAX_GRACE_S", "QUORUM_PARAMS", "DEFAULT_H", "DEFAULT_K1", "DEFAULT_K2", "DEFAULT_MAX_STEPS", "DEFAULT_MIX",
           "DEFAULT_OUTER_LR", "DEFAULT_OUTER_MOMENTUM", "DEFAULT_STALENESS", "MAX_COUNT",
           "MAX_OUTER_LR", "MODES", "PARAMS", "SyncConfig", "SyncError"]


class SyncError(ValueError):
    """A synchronization setting that cannot be used; the text names the field and why."""

MODES = ("fsa", "hfa", "mixed", "esync", "diloco")
PARAMS = {              # what each mode takes besides 'mode'
    "fsa": (),
    "hfa": ("k1", "k2", "quorum", "grace_s"),
    "mixed": ("staleness",),
    "esync": ("max_steps",),
    "diloco": ("h", "outer_lr", "outer_momentum", "fragments", "delay", "mix", "quorum",
               "grace_s"),
}
QUORUM_PARAMS = ("quorum", "grace_s")   # quorum rounds (docs/sync.md#quorum-rounds-not-waiting-for-a-late-dc-hfa-diloco): named in the
                                        # table form only when set
MAX_GRACE_S = 3600.0
DEFAULT_K1 = 1
DEFAULT_K2 = 1
DEFAULT_STALENESS = 2
DEFAULT_MAX_STEPS = 8
DEFAULT_H = 100                 # DiLoCo's inner steps per outer round (the paper: 100-500)
DEFAULT_OUTER_LR = 0.7          # DiLoCo's outer Nesterov step
DEFAULT_OUTER_MOMENTUM = 0.9
DEFAULT_MIX = 0.5               # streaming DiLoCo's share of the local fragment
MAX_OUTER_LR = 100.0
MAX_COUNT = 1 << 16     # the largest k1, k2, staleness or max_steps taken


@dataclass(frozen=True)
class SyncConfig:
    """One mode and its parameters; the others keep their defaults (and are ignored)."""

    mode: str = "fsa"
    k1: int = DEFAULT_K1
    k2: int = DEFAULT_K2
    staleness: int = DEFAULT_STALENESS
    max_steps: int = DEFAULT_MAX_STEPS
    h: int = DEFAULT_H
    outer_lr: float = DEFAULT_OUTER_LR
    outer_momentum: float = DEFAULT_OUTER_MOMENTUM
    fragments: int = 1
    delay: int = 0
    mix: float = DEFAULT_MIX
    quorum: int = 0         # hfa, diloco: the fewest DCs a WAN round completes with (0: all)
    grace_s: float = 0.0    # and how long it waits for the rest (0: derived from measurements)

    def __post_init__(self):
        check_kind(self.mode, MODES, "sync mode", SyncError)
        for name, lowest in (("k1", 1), ("k2", 1), ("staleness", 0), ("max_steps", 1),
                             ("h", 1), ("fragments", 1), ("delay", 0), ("quorum", 0)):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or \
                    not lowest <= value <= MAX_COUNT:
                raise SyncError(f"{name} must be a whole number in {lowest}..{MAX_COUNT}, "
                                f"got {value!r}")
        for name, low, high, text in (
                ("outer_lr", 0.0, MAX_OUTER_LR, f"0 < outer_lr <= {MAX_OUTER_LR:g}"),
                ("outer_momentum", 0.0, 1.0, "0 <= outer_momentum < 1"),
                ("mix", 0.0, 1.0, "0 <= mix <= 1"),
                ("grace_s", 0.0, MAX_GRACE_S, f"0 <= grace_s <= {MAX_GRACE_S:g}")):
            value = getattr(self, name)
            fits = not isinstance(value, bool) and isinstance(value, (int, float)) and \
                low <= value <= high and (name != "outer_lr" or value > low) and \
                (name != "outer_momentum" or value < high)
            if not fits:
                raise SyncError(f"{name} must be a number with {text}, got {value!r}")
            object.__setattr__(self, name, float(value))
        if self.quorum and self.mode == "hfa" and self.k2 != 1:
            raise SyncError("quorum needs k2 = 1 under hfa (every DC round a WAN round): a "
                            "late DC's rounds are merged into later WAN rounds, which rounds "
                            "that stay in the DC cannot be")
        if self.quorum and self.streaming:
            raise SyncError("quorum cannot run with fragments > 1 or delay > 0: a streamed "
                            "fragment's round is not the whole model's")
        if self.fragments > self.h:
            raise SyncError(f"fragments ({self.fragments}) must be at most h ({self.h}): "
                            f"each fragment is synchronized at its own inner step of the h")
        if self.delay and self.delay >= self.h:
            raise SyncError(f"delay ({self.delay}) must be less than h ({self.h}): a "
                            f"fragment's result is merged before that fragment leaves again")

    # ------------------------------------------------------------ what the mode means
    @property
    def local_steps(self) -> bool:
        """Workers run the optimizer themselves and push model deltas (hfa, esync, diloco)."""
        return self.mode in ("hfa", "esync", "diloco")

    @property
    def averaged(self) -> bool:
        """The model moves by the average of the workers' deltas, not their sum (hfa,
        diloco; esync sums, since its workers' step counts differ)."""
        return self.mode in ("hfa", "diloco")

    @property
    def streaming(self) -> bool:
        """diloco in fragments, or with results that may arrive late (overlapped)."""
        return self.mode == "diloco" and (self.fragments > 1 or self.delay > 0)

    @property
    def asynchronous(self) -> bool:
        """DCs apply each other's updates as they arrive (mixed)."""
        return self.mode == "mixed"

    @property
    def quorum_rounds(self) -> bool:
        """A WAN round may complete without every DC (``quorum`` set, hfa or diloco)."""
        return self.quorum > 0 and self.mode in ("hfa", "diloco")

    def quorum_in_force(self, dcs: int) -> bool:
        """Quorum rounds run in a cluster of ``dcs`` DCs: a quorum fewer than them (a quorum
        of every DC is every round, as without one)."""
        return self.quorum_rounds and self.quorum < dcs

    @property
    def rounds_per_wan_round(self) -> int:
        """DC rounds per WAN round (``k2`` under hfa, else 1)."""
        return self.k2 if self.mode == "hfa" else 1

    def wan_round(self, rnd: int) -> int:
        """The WAN round a DC round belongs to (its policy, its round gate): round ``rnd``
        (1-based) is in WAN round ``ceil(rnd / k2)``; that WAN round's sum is sent at its
        last DC round."""
        k = self.rounds_per_wan_round
        return -(-rnd // k)

    def crosses_wan(self, rnd: int) -> bool:
        """Whether DC round ``rnd`` ends with a sum across the WAN."""
        return rnd % self.rounds_per_wan_round == 0

    # ------------------------------------------------------------ forms
    @classmethod
    def from_params(cls, params, where: str = "[sync]") -> "SyncConfig":
        """From the cluster file's table (or None: fsa). Parameters a mode does not take are
        refused, never ignored."""
        if params is None:
            return cls()
        if not isinstance(params, dict):
            raise SyncError(f"{where} must be a table like {{mode = 'hfa', k1 = 4, k2 = 2}}, "
                            f"got {type(params).__name__}")
        params = {"mode": "fsa", **params}
        try:
            return cls(mode=params["mode"], **chosen_params(params, "mode", "sync mode", PARAMS,
                                                            SyncError))
        except SyncError as exc:
            raise SyncError(f"{where}: {exc}") from None

    @classmethod
    def parse(cls, text: str, where: str = "--sync") -> "SyncConfig":
        """From ``MODE`` or ``MODE:NAME=N,NAME=N`` (the launcher's and bench's flag)."""
        mode, _, rest = text.partition(":")
        params: dict = {"mode": mode.strip()}
        for item in filter(None, (p.strip() for p in rest.split(","))):
            name, eq, value = item.partition("=")
            params[name.strip()] = _number(value.strip(), item, mode, where) if eq else None
            if not eq:
                raise SyncError(f"{where}: expected NAME=N after '{mode}:', got {item!r}")
        return cls.from_params(params, where)

    def to_params(self) -> dict:
        """The table form, naming only what this mode takes (inverse of from_params)."""
        return {"mode": self.mode, **{k: getattr(self, k) for k in self._named()}}

    def _named(self) -> tuple:
        """The parameters the table form names: the mode's, the quorum's when set."""
        return tuple(k for k in PARAMS[self.mode]
                     if k not in QUORUM_PARAMS or getattr(self, k))

    def describe(self) -> str:
        """``hfa:k1=4,k2=2`` (what :meth:`parse` reads)."""
        extra = ",".join(f"{k}={getattr(self, k)}" for k in self._named())
        return f"{self.mode}:{extra}" if extra else self.mode

    def to_json(self) -> dict:
        return asdict(self)

    @classmethod
    def from_json(cls, data) -> "SyncConfig":
        if not isinstance(data, dict) or set(data) != {f.name for f in fields(cls)}:
            raise SyncError(f"malformed sync setting {data!r}")
        return cls(**data)


def _number(text: str, item: str, mode: str, where: str):
    """``text`` as an int (digits) or a finite float; else a SyncError naming ``item``."""
    if text.lstrip("-").isdigit():
        return int(text)
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if value != value or value in (float("inf"), float("-inf")):
        raise SyncError(f"{where}: expected NAME=N after '{mode}:', got {item!r}")
    return value
