#!/usr/bin/env python3
"""make_seeds.py: writes the seed corpus of every fuzz target into tests/fuzz/seeds/<name>/
(run from anywhere; the files are committed, this documents how they were made). Layouts
follow lib/bootstrap_wire.h, lib/bootstrap.h and topo/topo.h (x86-64, little endian)."""
import os
import struct

HERE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "seeds")
SECRET = b"weft-fuzz-secret"  # FUZZ_SECRET of fuzz_bootstrap_root.c
ID_MAGIC = 0x54464557
HELLO, REJECT, READY, GATHER, GATHERED, BYE, FAILED, HOST_LEFT = 1, 2, 3, 4, 5, 6, 7, 8


def put(name, fname, data):
    d = os.path.join(HERE, name)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, fname), "wb") as f:
        f.write(data)


def msg(t, payload=b""):
    return struct.pack("<II", t, len(payload)) + payload


def hello(rank, nranks, secret=SECRET, timeout=1000, pid=0):  # weft__bs_hello
    return msg(HELLO, struct.pack("<I16siiii", ID_MAGIC, secret, rank, nranks, timeout, pid))


def conn(data):  # one connection of fuzz_bootstrap_root's input
    return struct.pack("<H", len(data)) + data


# bootstrap_root: whole jobs as connections.
put("bootstrap_root", "two_ranks_gather_bye",
    conn(hello(0, 2) + msg(GATHER, b"abcd") + msg(BYE)) + conn(hello(1, 2) + msg(GATHER, b"efgh") + msg(BYE)))
put("bootstrap_root", "one_rank_barriers", conn(hello(0, 1) + msg(GATHER) + msg(GATHER) + msg(BYE)))
put("bootstrap_root", "wrong_secret", conn(hello(0, 2, secret=b"x" * 16)))
put("bootstrap_root", "nranks_conflict", conn(hello(0, 3)) + conn(hello(1, 2)) + conn(hello(2, 3)))
put("bootstrap_root", "rank_twice_then_gone", conn(hello(1, 3)) + conn(hello(1, 3)) + conn(hello(0, 3)))
put("bootstrap_root", "huge_nranks", conn(hello(5, 100000000)) + conn(hello(9999999, 10000000)) + conn(hello(3, 10000000)))
put("bootstrap_root", "sizes_differ",
    conn(hello(0, 2) + msg(GATHER, b"ab")) + conn(hello(1, 2) + msg(GATHER, b"abc")))

# bootstrap_rank: byte 0 = nranks - 1 (bits 0-1) | gather bytes << 2; then the root's stream.
def job(nranks, nbytes):
    return bytes([(nranks - 1) | (nbytes << 2)])


put("bootstrap_rank", "gathered_twice", job(2, 4) + msg(GATHERED, b"A" * 8) + msg(GATHERED, b"B" * 8))
put("bootstrap_rank", "failed_notice", job(3, 2) + msg(FAILED, struct.pack("<i", 1) + b"rank 1 exited\0"))
put("bootstrap_rank", "reject", job(1, 0) + msg(REJECT, struct.pack("<i", 7) + b"refused\0"))
put("bootstrap_rank", "short_gathered", job(4, 8) + msg(GATHERED, b"C" * 5))
put("bootstrap_rank", "ready_then_eof", job(2, 1) + msg(READY, struct.pack("<i", -1)))
put("bootstrap_rank", "host_left_then_failed", job(3, 1) + msg(READY, struct.pack("<i", 0)) + msg(HOST_LEFT)
    + msg(FAILED, struct.pack("<i", 0) + b"rank 0 exited\0"))

# unique_id: hex strings of ids (128 bytes -> 256 digits).
def id_hex(family, addr, port, magic=ID_MAGIC, version=1):
    raw = struct.pack("<IHHHHI16s16s", magic, version, family, port, 0, 0, addr, SECRET)
    return (raw + b"\0" * (128 - len(raw))).hex().encode()


put("unique_id", "ipv4", id_hex(2, bytes([127, 0, 0, 1]) + b"\0" * 12, 29500))
put("unique_id", "ipv6", id_hex(10, b"\0" * 15 + b"\1", 40000))
put("unique_id", "upper_case", id_hex(2, bytes([10, 1, 2, 3]) + b"\0" * 12, 1).upper())
put("unique_id", "bad_magic", id_hex(2, b"\0" * 16, 1, magic=1))
put("unique_id", "short", b"0123abcd")

# env: byte 0 picks the parser (fuzz_env.c), the rest is the value.
for i, (sel, val) in enumerate([(0, b"120000"), (0, b"0x10"), (1, b"64K"), (1, b"4096"), (2, b"^LL128,Simple"),
                                (2, b"LL"), (3, b"all_reduce:ring,tree;broadcast:chain"), (4, b"node[001-004,7],gpu2"),
                                (5, b"0-3,8,10-11")]):
    put("env", "%02d_parser%d" % (i, sel), bytes([sel]) + val)

