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
import ipaddress
import itertools
import json
import os
import re
import signal
import subprocess
import threading
from collections.abc import Iterator, Sequence

_COUNTER = itertools.count(1)
_LIVE: set[Namespace] = set()
_PREFIX = "esnf-"
# The /30s handed out: 10.200.0.0 to 10.254.255.252, picked from the pid (see _subnet).
_SUBNETS = 55 * 256 * 64


def _run(argv: list[str], stdin: str | None = None) -> str:
    out = subprocess.run(argv, input=stdin, check=True, capture_output=True, text=True, timeout=30)
    return out.stdout


def _ip(*args: str) -> str:
    return _run(["ip", *args])


class Namespace:
    """A network namespace with a veth pair to the host namespace: ``host_ip`` on the host
    side, ``ns_ip`` inside."""

    def __init__(self) -> None:
        pid, n = os.getpid(), next(_COUNTER)
        # Names carry the whole pid (interface names in hex: at most 15 characters), so
        # two test processes on one machine never pick the same, and a namespace left by
        # a killed process can be told from a live one's (_reap_dead).
        self.name = f"{_PREFIX}{pid}-{n}"
        self.host_veth = f"es{pid:x}h{n:x}"
        self.ns_veth = f"es{pid:x}n{n:x}"
        self.host_ip = self.ns_ip = ""
        self._rules: list[tuple[str, ...]] = []  # iptables rules added, to delete on lift

    def create(self) -> Namespace:
        """Add the namespace and the pair, address both ends and bring every link up."""
        _install_cleanup()
        _reap_dead()
        network = _free_subnet(os.getpid())
        self.host_ip, self.ns_ip = (str(host) for host in network.hosts())
        _LIVE.add(self)  # from here on, destroy() has something to undo
        try:
            _ip("netns", "add", self.name)
            _ip("link", "add", self.host_veth, "type", "veth", "peer", "name", self.ns_veth)
            _ip("link", "set", self.ns_veth, "netns", self.name)
            _ip("addr", "add", f"{self.host_ip}/30", "dev", self.host_veth)
            _ip("link", "set", self.host_veth, "up")
            inside = ["netns", "exec", self.name, "ip"]
            _ip(*inside, "addr", "add", f"{self.ns_ip}/30", "dev", self.ns_veth)
            _ip(*inside, "link", "set", self.ns_veth, "up")
            _ip(*inside, "link", "set", "lo", "up")
        except BaseException:
            self.destroy()  # half made: nothing of it stays
            raise
        return self

    def destroy(self) -> None:
        """Delete the namespace and the host's end of the pair; idempotent. The host's end
        is deleted by name as well: a process still inside keeps the namespace, and with
        it the pair, alive after ``netns del``."""
        _LIVE.discard(self)
        self._rules.clear()
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

    def blackhole(self) -> None:
        """Drop every packet between the namespace and the host, both ways. Traffic on
        the namespace's own loopback (a probe of a worker inside it) still flows."""
        self._change(add=[("OUTPUT", "-d", self.host_ip), ("INPUT", "-s", self.host_ip)])

    def lift(self) -> None:
        """Remove every fault rule this object added."""
        self._change(remove=list(self._rules))

    def lift_keeping_old_flows(self) -> list[int]:
        """End the fault as a NAT or load balancer that lost its state ends it: every TCP
        flow to the host that exists now stays silently dropped (a rule per 4-tuple, so a
        port of a server inside, such as a worker's probe, is not caught), new connections
        pass. A connect still sending SYNs is left to pass: a NAT makes state for a SYN.
        Returns the local ports of the flows kept dropped."""
        kept = [f for f in self._flows() if f[1] == self.host_ip and f[3] != "SYN-SENT"]
        add = []
        for local, peer, peer_port, _ in kept:
            tcp = ("-p", "tcp", "-s", self.ns_ip, "--sport", str(local))
            add.append(("OUTPUT", *tcp, "-d", peer, "--dport", str(peer_port)))
            add.append(("INPUT", "-p", "tcp", "-s", peer, "--sport", str(peer_port),
                        "-d", self.ns_ip, "--dport", str(local)))  # fmt: skip
        everything = [("OUTPUT", "-d", self.host_ip), ("INPUT", "-s", self.host_ip)]
        # In one transaction: no packet of an old flow slips through in between.
        self._change(add=add, remove=[rule for rule in everything if rule in self._rules])
        return sorted({local for local, *_ in kept})

    def flows(self) -> list[tuple[int, str, int]]:
        """(local port, peer address, peer port) of every TCP socket in the namespace that
        has a peer (any state but listening; loopback ones too)."""
        return [(local, peer, port) for local, peer, port, _ in self._flows()]

    def _flows(self) -> list[tuple[int, str, int, str]]:
        found = []
        for line in _run(self.command(["ss", "-Htn", "state", "all"])).splitlines():
            fields = line.split()
            if len(fields) < 5 or fields[0] == "LISTEN":
                continue
            peer_ip, _, peer_port = fields[4].rpartition(":")
            if peer_port == "*":
                continue
            local_port = int(fields[3].rpartition(":")[2])
            found.append((local_port, peer_ip.strip("[]"), int(peer_port), fields[0]))
        return found

    def _change(
        self, add: Sequence[tuple[str, ...]] = (), remove: Sequence[tuple[str, ...]] = ()
    ) -> None:
        """Insert DROP rules ``add`` and delete ``remove`` in one iptables-restore
        transaction inside the namespace."""
        if not add and not remove:
            return
        lines = [f"-I {' '.join(rule)} -j DROP" for rule in add]
        lines += [f"-D {' '.join(rule)} -j DROP" for rule in remove]
        script = "\n".join(["*filter", *lines, "COMMIT", ""])
        _run(self.command(["iptables-restore", "--noflush"]), stdin=script)
        self._rules.extend(add)
        for rule in remove:
            self._rules.remove(rule)

    def __enter__(self) -> Namespace:
        return self.create()

    def __exit__(self, *exc: object) -> None:
        self.destroy()


