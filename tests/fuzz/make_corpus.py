#!/usr/bin/python3
"""Writes the seed corpus of the fuzz targets into tests/fuzz/corpus/<target>/.

The seeds are small valid (and a few nearly valid) inputs, so that each
fuzzer starts from the interesting formats instead of finding them from
nothing. Every format is written out by hand here (record values, Raft log
entries, protobuf wire format) from the layouts in storage/record.h,
storage/log_entry.cc and proto/dedup/v1/dedup.proto: no dependency beyond the
standard library. Run it again after changing a format; the output is
deterministic, and the fuzzers still work from whatever is committed.

Usage: tests/fuzz/make_corpus.py
"""

import os
import shutil
import struct

HERE = os.path.dirname(os.path.abspath(__file__))
CORPUS = os.path.join(HERE, "corpus")
T0 = 1_700_000_000_000


# --- storage/record.h ------------------------------------------------------

def record(state=1, outcome=0, attempts=1, expire_at=T0 + 86_400_000,
           lease_until=T0 + 60_000, fence=1, created_at=T0, completed_at=0,
           ttl_s=86_400, args_hash=b"", owner=b"", result=b"", version=1):
    header = struct.pack("<BBBBIqqQqqIHH", version, state, outcome, 0,
                         attempts, expire_at, lease_until, fence, created_at,
                         completed_at, ttl_s, len(args_hash), len(owner))
    assert len(header) == 56
    return header + args_hash + owner + result


def record_seeds():
    in_flight = record(args_hash=b"\x01" * 32, owner=b"owner-1")
    done = record(state=2, outcome=1, attempts=2, fence=7,
                  lease_until=T0 + 500, completed_at=T0 + 500,
                  args_hash=b"h", owner=b"o", result=b'{"ok":true}')
    return {
        "in_flight": in_flight,
        "completed_success": done,
        "completed_error": record(state=2, outcome=2, result=b"declined"),
        "empty_strings": record(),
        "truncated_header": in_flight[:40],
        "truncated_owner": in_flight[:56 + 32 + 3],
        "unknown_version": record(version=2),
        "bad_state": record(state=3),
        # Regression: the compaction filter computed expire_at + grace in
        # int64 and overflowed (UB; in practice it dropped such a record).
        "expire_at_max": record(expire_at=2**63 - 1),
    }


# --- storage/log_entry.cc ----------------------------------------------------

def u64(v):
    return struct.pack("<Q", v & 0xFFFFFFFFFFFFFFFF)


def blob(b):
    return u64(len(b)) + b


def fnv1a64(data):
    h = 14695981039346656037
    for c in data:
        h ^= c
        h = (h * 1099511628211) & 0xFFFFFFFFFFFFFFFF
    return h


def op_begin(skey, args_hash, owner, lease_ms, ttl_s):
    return (bytes([1]) + blob(skey) + blob(args_hash) + blob(owner) +
            u64(lease_ms) + u64(ttl_s))


def op_complete(skey, fence, outcome, result, ttl_s):
    return (bytes([2]) + blob(skey) + u64(fence) + bytes([outcome]) +
            blob(result) + u64(ttl_s))


def op_fenced(kind, skey, fence, lease_ms=None):
    out = bytes([kind]) + blob(skey) + u64(fence)
    return out + (u64(lease_ms) if lease_ms is not None else b"")


def entry_body(ops, proposer=1, incarnation=0x1234, sequence=1, now=T0,
               version=1):
    out = (bytes([version]) + u64(proposer) + u64(incarnation) + u64(sequence) +
           u64(now) + u64(len(ops)) + b"".join(ops))
    return out + b"\0" * ((8 - (len(out) + 8) % 8) % 8)


