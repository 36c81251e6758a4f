#!/usr/bin/env python3
"""report.py: turns the raw output of perf/compare/run.sh into compare.md and compare.png.

Why a separate step: run.sh only runs programs; everything that reads numbers is here,
so a report can be redrawn from raw/ without running the sweep again:

    python3 perf/compare/report.py --raw compare/raw --out compare

Inputs in raw/, one file per collective, library and round:
  COLL.weft.rK.B.json weft's perf tool `-J` documents, one per size range starting at B bytes
                      (nccl-tests' JSON: results[].out_of_place; broadcast: in_place, see
                      WEFT_COLUMN), when it has -J;
  COLL.weft.rK.txt    otherwise its nccl-tests table (the same columns);
  COLL.mpi.rK.jsonl, COLL.gloo.rK.jsonl   JSON lines of mpi_bench / gloo_bench;
  COLL.LIB.rK.l3      perf/l3_probe's verdict before and after that sweep (shared / split L3);
  skipped.txt         peers or collectives run.sh skipped, and why;
  failed.txt          runs that exited non-zero (their rows up to the failure are kept).
Per collective, library and size it takes the median over rounds of the time per call
and of busbw; the weft/peer ratio is peer time / weft time (= weft busbw / peer busbw:
same bytes), so above 1 means weft is faster. Any wrong element in any round is shown
as WRONG and that row is left out of the ratios; the exit status is 1 when weft returned a
wrong element. A peer's wrong results are reported on stderr but do not fail the run: Gloo's
reduce-scatter returned wrong elements at 16-256 MiB in several sessions, and a sweep that
is red for a peer's bug says nothing about weft.

L3 placement: a round whose probes before and after both said "shared" (or "split") is
labelled so, else "mixed". Besides the medians over all rounds, compare.md gives weft/MPI
over the rounds of one placement only (both libraries measured in it), and compare.jsonl
adds rows with "l3": "shared" / "split" for those medians. Every compare.jsonl row also
carries round_us, its time per call in each round, for the spread of a ratio.
"""
import argparse
import json
import math
import os
import re
import statistics
import sys

# "base": another weft build run alternately with this one (run.sh's COMPARE_BASELINE), for
# the A/B of a change; its files have weft's formats.
LIBS = [("weft", "weft"), ("base", "weft baseline"), ("mpi", "Open MPI"), ("gloo", "Gloo")]
COLORS = {"weft": "#d62728", "base": "#ff9896", "mpi": "#1f77b4", "gloo": "#2ca02c"}
WEFT_BUILDS = ("weft", "base")
RAW_NAME = re.compile(r"^(?P<coll>[a-z_]+)\.(?P<lib>weft|base|mpi|gloo)\.r(?P<round>\d+)\.(\d+\.)?(?P<ext>json|jsonl|txt)$")


