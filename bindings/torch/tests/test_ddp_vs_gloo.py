"""test_ddp_vs_gloo.py: DistributedDataParallel on weft against DDP on gloo.

The GPT of trainers/bench/torch_gpt.py (small: 2 layers, d 64, T 32), same seed, same
batches (random windows of the given text, or of a synthetic one), AdamW with clipping, 6
steps on 2 ranks, once with backend "gloo" and once with "weft". DDP averages gradients
the same way on both (sum of the gradients divided by the world size), so the parameters
must agree to fp32 rounding; they are compared element by element (max |diff| reported,
and whether they are bitwise equal). TAP.

Usage: /usr/bin/python3 test_ddp_vs_gloo.py TORCH_GPT_PY [TEXT]   (weft_torch on PYTHONPATH)
"""
import faulthandler
import importlib.util
import os
import sys
import tempfile

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

import weft_torch  # noqa: F401

STEPS, LAYERS, D, HEADS, T, B = 6, 2, 64, 4, 32, 4


def load_gpt(path):
    spec = importlib.util.spec_from_file_location("torch_gpt", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def text_tokens(path):
    raw = open(path, "rb").read() if path and os.path.exists(path) else \
        bytes((i * 7 + (i // 13) * 3) % 64 + 32 for i in range(100000))
    chars = sorted(set(raw))
    index = bytearray(256)
    for i, c in enumerate(chars):
        index[c] = i
    return torch.frombuffer(bytearray(raw.translate(bytes(index))), dtype=torch.uint8).long(), len(chars)


def worker(rank, backend, gpt_path, text, store, out):
    faulthandler.dump_traceback_later(200, exit=True)  # a hang fails the run instead of blocking it
    torch.set_num_threads(1)
    dist.init_process_group(backend, init_method="file://" + store, rank=rank, world_size=2)
    g = load_gpt(gpt_path)
    data, vocab = text_tokens(text)
    torch.manual_seed(1)
    model = g.GPT(vocab, T, LAYERS, D, HEADS)
    ddp = torch.nn.parallel.DistributedDataParallel(model)
    opt = g.make_optimizer(model)
    gen = torch.Generator().manual_seed(1000 + rank)
    for _ in range(STEPS):
        x, y = g.batch(data, B, T, gen)
        loss = ddp(x, y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
    flat = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
    torch.save(flat, "%s.%d" % (out, rank))
    dist.barrier()
    dist.destroy_process_group()


def train(backend, gpt_path, text, tmp):
    out = os.path.join(tmp, backend)
    mp.start_processes(worker, args=(backend, gpt_path, text, os.path.join(tmp, backend + ".store"), out),
                       nprocs=2, start_method="spawn")
    return torch.load(out + ".0"), torch.load(out + ".1")


if __name__ == "__main__":
    gpt_path, text = sys.argv[1], sys.argv[2] if len(sys.argv) > 2 else ""
    tmp = tempfile.mkdtemp(prefix="weft-ddp-")
    print("1..2", flush=True)
    g0, g1 = train("gloo", gpt_path, text, tmp)
    w0, w1 = train("weft", gpt_path, text, tmp)
    same_ranks = torch.equal(w0, w1)
    print("%s 1 - DDP on weft leaves both ranks with identical parameters (%d values)" %
          ("ok" if same_ranks else "not ok", w0.numel()), flush=True)
    diff = (w0 - g0).abs().max().item()
    scale = g0.abs().max().item()
    ok = torch.allclose(w0, g0, rtol=1e-5, atol=1e-6 * scale)
    print("%s 2 - DDP on weft equals DDP on gloo after %d steps: max |diff| %.3g (max |param| %.3g), %s" %
          ("ok" if ok else "not ok", STEPS, diff, scale, "bitwise equal" if torch.equal(w0, g0) else "not bitwise"),
          flush=True)
    sys.exit(0 if same_ranks and ok else 1)