def log_entry_seeds():
    skey = b"\x12\x34\x02nsk1"
    begin = op_begin(skey, b"\x01" * 32, b"owner", 60_000, 86_400)
    complete = op_complete(skey, 5, 1, b"result", 0)
    release = op_fenced(3, skey, 5)
    renew = op_fenced(4, skey, 5, 30_000)
    get = bytes([5]) + blob(skey)
    forget = bytes([6]) + blob(skey)
    member = bytes([7]) + blob(b"127.0.0.2:7001") + u64(2)
    # replication/shard_layout_codec.cc: two groups over the 16,384 slots.
    u32 = lambda v: struct.pack("<I", v)
    layout = bytes([1]) + u64(4) + u32(2)
    for gid, first, end, replicas in ((0, 0, 8192, (1, 2, 3)),
                                      (1, 8192, 16384, (2, 3, 1))):
        layout += u32(gid) + u32(first) + u32(end) + u32(len(replicas))
        layout += b"".join(u64(r) for r in replicas)
    shard_map = bytes([9]) + blob(layout) + u64(3) + u64(4)
    # The target appends the checksum itself; one whole entry (with its
    # checksum) covers the as-is path.
    body = entry_body([begin, complete])
    return {
        "begin": entry_body([begin]),
        "complete": entry_body([complete]),
        "release": entry_body([release]),
        "renew": entry_body([renew]),
        "get_forget": entry_body([get, forget]),
        "set_member": entry_body([member]),
        "set_shard_map": entry_body([shard_map], version=2),
        "mixed": entry_body([begin, renew, complete, release, get]),
        "empty": entry_body([]),
        "with_checksum": body + u64(fnv1a64(body)),
    }


# --- protobuf wire format (dedup.v1 requests) -------------------------------

def varint(v):
    out = bytearray()
    while True:
        b = v & 0x7F
        v >>= 7
        if v:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def field_varint(num, v):
    return varint(num << 3) + varint(v)


def field_bytes(num, b):
    return varint((num << 3) | 2) + varint(len(b)) + b


def begin_req(ns=b"billing", key=b"order-42", args_hash=b"\xab" * 32,
              owner=b"4f7c-uuid", lease_ms=30_000, ttl_s=3600, wait_ms=0):
    out = field_bytes(1, ns) + field_bytes(2, key)
    if args_hash:
        out += field_bytes(3, args_hash)
    if owner:
        out += field_bytes(4, owner)
    for num, v in ((5, lease_ms), (6, ttl_s), (7, wait_ms)):
        if v:
            out += field_varint(num, v)
    return out


def complete_req(ns=b"billing", key=b"order-42", fence=7, outcome=1,
                 result=b'{"id":1}', ttl_s=0):
    out = field_bytes(1, ns) + field_bytes(2, key) + field_varint(3, fence)
    out += field_varint(4, outcome)
    if result:
        out += field_bytes(5, result)
    if ttl_s:
        out += field_varint(6, ttl_s)
    return out


def fenced_req(fence=7, lease_ms=0, ns=b"billing", key=b"order-42"):
    out = field_bytes(1, ns) + field_bytes(2, key) + field_varint(3, fence)
    return out + (field_varint(4, lease_ms) if lease_ms else b"")


def checkpoint_req(fence=7, step=b"charged", data=b"ch_1", lease_ms=0,
                   ns=b"billing", key=b"order-42"):
    out = field_bytes(1, ns) + field_bytes(2, key) + field_varint(3, fence)
    out += field_bytes(4, step) + field_bytes(5, data)
    return out + (field_varint(6, lease_ms) if lease_ms else b"")


def target_req(ns=b"billing", key=b"order-42"):
    return field_bytes(1, ns) + field_bytes(2, key)


# Methods in the order of fuzz_request_validation.cc; limits 0 default,
# 1 tight, 2 wide.
(BEGIN, COMPLETE, RELEASE, RENEW, GET, FORGET, BEGIN_BATCH, COMPLETE_BATCH,
 CHECKPOINT, CHECKPOINT_BATCH) = range(10)


def request(method, limits, body):
    return bytes([method, limits]) + body


