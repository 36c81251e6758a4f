#!/usr/bin/python3
"""trainers/bench/torch_gpt.py: the reference GPT of trainers/gpt.h in PyTorch, trained with
DistributedDataParallel over Gloo on the CPU: the peer `make bench-trainers` measures
weft-train-ddp against (weft issue 6).

Same model as gpt.h: token + position embeddings, L pre-LayerNorm blocks (causal multi-head
attention, 4d GELU-tanh MLP), final LayerNorm, LM head tied to the token embedding;
character-level vocabulary = the distinct bytes of the text in byte order; GPT-2 init
(N(0, 0.02), proj/fcproj N(0, 0.02/sqrt(2L)), biases 0, LayerNorm weights 1); AdamW
(lr 3e-4, betas 0.9/0.95, eps 1e-8, weight decay 0.1 on matrices and embeddings only),
global-norm clipping at 1.0; B random windows of T+1 tokens per rank and step.

Launch: one process per rank, with torchrun's environment set by hand (Debian 12's torchrun
script fails on Python 3.11): RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT.
Each rank runs on one thread: torch.set_num_threads(1), and OPENBLAS_NUM_THREADS=1 /
OMP_NUM_THREADS=1 in its environment (run.sh sets them; this script sets them too when
absent, before torch loads OpenBLAS). OpenBLAS's kernels are chosen as weft's trainers
choose them (trainers/blas_core.h): run as a script, on a CPU with AVX-512 where OpenBLAS
falls back to AVX2 kernels, it re-executes itself once with OPENBLAS_CORETYPE=SkylakeX; on
AMD's Zen 4 (family 25 with AVX-512, which it runs in 256-bit halves) where OpenBLAS picks
AVX-512 kernels, with OPENBLAS_CORETYPE=Haswell.

Output (rank 0): a header naming the BLAS and its core ("blas OpenBLAS 0.3.21 core SkylakeX
(chosen by weft: ...)"), one line per step, then
    # torch summary: backend NAME ranks R tokens/s X mfu Y median_step_ms Z warmup W steps S
tokens/s from the median step time of the steps after the warm-up; MFU with the FLOPs
formula of gpt_flops_per_token (6N + 12LHQT, PaLM appendix B) and the per-rank peak given
by --peak-gflops (run.sh passes the one weft-train-ddp measured, so both use one peak).
"""
import argparse
import ctypes
import math
import os
import sys
import time

for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

# The OpenBLAS core choice of weft's trainers (trainers/blas_core.h), so that both sides of
# the comparison run the same kernels: Debian's torch does its fp32 matrix products in
# the same libopenblas.so.0 (through libblas.so.3), which picks its kernels when it loads.
BLAS_MARKER = "WEFT_BLAS_DETECTED"
AVX512_CORES = ("skylakex", "cooperlake", "sapphirerapids")
SKYLAKEX_FLAGS = {"avx512f", "avx512cd", "avx512bw", "avx512dq", "avx512vl"}


def openblas(lib):
    """(config, corename) of a loaded OpenBLAS, or None when lib is not one."""
    try:
        cfg, core = lib.openblas_get_config, lib.openblas_get_corename
    except AttributeError:
        return None
    cfg.restype = core.restype = ctypes.c_char_p
    return cfg().decode(errors="replace"), core().decode(errors="replace")


def cpu_info():
    """(flags, vendor_id, cpu family) of the first CPU in /proc/cpuinfo."""
    flags, vendor, family = set(), "", -1
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                key, _, value = line.partition(":")
                key = key.strip()
                if key == "flags":
                    flags = set(value.split())
                    break
                if key == "vendor_id":
                    vendor = value.strip()
                elif key == "cpu family":
                    family = int(value)
    except (OSError, ValueError):
        pass
    return flags, vendor, family


def choose_openblas_core():
    """gpt_blas_choose: on a CPU with AVX-512 F, CD, BW, DQ and VL under a DYNAMIC_ARCH
    OpenBLAS, re-execute once with OPENBLAS_CORETYPE=Haswell when the CPU runs AVX-512 in
    256-bit halves (AMD family 25) and OpenBLAS picked AVX-512 kernels, or with SkylakeX when
    it does not and OpenBLAS fell back to others (the library reads the variable only when
    it loads); a user's OPENBLAS_CORETYPE and the marker win."""
    if "OPENBLAS_CORETYPE" in os.environ or BLAS_MARKER in os.environ:
        return
    try:
        got = openblas(ctypes.CDLL("libopenblas.so.0"))
    except OSError:
        return
    flags, vendor, family = cpu_info()
    if not got or "DYNAMIC_ARCH" not in got[0] or not SKYLAKEX_FLAGS <= flags:
        return
    halves = vendor == "AuthenticAMD" and family == 25
    avx512 = got[1].lower() in AVX512_CORES
    if halves and avx512:
        core = "Haswell"
    elif not halves and not avx512:
        core = "SkylakeX"
    else:
        return
    os.environ[BLAS_MARKER] = got[1]
    os.environ["OPENBLAS_CORETYPE"] = core
    sys.stdout.flush()
    try:
        os.execv(sys.executable, [sys.executable] + sys.argv)
    except OSError as e:
        print("# torch_gpt: re-executing with OPENBLAS_CORETYPE=%s failed: %s" % (core, e), file=sys.stderr)
        del os.environ[BLAS_MARKER], os.environ["OPENBLAS_CORETYPE"]


