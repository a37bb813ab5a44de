"""A squatter on a UNIX socket name, for attack tests. Run as the attacking
user. Standard library only.
  listen PATH LOG [--abstract]   bind PATH (a file, mode 0777, or the abstract
                                 name "\\0PATH"), write "listening" to LOG,
                                 then log every connection and the first
                                 bytes it sends ("connection: ...").
  connect PATH [--abstract]      try once to connect, as SOCK_SEQPACKET
                                 (memif) then SOCK_STREAM; print
                                 "connected" or "refused: <errno name>".
"""
import errno
import os
import socket
import sys


def address(path, abstract):
    return "\0" + path if abstract else path


def listen(path, log_path, abstract):
    kind = socket.SOCK_SEQPACKET if "memif" in os.path.basename(path) else socket.SOCK_STREAM
    s = socket.socket(socket.AF_UNIX, kind)
    s.bind(address(path, abstract))
    if not abstract:
        os.chmod(path, 0o777)
    s.listen(16)
    with open(log_path, "a", buffering=1) as log:
        log.write("listening\n")
        while True:
            conn, _ = s.accept()
            conn.settimeout(2)
            try:
                data = conn.recv(4096)
            except OSError:
                data = b""
            log.write("connection: %r\n" % data[:200])


def connect(path, abstract):
    last = None
    for kind in (socket.SOCK_SEQPACKET, socket.SOCK_STREAM):
        s = socket.socket(socket.AF_UNIX, kind)
        try:
            s.connect(address(path, abstract))
            print("connected")
            return
        except OSError as e:
            last = e
        finally:
            s.close()
    print("refused: %s" % errno.errorcode.get(last.errno, str(last.errno)))


def main():
    args = [a for a in sys.argv[1:] if a != "--abstract"]
    abstract = "--abstract" in sys.argv
    if args[0] == "listen":
        listen(args[1], args[2], abstract)
    elif args[0] == "connect":
        connect(args[1], abstract)
    else:
        sys.exit("usage: unix_squat.py listen PATH LOG [--abstract] | connect PATH [--abstract]")


if __name__ == "__main__":
    main()
