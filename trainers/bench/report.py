#!/usr/bin/python3
"""trainers/bench/report.py: the table and targets of `make bench-trainers` (weft issue 6).

    report.py DIR        (DIR holds run.sh's MODEL-rR-IMPL-ROUND.log files)

Per run: tokens/s and MFU from the median step time over the steps after the warm-up
(weft-train-ddp's and torch_gpt.py's per-step lines; both measured the same way), and for
weft the median comm and exposed comm per step. Per (model, ranks, impl): the median over
rounds. Then the ratio weft/torch, the scaling efficiency of 2 ranks over 1
(tokens/s(2) / (2 x tokens/s(1))), and PASS/MISS for each target:
  - weft DDP tokens/s >= 1.3x PyTorch's, on every model (at the largest rank count), both
    on the same OpenBLAS core (issue 20: the AVX-512 kernels where the CPU has them);
  - weft MFU >= 70% of the measured per-rank peak;
  - weft's 2-rank scaling efficiency >= 97%;
  - communication hidden behind the backward: exposed comm <= 2% of the step.
Beside the scaling target, its ceiling on this host: per round, the multi-rank run again
with --sync-only (impl "sync": the same steps and calls, one value all-reduced per bucket)
against that round's 1-rank weft run, and weft's own scaling of the round against it.
"""
import glob
import os
import re
import statistics
import sys

TARGET_RATIO, TARGET_MFU, TARGET_SCALING, TARGET_EXPOSED = 1.3, 0.70, 0.97, 0.02
HEADER = re.compile(r"# bench: impl (\w+) model (\w+) ranks (\d+) round (\d+) warmup (\d+) peak ([0-9.]+)")
FLOPS = re.compile(r"# ([0-9.]+) MFLOP/token")
WEFT_BATCH = re.compile(r"= (\d+) sequences \((\d+) tokens\) per step")
TORCH_MODEL = re.compile(r"seq (\d+), batch (\d+) per rank, ([0-9.]+) MFLOP/token")
# The OpenBLAS core each side ran: weft's "# peak per rank: ... on OpenBLAS 0.3.21 core
# SkylakeX (...)", torch_gpt.py's "blas OpenBLAS 0.3.21 core SkylakeX (...)".
CORE = re.compile(r"OpenBLAS \S+ core (\S+)")


def parse_run(path):
    """One log -> dict(impl, model, ranks, round, tps, mfu, step_ms, comm_ms, expo_ms), or None."""
    text = open(path, errors="replace").read()
    h = HEADER.search(text)
    if not h or "# bench: FAILED" in text:
        return None
    impl, model, ranks, rnd, warm, peak = h.groups()
    ranks, warm, peak = int(ranks), int(warm), float(peak)
    steps, comm, expo = [], [], []
    if impl in ("weft", "sync"):
        m, f = WEFT_BATCH.search(text), FLOPS.search(text)
        if not m or not f:
            return None
        tokens, mflop = int(m.group(2)), float(f.group(1))
        for line in text.splitlines():  # step loss gnorm ms tok/s MFU comm_ms expo_ms peakMiB
            w = line.split()
            if len(w) == 9 and w[0].isdigit() and w[5].endswith("%"):
                steps.append(float(w[3]))
                comm.append(float(w[6]))
                expo.append(float(w[7]))
    else:
        m = TORCH_MODEL.search(text)
        if not m:
            return None
        tokens, mflop = int(m.group(1)) * int(m.group(2)) * ranks, float(m.group(3))
        for line in text.splitlines():  # step loss ms tok/s
            w = line.split()
            if len(w) == 4 and w[0].isdigit():
                steps.append(float(w[2]))
    keep = slice(warm, None) if len(steps) > warm else slice(None)
    if not steps:
        return None
    step_ms = statistics.median(steps[keep])
    tps = tokens / (step_ms / 1e3)
    core = CORE.search(text)
    run = dict(impl=impl, model=model, ranks=ranks, round=int(rnd), tps=tps, step_ms=step_ms,
               mfu=mflop * 1e6 * tps / (ranks * peak * 1e9), comm_ms=None, expo_ms=None,
               core=core.group(1) if core else "?")
    if comm:
        run["comm_ms"] = statistics.median(comm[keep])
        run["expo_ms"] = statistics.median(expo[keep])
    return run