def human_size(n):
    for unit, scale in (("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10)):
        if n >= scale and n % scale == 0:
            return f"{n // scale}{unit}"
    return f"{n}"


def row(size, time_us, busbw, wrong, p50=None, p99=None):
    return {"size": int(size), "time_us": float(time_us), "busbw": float(busbw),
            "wrong": wrong, "p50_us": p50, "p99_us": p99}


# Which of weft's two columns is compared: out-of-place, as the peers run every collective,
# except broadcast: MPI_Bcast and Gloo's broadcast have one buffer (in place by definition),
# so weft's in-place column is the same call. (Out of place, weft's root also copies its
# own buffer: 64 MiB measured 8.9-9.9 ms against 4.2-4.5 ms in place.)
WEFT_COLUMN = {"broadcast": "in_place"}

# The collectives run.sh can sweep, in report order, with nccl-tests' busbw factors (n ranks).
# (sendrecv's in-place column is "N/A" in weft's tools: it races by design; out-of-place is read.)
COLL_FACTORS = {"all_reduce": "2(n-1)/n", "all_gather": "(n-1)/n", "reduce_scatter": "(n-1)/n",
                "all_to_all": "(n-1)/n", "broadcast": "1", "reduce": "1", "gather": "(n-1)/n",
                "scatter": "(n-1)/n", "sendrecv": "1"}


def factors_text(colls):
    """'all_reduce 2(n-1)/n, all_gather, reduce_scatter (n-1)/n, ...': each factor once, after
    the collectives that have it, in the order of colls."""
    groups = {}
    for coll in colls:
        groups.setdefault(COLL_FACTORS.get(coll, "?"), []).append(coll)
    return ", ".join(", ".join(cs) + " " + f for f, cs in groups.items())


def read_weft_json(paths, column="out_of_place"):
    """The results of weft's -J documents (nccl-tests' JSON; figures of the given column);
    None when no file has a usable result."""
    rows = []
    for path in paths:
        try:
            with open(path) as f:
                doc = json.load(f)
            for r in doc["results"]:
                half = r[column]
                wrong = half.get("nwrong")
                rows.append(row(r["size"], half.get("time", half.get("cpu_time")), half["bus_bw"],
                                None if wrong is None else int(wrong),
                                r.get("weft", {}).get("p50_us"), r.get("weft", {}).get("p99_us")))
        except (OSError, ValueError, KeyError, TypeError):
            return None
    return rows or None


def read_weft_table(path, column="out_of_place"):
    """The nccl-tests table: size count type redop root, then time algbw busbw #wrong
    out of place, then the same in place."""
    at = 9 if column == "in_place" else 5
    rows = []
    with open(path) as f:
        for line in f:
            fields = line.split()
            if not fields or line.lstrip().startswith("#") or not fields[0].isdigit():
                continue
            if len(fields) < at + 4:
                continue
            wrong = None if fields[at + 3] == "N/A" else int(fields[at + 3])
            rows.append(row(fields[0], fields[at], fields[at + 2], wrong))
    return rows


def read_jsonl(path):
    rows = []
    with open(path) as f:
        for line in f:
            line = line.strip()
            if not line.startswith("{"):
                continue
            try:
                o = json.loads(line)
                rows.append(row(o["size"], o["time_us"], o["busbw"], o.get("wrong"),
                                o.get("p50_us"), o.get("p99_us")))
            except (ValueError, KeyError, TypeError):
                continue
    return rows


def header_lines(path):
    """The '# ...' banner of a run (versions, transport), first line only."""
    txt = os.path.splitext(path)[0] + (".txt" if path.endswith(".json") else os.path.splitext(path)[1])
    try:
        with open(txt) as f:
            for line in f:
                if line.startswith("# ") and ("weft-library" in line or "_bench" in line):
                    return line[2:].strip().split(": ", 1)[-1]  # without the program name
    except OSError:
        pass
    return None


PLACEMENTS = ("shared", "split")


def placement(path):
    """'shared' or 'split' when every probe of a sweep agreed, 'mixed' when not, None: no probe."""
    if not os.path.exists(path):
        return None
    seen = set()
    with open(path) as f:
        for line in f:
            try:
                seen.add(json.loads(line).get("l3"))
            except ValueError:
                continue
    seen.discard(None)
    if not seen:
        return None
    return seen.pop() if len(seen) == 1 else "mixed"


def load(raw):
    """{(coll, lib): {size: [row per round]}}, {lib: banner}; each row has its round's "l3"."""
    data, banners, seen = {}, {}, set()
    names = sorted(os.listdir(raw))
    for name in names:
        m = RAW_NAME.match(name)
        if not m:
            continue
        coll, lib, rnd, ext = m["coll"], m["lib"], m["round"], m["ext"]
        path = os.path.join(raw, name)
        if lib in WEFT_BUILDS:
            if (coll, lib, rnd) in seen:
                continue
            rows = None
            docs = sorted(os.path.join(raw, n) for n in names
                          if n.startswith(f"{coll}.{lib}.r{rnd}.") and n.endswith(".json"))
            if docs:
                rows = read_weft_json(docs, WEFT_COLUMN.get(coll, "out_of_place"))
            txt = os.path.join(raw, f"{coll}.{lib}.r{rnd}.txt")
            if rows is None and os.path.exists(txt):
                rows = read_weft_table(txt, WEFT_COLUMN.get(coll, "out_of_place"))
            seen.add((coll, lib, rnd))
            path = txt
        else:
            rows = read_jsonl(path)
        banners.setdefault(lib, header_lines(path))
        per_size = data.setdefault((coll, lib), {})
        l3 = placement(os.path.join(raw, f"{coll}.{lib}.r{rnd}.l3"))
        for r in rows or []:
            if r["size"] > 0:
                r["l3"] = l3
                r["round"] = int(rnd)
                per_size.setdefault(r["size"], []).append(r)
    return data, banners


def summarize(rounds):
    """Median over rounds; wrong is the largest count seen (None: not checked); round_us:
    each round's time per call by round number, so that a reader can pair the libraries'
    rounds (they ran back to back) and show the launch-to-launch spread of a ratio."""
    wrongs = [r["wrong"] for r in rounds if r["wrong"] is not None]
    p50 = [r["p50_us"] for r in rounds if r["p50_us"] is not None]
    return {"time_us": statistics.median(r["time_us"] for r in rounds),
            "busbw": statistics.median(r["busbw"] for r in rounds),
            "p50_us": statistics.median(p50) if p50 else None,
            "wrong": max(wrongs) if wrongs else None, "rounds": len(rounds),
            "round_us": {str(r["round"]): r["time_us"] for r in rounds if "round" in r}}


def fmt_bw(s):
    if s is None:
        return "–"
    if s["wrong"]:
        return f"WRONG ({s['wrong']})"
    return f"{s['busbw']:.2f}" if s["busbw"] >= 0.1 else f"{s['busbw']:.3f}"


def fmt_us(s):
    if s is None:
        return "–"
    t = s["time_us"]
    return f"{t:.0f}" if t >= 1000 else f"{t:.1f}" if t >= 10 else f"{t:.2f}"


def ratio(weft, peer):
    if weft is None or peer is None or weft["time_us"] <= 0 or weft["wrong"] or peer["wrong"]:
        return None
    return peer["time_us"] / weft["time_us"]


def geomean(xs):
    xs = [x for x in xs if x]
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else None


def coll_table(coll, med, by_l3=None, rounds_l3=""):
    """Markdown lines for one collective; med: {lib: {size: summary}}; by_l3: {placement:
    the same, over that placement's rounds only}."""
    by_l3 = by_l3 or {}
    sizes = sorted(set().union(*[set(v) for v in med.values()]) if med else [])
    out = [f"## {coll}", ""]
    if not sizes:
        return out + ["No results.", ""]
    if rounds_l3:
        out += [f"L3 placement per round: {rounds_l3}", ""]
    # the baseline's columns only in an A/B run (run.sh's COMPARE_BASELINE)
    shown = [(lib, label) for lib, label in LIBS if lib != "base" or med.get("base")]
    peers = [lib for lib, _ in shown if lib != "weft"]
    out.append("| size | " + " | ".join(f"busbw {label}" for _, label in shown) + " | "
               + " | ".join(f"lat {label} (us)" for _, label in shown) + " | "
               + " | ".join(f"weft/{dict(LIBS)[p]}" for p in peers)
               + " | weft/MPI shared L3 | weft/MPI split L3 |")
    out.append("|---:|" + "---:|" * (2 * len(shown) + len(peers) + 2))
    ratios = {p: [] for p in peers}
    for size in sizes:
        s = {lib: med.get(lib, {}).get(size) for lib, _ in shown}
        cells = [human_size(size)] + [fmt_bw(s[lib]) for lib, _ in shown]
        cells += [fmt_us(s[lib]) for lib, _ in shown]
        for peer in peers:
            r = ratio(s["weft"], s[peer])
            cells.append(f"{r:.2f}x" if r else "–")
            ratios[peer].append((size, r))
        for where in PLACEMENTS:
            m = by_l3.get(where, {})
            r = ratio(m.get("weft", {}).get(size), m.get("mpi", {}).get(size))
            cells.append(f"{r:.2f}x" if r else "–")
        out.append("| " + " | ".join(cells) + " |")
    out.append("")
    notes = []
    for peer in peers:
        label = dict(LIBS)[peer]
        small = geomean([r for sz, r in ratios[peer] if sz <= 4096])
        large = geomean([r for sz, r in ratios[peer] if sz >= 1 << 20])
        if small or large:
            parts = []
            if small:
                parts.append(f"{small:.2f}x at <= 4K")
            if large:
                parts.append(f"{large:.2f}x at >= 1M")
            notes.append(f"weft/{label} (geometric mean): " + ", ".join(parts))
    return out + ([("- " + n) for n in notes] + [""] if notes else [])


def rounds_placement(data, coll, libs):
    """'weft: shared, split, ...; mpi: ...' from the first row of each round, or ''."""
    parts = []
    for lib in libs:
        per = data.get((coll, lib), {})
        if not per:
            continue
        first = per[min(per)]
        labels = [r.get("l3") or "?" for r in first]
        if any(l != "?" for l in labels):
            parts.append(f"{lib} " + ", ".join(labels))
    return "; ".join(parts)


def plot(path, colls, med_all, title):
    """Per collective two panels, one above the other: busbw against size, and the time per
    call against size on a log scale (below 4 KiB every busbw curve sits on zero, and the
    latency is what differs)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import FuncFormatter

    n = len(colls)
    ncols = min(3, n)
    nrows = (n + ncols - 1) // ncols
    fig, axes = plt.subplots(2 * nrows, ncols, figsize=(5.2 * ncols, 3.4 * 2 * nrows), squeeze=False)
    size_fmt = FuncFormatter(lambda v, _: human_size(int(v)) if v >= 1 else "")
    for i, coll in enumerate(colls):
        bw_ax = axes[2 * (i // ncols)][i % ncols]
        lat_ax = axes[2 * (i // ncols) + 1][i % ncols]
        med = med_all.get(coll, {})
        for lib, label in LIBS:
            pts = sorted(med.get(lib, {}).items())
            if not pts:
                continue
            xs = [sz for sz, _ in pts]
            style = dict(marker="o", markersize=3, linewidth=1.5, color=COLORS[lib], label=label)
            bw_ax.plot(xs, [s["busbw"] for _, s in pts], **style)
            lat_ax.plot(xs, [s["time_us"] for _, s in pts], **style)
            bad = [(sz, s) for sz, s in pts if s["wrong"]]
            for ax, key in ((bw_ax, "busbw"), (lat_ax, "time_us")):
                if bad:
                    ax.scatter([b[0] for b in bad], [b[1][key] for b in bad], marker="x", s=60,
                               color="black", zorder=5, label=f"{label}: wrong result")
        for ax in (bw_ax, lat_ax):
            ax.set_xscale("log", base=2)
            ax.xaxis.set_major_formatter(size_fmt)
            ax.set_xlabel("size (bytes)")
            ax.grid(True, which="major", alpha=0.3)
        bw_ax.set_title(f"{coll}: bus bandwidth")
        bw_ax.set_ylabel("busbw (GB/s)")
        bw_ax.set_ylim(bottom=0)
        lat_ax.set_title(f"{coll}: time per call")
        lat_ax.set_ylabel("time (us, log)")
        if lat_ax.get_lines():
            lat_ax.set_yscale("log")
        if bw_ax.get_legend_handles_labels()[0]:
            bw_ax.legend(fontsize=8, loc="upper left")
            lat_ax.legend(fontsize=8, loc="upper left")
        else:
            for ax in (bw_ax, lat_ax):
                ax.text(0.5, 0.5, "no results", ha="center", va="center", transform=ax.transAxes)
    for j in range(n, nrows * ncols):
        axes[2 * (j // ncols)][j % ncols].axis("off")
        axes[2 * (j // ncols) + 1][j % ncols].axis("off")
    fig.suptitle(title, fontsize=11)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--raw", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--np", default="?")
    ap.add_argument("--transport", default="auto")
    ap.add_argument("--colls", help="collectives to report, in order (default: those in --raw)")
    ap.add_argument("--libs", default="weft mpi gloo", help="any of weft base mpi gloo")
    ap.add_argument("--rounds", default="?")
    ap.add_argument("--iters", default="?")
    ap.add_argument("--no-plot", action="store_true")
    a = ap.parse_args()

    data, banners = load(a.raw)
    colls = a.colls.split() if a.colls else [c for c in COLL_FACTORS if any(k[0] == c for k in data)]
    libs = [lib for lib, _ in LIBS if lib in a.libs.split()]
    med_all = {coll: {lib: {sz: summarize(rs) for sz, rs in data.get((coll, lib), {}).items()}
                      for lib in libs} for coll in colls}
    # the same medians over the rounds of one L3 placement only
    med_l3 = {where: {coll: {lib: {sz: summarize(sel) for sz, rs in data.get((coll, lib), {}).items()
                                   if (sel := [r for r in rs if r.get("l3") == where])}
                             for lib in libs} for coll in colls} for where in PLACEMENTS}
    transport = {"auto": "weft auto (shm), Open MPI default BTLs (vader shm), Gloo TCP",
                 "socket": "weft socket, Open MPI --mca btl tcp,self, Gloo TCP"}.get(a.transport, a.transport)
    title = (f"busbw and time per call, {a.np} ranks, float32 sum, {a.transport} transport, "
             f"median of {a.rounds} round(s)")

    md = ["# weft vs Open MPI vs Gloo", "",
          f"- ranks: {a.np}; float32, sum; out-of-place (broadcast: in place, as MPI_Bcast and Gloo's "
          f"broadcast are by definition); {a.iters} timed iterations per size; "
          f"median of {a.rounds} alternating round(s)",
          f"- transport: {transport}",
          f"- busbw in GB/s (nccl-tests factors: {factors_text(colls)}); latency = mean time per call "
          "in us",
          "- weft/peer = peer time / weft time (above 1: weft is faster); WRONG = wrong elements "
          "in the checked call"]
    rooted = [c for c in ("broadcast", "reduce", "gather", "scatter") if c in colls]
    if rooted or "sendrecv" in colls:
        md.append("- " + "; ".join(
            ([f"root 0 ({', '.join(rooted)})"] if rooted else []) +
            (["reduce and gather: only the root's result is checked"]
             if {"reduce", "gather"} & set(colls) else []) +
            (["sendrecv: a ring shift, rank r sends to r+1 and receives from r-1, one call"]
             if "sendrecv" in colls else [])))
    for lib, label in LIBS:
        if banners.get(lib):
            md.append(f"- {label}: `{banners[lib]}`")
    for what in ("skipped", "failed"):
        path = os.path.join(a.raw, f"{what}.txt")
        if os.path.exists(path):
            with open(path) as f:
                md += [f"- {what}: {line.strip()}" for line in f if line.strip()]
    md.append("")
    for coll in colls:
        md += coll_table(coll, med_all[coll], {w: med_l3[w][coll] for w in PLACEMENTS},
                         rounds_placement(data, coll, libs))

    os.makedirs(a.out, exist_ok=True)
    with open(os.path.join(a.out, "compare.md"), "w") as f:
        f.write("\n".join(md) + "\n")
    with open(os.path.join(a.out, "compare.jsonl"), "w") as f:
        for coll in colls:
            for lib, per in med_all[coll].items():
                for sz, s in sorted(per.items()):
                    f.write(json.dumps({"coll": coll, "lib": lib, "size": sz, **s}) + "\n")
            for where in PLACEMENTS:
                for lib, per in med_l3[where][coll].items():
                    for sz, s in sorted(per.items()):
                        f.write(json.dumps({"coll": coll, "lib": lib, "size": sz, "l3": where, **s}) + "\n")
    print(f"compare: wrote {os.path.join(a.out, 'compare.md')}")
    if not a.no_plot:
        plot(os.path.join(a.out, "compare.png"), colls, med_all, title)
        print(f"compare: wrote {os.path.join(a.out, 'compare.png')}")

    wrong = [(coll, lib, sz) for coll in colls for lib, per in med_all[coll].items()
             for sz, s in per.items() if s["wrong"]]
    for coll, lib, sz in wrong:
        why = "" if lib in WEFT_BUILDS else (" (a peer's bug: its row shows WRONG and is left out of"
                                         " every ratio; the exit status is weft's alone)")
        print(f"compare: {lib} {coll} returned wrong results at {human_size(sz)}{why}",
              file=sys.stderr)
    return 1 if any(lib in WEFT_BUILDS for _, lib, _ in wrong) else 0


if __name__ == "__main__":
    sys.exit(main())
