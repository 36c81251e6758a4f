#!/usr/bin/env python3
"""weft-flight: reads the flight recorder files of all ranks of a weft job and says which
ranks are behind, which call each rank is in, and which pair is stuck.

Usage: weft-flight [--json] [--nranks N] PATH...
PATH: files written under WEFT_FLIGHT_RECORDER_DIR (weft-flight.<comm>.rank<R>.json) or
directories holding them. Files of several communicators are reported one after another.

Each rank's file says the last operations it ran (oldest first) and, for the one in flight
when it was written, the peers it waits for. Collectives are numbered per communicator, so
"all_reduce #41" is the same call on every rank: a rank whose latest collective has a lower
number than another's is behind. A rank that left no file (killed, stopped with SIGSTOP, or
never dumped) is named as such, and the ranks that wait for it point at it.

Exit status: 0 when a report was printed, 1 when no file could be read, 2 on bad usage."""
import argparse
import glob
import json
import os
import sys

P2P = ("send", "recv", "send/recv group")


def load(paths):
    files = []
    for p in paths:
        if os.path.isdir(p):
            files += sorted(glob.glob(os.path.join(p, "weft-flight.*.json")))
        else:
            files.append(p)
    comms, bad = {}, []
    for f in files:
        try:
            with open(f) as fh:
                d = json.load(fh)
            if d.get("weft_flight_recorder") != 1:
                raise ValueError("not a weft flight recorder file")
        except (OSError, ValueError) as e:
            bad.append("%s: %s" % (f, e))
            continue
        comms.setdefault(d["comm"], {})[d["rank"]] = d
    return comms, bad


def ranges(ranks):
    """[0, 1, 2, 5] -> 'ranks 0-2, 5'; [3] -> 'rank 3'."""
    ranks = sorted(ranks)
    parts, i = [], 0
    while i < len(ranks):
        j = i
        while j + 1 < len(ranks) and ranks[j + 1] == ranks[j] + 1:
            j += 1
        parts.append(str(ranks[i]) if i == j else "%d-%d" % (ranks[i], ranks[j]))
        i = j + 1
    return ("rank " if len(ranks) == 1 else "ranks ") + ", ".join(parts)


def call_name(e):
    if e["coll"] in P2P:
        peer = " peer %d" % e["peer"] if e.get("peer", -1) >= 0 else ""
        return "%s%s (this rank's p2p call #%d)" % (e["coll"], peer, e["seq"])
    return "%s #%d" % (e["coll"], e["seq"])


def position(d):
    """(state, entry, waiting_for): where rank d is: 'in' a call (running or failed in it,
    with the peers it waited for) or 'idle' after its last call (None if it ran none)."""
    entries = d.get("entries") or []
    fl = d.get("in_flight")
    last = entries[-1] if entries else None
    if fl is not None:
        return "in", last, fl.get("waiting_for", [])
    if last is not None and last["state"] == "failed":
        return "in", last, []
    return "idle", last, []


def last_collective(d):
    for e in reversed(d.get("entries") or []):
        if e["coll"] not in P2P:
            return e
    return None


