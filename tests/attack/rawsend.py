"""Raw frames onto an interface for attack tests: a sender on the wire that
may write any source address (AF_PACKET, so root or CAP_NET_RAW; standard
library only).

  rawsend.py roce IFACE --src-mac M --dst-mac M --src-ip IP --dst-ip IP
             --qpn N [--count N] [--opcode N] [--payload BYTES]
      RoCEv2 frames (Ethernet, IPv4 or IPv6 by the addresses, UDP to 4791,
      BTH, payload, ICRC as IBTA Annex A17.3.3 computes it), PSNs 0, 1, ...
  rawsend.py arp IFACE --src-mac M --dst-mac M --op request|reply
             --sender-mac M --sender-ip IP --target-mac M --target-ip IP
             [--count N]
      ARP (RFC 826) with every field given, the Ethernet source apart from
      the ARP sender hardware address.

Prints the number of frames sent. IFACE "-" sends nothing and prints each
frame in hex, one per line, instead.
"""
import argparse
import ipaddress
import socket
import struct
import sys
import zlib

ROCE_PORT = 4791
ETH_P_IP = 0x0800
ETH_P_IPV6 = 0x86DD
ETH_P_ARP = 0x0806


def mac_bytes(text):
    parts = text.split(":")
    if len(parts) != 6:
        raise ValueError("not a MAC address: " + text)
    return bytes(int(p, 16) for p in parts)


def ipv4_checksum(header):
    total = sum(struct.unpack("!%dH" % (len(header) // 2), header))
    while total >> 16:
        total = (total & 0xFFFF) + (total >> 16)
    return ~total & 0xFFFF


def icrc(ip_packet, ipv6):
    """The ICRC over the IP packet up to the ICRC (A17.3.3): eight bytes of
    0xFF for the LRH, the fields routers may change taken as all ones."""
    masked = bytearray(ip_packet)
    if ipv6:
        masked[0] |= 0x0F  # traffic class and flow label
        masked[1:4] = b"\xff\xff\xff"
        masked[7] = 0xFF  # hop limit
        udp = 40
    else:
        masked[1] = 0xFF  # TOS
        masked[8] = 0xFF  # TTL
        masked[10:12] = b"\xff\xff"  # header checksum
        udp = (masked[0] & 0x0F) * 4
    masked[udp + 6:udp + 8] = b"\xff\xff"  # UDP checksum
    masked[udp + 8 + 4] = 0xFF  # BTH byte 4: FECN, BECN, reserved
    return struct.pack("<I", zlib.crc32(b"\xff" * 8 + bytes(masked)) & 0xFFFFFFFF)


def roce_frame(src_mac, dst_mac, src_ip, dst_ip, qpn, opcode, psn, payload):
    pad = (4 - len(payload) % 4) % 4
    bth = struct.pack("!BBHII", opcode, pad << 4, 0xFFFF, qpn & 0xFFFFFF, psn & 0xFFFFFF)
    udp_length = 8 + len(bth) + len(payload) + pad + 4
    udp = struct.pack("!HHHH", 0xC000, ROCE_PORT, udp_length, 0)
    if src_ip.version == 4:
        header = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + udp_length, 0, 0x4000, 64, 17, 0,
                             src_ip.packed, dst_ip.packed)
        header = header[:10] + struct.pack("!H", ipv4_checksum(header)) + header[12:]
        ether_type = ETH_P_IP
    else:
        header = struct.pack("!IHBB16s16s", 6 << 28, udp_length, 17, 64, src_ip.packed, dst_ip.packed)
        ether_type = ETH_P_IPV6
    packet = header + udp + bth + payload + b"\0" * pad
    packet += icrc(packet, src_ip.version == 6)
    return dst_mac + src_mac + struct.pack("!H", ether_type) + packet


def arp_frame(src_mac, dst_mac, op, sender_mac, sender_ip, target_mac, target_ip):
    arp = struct.pack("!HHBBH6s4s6s4s", 1, ETH_P_IP, 6, 4, 1 if op == "request" else 2, sender_mac,
                      sender_ip.packed, target_mac, target_ip.packed)
    frame = dst_mac + src_mac + struct.pack("!H", ETH_P_ARP) + arp
    return frame + b"\0" * max(0, 60 - len(frame))


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="kind", required=True)
    roce = sub.add_parser("roce")
    arp = sub.add_parser("arp")
    for p in (roce, arp):
        p.add_argument("iface")
        p.add_argument("--src-mac", required=True)
        p.add_argument("--dst-mac", required=True)
        p.add_argument("--count", type=int, default=1)
    roce.add_argument("--src-ip", required=True)
    roce.add_argument("--dst-ip", required=True)
    roce.add_argument("--qpn", type=lambda s: int(s, 0), required=True)
    roce.add_argument("--opcode", type=lambda s: int(s, 0), default=0x04)  # RC SEND only
    roce.add_argument("--payload", default="uroce rawsend")
    arp.add_argument("--op", choices=("request", "reply"), required=True)
    arp.add_argument("--sender-mac", required=True)
    arp.add_argument("--sender-ip", required=True)
    arp.add_argument("--target-mac", default="00:00:00:00:00:00")
    arp.add_argument("--target-ip", required=True)
    args = parser.parse_args()

    frames = []
    for i in range(args.count):
        if args.kind == "roce":
            src_ip = ipaddress.ip_address(args.src_ip)
            dst_ip = ipaddress.ip_address(args.dst_ip)
            if src_ip.version != dst_ip.version:
                sys.exit("rawsend: --src-ip and --dst-ip of different families")
            frames.append(roce_frame(mac_bytes(args.src_mac), mac_bytes(args.dst_mac), src_ip, dst_ip, args.qpn,
                                     args.opcode, i, args.payload.encode()))
        else:
            frames.append(arp_frame(mac_bytes(args.src_mac), mac_bytes(args.dst_mac), args.op,
                                    mac_bytes(args.sender_mac), ipaddress.IPv4Address(args.sender_ip),
                                    mac_bytes(args.target_mac), ipaddress.IPv4Address(args.target_ip)))
    if args.iface == "-":
        # For a sender that is not a socket (tests/attack/frame_injector).
        print("\n".join(frame.hex() for frame in frames))
        return
    with socket.socket(socket.AF_PACKET, socket.SOCK_RAW) as s:
        s.bind((args.iface, 0))
        for frame in frames:
            s.send(frame)
    print(len(frames))


if __name__ == "__main__":
    main()