# ib_config: byte 0 even: WEFT_IB_HCA; odd: every WEFT_IB_* set to the value.
for i, (sel, val) in enumerate([(0, b"^=mlx5_0:1,mlx5_1"), (0, b"mlx5"), (0, b"=mlx5_0:0"), (1, b"1"), (1, b"-1")]):
    put("ib_config", "%02d_%s" % (i, "hca" if sel == 0 else "all"), bytes([sel]) + val)

# topo_xml: the format of topo/xml.c.
XML = b"""<?xml version="1.0" encoding="UTF-8"?>
<weft-topology version="1" nranks="2" nhosts="1">
  <host index="0" hostname="node1" hash="0x9b1c00000000001" discovery="sysfs" packages="1"
        numa-nodes="1" cores="2" pus="2" l3-caches="1">
    <device kind="nic" name="eth0" pci="0000:00:03.0" numa="0" speed-mbps="-1"/>
    <device kind="gpu" name="cuda0" pci="0000:3b:00.0" path="/sys/devices/pci0000:00/0000:3b:00.0" cpus="0-1" numa="0" speed-mbps="-1"/>
  </host>
  <rank index="0" host="0" numa="0" core-group="0" cpuset="0" nic="eth0" nic-speed-mbps="-1" nic-numa="0" pid="4242"/>
  <rank index="1" host="0" numa="0" core-group="0" cpuset="1" nic="eth0" nic-speed-mbps="-1" nic-numa="0" pid="4243"/>
</weft-topology>
"""
put("topo_xml", "one_host_two_ranks.xml", XML)
put("topo_xml", "nvlink.xml", XML.replace(b'l3-caches="1">', b'l3-caches="1" nvlink="nvml">').replace(
    b"  </host>", b'    <nvlink a="0" b="1" links="4"/>\n  </host>'))
put("topo_xml", "two_hosts.xml", b"""<?xml version='1.0'?>
<weft-topology version='1' nranks='2' nhosts='2'>
  <host index='0' hostname='a&amp;b' hash='1' discovery='hwloc 2.9.0' packages='2' numa-nodes='2' cores='8' pus='16' l3-caches='2'/>
  <host index='1' hostname='c' hash='2' discovery='sysfs' packages='1' numa-nodes='1' cores='4' pus='4' l3-caches='1'/>
  <rank index='0' host='0' numa='-1' core-group='-1' cpuset='0-15' nic='ib0' nic-speed-mbps='100000' nic-numa='1' pid='1'/>
  <rank index='1' host='1' numa='0' core-group='0' cpuset='2,3' nic='eth0' nic-speed-mbps='-1' nic-numa='-1' pid='2'/>
</weft-topology>
""")
put("topo_xml", "not_well_formed.xml", b"<weft-topology version='1'><host")

# topo_summary: weft__topo_summary structs (topo/topo.h), 2944 bytes each (with tail padding).
DEV = struct.Struct("<8s32s16sii128s128s")
HOST_HEAD = struct.Struct("<Q64s16siiiiii")
RANK = struct.Struct("<iiiiiii32s128s")
SUMMARY_BYTES = 2944


def cpus(*ids):
    b = bytearray(128)
    for c in ids:
        b[c // 8] |= 1 << (c % 8)
    return bytes(b)


def summary(rank, hosthash, ndev, numa, group, cpu):
    devs = b"".join(DEV.pack(b"nic", b"eth%d" % i, b"0000:00:0%d.0" % i, 0, 1000, b"", cpus(0, 1)) for i in range(ndev))
    devs += b"\0" * (DEV.size * (8 - ndev))
    host = HOST_HEAD.pack(hosthash, b"host%d" % hosthash, b"sysfs", 1, 1, 2, 2, 1, ndev) + devs + b"\0" * 64 + struct.pack("<ii", 0, 0)
    self_ = RANK.pack(0, 0, numa, group, 100 + rank, -1, -1, b"eth0", cpus(cpu))
    s = struct.pack("<Ii", 0x746F706F, rank) + host + self_
    return s + b"\0" * (SUMMARY_BYTES - len(s))


put("topo_summary", "one_rank", summary(0, 7, 1, 0, 0, 0))
put("topo_summary", "two_ranks_one_host", summary(0, 7, 2, 0, 0, 0) + summary(1, 7, 2, 0, 0, 1))
put("topo_summary", "three_ranks_two_hosts", summary(0, 7, 1, 0, 0, 0) + summary(1, 9, 0, -1, -1, 0) + summary(2, 7, 1, 0, 1, 1))
put("topo_summary", "bad_magic", b"\0" * 64)
