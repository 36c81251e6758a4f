#!/usr/bin/env python3
"""nccl_tests_format.py: a strict reader of nccl-tests' output, text and -J JSON, to check
that weft's perf programs print exactly what scripts written for nccl-tests read.

The expectations come from the printf formats of nccl-tests' src/util.cu (2.17 to 2.19):
the header lines, the column heads printed with "# %10s  %12s  %8s  %6s  %6s  %7s  %6s
%6s  %6s ..." and rows printed with "%12li  %12li  %8s  %6s  %6s" then, per half,
"  %7s  %6s  %6s  %6g" (or "    N/A"), so every field sits at a fixed column. Extra
columns (-I's four per half, -S's timestamp, weft's -L p50/p99) may follow the 13 columns,
each 2 spaces then a right-aligned field.

    nccl_tests_format.py text FILE [--rows N] [--extra K]   check a text output
    nccl_tests_format.py json FILE [--rows N] [--text FILE]  check a -J document (and that
                                                              its results match the text's)
    nccl_tests_format.py selftest                             the reader rejects near misses
Exit status 0 when the input is well-formed, 1 with the reason on stderr when not.
"""
import json
import re
import sys

HEAD_FMT = "# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %6s  %7s  %6s  %6s  %6s"
HEADS = [
    "# %10s  %12s  %8s  %6s  %6s           out-of-place                       in-place" % ("", "", "", "", ""),
    HEAD_FMT % ("size", "count", "type", "redop", "root", "time", "algbw", "busbw", "#wrong",
                "time", "algbw", "busbw", "#wrong"),
    HEAD_FMT % ("(B)", "(elements)", "", "", "", "(us)", "(GB/s)", "(GB/s)", "", "(us)",
                "(GB/s)", "(GB/s)", ""),
]
# (width, kind) of a row's fields, each after two spaces but the first; kind: i integer,
# s word, f figure, w #wrong. -I adds four figures (i_min i_max i_p99 i_cv%) to each half.
HALF = [(7, "f"), (6, "f"), (6, "f"), (6, "w")]


def layout(per_iter):
    cols = [(12, "i"), (12, "i"), (8, "s"), (6, "s"), (6, "i")]
    for _ in range(2):
        cols += HALF + ([(7, "f")] * 4 if per_iter else [])
    out, at = [], 0
    for width, kind in cols:
        out.append((at, width, kind))
        at += width + 2
    return out, at - 2


FIELDS, ROW_WIDTH = layout(False)  # 13 fields, 118 characters
DEVICE = re.compile(r"^#  Rank [ \d]\d* Group [ \d]\d* Pid [ \d]{5}\d* on [ \S]{9}\S* device [ \d]\d* \[[^\]]*\] .+$")
TIME_ROW = "# Collective test starting: "


class Bad(Exception):
    pass


def field(line, start, width, kind, where):
    text = line[start:start + width]
    if len(text) != width or text.rstrip() != text or not text.strip() or " " in text.strip():
        raise Bad(f"{where}: field at columns {start}-{start + width} is {text!r}, "
                  f"not one right-aligned word of width {width}")
    t = text.strip()
    if kind == "i":
        return int(t)
    if kind == "f":
        return float(t)
    if kind == "w":
        return None if t == "N/A" else int(float(t))
    return t


def parse_row(line, extra, where, per_iter=False):
    fields, row_width = layout(per_iter)
    if len(line) < row_width:
        raise Bad(f"{where}: {len(line)} characters, a row has {row_width} before any extra column")
    for start, width, _ in fields:  # the separators: exactly two spaces before each field
        if start and line[start - 2:start] != "  ":
            raise Bad(f"{where}: no two-space gap before column {start}: {line!r}")
    vals = [field(line, s, w, k, where) for s, w, k in fields]
    if per_iter:  # keep the 13 nccl-tests columns in order; the i_* ones go to "iter"
        iters = vals[9:13] + vals[17:21]
        vals = vals[:9] + vals[13:17]
    rest = line[row_width:]
    extras = re.findall(r"  ( *\S+)", rest)
    if "".join("  " + e for e in extras) != rest.rstrip("\n") and not re.fullmatch(r"( +\S+)*", rest):
        raise Bad(f"{where}: extra columns {rest!r} are not two-space separated fields")
    if extra is not None and len(rest.split()) != extra:
        raise Bad(f"{where}: {len(rest.split())} extra columns, expected {extra}")
    keys = ["size", "count", "type", "redop", "root", "oop_time", "oop_algbw", "oop_busbw",
            "oop_wrong", "ip_time", "ip_algbw", "ip_busbw", "ip_wrong"]
    row = dict(zip(keys, vals))
    row["extra"] = rest.split()
    row["iter"] = iters if per_iter else []
    return row