def collect(d):
    groups = {}
    for path in sorted(glob.glob(os.path.join(d, "*.log"))):
        r = parse_run(path)
        if r is None:
            print("report: %s: no usable result (failed run?), left out" % path)
            continue
        groups.setdefault((r["model"], r["ranks"], r["impl"]), []).append(r)
    out = {}
    for key, runs in groups.items():
        med = {k: statistics.median([r[k] for r in runs]) for k in ("tps", "mfu", "step_ms")}
        if runs[0]["comm_ms"] is not None:
            med["comm_ms"] = statistics.median([r["comm_ms"] for r in runs])
            med["expo_ms"] = statistics.median([r["expo_ms"] for r in runs])
        med["n"] = len(runs)
        med["by_round"] = {r["round"]: r for r in runs}
        med["cores"] = sorted({r["core"] for r in runs})
        out[key] = med
    return out


def fmt(v, spec, none="-"):
    return none if v is None else spec % v


def table(res, models, ranks):
    print("%-6s %5s | %10s %6s | %10s %6s | %6s | %7s %7s %8s | %s" %
          ("model", "ranks", "weft tok/s", "MFU", "torch tok/s", "MFU", "ratio", "comm_ms", "expo_ms",
           "expo %", "rounds"))
    for m in models:
        for r in ranks:
            w, t = res.get((m, r, "weft")), res.get((m, r, "torch"))
            ratio = w["tps"] / t["tps"] if w and t else None
            print("%-6s %5d | %10s %6s | %11s %6s | %6s | %7s %7s %8s | %s/%s" % (
                m, r, fmt(w and w["tps"], "%.0f"), fmt(w and 100 * w["mfu"], "%.1f%%"),
                fmt(t and t["tps"], "%.0f"), fmt(t and 100 * t["mfu"], "%.1f%%"), fmt(ratio, "%.2fx"),
                fmt(w and w.get("comm_ms"), "%.1f"), fmt(w and w.get("expo_ms"), "%.1f"),
                fmt(w and w.get("expo_ms") is not None and 100 * w["expo_ms"] / w["step_ms"] or None, "%.1f%%",
                    "0.0%" if w else "-"),
                w["n"] if w else 0, t["n"] if t else 0))


def scaling(res, model, impl, ranks):
    lo, hi = min(ranks), max(ranks)
    a, b = res.get((model, lo, impl)), res.get((model, hi, impl))
    if not a or not b or hi == lo:
        return None
    return b["tps"] * lo / (a["tps"] * hi)


def ceiling_rows(res, model, ranks):
    """Per round with both runs: (round, ceiling, weft) where ceiling = tokens/s of the
    multi-rank --sync-only run x lo / (hi x tokens/s of the 1-rank weft run of the same round)
    and weft = the same with weft's own multi-rank run (None where it is missing)."""
    lo, hi = min(ranks), max(ranks)
    one, sync, two = res.get((model, lo, "weft")), res.get((model, hi, "sync")), res.get((model, hi, "weft"))
    if not one or not sync or hi == lo:
        return []
    rows = []
    for rnd in sorted(set(sync["by_round"]) & set(one["by_round"])):
        base = one["by_round"][rnd]["tps"] * hi / lo
        w = two["by_round"].get(rnd) if two else None
        rows.append((rnd, sync["by_round"][rnd]["tps"] / base, w["tps"] / base if w else None))
    return rows


def ceilings(res, models, ranks):
    """The scaling ceiling of each model, round by round, and weft against it."""
    hi = max(ranks)
    shown = False
    for m in models:
        rows = ceiling_rows(res, m, ranks)
        if not rows:
            continue
        if not shown:
            print("\nscaling ceiling on this host: weft-train-ddp --sync-only on %d ranks (the same steps,"
                  " one value all-reduced per bucket)" % hi)
            print("against the 1-rank run of the same round; weft = its own %d-rank run:" % hi)
            shown = True
        per = ", ".join("round %d %.1f%%%s" % (r, 100 * c, fmt(w and 100 * w, " (weft %.1f%%)", ""))
                        for r, c, w in rows)
        cs = [c for _, c, _ in rows]
        ws = [w / c for _, c, w in rows if w is not None]
        sync = res[(m, hi, "sync")]
        print("  %-6s %s" % (m, per))
        print("  %-6s ceiling median %.1f%% (%.1f-%.1f%%), with --sync-only MFU %.1f%% and exposed %.1f ms a step;"
              " weft's scaling / ceiling %s" % (
            m, 100 * statistics.median(cs), 100 * min(cs), 100 * max(cs), 100 * sync["mfu"], sync["expo_ms"],
            "median %.2f (%.2f-%.2f)" % (statistics.median(ws), min(ws), max(ws)) if ws else "-"))


