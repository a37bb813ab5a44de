"""Compares `uroce dump --json` with Wireshark's dissector, frame by frame.

usage: dump_tshark_test.py UROCE FILE.pcap...

For every frame: both agree on whether it is RoCEv2, and for RoCEv2 frames
on the opcode, destination QP, PSN, AckReq, PadCnt, the ICRC value, and the
fields of every extension header Wireshark decodes. Wireshark does not check
ICRCs and shows the four ICRC bytes read big-endian while RoCE stores them
least-significant byte first, so the values are compared byte-swapped and
the ICRC status comes from uroce alone (every frame here must be "ok").

Wireshark 4.0 (Debian 12) names the XRC opcodes (IBTA annex A14, 0xA0-0xBF)
and decodes their BTH, but reads everything after it as vendor data: no
XRCETH, no extension header and no ICRC. For XRC frames the BTH is compared,
the rest only where tshark decodes it (a newer Wireshark will).

The same holds for IBTA 1.5's ATOMIC WRITE (RC opcode 0x1D): Wireshark 4.0
shows it as "Unknown (29)", decodes the BTH and reads the RETH and the 8 bytes
after it as vendor data, so its frames too are compared up to the BTH. So
does RoCEv2's CNP (opcode 0x81, annex A17.9.3): "Unknown (129)", its 16
reserved bytes and ICRC read as vendor data.
"""
import json
import subprocess
import sys

FIELDS = [
    "frame.number",
    "infiniband.bth.opcode",
    "infiniband.bth.destqp",
    "infiniband.bth.psn",
    "infiniband.bth.a",
    "infiniband.bth.padcnt",
    "infiniband.invariant.crc",
    "infiniband.reth.va",
    "infiniband.reth.r_key",
    "infiniband.reth.dmalen",
    "infiniband.aeth.syndrome",
    "infiniband.aeth.msn",
    "infiniband.deth.q_key",
    "infiniband.deth.srcqp",
    "infiniband.atomiceth.swapdt",
    "infiniband.atomiceth.cmpdt",
    "infiniband.atomicacketh.origremdt",
    "infiniband.immdt",
    "infiniband.ieth",
]


def number(text):
    """tshark prints integer fields in decimal or as 0x-hex."""
    return int(text.strip(), 0)


def hex_bytes(text):
    """tshark prints byte fields (ImmDt, IETH) as bare hex, maybe with colons."""
    return int(text.strip().replace(":", ""), 16)


def tshark(path):
    cmd = ["tshark", "-r", path, "--disable-protocol", "rpcordma", "-T", "fields",
           "-E", "separator=|", "-E", "occurrence=f"]
    for f in FIELDS:
        cmd += ["-e", f]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    frames = {}
    for line in out.splitlines():
        values = line.split("|")
        row = dict(zip(FIELDS, values))
        frames[int(row["frame.number"])] = row
    return frames


def uroce_dump(uroce, path):
    run = subprocess.run([uroce, "dump", "--json", path], capture_output=True, text=True)
    lines = run.stdout.splitlines()
    if run.returncode != 0:
        raise AssertionError(f"uroce dump --json {path}: exit {run.returncode}\n{run.stderr}")
    summary = json.loads(lines[-1])
    frames = {}
    for line in lines[:-1]:
        frame = json.loads(line)
        frames[frame["frame"]] = frame
    if len(frames) != summary["frames"]:
        raise AssertionError(f"{path}: {len(frames)} frame lines, summary says {summary['frames']}")
    return frames, summary


