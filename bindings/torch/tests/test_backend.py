"""test_backend.py: weft_torch through torch.distributed, checked against locally computed
results on real rank processes. TAP, one line per scenario:

  - every init method (env://, file://, tcp://);
  - every collective PyTorch routes to a backend, on 3 ranks: broadcast, all_reduce (every
    weft dtype, complex, SUM/PRODUCT/MIN/MAX/AVG, non-contiguous), all_reduce_coalesced,
    reduce, all_gather, _all_gather_base, all_gather_coalesced, gather, scatter,
    reduce_scatter, _reduce_scatter_base, all_to_all, all_to_all_single with split sizes,
    send/recv, isend/irecv, barrier; unsupported dtype / op errors name what is wrong;
  - async_op=True: the Work completes by itself and its Future carries the result;
  - registered tensors (weft_torch.register) and DDP with registered_allreduce_hook;
  - subgroups (weft_comm_split): new_group, non-members, several groups at once;
  - a rank that never joins a collective: the others raise within init_process_group's timeout,
    with weft's message;
  - a rank that dies: the survivor raises an exception naming it.
Usage: /usr/bin/python3 test_backend.py  (weft_torch on PYTHONPATH)."""
import copy
import faulthandler
import os
import sys
import tempfile
import time
import traceback
from datetime import timedelta

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.nn.parallel import DistributedDataParallel as DDP

import weft_torch  # noqa: F401


def init(rank, world, method, timeout=30):
    if method == "env":
        dist.init_process_group("weft", rank=rank, world_size=world, timeout=timedelta(seconds=timeout))
    else:
        dist.init_process_group("weft", init_method=method, rank=rank, world_size=world,
                                timeout=timedelta(seconds=timeout))


def expect_equal(what, got, want):
    if not torch.equal(got, want):
        raise AssertionError("%s: got %s, want %s" % (what, got.flatten()[:8], want.flatten()[:8]))


def expect_raises(what, fn, *needles):
    try:
        fn()
    except RuntimeError as e:
        for n in needles:
            if n not in str(e):
                raise AssertionError("%s: message lacks %r: %s" % (what, n, e))
        return str(e)
    raise AssertionError("%s: no exception" % what)


# ---- scenarios (each runs on every rank) -------------------------------------------------

