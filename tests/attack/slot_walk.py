"""Walks the daemon's slots by attaching and detaching, for attack tests.
Standard library only.
  slot_walk.py SOCKET TRIES   attach once and detach (the "victim"), then
                              attach and detach TRIES times; prints
                              "victim S", then "got S1 S2 ..." and
                              "refused N" (ERROR replies).
"""
import socket
import sys
import time


def attach(path):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    s.connect(path)
    s.send(b"ATTACH pid=1 program=slot_walk")
    first = s.recv(16384).split(b"\n", 1)[0].decode()
    s.close()
    if first.startswith("OK slot="):
        return int(first[8:])
    return None


def main():
    path = sys.argv[1]
    victim = attach(path)
    print("victim %s" % victim, flush=True)
    time.sleep(0.2)  # the daemon releases it
    got, refused = [], 0
    for _ in range(int(sys.argv[2])):
        slot = attach(path)
        if slot is None:
            refused += 1
        else:
            got.append(slot)
    print("got " + " ".join(str(s) for s in got))
    print("refused %d" % refused)


if __name__ == "__main__":
    main()
