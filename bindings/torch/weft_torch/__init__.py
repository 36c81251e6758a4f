"""weft_torch: weft as a torch.distributed backend (PyTorch 1.13).

    import weft_torch                      # registers backend "weft"
    torch.distributed.init_process_group("weft", init_method="env://", timeout=...)

Any init method works (env://, file://, tcp://): the unique id travels through the store
PyTorch hands the backend. Subgroups (dist.new_group, new_subgroups) are children of the
default weft group made by weft_comm_split, when the default group is weft: every rank
enters new_group (PyTorch requires it), members with one color, the others with
WEFT_SPLIT_NOCOLOR, so no second rendezvous is needed. Otherwise (a weft group under a
gloo default group) the subgroup makes its own unique id through the store.
"""
import inspect
import threading

import torch.distributed as dist
import torch.distributed.distributed_c10d as _c10d

from . import _C

__all__ = ["BACKEND", "weft_version"]

BACKEND = "weft"
weft_version = _C.weft_version

_pending = threading.local()  # (parent group, key) while new_group builds a weft subgroup


def _create(store, rank, size, timeout):
    request = getattr(_pending, "split", None)
    if request is not None:
        parent, key = request
        return _C.split(parent, 0, key, timeout)
    return _C.create_process_group(store, rank, size, timeout)


def _default_weft_group():
    if not _c10d.is_initialized():
        return None
    pg = _c10d._get_default_group()
    return pg if _C.is_weft(pg) else None


_original_helper = _c10d._new_process_group_helper
_helper_signature = inspect.signature(_original_helper)


def _new_process_group_helper(*args, **kwargs):
    """new_group's helper, called by every rank: splits the default weft group when the new
    group is a weft subgroup of it, then lets PyTorch register the child as usual."""
    bound = _helper_signature.bind(*args, **kwargs)
    bound.apply_defaults()
    a = bound.arguments
    ranks = a["global_ranks_in_group"]
    parent = _default_weft_group() if ranks else None
    if parent is None or dist.Backend(a["backend"]) != BACKEND:
        return _original_helper(*args, **kwargs)
    me = parent.rank()
    if me not in ranks:
        _C.split(parent, _C.SPLIT_NOCOLOR, 0, a["timeout"])
        return _original_helper(*args, **kwargs)
    _pending.split = (parent, list(ranks).index(me))
    try:
        return _original_helper(*args, **kwargs)
    finally:
        _pending.split = None


if BACKEND.upper() not in dist.Backend._plugins:
    dist.Backend.register_backend(BACKEND, _create)
    _c10d._new_process_group_helper = _new_process_group_helper
