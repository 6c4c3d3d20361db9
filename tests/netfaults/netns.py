"""A network namespace of the test's own, joined to the host by a veth pair, and packet
faults inside it (issue 37).

A worker started inside the namespace (``Namespace.wrap()``) reaches the host only over
the veth pair, so an iptables rule inside the namespace cuts exactly its traffic: a DROP
answers nothing (no reset, no ICMP), which is what a blackhole is and what keepalives and
``TCP_USER_TIMEOUT`` exist for. A userspace proxy cannot stand in for that: it would ACK
for the dead server. Nothing here touches the host's own rules: everything lives and dies
with the namespace.
"""

from __future__ import annotations

import atexit
import contextlib
import itertools
import os
import subprocess
from collections.abc import Iterator

_COUNTER = itertools.count(1)
_LIVE: set[Namespace] = set()


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, timeout=30)


class Namespace:
    """A network namespace with a veth pair to the host namespace: ``host_ip`` on the host
    side, ``ns_ip`` inside."""

    def __init__(self) -> None:
        pid, n = os.getpid(), next(_COUNTER)
        # Names and a /24 unique to this process and namespace: two test processes on one
        # machine (a CI tier beside a developer's run) must not collide. Interface names
        # are at most 15 characters.
        self.name = f"esnf-{pid}-{n}"
        self.host_veth = f"esh{pid % 100000}x{n}"
        self.ns_veth = f"esn{pid % 100000}x{n}"
        subnet = f"10.{100 + n % 150}.{pid % 250}"
        self.host_ip, self.ns_ip = f"{subnet}.1", f"{subnet}.2"
        self._rules: list[list[str]] = []  # iptables rules added, to delete on lift

    def create(self) -> Namespace:
        _LIVE.add(self)
        _ip("netns", "add", self.name)
        _ip("link", "add", self.host_veth, "type", "veth", "peer", "name", self.ns_veth)
        _ip("link", "set", self.ns_veth, "netns", self.name)
        _ip("addr", "add", f"{self.host_ip}/24", "dev", self.host_veth)
        _ip("link", "set", self.host_veth, "up")
        inside = ["netns", "exec", self.name, "ip"]
        _ip(*inside, "addr", "add", f"{self.ns_ip}/24", "dev", self.ns_veth)
        _ip(*inside, "link", "set", self.ns_veth, "up")
        _ip(*inside, "link", "set", "lo", "up")
        return self

    def destroy(self) -> None:
        """Delete the namespace (its end of the pair goes with it) and the host's end."""
        _LIVE.discard(self)
        for args in (("netns", "del", self.name), ("link", "del", self.host_veth)):
            with contextlib.suppress(subprocess.CalledProcessError):
                _ip(*args)

    def wrap(self) -> list[str]:
        """The prefix that runs a command inside the namespace (``ip netns exec`` execs it:
        the pid and the signals are the command's own)."""
        return ["ip", "netns", "exec", self.name]

    def command(self, argv: list[str]) -> list[str]:
        return [*self.wrap(), *argv]

    # -- faults -----------------------------------------------------------------------

    def _rule(self, *spec: str) -> None:
        subprocess.run(
            self.command(["iptables", "-I", *spec, "-j", "DROP"]),
            check=True,
            capture_output=True,
            timeout=30,
        )
        self._rules.append(list(spec))

    def _unrule(self, spec: list[str]) -> None:
        subprocess.run(
            self.command(["iptables", "-D", *spec, "-j", "DROP"]),
            check=True,
            capture_output=True,
            timeout=30,
        )
        self._rules.remove(spec)

    def blackhole(self) -> None:
        """Drop every packet between the namespace and the host, both ways. Traffic on
        the namespace's own loopback (a probe of a worker inside it) still flows."""
        self._rule("OUTPUT", "-d", self.host_ip)
        self._rule("INPUT", "-s", self.host_ip)

    def lift(self) -> None:
        """Remove every fault rule this object added."""
        for spec in list(self._rules):
            self._unrule(spec)

    def lift_keeping_old_flows(self) -> list[int]:
        """End the blackhole as a NAT or load balancer that lost its state ends it: the
        TCP flows that exist now stay silently dropped, new connections pass. Returns the
        local ports of the flows kept dropped."""
        ports = sorted({local for local, peer, _ in self.flows() if peer == self.host_ip})
        for port in ports:
            self._rule("OUTPUT", "-d", self.host_ip, "-p", "tcp", "--sport", str(port))
            self._rule("INPUT", "-s", self.host_ip, "-p", "tcp", "--dport", str(port))
        for spec in (["OUTPUT", "-d", self.host_ip], ["INPUT", "-s", self.host_ip]):
            if spec in self._rules:
                self._unrule(spec)
        return ports

    def flows(self) -> list[tuple[int, str, int]]:
        """(local port, peer address, peer port) of every TCP socket in the namespace that
        has a peer (any state but listening)."""
        out = subprocess.run(
            self.command(["ss", "-Htn", "state", "all"]),
            check=True,
            capture_output=True,
            text=True,
            timeout=30,
        ).stdout
        found = []
        for line in out.splitlines():
            fields = line.split()
            if len(fields) < 5 or fields[0] == "LISTEN":
                continue
            local, peer = fields[3], fields[4]
            peer_ip, _, peer_port = peer.rpartition(":")
            if peer_port == "*":
                continue
            found.append((int(local.rpartition(":")[2]), peer_ip, int(peer_port)))
        return found

    def __enter__(self) -> Namespace:
        return self.create()

    def __exit__(self, *exc: object) -> None:
        self.destroy()


@contextlib.contextmanager
def namespace() -> Iterator[Namespace]:
    """A created namespace for the block, destroyed after it whatever happens."""
    with Namespace() as ns:
        yield ns


@atexit.register
def _destroy_leftovers() -> None:
    for ns in list(_LIVE):
        ns.destroy()
