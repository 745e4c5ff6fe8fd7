#!/usr/bin/env python3
"""Captures libraft's peer traffic in a real dedupd group and writes the
test vectors of raft_frame_test (tests/unit/raft_frame_vectors.h).

Starts 3 nodes on 127.0.0.1 with tcpdump on their Raft ports, then drives
every message type: elections (pre-vote), entries, a leadership transfer
(TimeoutNow), a follower stopped long enough to need a snapshot
(InstallSnapshot), a fourth node added and removed (configuration-change
entries). Each TCP connection towards a Raft port becomes one stream; the
raft_uv handshake (u64 protocol, u64 server id, u64 address length, padded
address) is cut off, since the validator sees only the message stream.

A developer tool (needs root for tcpdump, and tcpdump itself): the vectors
it writes are committed, the tests never run it.
Usage: tests/unit/capture_raft_frames.py BUILD_DIR [OUT_HEADER]
"""

import collections
import os
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time

BUILD = sys.argv[1]
HEADER = sys.argv[2] if len(sys.argv) > 2 else os.path.join(
    os.path.dirname(os.path.abspath(__file__)), "raft_frame_vectors.h")
DEDUPD = os.path.join(BUILD, "server", "dedupd")
DEDUPCTL = os.path.join(BUILD, "client", "dedupctl")
WORK = tempfile.mkdtemp(prefix="raft-capture-")


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


N = 4  # the fourth joins later
RAFT = [free_port() for _ in range(N)]
CLIENT = [free_port() for _ in range(N)]
PEERS = ",".join(f"{i + 1}=127.0.0.1:{RAFT[i]}=127.0.0.1:{CLIENT[i]}"
                 for i in range(3))
procs = [None] * N


def start(i):
    flags = [f"--node_id={i + 1}", f"--peers={PEERS}",
             f"--raft_address=127.0.0.1:{RAFT[i]}",
             f"--address=127.0.0.1:{CLIENT[i]}",
             f"--data_dir={WORK}/n{i + 1}", "--event_log=off",
             "--metrics_address=", "--snapshot_threshold=64",
             "--snapshot_trailing=16"]
    if i == 3:
        flags.append("--join")
    log = open(f"{WORK}/n{i + 1}.log", "ab")
    procs[i] = subprocess.Popen([DEDUPD, *flags], stdout=log, stderr=log)


def stop(i):
    procs[i].send_signal(signal.SIGTERM)
    procs[i].wait(30)


def ctl(*args):
    addrs = ",".join(f"127.0.0.1:{c}" for c in CLIENT[:3])
    r = subprocess.run([DEDUPCTL, f"--address={addrs}", *args],
                       capture_output=True, text=True, timeout=120)
    print("dedupctl", *args[:2], "->", r.returncode, flush=True)
    return r


def writes(n, tag):
    for k in range(n):
        r = subprocess.run(
            [DEDUPCTL, "--address=" + ",".join(
                f"127.0.0.1:{c}" for c in CLIENT[:3]), "begin", "ns",
             f"{tag}-{k}"], capture_output=True, text=True, timeout=60)
        fence = [line.split(":", 1)[1].split()[0]
                 for line in r.stdout.splitlines() if line.startswith("fence")]
        if fence:
            subprocess.run(
                [DEDUPCTL, "--address=" + ",".join(
                    f"127.0.0.1:{c}" for c in CLIENT[:3]), "complete", "ns",
                 f"{tag}-{k}", fence[0], "--result=" + "r" * (k % 13)],
                capture_output=True, timeout=60)


def drive():
    for i in range(3):
        start(i)
    time.sleep(4)
    writes(30, "a")
    ctl("cluster", "transfer")
    time.sleep(2)
    writes(10, "b")
    stop(2)
    writes(150, "c")
    start(2)
    time.sleep(6)
    start(3)
    time.sleep(2)
    ctl("cluster", "add", "4", f"127.0.0.1:{RAFT[3]}",
        f"127.0.0.1:{CLIENT[3]}")
    time.sleep(4)
    writes(10, "d")
    ctl("cluster", "remove", "4")
    time.sleep(2)


def streams(pcap):
    """Each connection's bytes towards a Raft port, in order."""
    b = open(pcap, "rb").read()
    assert struct.unpack_from("<I", b, 0)[0] == 0xa1b2c3d4
    link = {1: 14, 113: 16}[struct.unpack_from("<I", b, 20)[0]]
    flows = collections.OrderedDict()
    o = 24
    while o + 16 <= len(b):
        incl = struct.unpack_from("<I", b, o + 8)[0]
        ip = b[o + 16 + link:o + 16 + incl]
        o += 16 + incl
        if ip[0] >> 4 != 4:
            continue
        tcp = ip[(ip[0] & 15) * 4:struct.unpack_from(">H", ip, 2)[0]]
        sport, dport, seq = struct.unpack_from(">HHI", tcp, 0)
        if dport not in RAFT:
            continue
        f = flows.setdefault((sport, dport), {"isn": None, "segs": {}})
        if tcp[13] & 0x02:
            f["isn"] = seq + 1
        elif tcp[(tcp[12] >> 4) * 4:]:
            f["segs"].setdefault(seq, tcp[(tcp[12] >> 4) * 4:])
    for key, f in flows.items():
        if f["isn"] is None:
            continue
        out, nxt = bytearray(), f["isn"]
        for s in sorted(f["segs"], key=lambda s: (s - f["isn"]) & 0xffffffff):
            d = f["segs"][s]
            behind = (nxt - s) & 0xffffffff
            if behind and behind < 0x80000000:  # a retransmission
                d = d[behind:]
            elif s != nxt:
                raise SystemExit(f"gap in flow {key}")
            out += d
            nxt = (nxt + len(d)) & 0xffffffff
        if len(out) >= 24:
            yield bytes(out)