def parse_text(text, extra=None):
    lines = text.split("\n")
    while lines and re.match(r"^# (Writing JSON output to |skipping json output)", lines[0]):
        lines = lines[1:]  # printed by nccl-tests' -J before everything else
    if not re.match(r"^# nccl-tests version \S+ .*$", lines[0]):
        raise Bad(f"line 1 is not '# nccl-tests version ...': {lines[0]!r}")
    if not lines[1].startswith(TIME_ROW):
        raise Bad(f"line 2 is not '{TIME_ROW}PROGRAM': {lines[1]!r}")
    prog = lines[1][len(TIME_ROW):]
    if not re.match(r"^# nThread \d+ nGpus \d+ minBytes \d+ maxBytes \d+ step: \d+\((factor|bytes)\) "
                    r"warmup iters: \d+ iters: \d+ agg iters: \d+ validation: \d+ graph: \d+ "
                    r"unalign: \d+$", lines[2]):
        raise Bad(f"line 3 is not nccl-tests' options line: {lines[2]!r}")
    i = 3
    while lines[i] != "#":
        if not lines[i].startswith("# "):
            raise Bad(f"line {i + 1}: expected '#' or a '# ...' note, got {lines[i]!r}")
        i += 1
    if lines[i + 1] != "# Using devices":
        raise Bad(f"line {i + 2}: expected '# Using devices', got {lines[i + 1]!r}")
    i += 2
    devices = 0
    while DEVICE.match(lines[i]):
        devices += 1
        i += 1
    if devices == 0 or lines[i] != "#":
        raise Bad(f"line {i + 1}: expected device lines then '#', got {lines[i]!r}")
    i += 1
    per_iter = "per-iteration" in lines[i]
    for k, head in enumerate(HEADS):
        got = lines[i + k]
        if per_iter:  # -I: nccl-tests' wider heads; check their first five columns
            if not got.startswith(head[:54]):
                raise Bad(f"line {i + k + 1}: column heads {got!r}")
        elif not got.startswith(head):
            raise Bad(f"line {i + k + 1}: column heads\n  {got!r}\nexpected to start with\n  {head!r}")
    i += 3
    rows = []
    while i < len(lines) and lines[i] and not lines[i].startswith("#"):
        rows.append(parse_row(lines[i], extra, f"line {i + 1}", per_iter))
        i += 1
    m = re.match(r"^# Out of bounds values : (\d+) (OK|FAILED)$", lines[i])
    if not m:
        raise Bad(f"line {i + 1}: expected the out-of-bounds line, got {lines[i]!r}")
    if not re.match(r"^# Avg bus bandwidth    : \S+ (|OK|FAILED)$", lines[i + 1]):
        raise Bad(f"line {i + 2}: expected the average bus bandwidth line, got {lines[i + 1]!r}")
    if lines[i + 2] != "#" or lines[i + 3] != f"# Collective test concluded: {prog}":
        raise Bad(f"line {i + 3}: expected '#' and '# Collective test concluded: {prog}'")
    return {"program": prog, "devices": devices, "rows": rows, "errors": int(m[1])}


def need(obj, key, types, where):
    if key not in obj:
        raise Bad(f"{where}: no key {key!r} (has {sorted(obj)})")
    if not isinstance(obj[key], types) or isinstance(obj[key], bool):
        raise Bad(f"{where}.{key}: {obj[key]!r} is not {types}")
    return obj[key]


def flag(obj, key, where):
    if obj.get(key) not in ("true", "false"):
        raise Bad(f"{where}.{key}: nccl-tests writes booleans as \"true\"/\"false\", got {obj.get(key)!r}")


def check_half(half, where):
    if ("time" in half) == ("cpu_time" in half):
        raise Bad(f"{where}: needs exactly one of time / cpu_time")
    for k in ("alg_bw", "bus_bw"):
        need(half, k, (int, float), where)
    if half.get("nwrong", 0) is not None:
        need(half, "nwrong", (int, float), where)


RESULT_KEYS = {"size", "count", "type", "redop", "root", "out_of_place", "in_place",
               "out_of_place_per_iter", "in_place_per_iter", "actual_iterations", "experiment_name"}
CONFIG_KEYS = {"nthreads", "ngpus", "minimum_bytes", "maximum_bytes", "step_factor", "step_bytes",
               "warmup_iters", "iterations", "aggregated_iterations", "validation", "graph",
               "blocking_collectives", "per_iter_timing", "per_iter_skip", "parallel_init", "devices"}
TOP_KEYS = ["version", "start_time", "args", "env", "nccl_version", "config", "results",
            "out_of_bounds", "average_bus_bandwidth", "errors", "end_time"]


