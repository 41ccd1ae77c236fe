"""Reading the cluster-wide settings tables ([sync], [compression]) the same way. Pure."""
from __future__ import annotations

__all__ = ["check_kind", "chosen_params"]


def check_kind(kind, known, label: str, error: type):
    """``kind`` if it is one of ``known``; else ``error`` naming it as ``label`` and what is
    accepted. O(len(known))."""
    if not isinstance(kind, str) or kind not in known:
        raise error(f"{label} {kind!r} is unknown; accepted: "
                    f"{', '.join(repr(k) for k in known)}")
    return kind


def chosen_params(params: dict, kind_field: str, label: str, takes: dict,
                  error: type) -> dict:
    """The parameters a user's table ``params`` gives for the kind it names in
    ``kind_field`` (``takes``: kind -> the parameters it takes). An unknown kind, or a
    parameter that kind does not take, raises ``error`` naming the kind as ``label`` and
    what is accepted; nothing is ignored. O(len(params))."""
    kind = check_kind(params.get(kind_field), takes, label, error)
    extra = sorted(set(params) - {kind_field, *takes[kind]}, key=str)
    if extra:
        raise error(f"{label} {kind!r} takes no {', '.join(map(repr, extra))} "
                    f"(it takes {', '.join(map(repr, takes[kind])) or 'nothing'})")
    return {k: params[k] for k in takes[kind] if k in params}