def verdict(ok):
    return "-" if ok is None else ("PASS" if ok else "MISS")


def targets(res, models, ranks):
    top = max(ranks)
    misses = 0
    print("\ntargets (weft issues 6 and 20):")
    for m in models:
        w, t = res.get((m, top, "weft")), res.get((m, top, "torch"))
        checks = []
        if w and t:
            r = w["tps"] / t["tps"]
            checks.append(("tokens/s >= %.1fx PyTorch (%d ranks)" % (TARGET_RATIO, top), "%.2fx" % r,
                           r >= TARGET_RATIO))
            cores = {c for rr in ranks for i in ("weft", "torch") for c in res.get((m, rr, i), {}).get("cores", [])}
            checks.append(("both on one OpenBLAS core", "/".join(sorted(cores)), len(cores) == 1 and "?" not in cores))
        for rr in ranks:
            x = res.get((m, rr, "weft"))
            if x:
                checks.append(("MFU >= %.0f%% of peak (%d rank%s)" % (100 * TARGET_MFU, rr, "s"[:rr > 1]),
                               "%.1f%%" % (100 * x["mfu"]), x["mfu"] >= TARGET_MFU))
        s, st = scaling(res, m, "weft", ranks), scaling(res, m, "torch", ranks)
        ceil = ceiling_rows(res, m, ranks)
        if s is not None:
            c = ", ceiling %.1f%%" % (100 * statistics.median([r[1] for r in ceil])) if ceil else ""
            checks.append(("scaling %d->%d ranks >= %.0f%%" % (min(ranks), top, 100 * TARGET_SCALING),
                           "%.1f%% (torch %s%s)" % (100 * s, fmt(st and 100 * st, "%.1f%%"), c), s >= TARGET_SCALING))
        if w and top > 1 and w.get("expo_ms") is not None:
            e = w["expo_ms"] / w["step_ms"]
            checks.append(("comm hidden: exposed <= %.0f%% of step (%d ranks)" % (100 * TARGET_EXPOSED, top),
                           "%.1f ms of %.0f (%.1f%%)" % (w["expo_ms"], w["step_ms"], 100 * e), e <= TARGET_EXPOSED))
        for name, got, ok in checks:
            misses += not ok
            print("  %-6s %-44s %-26s %s" % (m, name, got, verdict(ok)))
    return misses


def main():
    d = sys.argv[1] if len(sys.argv) > 1 else "trainers-bench"
    res = collect(d)
    if not res:
        print("report: no results in %s" % d)
        return 1
    models = [m for m in ("small", "large") if any(k[0] == m for k in res)]
    models += sorted({k[0] for k in res} - set(models))
    ranks = sorted({k[1] for k in res})
    pf = os.path.join(d, "peak")
    peaks = "%s GFLOP/s (measured)" % open(pf).read().strip() if os.path.exists(pf) else "as logged"
    print("bench-trainers: weft-train-ddp vs PyTorch DDP (Gloo), medians over rounds of each run's median")
    print("step after warm-up; MFU = (6N + 12LHQT) x tokens/s / (ranks x peak), peak per rank %s" % peaks)
    print("small: 4 layers d 256 4 heads T 128 batch 16/rank; large: 6 layers d 384 6 heads T 256 batch 8/rank\n")
    table(res, models, ranks)
    for impl in ("weft", "torch"):
        cores = sorted({c for k, v in res.items() if k[2] == impl for c in v["cores"]})
        if cores:
            print("%s ran OpenBLAS core %s" % (impl, ", ".join(cores)))
    misses = targets(res, models, ranks)
    ceilings(res, models, ranks)
    print("\n%d target(s) missed" % misses)
    return 0


if __name__ == "__main__":
    sys.exit(main())
