#!/usr/bin/env python3
"""report.py DIR: weft's ratios against the issue-4 speed targets, from `make bench` output.

Reads DIR/{shm,socket,np4}/compare.jsonl (written by perf/compare/run.sh: one object per
collective, library and size with busbw in GB/s and time_us, medians over rounds) and
DIR/floor.jsonl (perf/membw_floor: one row per collective and size; rows without "coll" are
all_reduce, from older files), and DIR/floor_ab (the fused all-reduce floor, the two-copy
floor and weft's all-reduce, plain and on registered buffers, back to back in each round: the
"0.8 x floor" target is judged on those per-round ratios when present, and the two-copy floor
against the fused one, an estimate of that target's ceiling on plain buffers, is shown
beside it). Prints one table per target with the ratio at each size and
PASS / MISS, then a summary line per target. A missing sweep or peer is reported as
"not measured", never as a pass; a sweep whose Open MPI did not run (its line in
DIR/SWEEP/raw/skipped.txt) also makes the report exit 1. When DIR/shm_registered and
DIR/np4_registered exist (weft's buffers registered as windows, -R 2), the np=2 and 4-rank
targets are reported a second time for them, with their own summary; DIR/shm_plain_registered
(the program's own buffers registered, -R 1) likewise, and DIR/floor_ab's -R 1 runs give the
floor target for them even without that sweep.

The np=2 shm tables also give the ratio over the rounds in which the two CPUs shared an
L3 and over those in which they did not (perf/l3_probe, run around every sweep): on the
development VM that placement changes by itself and moves large-message figures 2-5x,
for both libraries. The PASS / MISS verdict uses the medians over all rounds.

The busbw tables against Open MPI also show weft/floor, MPI/floor and the ceiling =
floor / MPI: the highest ratio to Open MPI any implementation could reach on this machine.
Where the sweep ran a floor in each round (DIR/SWEEP/raw/COLL.floor.rK.jsonl, perf/compare's
COMPARE_FLOOR=1) the three are medians of ratios taken within a round; else they come from
DIR/floor.jsonl, measured once after the sweeps. The "0.8 x floor" target falls back to the
per-round floors when DIR/floor_ab is missing.
A missed row whose ceiling is below the target is marked "MISS (above floor)"; it is still
a miss. The all-reduce floor used there is the higher of all_reduce and all_reduce_fused
(its least-traffic form), and so does the "0.8 x floor" target.
"""
import json
import math
import os
import sys

MIB = 1 << 20


PLACEMENTS = ("shared", "split")


def load(path, l3=None):
    """Medians over all rounds (l3 None), or over the rounds of one L3 placement only."""
    rows = {}
    if not os.path.exists(path):
        return rows
    for line in open(path):
        line = line.strip()
        if not line:
            continue
        r = json.loads(line)
        if r.get("l3") == l3:
            rows[(r.get("coll"), r.get("lib"), r["size"])] = r
    return rows


def placement_ratios(path, coll, peer, lo, hi, key, higher_better=True):
    """{placement: {size: ratio}} over the rounds where both libraries ran in it."""
    return {w: {size: q for size, _, _, q, _ in ratio_rows(load(path, w), coll, peer, lo, hi, key,
                                                        higher_better)} for w in PLACEMENTS}


def fmt_size(s):
    for unit, div in (("G", 1 << 30), ("M", MIB), ("K", 1024)):
        if s >= div and s % div == 0:
            return f"{s // div}{unit}"
    return str(s)


def ratio_rows(rows, coll, peer, lo, hi, key, higher_better=True):
    """[(size, weft, peer, ratio, spread)] for sizes in [lo, hi] where both were measured;
    spread is (lowest, highest) of the ratio taken within each round (the libraries ran
    back to back in a round), from the rows' round_us (busbw is the size over the time, so a
    round's busbw ratio is the peer's time over weft's); None below two rounds."""
    out = []
    for (c, lib, size), r in sorted(rows.items(), key=lambda kv: kv[0][2]):
        if c != coll or lib != "weft" or not (lo <= size <= hi):
            continue
        p = rows.get((coll, peer, size))
        if p is None or not r.get(key) or not p.get(key):
            continue
        w, q = r[key], p[key]
        spread = None
        if key in ("time_us", "busbw"):
            wr, pr = r.get("round_us") or {}, p.get("round_us") or {}
            # Each round's ratio as the table's: weft/peer busbw and peer/weft time are both
            # the peer's time over weft's.
            peer_over_weft = (key == "busbw") == higher_better
            per = [(pr[k] / wr[k]) if peer_over_weft else (wr[k] / pr[k])
                   for k in wr if k in pr and wr[k] and pr[k]]
            spread = (min(per), max(per)) if len(per) >= 2 else None
        out.append((size, w, q, (w / q) if higher_better else (q / w), spread))
    return out