def u64(b, o):
    return struct.unpack_from("<Q", b, o)[0]


def split(b):
    """The message stream after the handshake, cut into categorised
    messages (start, end, category)."""
    o = 24 + (u64(b, 16) + 7) // 8 * 8
    b = b[o:]
    o, out = 0, []
    while o + 16 <= len(b):
        t, hl = u64(b, o), u64(b, o + 8)
        h = b[o + 16:o + 16 + hl]
        payload, cat = 0, None
        if t == 1:
            n = u64(h, 32)
            types = sorted({h[48 + 16 * k] for k in range(n)})
            payload = sum(struct.unpack_from("<I", h, 52 + 16 * k)[0]
                          for k in range(n))
            cat = "append_entries_heartbeat" if n == 0 else (
                "append_entries_%s_type%s" % ("many" if n > 1 else "one",
                                             "".join(map(str, types))))
        elif t == 2:
            cat = "append_entries_result" + ("_rejected" if u64(h, 8) else "")
        elif t == 3:
            cat = "request_vote_flags%d" % u64(h, 32)
        elif t == 4:
            cat = "request_vote_result_granted%d_flags%d" % (u64(h, 8),
                                                             u64(h, 16))
        elif t == 5:
            payload = u64(h, 40 + u64(h, 32))
            cat = "install_snapshot"
        elif t == 6:
            cat = "timeout_now"
        end = o + 16 + hl + payload
        if len(h) < hl or end > len(b):
            break  # cut by the end of the capture
        out.append((o, end, cat))
        o = end
    return b, out


def emit(all_streams):
    examples = collections.OrderedDict()
    chosen = []
    for raw in all_streams:
        b, msgs = split(raw)
        for s, e, cat in msgs:
            examples.setdefault(cat, b[s:e])
        # A stream around each rarer message: 8 messages either side.
        for k, (_, _, cat) in enumerate(msgs):
            if not cat.startswith(("append_entries", "request_vote_result")):
                lo, hi = max(0, k - 8), min(len(msgs), k + 9)
                chosen.append((cat, b[msgs[lo][0]:msgs[hi - 1][1]], hi - lo))
    seen, streams_out = set(), []
    for cat, data, count in chosen:
        if cat not in seen:
            seen.add(cat)
            streams_out.append((cat, data, count))

    def hexlines(data):
        h = data.hex()
        return "\n".join(f'    "{h[i:i + 96]}"' for i in range(0, len(h), 96))

    with open(HEADER, "w") as f:
        f.write("// Generated by tests/unit/capture_raft_frames.py from a real "
                "dedupd group\n// (libraft 0.15.0): do not edit. Message "
                "streams without the raft_uv\n// handshake, hex.\n"
                "#ifndef DEDUP_TESTS_UNIT_RAFT_FRAME_VECTORS_H_\n"
                "#define DEDUP_TESTS_UNIT_RAFT_FRAME_VECTORS_H_\n\n"
                "#include <cstdint>\n\nnamespace dedup {\n\n"
                "struct RaftFrameVector {\n  const char* name;\n"
                "  const char* hex;\n  uint64_t messages;\n};\n\n"
                "// One real message of each kind seen.\n"
                "inline constexpr RaftFrameVector kRealMessages[] = {\n")
        for cat, data in examples.items():
            f.write(f'    {{"{cat}",\n{hexlines(data)},\n     1}},\n')
        f.write("};\n\n// Real streams around the rarer messages.\n"
                "inline constexpr RaftFrameVector kRealStreams[] = {\n")
        for cat, data, count in streams_out:
            f.write(f'    {{"around_{cat}",\n{hexlines(data)},\n'
                    f'     {count}}},\n')
        f.write("};\n\n}  // namespace dedup\n\n"
                "#endif  // DEDUP_TESTS_UNIT_RAFT_FRAME_VECTORS_H_\n")
    print("kinds:", ", ".join(examples))


def main():
    pcap = os.path.join(WORK, "raft.pcap")
    dump = subprocess.Popen(
        ["tcpdump", "-i", "lo", "-s", "0", "-U", "-w", pcap, "tcp and (" +
         " or ".join(f"port {p}" for p in RAFT) + ")"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(1)
    try:
        drive()
    finally:
        for p in procs:
            if p and p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in procs:
            if p:
                p.wait(30)
        time.sleep(1)
        dump.send_signal(signal.SIGINT)
        dump.wait(10)
    emit(list(streams(pcap)))
    shutil.rmtree(WORK)


if __name__ == "__main__":
    main()