def parse_json(doc, own_key=None):
    """own_key: the one extra key allowed in config and in each result (weft's "weft")."""
    if list(doc) != TOP_KEYS:
        raise Bad(f"top-level keys {list(doc)}, expected {TOP_KEYS}")
    if doc["version"] != 3:
        raise Bad(f"version {doc['version']!r}, expected 3")
    for k in ("args", "env", "errors"):
        if not all(isinstance(x, str) for x in need(doc, k, list, "document")):
            raise Bad(f"{k}: not a list of strings")
    need(doc, "nccl_version", int, "document")
    cfg = need(doc, "config", dict, "document")
    allowed = CONFIG_KEYS | ({own_key} if own_key else set())
    if set(cfg) - allowed:
        raise Bad(f"config: keys {sorted(set(cfg) - allowed)} are not nccl-tests'")
    for k in ("nthreads", "ngpus", "minimum_bytes", "maximum_bytes", "warmup_iters", "iterations",
              "aggregated_iterations", "validation", "graph", "per_iter_skip"):
        need(cfg, k, int, "config")
    for k in ("blocking_collectives", "per_iter_timing", "parallel_init"):
        flag(cfg, k, "config")
    for n, dev in enumerate(need(cfg, "devices", list, "config")):
        for k, t in (("rank", int), ("group", int), ("pid", int), ("hostname", str),
                     ("device", int), ("device_hex", str), ("device_info", str)):
            need(dev, k, t, f"config.devices[{n}]")
    allowed = RESULT_KEYS | ({own_key} if own_key else set())
    for n, r in enumerate(need(doc, "results", list, "document")):
        where = f"results[{n}]"
        if set(r) - allowed:
            raise Bad(f"{where}: keys {sorted(set(r) - allowed)} are not nccl-tests'")
        for k, t in (("size", int), ("count", int), ("type", str), ("redop", str), ("root", str),
                     ("actual_iterations", int), ("experiment_name", str)):
            need(r, k, t, where)
        if len(r["root"]) < 6 or r["root"] != r["root"].rjust(6):
            raise Bad(f"{where}.root: {r['root']!r} is not nccl-tests' %6i text")
        check_half(need(r, "out_of_place", dict, where), where + ".out_of_place")
        check_half(need(r, "in_place", dict, where), where + ".in_place")
    oob = need(doc, "out_of_bounds", dict, "document")
    need(oob, "count", int, "out_of_bounds")
    flag(oob, "okay", "out_of_bounds")
    abw = need(doc, "average_bus_bandwidth", dict, "document")
    need(abw, "bandwidth", (int, float), "average_bus_bandwidth")
    if abw.get("okay") not in ("true", "false", "unchecked"):
        raise Bad(f"average_bus_bandwidth.okay: {abw.get('okay')!r}")
    return doc


def same_rows(text_rows, results):
    if len(text_rows) != len(results):
        raise Bad(f"{len(text_rows)} text rows, {len(results)} JSON results")
    for t, j in zip(text_rows, results):
        if (t["size"], t["count"], t["type"], t["redop"]) != (j["size"], j["count"], j["type"], j["redop"]) \
           or t["root"] != int(j["root"]):
            raise Bad(f"text row {t} and JSON result {j} describe different calls")
        got = j["out_of_place"].get("time", j["out_of_place"].get("cpu_time"))
        if abs(got - t["oop_time"]) > max(0.006, 0.0006 * got):
            raise Bad(f"size {t['size']}: text time {t['oop_time']} vs JSON {got}")


def selftest():
    """The reader must reject near misses of the format, or it proves nothing."""
    good = "%12d  %12d  %8s  %6s  %6s" % (8, 2, "float", "sum", "%6i" % -1) + \
           ("  %7s  %6s  %6s  %6g" % ("1.00", "0.01", "0.01", 0)) * 2
    parse_row(good, 0, "good")
    bad = {
        "#wrong as %5s (weft before 0.2)": good[:79] + good[80:],
        "time column one wider": good[:54] + " " + good[54:],
        "a field left-aligned": good.replace("   float", "float   ", 1),
        "a figure with a space": good[:58] + " " + good[59:],
    }
    for what, line in bad.items():
        try:
            parse_row(line, 0, what)
        except Bad:
            continue
        raise Bad(f"selftest: the reader accepted a row with {what}: {line!r}")
    print("selftest: the reader rejects %d near misses" % len(bad), end="")


def main(argv):
    import argparse
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("what", choices=["text", "json", "selftest"])
    ap.add_argument("file", nargs="?")
    ap.add_argument("--rows", type=int)
    ap.add_argument("--extra", type=int, help="extra columns after the 13 (default: any)")
    ap.add_argument("--text", help="with json: the run's text output, whose rows must match")
    ap.add_argument("--own-key", help="with json: the one extra key allowed (weft's: weft)")
    a = ap.parse_args(argv)
    try:
        if a.what == "selftest":
            selftest()
            print()
            return 0
        if a.what == "text":
            out = parse_text(open(a.file).read(), a.extra)
            n = len(out["rows"])
        else:
            doc = parse_json(json.load(open(a.file)), a.own_key)
            n = len(doc["results"])
            if a.text:
                same_rows(parse_text(open(a.text).read())["rows"], doc["results"])
        if a.rows is not None and n != a.rows:
            raise Bad(f"{n} rows, expected {a.rows}")
    except (Bad, ValueError, KeyError, IndexError, OSError) as e:
        print(f"{a.file}: not nccl-tests' format: {type(e).__name__}: {e}", file=sys.stderr)
        return 1
    print(f"{a.file}: nccl-tests' {a.what} format, {n} rows")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