def request_seeds():
    tight_begin = begin_req(ns=b"a:b", key=b"k 1~", args_hash=b"h",
                            owner=b"o", lease_ms=300, ttl_s=2, wait_ms=10)
    return {
        "begin": request(BEGIN, 0, begin_req()),
        "begin_defaults": request(BEGIN, 0, begin_req(
            args_hash=b"", owner=b"", lease_ms=0, ttl_s=0)),
        "begin_wait": request(BEGIN, 0, begin_req(wait_ms=60_000)),
        "begin_tight": request(BEGIN, 1, tight_begin),
        "begin_wide": request(BEGIN, 2, begin_req(
            lease_ms=0xFFFFFFFF, ttl_s=0xFFFFFFFF, wait_ms=1)),
        "begin_bad_namespace": request(BEGIN, 0, begin_req(ns=b"bad ns")),
        "begin_bad_key": request(BEGIN, 0, begin_req(key=b"tab\tkey")),
        "complete": request(COMPLETE, 0, complete_req()),
        "complete_error_ttl": request(COMPLETE, 0, complete_req(
            outcome=2, result=b"declined", ttl_s=60)),
        "complete_tight": request(COMPLETE, 1, complete_req(
            ns=b"n", key=b"k", result=b"12345678", ttl_s=5)),
        "complete_no_outcome": request(COMPLETE, 0, complete_req(outcome=0)),
        "release": request(RELEASE, 0, fenced_req()),
        "renew": request(RENEW, 0, fenced_req(lease_ms=10_000)),
        "renew_tight": request(RENEW, 1, fenced_req(
            lease_ms=200, ns=b"n", key=b"k")),
        "get": request(GET, 0, target_req()),
        "forget": request(FORGET, 0, target_req(ns=b"a.b_c:d/e-f")),
        "begin_batch": request(BEGIN_BATCH, 0, field_bytes(
            1, begin_req()) + field_bytes(1, begin_req(key=b"order-43"))),
        "begin_batch_wait": request(BEGIN_BATCH, 0, field_bytes(
            1, begin_req(wait_ms=5))),
        "checkpoint": request(CHECKPOINT, 0, checkpoint_req(lease_ms=5000)),
        "checkpoint_tight": request(CHECKPOINT, 1, checkpoint_req(
            ns=b"n", key=b"k", step=b"abc", data=b"1234", lease_ms=300)),
        "checkpoint_batch": request(CHECKPOINT_BATCH, 1, field_bytes(
            1, checkpoint_req(ns=b"n", key=b"k", step=b"s", data=b"")) +
            field_bytes(1, checkpoint_req(ns=b"n", key=b"k2", step=b"t\n"))),
        "complete_batch": request(COMPLETE_BATCH, 1, field_bytes(
            1, complete_req(ns=b"n", key=b"k", result=b"r")) + field_bytes(
            1, complete_req(ns=b"n", key=b"k2", outcome=2, result=b""))),
    }


# --- fuzz_authority_model.cc operations (3 bytes each) ----------------------

KIND = {"begin": 0, "complete": 1, "release": 2, "renew": 3, "get": 4,
        "forget": 5, "compact": 6}
OWNERS = {"": 0, "a": 1, "b": 2, "c": 3}
STEP_MS = [0, 1, 2, 99, 100, 101, 250, 999, 1000, 1001, 2000, 5000, 60_000,
           61_000, 3_600_000, 86_400_000]
LEASE_MS = [100, 250, 999, 1000, 1001, 5000, 60_000, 3_600_000]
TTL_S = [1, 2, 3, 5, 60, 3600, 86_400, 2_592_000]
# Which fence a fenced call sends: the key's current one, the last one a
# Begin gave for the key, the one before, one never issued.
FENCE = {"current": 0, "given": 1, "older": 2, "future": 3}