if __name__ == "__main__":  # not when a test imports the model: its process keeps its kernels
    choose_openblas_core()

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402


class Block(nn.Module):
    def __init__(self, d, heads):
        super().__init__()
        self.heads = heads
        self.ln1 = nn.LayerNorm(d, eps=1e-5)
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)
        self.ln2 = nn.LayerNorm(d, eps=1e-5)
        self.fc = nn.Linear(d, 4 * d)
        self.fcproj = nn.Linear(4 * d, d)

    def attention(self, x, mask):
        B, T, d = x.shape
        H = self.heads
        q, k, v = self.qkv(x).split(d, dim=2)
        q = q.view(B, T, H, d // H).transpose(1, 2)
        k = k.view(B, T, H, d // H).transpose(1, 2)
        v = v.view(B, T, H, d // H).transpose(1, 2)
        s = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(d // H))
        p = F.softmax(s.masked_fill(mask[:T, :T], float("-inf")), dim=-1)
        y = (p @ v).transpose(1, 2).reshape(B, T, d)
        return self.proj(y)

    def forward(self, x, mask):
        x = x + self.attention(self.ln1(x), mask)
        return x + self.fcproj(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))


class GPT(nn.Module):
    def __init__(self, vocab, seq, layers, d, heads):
        super().__init__()
        self.wte = nn.Embedding(vocab, d)
        self.wpe = nn.Embedding(seq, d)
        self.blocks = nn.ModuleList([Block(d, heads) for _ in range(layers)])
        self.lnf = nn.LayerNorm(d, eps=1e-5)
        # A plain attribute, not a buffer: Gloo cannot broadcast bool tensors, and it is a constant.
        self.mask = torch.triu(torch.ones(seq, seq, dtype=torch.bool), 1)
        self.init_weights(layers)

    def init_weights(self, layers):
        resid_std = 0.02 / math.sqrt(2.0 * layers)
        for name, p in self.named_parameters():
            if name.startswith("lnf") or ".ln" in name:
                nn.init.ones_(p) if name.endswith("weight") else nn.init.zeros_(p)
            elif name.endswith("bias"):
                nn.init.zeros_(p)
            else:
                std = resid_std if ("proj.weight" in name) else 0.02  # proj and fcproj
                nn.init.normal_(p, 0.0, std)

    def forward(self, idx, targets):
        T = idx.shape[1]
        x = self.wte(idx) + self.wpe.weight[:T]
        for blk in self.blocks:
            x = blk(x, self.mask)
        logits = self.lnf(x) @ self.wte.weight.t()  # tied head
        return F.cross_entropy(logits.view(-1, logits.shape[-1]), targets.reshape(-1))


def nonembedding_params(vocab, layers, d):
    """N of gpt_num_params_nonembedding: every parameter but wpe (wte counts once)."""
    block = 2 * d + 3 * d * d + 3 * d + d * d + d + 2 * d + 4 * d * d + 4 * d + 4 * d * d + d
    return vocab * d + layers * block + 2 * d


def flops_per_token(vocab, seq, layers, d, heads):
    """gpt_flops_per_token: 6N + 12 L H Q T (PaLM appendix B)."""
    return 6.0 * nonembedding_params(vocab, layers, d) + 12.0 * layers * heads * (d / heads) * seq


def parse():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data", required=True)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--dmodel", type=int, default=256)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--batch", type=int, default=16, help="sequences per rank and step")
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=3, help="steps left out of tokens/s")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--backend", default="gloo",
                    help="torch.distributed backend: gloo, or weft (weft_torch on PYTHONPATH)")
    ap.add_argument("--peak-gflops", type=float, default=0.0, help="per-rank peak for MFU (0: no MFU)")
    ap.add_argument("--weft-register", action="store_true",
                    help="with --backend weft: DDP's buckets registered (weft_torch.registered_allreduce_hook)")
    return ap.parse_args()


def load(path):
    raw = open(path, "rb").read()
    chars = sorted(set(raw))
    index = bytearray(256)
    for i, c in enumerate(chars):
        index[c] = i
    data = torch.frombuffer(bytearray(raw.translate(bytes(index))), dtype=torch.uint8).long()
    return data[: int(len(data) * 0.9)], len(chars)


