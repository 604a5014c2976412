"""A small internet in network namespaces: a public segment and NATed sites.

Used by tests/test_nat.py (needs root, ``ip`` and ``iptables``). Every site is a
router namespace doing iptables MASQUERADE between its private /24 and the public
segment, and a host namespace behind it::

    ns <p>pub: bridge br0 198.51.100.1/24 ("the internet"; the bootstrap/relay)
        |                         |
    198.51.100.2              198.51.100.3
    ns <p>rtrA  MASQUERADE    ns <p>rtrB  MASQUERADE   (no port forwards)
    10.1.0.1                  10.2.0.1
        |                         |
    10.1.0.2 ns <p>natA       10.2.0.2 ns <p>natB

``NatLab(symmetric=True)`` gives every router ``MASQUERADE --random-fully``: each
new flow leaves from a random public port, so the port a peer sees is not the one
its next flow (to anyone else) uses: a symmetric NAT, as carrier-grade NATs are.

Invariants: names carry a per-run prefix, so runs never collide; ``close`` deletes
every namespace this lab created (their veths go with them), also after a failed
``__init__``; every command has a timeout and a failing one raises with its stderr.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

from swarmnode.lab.farlink import sh

PUBLIC_NET = "198.51.100"  # TEST-NET-2: never routed on the real internet
SITES = {"A": ("2", "10.1.0"), "B": ("3", "10.2.0")}  # site -> (router's public host, LAN)


def unavailable() -> str | None:
    """Why this machine cannot build the lab, or None."""
    if os.geteuid() != 0:
        return "network namespaces need root"
    for tool in ("ip", "iptables"):
        if shutil.which(tool) is None:
            return f"`{tool}` is not installed (apt-get install iproute2 iptables)"
    probe = f"snprobe{os.getpid()}"
    made = subprocess.run(["ip", "netns", "add", probe], capture_output=True, timeout=10)
    if made.returncode != 0:
        return f"`ip netns add` failed: {made.stderr.decode().strip()}"
    subprocess.run(["ip", "netns", "del", probe], capture_output=True, timeout=10)
    return None


class NatLab:
    """The namespaces above; ``ns(name)`` is the real namespace name."""

    def __init__(self, symmetric: bool = False) -> None:
        self.symmetric = symmetric
        self.prefix = f"sn{os.getpid() % 100000}"
        self.made: list[str] = []
        try:
            self._build()
        except BaseException:
            self.close()
            raise

    def ns(self, name: str) -> str:
        return f"{self.prefix}{name}"

    def run(self, name: str, *args: str) -> str:
        return sh("ip", "netns", "exec", self.ns(name), *args)

    def prefix_cmd(self, name: str) -> list[str]:
        """Prepend to a command line to run it inside namespace ``name``."""
        return ["ip", "netns", "exec", self.ns(name)]

    def _add(self, name: str) -> None:
        sh("ip", "netns", "add", self.ns(name))
        self.made.append(self.ns(name))
        self.run(name, "ip", "link", "set", "lo", "up")

    def _veth(self, a: str, a_if: str, b: str, b_if: str) -> None:
        tmp_a, tmp_b = f"{self.prefix}x{a_if}"[:15], f"{self.prefix}y{b_if}"[:15]
        sh("ip", "link", "add", tmp_a, "type", "veth", "peer", "name", tmp_b)
        for ns, tmp, final in ((a, tmp_a, a_if), (b, tmp_b, b_if)):
            sh("ip", "link", "set", tmp, "netns", self.ns(ns))
            self.run(ns, "ip", "link", "set", tmp, "name", final)
            self.run(ns, "ip", "link", "set", final, "up")

    def _build(self) -> None:
        self._add("pub")
        self.run("pub", "ip", "link", "add", "br0", "type", "bridge")
        self.run("pub", "ip", "addr", "add", f"{PUBLIC_NET}.1/24", "dev", "br0")
        self.run("pub", "ip", "link", "set", "br0", "up")
        for site, (public_host, lan) in SITES.items():
            rtr, host = f"rtr{site}", f"nat{site}"
            self._add(rtr)
            self._add(host)
            self._veth("pub", f"port{site}", rtr, "wan")
            self.run("pub", "ip", "link", "set", f"port{site}", "master", "br0")
            self.run(rtr, "ip", "addr", "add", f"{PUBLIC_NET}.{public_host}/24", "dev", "wan")
            self._veth(rtr, "lan", host, "eth0")
            self.run(rtr, "ip", "addr", "add", f"{lan}.1/24", "dev", "lan")
            self.run(host, "ip", "addr", "add", f"{lan}.2/24", "dev", "eth0")
            self.run(host, "ip", "route", "add", "default", "via", f"{lan}.1")
            self.run(rtr, "sysctl", "-qw", "net.ipv4.ip_forward=1")
            # Port-restricted cone by default (Linux keeps the source port when it is
            # free); --random-fully draws a new public port for every flow: symmetric.
            random_port = ["--random-fully"] if self.symmetric else []
            self.run(rtr, "iptables", "-t", "nat", "-A", "POSTROUTING", "-o", "wan", "-j",
                     "MASQUERADE", *random_port)  # fmt: skip
            # A home router: nothing from outside reaches the LAN unless it answers
            # a flow the LAN opened (no port forwards, no UPnP).
            self.run(rtr, "iptables", "-A", "FORWARD", "-i", "wan", "-m", "conntrack",
                     "--ctstate", "ESTABLISHED,RELATED", "-j", "ACCEPT")  # fmt: skip
            self.run(rtr, "iptables", "-A", "FORWARD", "-i", "wan", "-j", "DROP")
            # ...and, like most home routers, it drops an unsolicited packet instead of
            # answering it with a reset (which would also kill a hole punch's first SYN).
            self.run(rtr, "iptables", "-A", "INPUT", "-i", "wan", "-m", "conntrack",
                     "--ctstate", "ESTABLISHED,RELATED", "-j", "ACCEPT")  # fmt: skip
            self.run(rtr, "iptables", "-A", "INPUT", "-i", "wan", "-j", "DROP")

    def host_ip(self, site: str) -> str:
        return f"{SITES[site][1]}.2"

    def router_ip(self, site: str) -> str:
        return f"{PUBLIC_NET}.{SITES[site][0]}"

    def tcp_connects(self, name: str, ip: str, port: int, timeout: float = 3.0) -> bool:
        """Whether a plain TCP connect from namespace ``name`` to ip:port succeeds."""
        code = (
            "import socket,sys\n"
            f"try: socket.create_connection(({ip!r}, {port}), timeout={timeout}).close()\n"
            "except OSError: sys.exit(1)\n"
        )
        proc = subprocess.run(
            [*self.prefix_cmd(name), sys.executable, "-c", code],
            capture_output=True,
            timeout=timeout + 10,
        )
        return proc.returncode == 0

    def mapped_ports(self, site: str, ports: tuple[int, int] = (7101, 7102)) -> list[int]:
        """The public source ports the internet sees for two flows that leave host
        ``site`` from one local port to two destinations (the relay's address, two
        ports): equal behind a cone NAT, different behind a symmetric one."""
        server = (
            "import socket\n"
            "ls = []\n"
            f"for port in {ports!r}:\n"
            "    s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\n"
            f"    s.bind(({PUBLIC_NET + '.1'!r}, port)); s.listen(1); s.settimeout(20)\n"
            "    ls.append(s)\n"
            "print('ready', flush=True)\n"
            "for s in ls:\n"
            "    c, addr = s.accept(); print(addr[1], flush=True); c.close()\n"
        )
        client = (
            "import socket\n"
            "held = []\n"
            f"for port in {ports!r}:\n"
            "    s = socket.socket()\n"
            "    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\n"
            "    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)\n"
            "    s.bind(('', 40000)); s.settimeout(10)\n"
            f"    s.connect(({PUBLIC_NET + '.1'!r}, port)); held.append(s)\n"
        )
        srv = subprocess.Popen(
            [*self.prefix_cmd("pub"), sys.executable, "-c", server],
            stdout=subprocess.PIPE,
            text=True,
        )
        try:
            assert srv.stdout is not None
            if srv.stdout.readline().strip() != "ready":
                raise RuntimeError("the port-mapping probe's listener did not start")
            subprocess.run(
                [*self.prefix_cmd(f"nat{site}"), sys.executable, "-c", client],
                check=True,
                capture_output=True,
                timeout=30,
            )
            out, _ = srv.communicate(timeout=30)
        finally:
            if srv.poll() is None:
                srv.kill()
                srv.wait(timeout=10)
        return [int(line) for line in out.split()]

    def close(self) -> None:
        for ns in reversed(self.made):
            subprocess.run(["ip", "netns", "del", ns], capture_output=True, timeout=30)
        self.made.clear()
