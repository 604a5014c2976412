"""Another machine's network, emulated on this one: a network namespace joined to ours
by a veth pair, each side's received packets processed on its own CPUs.

On loopback a sender's kernel runs the receiver's whole TCP input on the sender's core
(a packet is delivered on the way out of ``send``): a node that relays each message to
five peers on loopback also pays their five receipts, which on a network it would not,
while whatever it is sent is received on the *sender's* core, which on a network it
would be on its own. Across the link the near side (this namespace, the node) receives
on ``near_cpus`` and the far side (the namespace, the attackers) on ``far_cpus``, by
receive packet steering (RPS), as each machine's NIC interrupts would. What it does not
emulate: the cores still share the caches and memory of one machine.

    with FarLink({0}, {1}) as link:   # the node listens on link.near_ip too
        subprocess.Popen([*link.exec_prefix(), sys.executable, ...])  # dials link.near_ip

Invariants: needs root and ``ip`` (``unavailable`` says why not); names carry this
process's id, so runs never collide; ``close`` deletes the namespace, and the veth pair
with it, also after a failed start; every command has a timeout, and a failing one
raises with its stderr.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from types import TracebackType

NET = "10.231.0"  # RFC 1918, /30 on the link: near .1, far .2


def unavailable() -> str | None:
    """Why this machine cannot build the link, or None."""
    if os.geteuid() != 0:
        return "a network namespace needs root"
    if shutil.which("ip") is None:
        return "`ip` is not installed (apt-get install iproute2)"
    return None


def sh(*args: str) -> str:
    """Run a command (30 s at most); its stdout, or RuntimeError with its stderr."""
    proc = subprocess.run(args, capture_output=True, text=True, timeout=30)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(args)}: {proc.stderr.strip()}")
    return proc.stdout


def cpu_mask(cpus: set[int]) -> str:
    """The hex CPU bitmask ``rps_cpus`` takes: {0} -> '1', {1, 2} -> '6'."""
    return format(sum(1 << c for c in cpus), "x")


class FarLink:
    """The namespace ``ns`` and the veth pair ``near_dev`` (here, ``near_ip``) and
    ``far_dev`` (in ``ns``, ``far_ip``)."""

    def __init__(self, near_cpus: set[int], far_cpus: set[int]) -> None:
        why = unavailable()
        if why is not None:
            raise RuntimeError(why)
        pid = os.getpid()
        self.ns, self.near_dev, self.far_dev = f"snfar{pid}", f"snn{pid}", f"snf{pid}"
        self.near_ip, self.far_ip = f"{NET}.1", f"{NET}.2"
        self.made = False
        try:
            sh("ip", "netns", "add", self.ns)
            self.made = True
            sh("ip", "link", "add", self.near_dev, "type", "veth", "peer", "name", self.far_dev)
            sh("ip", "link", "set", self.far_dev, "netns", self.ns)
            sh("ip", "addr", "add", f"{self.near_ip}/30", "dev", self.near_dev)
            sh("ip", "link", "set", self.near_dev, "up")
            inside = ("ip", "netns", "exec", self.ns)
            sh(*inside, "ip", "addr", "add", f"{self.far_ip}/30", "dev", self.far_dev)
            sh(*inside, "ip", "link", "set", self.far_dev, "up")
            sh(*inside, "ip", "link", "set", "lo", "up")
            # what each side receives is processed on its own CPUs (``ip netns exec``
            # mounts the namespace's own /sys, where its device is)
            rps = "/sys/class/net/{}/queues/rx-0/rps_cpus"
            sh("sh", "-c", f"echo {cpu_mask(near_cpus)} > {rps.format(self.near_dev)}")
            cmd = f"echo {cpu_mask(far_cpus)} > {rps.format(self.far_dev)}"
            sh(*inside, "sh", "-c", cmd)
        except BaseException:
            self.close()
            raise

    def exec_prefix(self) -> list[str]:
        """Prepend to a command line to run it on the far side."""
        return ["ip", "netns", "exec", self.ns]

    def close(self) -> None:
        if self.made:
            subprocess.run(["ip", "netns", "del", self.ns], capture_output=True, timeout=30)
            self.made = False
        # a near end left behind by a failed start (deleting the namespace takes both)
        subprocess.run(["ip", "link", "del", self.near_dev], capture_output=True, timeout=30)

    def __enter__(self) -> FarLink:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, err: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()
