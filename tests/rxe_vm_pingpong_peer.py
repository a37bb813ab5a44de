#!/usr/bin/env python3
"""Plays the TCP half of an `ibv_rc_pingpong` server, and nothing else.

rdma-core's pingpong programs swap "LID:QPN:PSN:GID" over TCP before any RoCE
frame moves. This script listens where the server would, reads the client's
address, answers with a made-up QPN and PSN and the GID of an address that
has no RoCE device behind it (the host kernel's side of the tap), then prints
the client's line. The client then sends RC SENDs there, which the harness's
capture records, until its retries run out.

Used by tests/rxe_vm_link_test.sh to prove the harness's pipes (TCP over the
tap, rxe frames on the tap, the capture) without uroce. When uroce's verbs
library exists, the real `ibv_rc_pingpong` server on the host replaces it.

usage: rxe_vm_pingpong_peer.py LISTEN_ADDR PORT GID_ADDR QPN PSN TIMEOUT_S
"""

import ipaddress
import re
import socket
import sys


def wire_gid(addr):
    """The pingpong programs' GID text: the 16 GID bytes in hex, in wire order.
    An IPv4 address becomes its IPv4-mapped IPv6 form, as RoCEv2 GIDs are."""
    ip = ipaddress.ip_address(addr)
    if ip.version == 4:
        ip = ipaddress.IPv6Address("::ffff:" + addr)
    return ip.packed.hex()


def main(argv):
    listen, port, gid_addr, qpn, psn, timeout = argv
    family = socket.AF_INET6 if ":" in listen else socket.AF_INET
    srv = socket.socket(family, socket.SOCK_STREAM)
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind((listen, int(port)))
    srv.listen(1)
    srv.settimeout(float(timeout))
    print("listening", flush=True)
    conn, _ = srv.accept()
    conn.settimeout(float(timeout))
    data = b""
    # The client sends a fixed-size, NUL-terminated message; read up to the NUL.
    while b"\0" not in data:
        chunk = conn.recv(256)
        if not chunk:
            break
        data += chunk
    text = data.split(b"\0")[0].decode()
    if not re.fullmatch(r"[0-9a-f]{4}:[0-9a-f]{6}:[0-9a-f]{6}:[0-9a-f]{32}", text):
        print(f"unexpected message from the client: {data!r}", file=sys.stderr)
        return 1
    reply = f"0000:{int(qpn, 0):06x}:{int(psn, 0):06x}:{wire_gid(gid_addr)}"
    # Same size as what the client sent: it reads exactly that many bytes.
    conn.sendall(reply.encode().ljust(len(data), b"\0"))
    print(f"client {text}", flush=True)
    # The client says "done" once it has connected its QP; wait briefly for it.
    try:
        conn.recv(16)
    except OSError:
        pass
    conn.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
