#!/usr/bin/env python3
"""report.py DIR: weft's ratios against the issue-4 speed targets, from `make bench` output.

Reads DIR/{shm,socket,np4}/compare.jsonl (written by perf/compare/run.sh: one object per
collective, library and size with busbw in GB/s and time_us, medians over rounds) and
DIR/floor.jsonl (perf/membw_floor). Prints one table per target with the ratio at each size
and PASS / MISS, then a summary line per target. A missing sweep or peer is reported as
"not measured", never as a pass.
"""
import json
import os
import sys

MIB = 1 << 20


def load(path):
    rows = {}
    if not os.path.exists(path):
        return rows
    for line in open(path):
        line = line.strip()
        if not line:
            continue
        r = json.loads(line)
        rows[(r.get("coll"), r.get("lib"), r["size"])] = r
    return rows


def fmt_size(s):
    for unit, div in (("G", 1 << 30), ("M", MIB), ("K", 1024)):
        if s >= div and s % div == 0:
            return f"{s // div}{unit}"
    return str(s)


def ratio_rows(rows, coll, peer, lo, hi, key, higher_better=True):
    """[(size, weft, peer, ratio)] for sizes in [lo, hi] where both were measured."""
    out = []
    for (c, lib, size), r in sorted(rows.items(), key=lambda kv: kv[0][2]):
        if c != coll or lib != "weft" or not (lo <= size <= hi):
            continue
        p = rows.get((coll, peer, size))
        if p is None or not r.get(key) or not p.get(key):
            continue
        w, q = r[key], p[key]
        out.append((size, w, q, (w / q) if higher_better else (q / w)))
    return out


def table(title, rows, need, unit):
    print(f"\n## {title}")
    if not rows:
        print("not measured (sweep or peer missing)")
        return None
    print(f"| size | weft {unit} | peer {unit} | ratio | target | |")
    print("|---:|---:|---:|---:|---:|---|")
    ok = True
    for size, w, q, ratio in rows:
        good = ratio >= need
        ok &= good
        print(f"| {fmt_size(size)} | {w:.3g} | {q:.3g} | {ratio:.2f}x | {need}x | {'PASS' if good else 'MISS'} |")
    worst = min(r[3] for r in rows)
    print(f"- {'PASS' if ok else 'MISS'}: worst ratio {worst:.2f}x (target {need}x)")
    return ok


def main(d):
    shm = load(os.path.join(d, "shm", "compare.jsonl"))
    sock = load(os.path.join(d, "socket", "compare.jsonl"))
    np4 = load(os.path.join(d, "np4", "compare.jsonl"))
    floor = {}
    fpath = os.path.join(d, "floor.jsonl")
    if os.path.exists(fpath):
        for line in open(fpath):
            r = json.loads(line)
            floor[r["size"]] = r["busbw"]
    results = {}
    print("# weft against the issue-4 speed targets (ratios are weft / Open MPI unless said)")
    results["all-reduce busbw >= 3x Open MPI, 16-256 MiB (np=2)"] = table(
        "all-reduce busbw vs Open MPI, 16-256 MiB, np=2, shm",
        ratio_rows(shm, "all_reduce", "mpi", 16 * MIB, 256 * MIB, "busbw"), 3.0, "GB/s")
    frows = []
    for (c, lib, size), r in sorted(shm.items(), key=lambda kv: kv[0][2]):
        if c == "all_reduce" and lib == "weft" and size in floor and 16 * MIB <= size <= 256 * MIB:
            frows.append((size, r["busbw"], floor[size], r["busbw"] / floor[size]))
    results["all-reduce busbw >= 0.7 x memory-bandwidth floor"] = table(
        "all-reduce busbw vs the two-thread memory-bandwidth floor (perf/membw_floor)", frows, 0.7, "GB/s")
    every = True
    measured = False
    for coll in ("all_reduce", "all_gather", "reduce_scatter", "all_to_all", "broadcast"):
        ok = table(f"{coll}: latency vs Open MPI at every size, np=2 (ratio = MPI time / weft time)",
                   ratio_rows(shm, coll, "mpi", 0, 1 << 40, "time_us", higher_better=False), 1.0, "us")
        if ok is not None:
            measured = True
            every &= ok
    results["every collective >= 1.0x Open MPI at every size (np=2)"] = every if measured else None
    big = True
    measured = False
    for coll in ("all_gather", "reduce_scatter", "all_to_all", "broadcast"):
        ok = table(f"{coll}: busbw vs Open MPI at >= 16 MiB, np=2",
                   ratio_rows(shm, coll, "mpi", 16 * MIB, 1 << 40, "busbw"), 1.5, "GB/s")
        if ok is not None:
            measured = True
            big &= ok
    results["all-gather, reduce-scatter, all-to-all, broadcast >= 1.5x at >= 16 MiB"] = big if measured else None
    results["socket: all-reduce busbw >= 2x Open MPI TCP at >= 16 MiB"] = table(
        "socket only: all-reduce busbw vs Open MPI's TCP BTL at >= 16 MiB",
        ratio_rows(sock, "all_reduce", "mpi", 16 * MIB, 1 << 40, "busbw"), 2.0, "GB/s")
    results["socket: 8-byte all-reduce latency <= Open MPI TCP's"] = table(
        "socket only: 8-byte all-reduce latency (ratio = MPI time / weft time)",
        ratio_rows(sock, "all_reduce", "mpi", 8, 8, "time_us", higher_better=False), 1.0, "us")
    four = True
    measured = False
    for coll in ("all_reduce", "all_gather", "reduce_scatter", "all_to_all", "broadcast"):
        ok = table(f"4 ranks on 2 cores: {coll} vs Open MPI at every size (ratio = MPI time / weft time)",
                   ratio_rows(np4, coll, "mpi", 0, 1 << 40, "time_us", higher_better=False), 1.0, "us")
        if ok is not None:
            measured = True
            four &= ok
    results["4 ranks on 2 cores: >= Open MPI at every size"] = four if measured else None
    print("\n# Summary")
    for name, ok in results.items():
        print(f"- {'not measured' if ok is None else ('PASS' if ok else 'MISS')}: {name}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else "bench"))
