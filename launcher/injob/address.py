"""A node's Ray address by the site's method, keyed on the Slurm node name.

loopback   <prefix>.<10 + trailing number of the node name> (dev cluster: dev3 -> 127.0.0.13);
           never 127.0.0.1, which Ray rewrites to the external address
interface  the IPv4 address of the named interface (e.g. ib0) on this node
hostname   what the node's name resolves to
"""

from __future__ import annotations

import fcntl
import re
import socket
import struct

METHODS = ("loopback", "interface", "hostname")


def loopback_address(node: str, prefix: str = "127.0.0") -> str:
    match = re.search(r"(\d+)$", node or "")
    if not match:
        raise ValueError(f"node name {node!r} has no trailing number; loopback addresses need one (dev1, dev2, ...)")
    last = 10 + int(match.group(1))
    if last > 254:
        raise ValueError(f"node {node!r}: {prefix}.{last} is not an address; loopback method supports up to node 244")
    address = f"{prefix}.{last}"
    if address == "127.0.0.1":  # pragma: no cover - prefix/number chosen to avoid it
        raise ValueError("127.0.0.1 is rewritten by Ray; use another loopback address")
    return address


def interface_address(interface: str) -> str:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        try:
            packed = fcntl.ioctl(sock.fileno(), 0x8915, struct.pack("256s", interface.encode()[:15]))  # SIOCGIFADDR
        except OSError as exc:
            raise ValueError(f"interface {interface!r} has no IPv4 address on this node ({exc.strerror})") from None
    return socket.inet_ntoa(packed[20:24])


def node_address(node: str, method: str, prefix: str = "127.0.0", interface: str | None = None) -> str:
    if method == "loopback":
        return loopback_address(node, prefix)
    if method == "interface":
        if not interface:
            raise ValueError("ray.node_address.method is interface but no interface is set in the site file")
        return interface_address(interface)
    if method == "hostname":
        return socket.gethostbyname(node or socket.gethostname())
    raise ValueError(f"unknown node address method {method!r}; use one of {', '.join(METHODS)}")
