"""weft_torch: weft as a torch.distributed backend (PyTorch 1.13).

    import weft_torch                      # registers backend "weft"
    torch.distributed.init_process_group("weft", init_method="env://", timeout=...)

Any init method works (env://, file://, tcp://): the unique id travels through the store
PyTorch hands the backend. Subgroups (dist.new_group, new_subgroups) are children of the
default weft group made by weft_comm_split, when the default group is weft: every rank
enters new_group (PyTorch requires it), members with one color, the others with
WEFT_SPLIT_NOCOLOR, so no second rendezvous is needed. Otherwise (a weft group under a
gloo default group) the subgroup makes its own unique id through the store.

Registered buffers (weft_comm_register, as ncclCommRegister): weft_torch.register(tensor)
on every rank makes that group's collectives on the tensor run weft's direct algorithm within
a host; weft_torch.registered_allreduce_hook does it for DDP's gradient buckets:

    ddp_model.register_comm_hook(None, weft_torch.registered_allreduce_hook)
"""
import inspect
import threading

import torch.distributed as dist
import torch.distributed.distributed_c10d as _c10d

from . import _C

__all__ = ["BACKEND", "weft_version", "Registration", "register", "registered_allreduce_hook"]

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


def _weft_group(group):
    pg = group if group is not None else _c10d._get_default_group()
    if not _C.is_weft(pg):
        raise RuntimeError("weft: register: the group is not a weft process group")
    return pg


class Registration:
    """A tensor registered with a weft group (weft_comm_register, as ncclCommRegister): this
    rank's only, no collective. Collectives of that group whose tensors every rank
    registered run weft's direct algorithm within a host (peers read and write them in
    place: 2 ranks, 16 MiB all-reduce 3-4x faster than unregistered on the development VM).
    Every rank must pass registered tensors to a call or none (else the call raises). Until
    deregister(), the tensor must stay where it is (the Registration holds a reference) and a
    process forked meanwhile shares its pages. A no-op off a host (sockets) or for one rank."""

    def __init__(self, tensor, group=None):
        self.group = _weft_group(group)
        self.tensor = tensor
        self.data_ptr = tensor.data_ptr()
        self.nbytes = tensor.numel() * tensor.element_size()
        self._handle = _C.register_tensor(self.group, tensor)

    def deregister(self):
        """Ends the registration; call it when no operation on the tensor is in flight."""
        if self._handle:
            _C.deregister_tensor(self.group, self._handle)
            self._handle = 0
            self.tensor = None


def register(tensor, group=None):
    """Registers a contiguous CPU tensor with group (default: the default group); see
    Registration."""
    return Registration(tensor, group)


_hook_registrations = {}  # (id of the group, bucket index) -> Registration


def registered_allreduce_hook(process_group, bucket):
    """A DDP communication hook: PyTorch's allreduce_hook (the bucket averaged over the group),
    with each bucket's flat buffer registered with weft first, so its all-reduce runs direct:
    ddp_model.register_comm_hook(None, weft_torch.registered_allreduce_hook). Every rank
    registers bucket i's buffer when it first sees it or sees it at a new address (DDP
    rebuilds its buckets after the first iteration, alike on every rank), so every rank
    passes a registered buffer to every call."""
    group = process_group if process_group is not None else _c10d._get_default_group()
    buf = bucket.buffer()
    key = (id(group), bucket.index())
    reg = _hook_registrations.get(key)
    nbytes = buf.numel() * buf.element_size()
    if reg is None or reg.data_ptr != buf.data_ptr() or reg.nbytes != nbytes:
        if reg is not None:
            reg.deregister()
        _hook_registrations[key] = Registration(buf, group)
    buf.div_(group.size())
    fut = dist.all_reduce(buf, group=group, async_op=True).get_future()
    return fut.then(lambda f: f.value()[0])


if BACKEND.upper() not in dist.Backend._plugins:
    dist.Backend.register_backend(BACKEND, _create)
    _c10d._new_process_group_helper = _new_process_group_helper