def compare_file(uroce, path):
    """Returns (RoCE frames compared, list of disagreements)."""
    ours, summary = uroce_dump(uroce, path)
    theirs = tshark(path)
    problems = []
    compared = 0
    if set(ours) != set(theirs):
        problems.append(f"frame numbers differ: uroce {len(ours)}, tshark {len(theirs)}")
    for n in sorted(ours):
        u, t = ours[n], theirs.get(n, {})
        where = f"{path} frame {n}"
        t_is_roce = bool(t.get("infiniband.bth.opcode"))
        if u["roce"] != t_is_roce:
            problems.append(f"{where}: uroce roce={u['roce']}, tshark decodes BTH: {t_is_roce}")
            continue
        if not u["roce"]:
            continue
        compared += 1

        # Opcodes Wireshark 4.0 reads only the BTH of (see above).
        bth_only = 0xA0 <= u["opcode"] <= 0xBF or u["opcode"] in (0x1D, 0x81)

        def check(what, mine, wireshark_field, convert=number, bth=False):
            text = t.get(wireshark_field, "")
            if text == "":
                if bth_only and not bth:
                    return
                problems.append(f"{where}: tshark has no {wireshark_field} (uroce {what}={mine})")
                return
            if convert(text) != mine:
                problems.append(f"{where}: {what}: uroce {mine}, tshark {text}")

        if u.get("icrc") != "ok":
            problems.append(f"{where}: uroce says ICRC {u.get('icrc')} ({u.get('error', '')})")
            continue
        check("opcode", u["opcode"], "infiniband.bth.opcode", bth=True)
        check("dest_qp", u["dest_qp"], "infiniband.bth.destqp", bth=True)
        check("psn", u["psn"], "infiniband.bth.psn", bth=True)
        check("ack_request", u["ack_request"], "infiniband.bth.a", lambda s: s in ("1", "True"), bth=True)
        check("pad_count", u["pad_count"], "infiniband.bth.padcnt", bth=True)
        swapped = int.from_bytes(u["icrc_value"].to_bytes(4, "little"), "big")
        check("icrc (byte-swapped)", swapped, "infiniband.invariant.crc")
        if "reth" in u:
            check("reth.va", int(u["reth"]["va"], 16), "infiniband.reth.va")
            check("reth.rkey", u["reth"]["rkey"], "infiniband.reth.r_key")
            check("reth.dma_length", u["reth"]["dma_length"], "infiniband.reth.dmalen")
        if "atomic_eth" in u:
            # Wireshark files the AtomicETH's VA and R_Key under reth.*.
            check("atomic.va", int(u["atomic_eth"]["va"], 16), "infiniband.reth.va")
            check("atomic.rkey", u["atomic_eth"]["rkey"], "infiniband.reth.r_key")
            check("atomic.swap_or_add", int(u["atomic_eth"]["swap_or_add"], 16), "infiniband.atomiceth.swapdt")
            check("atomic.compare", int(u["atomic_eth"]["compare"], 16), "infiniband.atomiceth.cmpdt")
        if "aeth" in u:
            check("aeth.syndrome", u["aeth"]["syndrome"], "infiniband.aeth.syndrome")
            check("aeth.msn", u["aeth"]["msn"], "infiniband.aeth.msn")
        if "atomic_ack_eth" in u:
            check("atomic_ack.original", int(u["atomic_ack_eth"]["original"], 16),
                  "infiniband.atomicacketh.origremdt")
        if "deth" in u:
            check("deth.qkey", u["deth"]["qkey"], "infiniband.deth.q_key")
            check("deth.src_qp", u["deth"]["src_qp"], "infiniband.deth.srcqp")
        if "immediate_data" in u:
            check("immediate_data", u["immediate_data"], "infiniband.immdt", hex_bytes)
        if "invalidate_rkey" in u:
            check("invalidate_rkey", u["invalidate_rkey"], "infiniband.ieth", hex_bytes)
    if compared == 0:
        problems.append(f"{path}: no RoCE frame to compare")
    if compared != summary["roce"]:
        problems.append(f"{path}: compared {compared} RoCE frames, uroce counts {summary['roce']}")
    return compared, problems


def main():
    uroce, paths = sys.argv[1], sys.argv[2:]
    if len(paths) < 2:
        print("FAIL: no capture files given")
        return 1
    total, failed = 0, []
    for path in paths:
        compared, problems = compare_file(uroce, path)
        total += compared
        print(f"{path}: {compared} RoCE frames agree" if not problems else f"{path}: {len(problems)} disagreements")
        failed += problems
    for p in failed[:50]:
        print("FAIL:", p)
    print(f"{total} RoCE frames compared, {len(failed)} disagreements")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