@contextlib.contextmanager
def namespace() -> Iterator[Namespace]:
    """A created namespace for the block, destroyed after it whatever happens."""
    ns = Namespace()
    try:
        yield ns.create()
    finally:
        ns.destroy()


def _free_subnet(pid: int) -> ipaddress.IPv4Network:
    """A /30 in 10.200-254.x.x that no route or address of the host overlaps, the first
    tried chosen from the pid: two processes start far apart and do not race for one."""
    routes = json.loads(_ip("-4", "-j", "route", "show", "table", "all"))
    taken = [_network(route["dst"]) for route in routes if route["dst"] != "default"]
    for link in json.loads(_ip("-4", "-j", "addr", "show")):
        taken += [_network(f"{a['local']}/{a['prefixlen']}") for a in link["addr_info"]]
    start = pid * 64 % _SUBNETS
    for step in range(_SUBNETS):
        index = (start + step) % _SUBNETS
        second, third, fourth = 200 + index // (256 * 64), index // 64 % 256, index % 64 * 4
        network = _network(f"10.{second}.{third}.{fourth}/30")
        if not any(network.overlaps(other) for other in taken):
            return network
    raise RuntimeError("no free /30 in 10.200.0.0-10.254.255.255")


def _network(text: str) -> ipaddress.IPv4Network:
    return ipaddress.IPv4Network(text, strict=False)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _reap_dead() -> None:
    """Delete the namespaces and host veths of test processes that are gone (killed
    before their cleanup ran), so a crashed run does not leave them behind for good."""
    for name in _ip("netns", "list").split():
        found = re.fullmatch(rf"{_PREFIX}(\d+)-\d+", name)
        if found and not _alive(int(found.group(1))):
            with contextlib.suppress(subprocess.CalledProcessError):
                _ip("netns", "del", name)
    for link in json.loads(_ip("-j", "link", "show", "type", "veth")):
        found = re.fullmatch(r"es([0-9a-f]+)h[0-9a-f]+", link["ifname"])
        if found and not _alive(int(found.group(1), 16)):
            with contextlib.suppress(subprocess.CalledProcessError):
                _ip("link", "del", link["ifname"])


def _destroy_leftovers() -> None:
    for ns in list(_LIVE):
        ns.destroy()


def _on_sigterm(signum: int, frame: object) -> None:
    """Delete what is left, then die of the signal as the process would have."""
    _destroy_leftovers()
    signal.signal(signum, signal.SIG_DFL)
    os.kill(os.getpid(), signum)


_installed = False


def _install_cleanup() -> None:
    """atexit deletes what is still there at exit; a SIGTERM (a CI timeout) deletes it
    too, unless the process handles SIGTERM itself."""
    global _installed
    if _installed:
        return
    _installed = True
    atexit.register(_destroy_leftovers)
    if (
        threading.current_thread() is threading.main_thread()
        and signal.getsignal(signal.SIGTERM) == signal.SIG_DFL
    ):
        signal.signal(signal.SIGTERM, _on_sigterm)