def op(kind, key=0, owner="a", hash2=False, lease=1000, ttl=1, error=False,
       result=False, step=0, back=False, fence="current", complete_ttl=False):
    b0 = KIND[kind] | (key << 3) | (OWNERS[owner] << 5) | (hash2 << 7)
    b1 = (LEASE_MS.index(lease) | (TTL_S.index(ttl) << 3) | (error << 6) |
          (result << 7))
    b2 = (STEP_MS.index(step) | (back << 4) | (FENCE[fence] << 5) |
          (complete_ttl << 7))
    return bytes([b0, b1, b2])


def authority_seeds():
    return {
        # Begin, Complete, then a duplicate and a conflict.
        "begin_complete_duplicate": b"".join([
            op("begin"), op("complete", result=True, step=100),
            op("begin", owner="b", step=1), op("begin", hash2=True),
            op("complete", result=True), op("get")]),
        # Another owner waits, the lease lapses, it takes over; the first
        # owner's Complete is stale.
        "takeover_stale_complete": b"".join([
            op("begin", lease=250, ttl=5), op("begin", owner="b", step=100),
            op("begin", owner="a", step=99),
            op("begin", owner="b", step=101, lease=1000),
            op("complete", fence="older", step=1),
            op("complete", fence="given", error=True, complete_ttl=True,
               ttl=60)]),
        # Renew keeps a lease alive, Release frees the key for a new Begin.
        "renew_release": b"".join([
            op("begin", lease=1000), op("renew", step=999, lease=5000),
            op("begin", owner="b", step=1001), op("release", step=1),
            op("begin", owner="b"), op("renew", fence="older")]),
        # Expiry, compaction, a clock step back, Forget, and keys 1 and 2.
        "expiry_compaction": b"".join([
            op("begin", ttl=1, lease=100), op("begin", key=1, owner=""),
            op("complete", step=5000, fence="given"),
            op("compact", step=61_000), op("get", step=1000, back=True),
            op("begin", key=2, owner="c"), op("forget", key=2),
            op("begin", key=2, owner="c"), op("begin", step=1)]),
    }


# --- replication/raft_frame.h -----------------------------------------------

def raft_frame_seeds():
    """Real libraft 0.15 streams (the unit test's captured vectors), each
    behind the harness's 9-byte prefix: limits pick, receiver's term."""
    import re
    path = os.path.join(HERE, "..", "unit", "raft_frame_vectors.h")
    text = open(path).read()
    seeds = {}
    for m in re.finditer(r'\{"([a-z0-9_]+)",\n((?:\s*"[0-9a-f]+"\n?)+),',
                         text):
        data = bytes.fromhex("".join(re.findall(r'"([0-9a-f]+)"',
                                                m.group(2))))
        seeds[m.group(1)] = bytes([0]) + u64(3) + data
    # The crash: AppendEntries, header length 40, 2^32-1 entries;
    # and a term of 2^64-1 (AppendEntriesResult), under the small limits.
    seeds["issue_count_crash"] = bytes([0]) + u64(3) + b"".join(
        map(u64, [1, 40, 3, 7, 3, 6, 0xffffffff]))
    seeds["issue_term_max"] = bytes([5]) + u64(3) + b"".join(
        map(u64, [2, 24, 2**64 - 1, 0, 9]))
    return seeds


def main():
    targets = {
        "fuzz_record_codec": record_seeds(),
        "fuzz_log_entry": log_entry_seeds(),
        "fuzz_request_validation": request_seeds(),
        "fuzz_authority_model": authority_seeds(),
        "fuzz_raft_frame": raft_frame_seeds(),
    }
    for target, seeds in targets.items():
        out = os.path.join(CORPUS, target)
        shutil.rmtree(out, ignore_errors=True)
        os.makedirs(out)
        for name, data in seeds.items():
            with open(os.path.join(out, name), "wb") as f:
                f.write(data)
        print(f"{target}: {len(seeds)} seeds")


if __name__ == "__main__":
    main()