def analyse(comm, ranks, nranks_opt):
    nranks = nranks_opt or max(d["nranks"] for d in ranks.values())
    out = []
    missing = [r for r in range(nranks) if r not in ranks]
    pos = {r: position(d) for r, d in ranks.items()}
    # Who each present rank waits for (the peers of its call in flight).
    waits = {r: p[2] for r, p in pos.items() if p[0] == "in"}
    # Group ranks by the call they are in (or idle after).
    groups = {}
    for r, (state, e, _) in pos.items():
        key = (state, e["coll"] if e else None, e["seq"] if e else 0, e["state"] if e else None)
        groups.setdefault(key, []).append(r)
    front = max((last_collective(d)["seq"] for d in ranks.values() if last_collective(d)), default=0)
    out.append("communicator %s: %d ranks, files from %s" % (comm, nranks, ranges(ranks.keys())))
    if missing:
        out.append("%s left no file (killed, stopped or never dumped: its state is unknown)" % ranges(missing))
    order = sorted(groups.items(), key=lambda kv: (-(kv[0][2] if kv[0][1] not in P2P else 0), kv[0][0] != "in"))
    for (state, coll, seq, est), rs in order:
        e = pos[rs[0]][1]
        if e is None:
            out.append("%s ran no operation yet" % ranges(rs))
            continue
        lc = last_collective(ranks[rs[0]])
        behind = lc is not None and lc["seq"] < front
        if state == "in":
            verb = "still in" if behind else "in"
            how = "" if est == "running" else " (it failed there: %s)" % (e.get("status") or "error")
            w = sorted({p for r in rs for p in waits.get(r, [])} - set(rs))
            wtxt = ", waiting for %s" % ranges(w) if w else ""
            out.append("%s %s %s %s%s%s" % (ranges(rs), "is" if len(rs) == 1 else "are", verb, call_name(e), how, wtxt))
        else:
            nxt = " and has not called #%d yet" % front if behind else ""
            out.append("%s %s idle after %s (%s)%s" % (ranges(rs), "is" if len(rs) == 1 else "are",
                                                    call_name(e), e["state"], nxt))
    # The stuck pair: the rank furthest behind, and whom it waits for; or, when a rank left
    # no file, the ranks that wait for it.
    present_behind = [r for r, d in ranks.items() if last_collective(d) and last_collective(d)["seq"] < front]
    stuck = []
    for r in sorted(present_behind, key=lambda r: last_collective(ranks[r])["seq"]):
        for p in waits.get(r, []):
            stuck.append("rank %d (behind, in %s) waits for rank %d" % (r, call_name(pos[r][1]), p))
        if not waits.get(r) and pos[r][0] == "idle":
            waiters = sorted(q for q, w in waits.items() if r in w)
            stuck.append("rank %d is behind: it finished %s and did not call the next collective%s"
                         % (r, call_name(last_collective(ranks[r])),
                            "; %s wait%s for it" % (ranges(waiters), "s" if len(waiters) == 1 else "") if waiters else ""))
    for m in missing:
        waiters = sorted(r for r, w in waits.items() if m in w)
        if waiters:
            stuck.append("%s wait%s for rank %d, which left no file" % (ranges(waiters), "s" if len(waiters) == 1 else "", m))
    # All in the same call and waiting in a cycle: the rank that failed long after the
    # others (its timeout ran late) was not running: stopped, or descheduled.
    failed_at = {r: pos[r][1]["end_ns"] for r in ranks if pos[r][0] == "in" and pos[r][1]
                 and pos[r][1]["state"] == "failed" and pos[r][1]["end_ns"]}
    if failed_at:
        first = min(failed_at.values())
        half = max(d.get("timeout_ms", 0) for d in ranks.values()) * 500000
        for late in sorted(r for r, t in failed_at.items() if t - first > half):
            waiters = sorted(r for r, w in waits.items() if late in w and r != late)
            who = "%s wait%s for rank %d" % (ranges(waiters), "s" if len(waiters) == 1 else "", late) \
                if waiters else "rank %d" % late
            stuck.append("%s, which is in %s and failed %.1f s after the others (it was not running: "
                         "stopped or descheduled?)" % (who, call_name(pos[late][1]), (failed_at[late] - first) / 1e9))
    if not stuck:
        for r, w in sorted(waits.items()):
            for p in w:
                if p in ranks and pos[p][0] == "idle":
                    stuck.append("rank %d waits for rank %d, which is not in any call" % (r, p))
    for r in sorted(waits):
        fl = ranks[r].get("in_flight") or {}
        for pe in fl.get("peers", []):
            if pe["peer"] not in waits[r]:
                continue
            parts = []
            for k, what in (("recv_pending", "recv"), ("send_pending", "send")):
                if pe.get(k):
                    parts.append("%s %d of %d bytes" % (what, pe[k][0], pe[k][1]))
            out.append("  rank %d waits for rank %d (%s; this call so far: %d bytes sent, %d received)"
                       % (r, pe["peer"], ", ".join(parts), pe["sent"], pe["received"]))
    if stuck:
        out.append("stuck: " + "; ".join(stuck))
    elif all(p[0] == "idle" for p in pos.values()) and not missing and not present_behind:
        out.append("no rank is in a call: nothing is stuck")
    for r, d in sorted(ranks.items()):
        if d.get("error"):
            out.append("rank %d's error (%s): %s" % (r, d.get("reason"), d["error"]))
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(prog="weft-flight", description=__doc__.split("\n\n")[0])
    ap.add_argument("paths", nargs="+", help="flight recorder files or directories")
    ap.add_argument("--nranks", type=int, default=0, help="ranks in the job, when no file says")
    ap.add_argument("--json", action="store_true", help="print the report lines as a JSON list")
    a = ap.parse_args(argv)
    comms, bad = load(a.paths)
    for b in bad:
        print("weft-flight: skipped %s" % b, file=sys.stderr)
    if not comms:
        print("weft-flight: no flight recorder file found in %s" % " ".join(a.paths), file=sys.stderr)
        return 1
    report = []
    for comm, ranks in sorted(comms.items()):
        report += analyse(comm, ranks, a.nranks)
    if a.json:
        print(json.dumps(report, indent=1))
    else:
        print("\n".join(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