def scenario_init_method(rank, world, method):
    init(rank, world, method)
    t = torch.full((5,), float(rank + 1))
    dist.all_reduce(t)
    expect_equal("all_reduce after %s" % method, t, torch.full((5,), float(world * (world + 1) // 2)))


REDUCE_DTYPES = [torch.int8, torch.uint8, torch.int32, torch.int64, torch.float16, torch.bfloat16,
                 torch.float32, torch.float64]


def check_all_reduce(rank, world):
    n_sum = world * (world + 1) // 2
    for dt in REDUCE_DTYPES:
        for op, want in ((dist.ReduceOp.SUM, n_sum), (dist.ReduceOp.MAX, world), (dist.ReduceOp.MIN, 1),
                         (dist.ReduceOp.PRODUCT, 2 ** (world // 2)), (dist.ReduceOp.AVG, n_sum // world)):
            v = (rank % 2 + 1) if op == dist.ReduceOp.PRODUCT else rank + 1
            t = torch.full((37,), v, dtype=dt)
            dist.all_reduce(t, op=op)
            expect_equal("all_reduce %s %s" % (dt, op), t, torch.full((37,), want, dtype=dt))
    c = torch.full((4,), complex(rank, 1), dtype=torch.complex64)
    dist.all_reduce(c)
    expect_equal("all_reduce complex", c, torch.full((4,), complex(n_sum - world, world), dtype=torch.complex64))
    nc = torch.arange(12, dtype=torch.float32).reshape(3, 4).t()  # not contiguous
    dist.all_reduce(nc)
    expect_equal("all_reduce non-contiguous", nc, torch.arange(12, dtype=torch.float32).reshape(3, 4).t() * world)
    ts = [torch.full((3,), float(rank)), torch.full((2, 2), 1.0)]
    dist.all_reduce_coalesced(ts)
    expect_equal("all_reduce_coalesced 0", ts[0], torch.full((3,), float(world * (world - 1) // 2)))
    expect_equal("all_reduce_coalesced 1", ts[1], torch.full((2, 2), float(world)))


def check_rooted(rank, world):
    t = torch.full((7,), rank, dtype=torch.int32) if rank == 1 else torch.zeros(7, dtype=torch.int32)
    dist.broadcast(t, src=1)
    expect_equal("broadcast", t, torch.full((7,), 1, dtype=torch.int32))
    b = torch.tensor([rank % 2 == 0, True])
    dist.broadcast(b, src=1)
    expect_equal("broadcast bool", b, torch.tensor([False, True]))
    t = torch.full((7,), float(rank + 1))
    dist.reduce(t, dst=2, op=dist.ReduceOp.MAX)
    if rank == 2:
        expect_equal("reduce", t, torch.full((7,), float(world)))
    g = [torch.zeros(3) for _ in range(world)] if rank == 0 else None
    dist.gather(torch.full((3,), float(rank)), gather_list=g, dst=0)
    if rank == 0:
        for r in range(world):
            expect_equal("gather %d" % r, g[r], torch.full((3,), float(r)))
    out = torch.zeros(2, dtype=torch.float64)
    s = [torch.full((2,), float(10 + r), dtype=torch.float64) for r in range(world)] if rank == 1 else None
    dist.scatter(out, scatter_list=s, src=1)
    expect_equal("scatter", out, torch.full((2,), float(10 + rank), dtype=torch.float64))


def check_gathers(rank, world):
    outs = [torch.zeros(4, dtype=torch.bfloat16) for _ in range(world)]
    dist.all_gather(outs, torch.full((4,), rank, dtype=torch.bfloat16))
    for r in range(world):
        expect_equal("all_gather %d" % r, outs[r], torch.full((4,), r, dtype=torch.bfloat16))
    flat = torch.zeros(world * 3)
    dist._all_gather_base(flat, torch.full((3,), float(rank)))
    expect_equal("_all_gather_base", flat, torch.arange(world).float().repeat_interleave(3))
    lists = [[torch.zeros(2), torch.zeros(1)] for _ in range(world)]
    dist.all_gather_coalesced(lists, [torch.full((2,), float(rank)), torch.tensor([rank * 7.0])])
    for r in range(world):
        expect_equal("all_gather_coalesced %d" % r, lists[r][1], torch.tensor([r * 7.0]))
    rs = torch.zeros(3)
    dist.reduce_scatter(rs, [torch.full((3,), float(rank + p)) for p in range(world)])
    expect_equal("reduce_scatter", rs, torch.full((3,), float(world * rank + world * (world - 1) // 2)))
    rsb = torch.zeros(2, dtype=torch.float64)
    dist._reduce_scatter_base(rsb, torch.arange(2 * world, dtype=torch.float64))
    expect_equal("_reduce_scatter_base", rsb, torch.arange(2 * rank, 2 * rank + 2, dtype=torch.float64) * world)


def check_all_to_all(rank, world):
    ins = [torch.full((p + 1,), float(10 * rank + p)) for p in range(world)]
    outs = [torch.zeros(rank + 1) for _ in range(world)]
    dist.all_to_all(outs, ins)
    for p in range(world):
        expect_equal("all_to_all from %d" % p, outs[p], torch.full((rank + 1,), float(10 * p + rank)))
    # all_to_all_single with split sizes: rank r sends p + 1 rows of 2 to rank p.
    inp = torch.cat([torch.full((p + 1, 2), float(10 * rank + p)) for p in range(world)])
    out = torch.zeros((rank + 1) * world, 2)
    dist.all_to_all_single(out, inp, output_split_sizes=[rank + 1] * world,
                           input_split_sizes=[p + 1 for p in range(world)])
    want = torch.cat([torch.full((rank + 1, 2), float(10 * p + rank)) for p in range(world)])
    expect_equal("all_to_all_single with splits", out, want)
    eq = torch.arange(world * 2, dtype=torch.int32) + 100 * rank
    eo = torch.zeros(world * 2, dtype=torch.int32)
    dist.all_to_all_single(eo, eq)
    expect_equal("all_to_all_single", eo, torch.tensor([100 * p + 2 * rank + i for p in range(world) for i in range(2)],
                                                       dtype=torch.int32))


def check_p2p(rank, world):
    nxt, prv = (rank + 1) % world, (rank - 1) % world
    if rank % 2 == 0:
        dist.send(torch.full((5,), float(rank)), nxt)
        r = torch.zeros(5)
        dist.recv(r, prv)
    else:
        r = torch.zeros(5)
        dist.recv(r, prv)
        dist.send(torch.full((5,), float(rank)), nxt)
    expect_equal("send/recv", r, torch.full((5,), float(prv)))
    if rank == 0:
        w = dist.isend(torch.tensor([42]), 1)
        w.wait()
    elif rank == 1:
        r = torch.zeros(1, dtype=torch.int64)
        dist.irecv(r, 0).wait()
        expect_equal("isend/irecv", r, torch.tensor([42]))
    dist.barrier()


def check_errors(rank, world):
    expect_raises("bool sum", lambda: dist.all_reduce(torch.tensor([True])), "weft", "bool")
    expect_raises("BAND", lambda: dist.all_reduce(torch.ones(2, dtype=torch.int32), op=dist.ReduceOp.BAND),
                  "weft", "BAND")
    expect_raises("any source", lambda: dist.recv(torch.zeros(1)), "weft", "any source")
    t = torch.ones(3)
    dist.all_reduce(t)  # the group still works after rejected calls
    expect_equal("all_reduce after errors", t, torch.full((3,), float(world)))


def scenario_collectives(rank, world, method):
    init(rank, world, method)
    for check in (check_all_reduce, check_rooted, check_gathers, check_all_to_all, check_p2p, check_errors):
        check(rank, world)


def scenario_async(rank, world, method):
    init(rank, world, method)
    big = torch.full((4 << 20,), float(rank + 1))  # 16 MiB
    work = dist.all_reduce(big, async_op=True)
    fut = work.get_future()
    a = torch.randn(256, 256)
    for _ in range(10):
        a = torch.tanh(a @ a)  # compute while the all-reduce runs on weft's stream
    work.wait()
    if not work.is_completed() or not work.is_success():
        raise AssertionError("work not complete after wait")
    expect_equal("async all_reduce", big, torch.full((4 << 20,), float(world * (world + 1) // 2)))
    expect_equal("future value", fut.wait()[0], big)
    works = [dist.all_reduce(torch.ones(10) * i, async_op=True) for i in range(20)]
    for i, w in enumerate(works):
        w.wait()


def scenario_registered(rank, world, method):
    """weft_torch.register: an in-place all-reduce on registered tensors is right; DDP with
    registered_allreduce_hook trains exactly as DDP without it."""
    init(rank, world, method)
    n = 1 << 20
    t = torch.full((n,), float(rank + 1))
    reg = weft_torch.register(t)
    dist.all_reduce(t)
    expect_equal("all_reduce on registered tensors", t, torch.full((n,), float(world * (world + 1) // 2)))
    reg.deregister()
    dist.all_reduce(t)  # unregistered again on every rank
    expect_equal("all_reduce after deregister", t, torch.full((n,), float(world * world * (world + 1) // 2)))
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.ReLU(), torch.nn.Linear(512, 256))
    ref = copy.deepcopy(model)
    hooked = DDP(model, bucket_cap_mb=0.25)
    hooked.register_comm_hook(None, weft_torch.registered_allreduce_hook)
    plain = DDP(ref, bucket_cap_mb=0.25)
    opts = [torch.optim.SGD(m.parameters(), lr=0.1) for m in (hooked, plain)]
    gen = torch.Generator().manual_seed(rank)
    for _ in range(3):
        x = torch.randn(16, 256, generator=gen)
        for m, o in zip((hooked, plain), opts):
            o.zero_grad()
            m(x).square().mean().backward()
            o.step()
    for p, q in zip(model.parameters(), ref.parameters()):
        if not torch.allclose(p, q, rtol=1e-5, atol=1e-6):
            raise AssertionError("DDP with the registered hook diverged: max diff %g" % (p - q).abs().max())
    if not weft_torch._hook_registrations:
        raise AssertionError("the hook registered no bucket")


def scenario_subgroups(rank, world, method):
    init(rank, world, method)
    g12 = dist.new_group([1, 2])
    g03 = dist.new_group([0, 3])
    t = torch.full((3,), float(rank))
    if rank in (1, 2):
        dist.all_reduce(t, group=g12)
        expect_equal("all_reduce on [1, 2]", t, torch.full((3,), 3.0))
        if dist.get_rank(g12) != rank - 1 or dist.get_world_size(g12) != 2:
            raise AssertionError("group rank %d size %d" % (dist.get_rank(g12), dist.get_world_size(g12)))
    else:
        dist.broadcast(t, src=3, group=g03)  # global rank 3 is the root
        expect_equal("broadcast on [0, 3]", t, torch.full((3,), 3.0))
    # new_subgroups(_by_enumeration) need CUDA in 1.13: the same groups by hand.
    pairs = [dist.new_group([0, 2]), dist.new_group([1, 3])]
    sub = pairs[rank % 2]
    u = torch.ones(2)
    dist.all_reduce(u, group=sub)
    expect_equal("all_reduce on new_subgroups", u, torch.full((2,), 2.0))
    whole = dist.new_group()
    v = torch.ones(1)
    dist.all_reduce(v, group=whole)
    expect_equal("all_reduce on new_group()", v, torch.full((1,), float(world)))
    dist.barrier()


def scenario_timeout(rank, world, method):
    init(rank, world, method, timeout=2)
    if rank == 1:
        time.sleep(8)  # never joins: rank 0 must give up after ~2 s, not hang
        return
    t0 = time.time()
    msg = expect_raises("all_reduce with a silent peer", lambda: dist.all_reduce(torch.ones(4)), "weft")
    took = time.time() - t0
    if took > 7:
        raise AssertionError("the timeout took %.1f s: %s" % (took, msg))
    os._exit(0)  # skip destroy: the peer is not coming


def scenario_peer_dies(rank, world, method):
    init(rank, world, method)
    dist.barrier()
    if rank == 1:
        os._exit(0)
    time.sleep(0.5)
    expect_raises("all_reduce with a dead peer", lambda: dist.all_reduce(torch.ones(4)), "weft", "rank 1")
    os._exit(0)


# ---- driver ---------------------------------------------------------------------------------

def worker(rank, world, scenario, method, port):
    # A rank stuck for 100 s prints where it is and exits, so a hang fails the run, never blocks it.
    faulthandler.dump_traceback_later(100, exit=True)
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    torch.set_num_threads(1)
    try:
        scenario(rank, world, method)
        if dist.is_initialized():
            dist.destroy_process_group()
    except Exception:
        traceback.print_exc()
        sys.stderr.write("# rank %d failed\n" % rank)
        sys.stderr.flush()
        os._exit(1)


def run(name, scenario, world, method_kind):
    tmp = tempfile.mkdtemp(prefix="weft-torch-")
    port = 29600 + (os.getpid() * 7 + hash(name)) % 2000
    method = {"env": "env", "file": "file://" + os.path.join(tmp, "store"),
              "tcp": "tcp://127.0.0.1:%d" % (port + 1)}[method_kind]
    try:
        mp.start_processes(worker, args=(world, scenario, method, port), nprocs=world, start_method="spawn")
        ok = True
    except Exception as e:
        sys.stderr.write("# %s: %s\n" % (name, e))
        ok = False
    return ok


SCENARIOS = [
    ("init_method_env_all_reduce_on_2_ranks", scenario_init_method, 2, "env"),
    ("init_method_file_all_reduce_on_2_ranks", scenario_init_method, 2, "file"),
    ("init_method_tcp_all_reduce_on_2_ranks", scenario_init_method, 2, "tcp"),
    ("every_collective_dtype_and_op_on_3_ranks", scenario_collectives, 3, "file"),
    ("async_op_work_and_future_complete_on_2_ranks", scenario_async, 2, "file"),
    ("registered_tensors_and_the_ddp_hook_on_2_ranks", scenario_registered, 2, "file"),
    ("subgroups_by_comm_split_on_4_ranks", scenario_subgroups, 4, "env"),
    ("silent_peer_raises_within_the_init_timeout", scenario_timeout, 2, "file"),
    ("dead_peer_raises_naming_it", scenario_peer_dies, 2, "file"),
]

if __name__ == "__main__":
    only = sys.argv[1:]
    todo = [s for s in SCENARIOS if not only or any(o in s[0] for o in only)]
    print("1..%d" % len(todo), flush=True)
    failed = 0
    for i, (name, fn, world, method) in enumerate(todo, 1):
        t0 = time.time()
        ok = run(name, fn, world, method)
        failed += not ok
        print("%s %d - %s (%.1f s)" % ("ok" if ok else "not ok", i, name, time.time() - t0), flush=True)
    sys.exit(1 if failed else 0)
