"""A member of the daemon's group trying to take more than its share, for
attack tests. Standard library only. Each mode prints one line of counts.
  daemon_flood.py SOCKET attach N   N sessions that ATTACH (claiming pid 1),
                                    kept open; then a STATS of its own:
                                    "attached A refused R sees_uids U1,U2"
  daemon_flood.py SOCKET idle N S   N sessions that say nothing, kept S
                                    seconds: "open O refused R closed C"
  daemon_flood.py SOCKET listen N   one attached session that LISTENs on
                                    ports 1..N: "listening L refused R"
  daemon_flood.py SOCKET hold S     one attached session kept S seconds
  daemon_flood.py SOCKET peer N ADDR  two attached sessions; the first sends
                                    N PEER records (its QPNs to a QPN of the
                                    second at ADDR, a host address); then
                                    the records it keeps: "records R"
"""
import re
import socket
import sys
import time


def connect(path):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    s.connect(path)
    return s


def request(s, text):
    s.send(text.encode())
    return s.recv(65536).decode(errors="replace")


def main():
    path, mode = sys.argv[1], sys.argv[2]
    if mode == "attach":
        kept, attached, refused = [], 0, 0
        for _ in range(int(sys.argv[3])):
            s = connect(path)
            if request(s, "ATTACH pid=1 program=flood").startswith("OK slot="):
                attached += 1
                kept.append(s)
            else:
                refused += 1
                s.close()
        stats = request(connect(path), "STATS")
        uids = sorted({w[4:] for line in stats.splitlines() if line.startswith("process ")
                       for w in line.split() if w.startswith("uid=")})
        print("attached %d refused %d sees_uids %s" % (attached, refused, ",".join(uids)), flush=True)
    elif mode == "idle":
        kept, refused = [], 0
        for _ in range(int(sys.argv[3])):
            try:
                kept.append(connect(path))
            except OSError:
                refused += 1
        time.sleep(0.5)
        closed = 0
        for s in kept:
            s.setblocking(False)
            try:
                s.recv(4096)
                closed += 1  # an ERROR, or the end: turned away
            except BlockingIOError:
                pass  # silent and open
            except OSError:
                closed += 1
        print("open %d refused %d closed %d" % (len(kept) - closed, refused, closed), flush=True)
        time.sleep(float(sys.argv[4]))
    elif mode == "listen":
        s = connect(path)
        if not request(s, "ATTACH pid=1 program=flood").startswith("OK slot="):
            print("listening 0 refused all (no attach)")
            return
        listening = refused = 0
        for port in range(1, int(sys.argv[3]) + 1):
            if request(s, "LISTEN %d" % port).startswith("OK"):
                listening += 1
            else:
                refused += 1
        print("listening %d refused %d" % (listening, refused), flush=True)
    elif mode == "peer":
        a, b = connect(path), connect(path)
        slots = [re.match(r"OK slot=(\d+)", request(s, "ATTACH pid=1 program=peer%s" % name))
                 for s, name in ((a, "s"), (b, "dest"))]
        if None in slots:
            print("records 0 (no attach)")
            return
        slot_a, slot_b = (int(m.group(1)) for m in slots)
        for i in range(int(sys.argv[3])):
            a.send(("PEER qpn=%d dest=%s dest_qpn=%d" % ((slot_a << 16) + i, sys.argv[4], (slot_b << 16) + 1)).encode())
        stats = request(a, "STATS")
        line = next((l for l in stats.splitlines() if l.startswith("process ") and " program=peers " in l + " "), "")
        print("records %s" % next((w[6:] for w in line.split() if w.startswith("peers=")), "?"), flush=True)
    elif mode == "hold":
        s = connect(path)
        print(request(s, "ATTACH pid=1 program=holder").split("\n")[0], flush=True)
        time.sleep(float(sys.argv[3]))


if __name__ == "__main__":
    main()
