"""What crosses a container's network interface, captured on this machine (the controller, root) at the host side of
the container's veth pair: every frame the container sends or receives, as on a switch port. A raw AF_PACKET socket,
no capture program needed.

    with Capture(container) as capture:
        ...                                  # the traffic
    payload = capture.ipv4_payload(address_a, address_b)
"""

import socket
import struct
import threading

from tests.tools import containers

ETH_P_ALL = 0x0003
ETH_P_IP = 0x0800


def host_side_interface(container):
    """The name, on this machine, of the veth peer of the container's eth0."""
    peer_index = int(containers.checked_sh(container, "cat /sys/class/net/eth0/iflink"))
    return socket.if_indextoname(peer_index)


class Capture:
    """Frames on a container's interface while the with-block runs (kept in memory: for seconds of test traffic)."""

    def __init__(self, container):
        self.interface = host_side_interface(container)
        self.frames = []
        self._stop = threading.Event()
        self._socket = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P_ALL))
        self._socket.bind((self.interface, 0))
        self._socket.settimeout(0.2)
        # veth hands over whole segments of up to 64 KiB (GRO), and a load sends many MB in a few seconds.
        self._socket.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 32 << 20)
        self._thread = threading.Thread(target=self._read, daemon=True)

    def _read(self):
        while not self._stop.is_set():
            try:
                self.frames.append(self._socket.recv(1 << 18))
            except socket.timeout:
                continue

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *_exc):
        self._stop.set()
        self._thread.join()
        self._socket.close()

    def ipv4_packets(self, address_a, address_b):
        """(protocol, source port, destination port, transport payload) of the IPv4 packets between the two addresses,
        either way."""
        wanted = {socket.inet_aton(address_a), socket.inet_aton(address_b)}
        for frame in self.frames:
            if len(frame) < 34 or struct.unpack("!H", frame[12:14])[0] != ETH_P_IP:
                continue
            header_length = (frame[14] & 0x0F) * 4
            protocol, source, destination = frame[23], frame[26:30], frame[30:34]
            if {source, destination} != wanted:
                continue
            transport = frame[14 + header_length:]
            if protocol == socket.IPPROTO_TCP and len(transport) >= 20:
                ports, offset = struct.unpack("!HH", transport[:4]), (transport[12] >> 4) * 4
            elif protocol == socket.IPPROTO_UDP and len(transport) >= 8:
                ports, offset = struct.unpack("!HH", transport[:4]), 8
            else:
                continue
            yield protocol, ports[0], ports[1], transport[offset:]

    def ipv4_payload(self, address_a, address_b):
        """Every byte the two addresses' TCP and UDP packets carried, in capture order."""
        return b"".join(payload for _protocol, _source, _destination, payload in self.ipv4_packets(address_a, address_b))