def batch(train, B, T, gen):
    off = torch.randint(0, len(train) - T, (B,), generator=gen)
    w = torch.stack([train[o : o + T + 1] for o in off.tolist()])
    return w[:, :T].contiguous(), w[:, 1:].contiguous()


def make_optimizer(model):
    decay = [p for n, p in model.named_parameters() if p.dim() == 2]  # matrices and embeddings
    rest = [p for n, p in model.named_parameters() if p.dim() != 2]
    groups = [{"params": decay, "weight_decay": 0.1}, {"params": rest, "weight_decay": 0.0}]
    return torch.optim.AdamW(groups, lr=3e-4, betas=(0.9, 0.95), eps=1e-8, foreach=True)


def main():
    a = parse()
    torch.set_num_threads(1)
    torch.set_num_interop_threads(1)
    rank, world = int(os.environ.get("RANK", "0")), int(os.environ.get("WORLD_SIZE", "1"))
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29511")
    if a.backend == "weft":
        import weft_torch  # noqa: F401  (registers the backend)
    dist.init_process_group(a.backend, rank=rank, world_size=world)
    train, vocab = load(a.data)
    torch.manual_seed(a.seed)
    model = GPT(vocab, a.seq, a.layers, a.dmodel, a.heads)
    ddp = nn.parallel.DistributedDataParallel(model)  # broadcasts rank 0's parameters
    if a.weft_register and a.backend == "weft":
        ddp.register_comm_hook(None, weft_torch.registered_allreduce_hook)
    opt = make_optimizer(model)
    gen = torch.Generator().manual_seed(a.seed * 1000 + rank)
    fpt = flops_per_token(vocab, a.seq, a.layers, a.dmodel, a.heads)
    tokens = a.batch * a.seq * world
    if rank == 0:
        print("# torch %s DDP %s: %d ranks, blas %s, %d thread(s) per rank, vocab %d" %
              (torch.__version__, a.backend, world, blas_name(), torch.get_num_threads(), vocab))
        print("# model: layers %d dmodel %d heads %d seq %d, batch %d per rank, %.3f MFLOP/token" %
              (a.layers, a.dmodel, a.heads, a.seq, a.batch, fpt / 1e6))
        print("%6s %10s %9s %9s" % ("step", "loss", "ms", "tok/s"))
    times = []
    for step in range(1, a.steps + 1):
        x, y = batch(train, a.batch, a.seq, gen)
        t0 = time.perf_counter()
        loss = ddp(x, y)
        opt.zero_grad(set_to_none=True)
        loss.backward()  # DDP all-reduces gradient buckets during it and waits at its end
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        dt = time.perf_counter() - t0
        times.append(dt)
        if rank == 0:
            print("%6d %10.6f %9.1f %9.0f" % (step, loss.item(), dt * 1e3, tokens / dt), flush=True)
    steady = sorted(times[a.warmup:] or times)
    med = steady[len(steady) // 2]
    tps = tokens / med
    mfu = fpt * tps / (world * a.peak_gflops * 1e9) if a.peak_gflops > 0 else float("nan")
    if rank == 0:
        print("# torch summary: backend %s ranks %d tokens/s %.1f mfu %.4f median_step_ms %.2f warmup %d steps %d" %
              (a.backend, world, tps, mfu, med * 1e3, a.warmup, a.steps), flush=True)
    dist.barrier()
    dist.destroy_process_group()


def blas_name():
    """Which BLAS torch's process mapped (reference BLAS makes the comparison meaningless),
    and for OpenBLAS its version and core, said as weft's trainers say it (blas_core.c)."""
    try:
        maps = open("/proc/self/maps").read()
    except OSError:
        return "unknown"
    for name in ("openblas", "libmkl", "blis", "libblas.so"):
        if name in maps:
            break
    else:
        return "unknown"
    if name != "openblas":
        return name
    path = next(l.split()[-1] for l in maps.splitlines() if "libopenblas" in l)
    got = openblas(ctypes.CDLL(path))
    if not got:
        return name
    version, core = " ".join(got[0].split()[:2]), got[1]
    env, marker = os.environ.get("OPENBLAS_CORETYPE"), os.environ.get(BLAS_MARKER)
    if env is not None and marker is not None and env.lower() == "skylakex":
        why = "chosen by weft: OpenBLAS picked %s, the CPU has AVX-512" % marker
    elif env is not None and marker is not None and env.lower() == "haswell":
        why = ("chosen by weft: OpenBLAS picked %s, the CPU runs AVX-512 in 256-bit halves and the AVX2 kernels "
               "are faster there" % marker)
    elif env is not None:
        why = "OPENBLAS_CORETYPE=%s in the environment" % env
    else:
        why = "OpenBLAS's own choice"
    return "%s core %s (%s)" % (version, core, why)


if __name__ == "__main__":
    sys.exit(main())