def load_floors(path):
    """{(coll, size): busbw} from membw_floor rows; rows without "coll" are all_reduce."""
    floors = {}
    if not os.path.exists(path):
        return floors
    for line in open(path):
        line = line.strip()
        if line:
            r = json.loads(line)
            floors[(r.get("coll", "all_reduce"), r["size"])] = r["busbw"]
    return floors


def floor_forms(coll):
    """The membw_floor forms of a collective: all-reduce has two (the floor is the faster)."""
    return ("all_reduce", "all_reduce_fused") if coll == "all_reduce" else (coll,)


def floor_of(floors, coll, size):
    """The floor a collective's ceiling uses: the best of its measured forms, or None."""
    forms = floor_forms(coll)
    found = [floors[(c, size)] for c in forms if (c, size) in floors]
    return max(found) if found else None


def median(xs):
    xs = sorted(xs)
    return xs[len(xs) // 2] if len(xs) % 2 else (xs[len(xs) // 2 - 1] + xs[len(xs) // 2]) / 2


def round_floors(raw, coll):
    """{size: {round: floor time_us}} from a sweep's raw/COLL.floor.rK.jsonl (perf/compare with
    COMPARE_FLOOR=1: membw_floor right after the libraries in each round); the all-reduce floor
    is the faster of its two forms. {} when the sweep ran no floors."""
    out = {}
    if not os.path.isdir(raw):
        return out
    forms = floor_forms(coll)
    for name in os.listdir(raw):
        head, _, rest = name.partition(".floor.r")
        if head != coll or not rest.endswith(".jsonl"):
            continue
        rnd = rest[:-len(".jsonl")]
        for line in open(os.path.join(raw, name)):
            if line.strip():
                r = json.loads(line)
                if r.get("coll") in forms and r.get("time_us"):
                    per = out.setdefault(r["size"], {})
                    per[rnd] = min(per.get(rnd, r["time_us"]), r["time_us"])
    return out


def ceiling_of(rows, coll, floors, raw):
    """size -> (weft/floor, MPI/floor, ceiling = floor/MPI, how) or None, for table()'s floor
    columns. With per-round floors (round_floors), each is taken within a round (weft, Open
    MPI and the floor ran back to back) and the median over rounds is given: how = "per
    round". Else from the one floor.jsonl measured after the sweeps: how = "after"."""
    per_round = round_floors(raw, coll)

    def of(size):
        w, q = rows.get((coll, "weft", size)), rows.get((coll, "mpi", size))
        fr = per_round.get(size, {})
        if w and q and fr:
            wr, qr = w.get("round_us") or {}, q.get("round_us") or {}
            both = [k for k in fr if wr.get(k) and qr.get(k)]
            if both:
                return (median([fr[k] / wr[k] for k in both]), median([fr[k] / qr[k] for k in both]),
                        median([qr[k] / fr[k] for k in both]), "per round")
        f = floor_of(floors, coll, size)
        if not (w and q and f):
            return None
        return w["busbw"] / f, q["busbw"] / f, f / q["busbw"], "after"
    return of


def table(title, rows, need, unit, floor=None, by_l3=None, spread_counts=False):
    """floor: size -> (weft/floor, MPI/floor, ceiling, how) or None (ceiling_of) adds those columns;
    by_l3: {placement: {size: ratio}} adds the ratio over each placement's rounds; rows
    with a spread (ratio_rows) add the lowest and highest ratio within one round.
    spread_counts: a row whose median ratio misses but whose ratio reached the target in at
    least one round (the gap is inside the launch-to-launch spread, shown beside it) counts
    as met, "met in spread": issue 20 counts such rows as met when the spread is shown."""
    print(f"\n## {title}")
    if not rows:
        print("not measured (sweep or peer missing)")
        return None
    spreads = any(r[4] for r in rows)
    extra = " weft/floor | MPI/floor | ceiling |" if floor else ""
    if spreads:
        extra += " per round |"
    if by_l3:
        extra += " shared L3 | split L3 |"
    print(f"| size | weft {unit} | peer {unit} | ratio | target |{extra} |")
    print("|---:|---:|---:|---:|---:|" + ("---:|---:|---:|" if floor else "") +
          ("---:|" if spreads else "") + ("---:|---:|" if by_l3 else "") + "---|")
    ok = True
    above = misses = beaten = floored = in_spread = 0
    hows = set()
    for size, w, q, ratio, spread in rows:
        good = ratio >= need
        verdict, cols = ("PASS" if good else "MISS"), ""
        if not good and spread_counts and spread and spread[1] >= need:
            good, verdict = True, "met in spread"
            in_spread += 1
        ok &= good
        if floor:
            got = floor(size)
            ceiling = got[2] if got else None
            cols = (f" {got[0]:.2f} | {got[1]:.2f} | {ceiling:.2f}x |" if got else " - | - | - |")
            floored += got is not None
            beaten += got is not None and max(got[0], got[1]) > 1
            hows.add(got[3] if got else None)
            if not good:
                misses += 1
                if ceiling is not None and ceiling < need:
                    above += 1
                    verdict = "MISS (above floor)"
        if spreads:
            cols += f" {spread[0]:.2f}-{spread[1]:.2f}x |" if spread else " - |"
        for where in PLACEMENTS if by_l3 else ():
            r = by_l3.get(where, {}).get(size)
            cols += f" {r:.2f}x |" if r else " - |"
        print(f"| {fmt_size(size)} | {w:.3g} | {q:.3g} | {ratio:.2f}x | {need}x |{cols} {verdict} |")
    worst = min(r[3] for r in rows)
    print(f"- {'PASS' if ok else 'MISS'}: worst ratio {worst:.2f}x (target {need}x)" +
          (f"; {in_spread} row(s) met only inside the spread of the ratio between rounds"
           if in_spread else ""))
    if floor and not floored:
        print("- no memory-bandwidth floor measured at these sizes (floor.jsonl): no ceiling")
    elif floor:
        print(f"- {above} of {misses} missed rows have a ceiling (floor / MPI) below {need}x: "
              "no implementation could reach the target there on this machine")
        print("- floor columns: " + ("medians of per-round ratios (the floor ran right after weft and "
                                     "Open MPI in each round)" if hows == {"per round"} else
                                     "from the floor measured once after the sweeps (floor.jsonl)"
                                     if hows == {"after"} else "per round where measured, else floor.jsonl"))
        if beaten:
            print(f"- warning: in {beaten} rows weft or MPI beat the floor (x/floor > 1): that floor "
                  "was measured on a busy machine or is not a floor, so its ceiling is too low")
    return ok


def ab_floor(ab, name, rnd):
    """{size: busbw} of DIR/floor_ab/NAME.rRND.jsonl (membw_floor rows), {} when absent."""
    path = os.path.join(ab, f"{name}.r{rnd}.jsonl")
    if not os.path.exists(path):
        return {}
    return {r["size"]: r["busbw"] for r in (json.loads(line) for line in open(path) if line.strip())}


def per_round_rows(per):
    """(size, a, b, a/b, spread) from {size: [(a, b) per round]}: medians of a, b and of the
    ratio taken within each round; spread is the lowest and highest ratio (None below 2 rounds)."""
    return [(size, median([a for a, _ in v]), median([b for _, b in v]), median([a / b for a, b in v]),
             (min(a / b for a, b in v), max(a / b for a, b in v)) if len(v) >= 2 else None)
            for size, v in sorted(per.items())]


def interleaved_floor_rows(d, reg, place="out_of_place", floor_name="floor"):
    """(size, weft busbw, floor busbw, ratio, spread) from DIR/floor_ab: weft's all-reduce (-R reg)
    and the fused floor run back to back in each round; the ratio is taken within a round,
    then the median over rounds (busbw columns: medians too). place: nccl-tests' column,
    "out_of_place" (the target's) or "in_place". floor_name "plain": against the two-copy
    floor instead (membw_floor -c all_reduce_plain). [] when not measured."""
    ab = os.path.join(d, "floor_ab")
    per = {}  # size -> [(weft, floor)]
    rnd = 1
    while os.path.exists(os.path.join(ab, f"floor.r{rnd}.jsonl")):
        fl = ab_floor(ab, floor_name, rnd)
        # one nccl-tests JSON document per size: weft_R{reg}.r{rnd}.{size}.json
        prefix = f"weft_R{reg}.r{rnd}."
        for name in sorted(os.listdir(ab)):
            if not (name.startswith(prefix) and name.endswith(".json")):
                continue
            try:
                results = json.load(open(os.path.join(ab, name)))["results"]
            except (ValueError, KeyError):
                continue
            for r in results:
                w = r[place]["bus_bw"]
                if r["size"] in fl and not r[place]["nwrong"]:
                    per.setdefault(r["size"], []).append((w, fl[r["size"]]))
        rnd += 1
    return per_round_rows(per)


def two_copy_table(d, frows, need):
    """The floor target on the program's own buffers: per round, the two-copy floor
    (membw_floor -c all_reduce_plain: each rank's buffers private, every byte through a
    shared FIFO) against the fused floor, an estimate of the target's ceiling there, and
    weft's plain all-reduce against the two-copy floor. frows: the target's rows
    (interleaved_floor_rows). Shown, not judged."""
    ab = os.path.join(d, "floor_ab")
    per = {}  # size -> [(plain, fused)]
    rnd = 1
    while os.path.exists(os.path.join(ab, f"plain.r{rnd}.jsonl")):
        fused, plain = ab_floor(ab, "floor", rnd), ab_floor(ab, "plain", rnd)
        for size in sorted(set(fused) & set(plain)):
            per.setdefault(size, []).append((plain[size], fused[size]))
        rnd += 1
    print("\n## the floor target on plain buffers: the two-copy floor (membw_floor -c "
          "all_reduce_plain, perf/floor_fifo.h) against the fused floor, and weft against it")
    if not per:
        print("not measured (no floor_ab/plain.rK.jsonl)")
        return
    vs_plain = {r[0]: r for r in interleaved_floor_rows(d, 0, floor_name="plain")}
    missed = {size for size, _, _, ratio, _ in frows if ratio < need}
    print("| size | two-copy GB/s | fused floor GB/s | two-copy/fused | per round | weft/two-copy | per round | |")
    print("|---:|---:|---:|---:|---:|---:|---:|---|")
    below = beaten = 0
    for size, p, f, two_copy, spread in per_round_rows(per):
        v = vs_plain.get(size)
        reach = "two copies reach it" if two_copy >= need else f"two copies below {need}"
        below += size in missed and two_copy < need
        beaten += v is not None and v[3] > 1
        print(f"| {fmt_size(size)} | {p:.3g} | {f:.3g} | {two_copy:.2f} |" +
              (f" {spread[0]:.2f}-{spread[1]:.2f} |" if spread else " - |") +
              (f" {v[3]:.2f} |" + (f" {v[4][0]:.2f}-{v[4][1]:.2f} |" if v[4] else " - |") if v else " - | - |") +
              f" {reach} |")
    print(f"- {below} of {len(missed)} sizes where weft missed {need} of the fused floor have a two-copy "
          f"floor below {need} of it")
    if beaten:
        print(f"- at {beaten} sizes weft beat the two-copy floor (weft/two-copy > 1): it estimates "
              "the cost of two copies, it does not bound it")


def np2_targets(d, shm_name, floors, floor, tag, results, floor_reg=0):
    """The np=2 shm targets on sweep DIR/shm_name, into results (names suffixed by tag);
    the floor target from DIR/floor_ab's weft runs with -R floor_reg."""
    shm_path = os.path.join(d, shm_name, "compare.jsonl")
    raw = os.path.join(d, shm_name, "raw")
    shm = load(shm_path)
    results["all-reduce busbw >= 3x Open MPI, 16-256 MiB (np=2)" + tag] = table(
        "all-reduce busbw vs Open MPI, 16-256 MiB, np=2, shm" + tag,
        ratio_rows(shm, "all_reduce", "mpi", 16 * MIB, 256 * MIB, "busbw"), 3.0, "GB/s",
        ceiling_of(shm, "all_reduce", floors, raw),
        placement_ratios(shm_path, "all_reduce", "mpi", 16 * MIB, 256 * MIB, "busbw"))
    frows = interleaved_floor_rows(d, floor_reg)
    how = "fused floor and weft interleaved, ratio per round, medians"
    if not frows:  # the sweep's own per-round floors (COMPARE_FLOOR=1)
        how = "floor run after weft in each round of the sweep, ratio per round, medians"
        per_round = round_floors(raw, "all_reduce")
        for (c, lib, size), r in sorted(shm.items(), key=lambda kv: kv[0][2]):
            wr = r.get("round_us") or {}
            both = [k for k in per_round.get(size, {}) if wr.get(k)]
            if c == "all_reduce" and lib == "weft" and both and 16 * MIB <= size <= 256 * MIB:
                q = [per_round[size][k] / wr[k] for k in both]
                frows.append((size, r["busbw"], r["busbw"] / median(q), median(q),
                              (min(q), max(q)) if len(q) >= 2 else None))
    if not frows:
        how = "floor measured after the sweeps"
        for (c, lib, size), r in sorted(shm.items(), key=lambda kv: kv[0][2]):
            if c == "all_reduce" and lib == "weft" and size in floor and 16 * MIB <= size <= 256 * MIB:
                frows.append((size, r["busbw"], floor[size], r["busbw"] / floor[size], None))
    results["all-reduce busbw >= 0.8 x memory-bandwidth floor" + tag] = table(
        f"all-reduce busbw vs the two-thread memory-bandwidth floor (perf/membw_floor; {how})" + tag,
        frows, 0.8, "GB/s")
    if floor_reg == 0:
        two_copy_table(d, frows, 0.8)
    # Shown, not judged: the target reads nccl-tests' out-of-place columns, but PyTorch DDP
    # all-reduces its gradient buckets in place, and on plain buffers the two differ.
    irows = interleaved_floor_rows(d, floor_reg, "in_place")
    if irows:
        table("all-reduce in place (as PyTorch DDP calls it) vs the floor; shown beside the target, "
              "which reads the out-of-place columns (" + how + ")" + tag, irows, 0.8, "GB/s")
    results["every collective >= 1.0x Open MPI at every size (np=2)" + tag] = latency_targets(
        shm_path, ("all_reduce", "all_gather", "reduce_scatter", "all_to_all", "broadcast"), tag)
    results["all-gather, reduce-scatter, all-to-all, broadcast >= 1.5x at >= 16 MiB" + tag] = \
        busbw_targets(shm_path, ("all_gather", "reduce_scatter", "all_to_all", "broadcast"), tag,
                      lambda coll: ceiling_of(shm, coll, floors, raw))


def all_of(verdicts):
    """One verdict from a target's tables (table()'s: True, False, None = not measured): PASS
    when every measured table passed, None when none was measured."""
    measured = [ok for ok in verdicts if ok is not None]
    return all(measured) if measured else None


def latency_targets(path, colls, tag):
    """The np=2 latency target (>= 1.0x Open MPI at every size) of each collective in colls,
    from the sweep's compare.jsonl at path, one table each (with the ratio per L3 placement);
    the verdict over all of them (all_of)."""
    rows = load(path)
    return all_of([table(f"{coll}: latency vs Open MPI at every size, np=2 (ratio = MPI time / weft time)"
                         + tag, ratio_rows(rows, coll, "mpi", 0, 1 << 40, "time_us", higher_better=False),
                         1.0, "us", by_l3=placement_ratios(path, coll, "mpi", 0, 1 << 40, "time_us", False),
                         spread_counts=True) for coll in colls])


def busbw_targets(path, colls, tag, ceiling=None):
    """The np=2 busbw target (>= 1.5x Open MPI at >= 16 MiB) of each collective in colls, as
    latency_targets; ceiling: coll -> table()'s floor columns (ceiling_of), None where the
    collectives have no memory-bandwidth floor."""
    rows = load(path)
    return all_of([table(f"{coll}: busbw vs Open MPI at >= 16 MiB, np=2" + tag,
                         ratio_rows(rows, coll, "mpi", 16 * MIB, 1 << 40, "busbw"), 1.5, "GB/s",
                         ceiling(coll) if ceiling else None,
                         placement_ratios(path, coll, "mpi", 16 * MIB, 1 << 40, "busbw"))
                   for coll in colls])


# The collectives of sweep shm_more (perf/bench/run.sh), np=2 over shm: no floor, no ceiling.
MORE_COLLS = ("reduce", "gather", "scatter", "sendrecv")


def more_targets(d, name, tag, results):
    """The np=2 targets of the collectives in sweep DIR/name (MORE_COLLS), into results."""
    path = os.path.join(d, name, "compare.jsonl")
    print(f"\n# {', '.join(MORE_COLLS)} against the same np=2 targets (sweep {name})")
    results[f"{', '.join(MORE_COLLS)} >= 1.0x Open MPI at every size (np=2)" + tag] = \
        latency_targets(path, MORE_COLLS, tag)
    results[f"{', '.join(MORE_COLLS)} >= 1.5x at >= 16 MiB (np=2)" + tag] = busbw_targets(path, MORE_COLLS, tag)


def np4_targets(d, np4_name, tag, results,
                colls=("all_reduce", "all_gather", "reduce_scatter", "all_to_all", "broadcast"), what=""):
    """The 4-ranks-on-2-cores target (>= 1.0x Open MPI at every size) of each collective in
    colls, from sweep DIR/np4_name, into results (named with what, e.g. MORE_COLLS')."""
    np4 = load(os.path.join(d, np4_name, "compare.jsonl"))
    results["4 ranks on 2 cores: " + what + ">= Open MPI at every size" + tag] = all_of([
        table(f"4 ranks on 2 cores: {coll} vs Open MPI at every size (ratio = MPI time / weft time)" + tag,
              ratio_rows(np4, coll, "mpi", 0, 1 << 40, "time_us", higher_better=False), 1.0, "us",
              spread_counts=True)
        for coll in colls])


def geomean(xs):
    xs = [x for x in xs if x]
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else None


def ab_section(d):
    """The A/B of two weft builds (make bench with BENCH_BASELINE): per sweep, collective and
    size, weft/base (base time / weft time: above 1, this build is faster) beside both builds'
    ratio to Open MPI, which was measured in the same alternating rounds. Nothing when no
    sweep ran a baseline."""
    sweeps = [n for n in ("shm", "shm_more", "socket", "np4", "np4_more", "shm_registered", "np4_registered",
                          "shm_plain_registered")
              if any(lib == "base" for (_, lib, _) in load(os.path.join(d, n, "compare.jsonl")))]
    if not sweeps:
        return
    print("\n# A/B: this build (weft) against the baseline build (base), alternating in each round")
    print("ratio = other time / weft time per call, medians over rounds; above 1: weft is faster\n")
    summary = []
    for name in sweeps:
        rows = load(os.path.join(d, name, "compare.jsonl"))
        colls = sorted({c for (c, lib, _) in rows if lib == "base"})
        for coll in colls:
            print(f"## {name}: {coll}\n")
            print("| size | weft (us) | base (us) | weft/base | weft/MPI | base/MPI |")
            print("|---:|---:|---:|---:|---:|---:|")
            ab = []
            for size in sorted({s for (c, lib, s) in rows if c == coll and lib == "base"}):
                w, b, m = (rows.get((coll, lib, size)) for lib in ("weft", "base", "mpi"))
                if not w or not b:
                    continue
                q = b["time_us"] / w["time_us"]
                ab.append((size, q))
                wm = f"{m['time_us'] / w['time_us']:.2f}" if m else "–"
                bm = f"{m['time_us'] / b['time_us']:.2f}" if m else "–"
                print(f"| {fmt_size(size)} | {w['time_us']:.2f} | {b['time_us']:.2f} | {q:.3f} | {wm} | {bm} |")
            print()
            small = geomean([q for s, q in ab if s <= 4096])
            large = geomean([q for s, q in ab if s >= 16 * MIB])
            summary.append(f"- {name} {coll}: weft/base geometric mean "
                           f"{small and f'{small:.3f}' or '–'} at <= 4 KiB, "
                           f"{large and f'{large:.3f}' or '–'} at >= 16 MiB")
    print("## A/B summary\n")
    print("\n".join(summary))


def main(d):
    sock = load(os.path.join(d, "socket", "compare.jsonl"))
    floors = load_floors(os.path.join(d, "floor.jsonl"))
    # The 0.8 x floor target uses the stricter (higher) of the two all-reduce floors: the
    # fused, non-temporal form is the least work an all-reduce needs, which is what issue 4 asks.
    floor = {size: floor_of(floors, "all_reduce", size) for (c, size) in floors if c.startswith("all_reduce")}
    results = {}
    print("# weft against the issue-4 speed targets (ratios are weft / Open MPI unless said)")
    np2_targets(d, "shm", floors, floor, "", results)
    results["socket: all-reduce busbw >= 2x Open MPI TCP at >= 16 MiB"] = table(
        "socket only: all-reduce busbw vs Open MPI's TCP BTL at >= 16 MiB",
        ratio_rows(sock, "all_reduce", "mpi", 16 * MIB, 1 << 40, "busbw"), 2.0, "GB/s")
    results["socket: 8-byte all-reduce latency <= Open MPI TCP's"] = table(
        "socket only: 8-byte all-reduce latency (ratio = MPI time / weft time)",
        ratio_rows(sock, "all_reduce", "mpi", 8, 8, "time_us", higher_better=False), 1.0, "us")
    np4_targets(d, "np4", "", results)
    if os.path.isdir(os.path.join(d, "shm_more")):
        more_targets(d, "shm_more", "", results)
    if os.path.isdir(os.path.join(d, "np4_more")):
        np4_targets(d, "np4_more", "", results, MORE_COLLS, f"{', '.join(MORE_COLLS)} ")
    reg = {}
    tag = " [registered buffers, -R 2]"
    if os.path.isdir(os.path.join(d, "shm_registered")):
        print("\n# The same targets with weft's buffers registered as windows (-R 2: direct collectives)")
        np2_targets(d, "shm_registered", floors, floor, tag, reg, 2)
    if os.path.isdir(os.path.join(d, "np4_registered")):
        np4_targets(d, "np4_registered", tag, reg)
    tag = " [the program's own buffers registered, -R 1]"
    if os.path.isdir(os.path.join(d, "shm_plain_registered")):
        print("\n# The same targets with the program's own buffers registered as windows (-R 1: weft adopts them)")
        np2_targets(d, "shm_plain_registered", floors, floor, tag, reg, 1)
    elif interleaved_floor_rows(d, 1):
        reg["all-reduce busbw >= 0.8 x memory-bandwidth floor" + tag] = table(
            "all-reduce busbw vs the two-thread memory-bandwidth floor (fused floor and weft interleaved, "
            "ratio per round, medians)" + tag, interleaved_floor_rows(d, 1), 0.8, "GB/s")
    ab_section(d)
    print("\n# Summary")
    for name, ok in list(results.items()) + list(reg.items()):
        print(f"- {'not measured' if ok is None else ('PASS' if ok else 'MISS')}: {name}")
    missing = [(sweep, why) for sweep, peer, why in skipped_peers(d) if peer == "Open MPI"]
    for sweep, why in missing:
        print(f"- FAILED: Open MPI did not run in sweep {sweep}: {why}; its targets are not measured "
              "(perf/compare/install-peers.sh installs it)")
    return 1 if missing else 0


def skipped_peers(d):
    """(sweep, peer, reason) for every peer a sweep skipped: perf/compare/run.sh writes one
    "PEER: REASON" line per skipped peer or collective to DIR/SWEEP/raw/skipped.txt. A sweep
    whose Open MPI did not run has measured none of its targets against Open MPI, and the
    report says so by failing: make bench once ended with exit 0 and a column of "not
    measured" on a machine without mpi.h."""
    out = []
    for sweep in sorted(os.listdir(d)) if os.path.isdir(d) else []:
        path = os.path.join(d, sweep, "raw", "skipped.txt")
        if not os.path.isfile(path):
            continue
        with open(path) as f:
            for line in f:
                peer, sep, why = line.strip().partition(": ")
                if sep:
                    out.append((sweep, peer, why))
    return out


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else "bench"))
