"""A fake `uroce daemon` for attack tests: listens on a SOCK_SEQPACKET
socket (mode 0777, so that anybody may connect), logs the first line of
every request, answers DEVICES with the text of DEVICES_FILE and ATTACH with
the reply in GRANT_FILE plus a memory file as the port (SCM_RIGHTS, as the
daemon's protocol carries it: host/daemon_protocol.h). Standard library only;
run as the attacking user.
  usage: fake_daemon.py SOCKET DEVICES_FILE GRANT_FILE LOG
"""
import os
import socket
import sys


def main():
    path, devices_file, grant_file, log_path = sys.argv[1:5]
    devices = open(devices_file, "rb").read()
    grant = open(grant_file, "rb").read()
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    listener.bind(path)
    os.chmod(path, 0o777)
    listener.listen(16)
    sessions = []  # kept open: a closed session reads as "the daemon is gone"
    with open(log_path, "a", buffering=1) as log:
        log.write("listening\n")
        while True:
            conn, _ = listener.accept()
            sessions.append(conn)
            try:
                request = conn.recv(16384)
            except OSError:
                continue
            first = request.split(b"\n", 1)[0].decode("ascii", "replace")
            log.write("request: %s\n" % first)
            try:
                if request == b"DEVICES":
                    conn.send(b"OK\n" + devices)
                elif request.startswith(b"ATTACH "):
                    port = os.memfd_create("port")
                    os.ftruncate(port, 1 << 22)
                    socket.send_fds(conn, [grant], [port])
                    os.close(port)
                elif request == b"STATS":
                    conn.send(b"OK\n")
            except OSError as e:
                log.write("send: %s\n" % e)


if __name__ == "__main__":
    main()
