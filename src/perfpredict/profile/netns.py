"""Network-separated "nodes" on one machine: Linux network namespaces joined by veth links and a bridge.

GENIE's communication penalty depends on how a job's devices are spread over nodes (placement
⟨d_node, d_g/n⟩). Without a cluster we still get a *real* inter-node link: each virtual node is a network
namespace with its own IP; ranks in the same namespace talk over its loopback, ranks in different namespaces
go through a veth pair and a bridge, with a token-bucket filter (``tc tbf``) capping each node's egress
bandwidth. Gloo traffic between nodes therefore pays a real, controllable network cost.

Needs root (CAP_NET_ADMIN / CAP_SYS_ADMIN) and the ``ip`` and ``tc`` tools; :func:`netns_support` says
whether this machine has them, so callers and tests can skip cleanly.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import uuid
from dataclasses import dataclass, field

from perfpredict.errors import UsageError


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(["ip", *args], capture_output=True, text=True, check=check)


def netns_support() -> tuple[bool, str]:
    """(usable, reason): can this process create namespaces, veth links, a bridge and a tbf qdisc?"""
    if os.name != "posix" or not os.path.exists("/proc/self/ns/net"):
        return False, "network namespaces need Linux"
    if os.geteuid() != 0:
        return False, "creating network namespaces needs root"
    for tool in ("ip", "tc"):
        if shutil.which(tool) is None:
            return False, f"the `{tool}` tool (iproute2) is not installed"
    try:
        with VirtualNodes(2, rate_mbit=100):
            pass
    except (OSError, subprocess.CalledProcessError, UsageError) as e:
        detail = getattr(e, "stderr", None) or str(e)
        return False, f"could not build a test link: {str(detail).strip()[:200]}"
    return True, "ok"


@dataclass
class VirtualNodes:
    """``n`` namespaces ``<prefix>-<i>`` with addresses 10.<a>.<b>.(i+1)/24 on one bridge.

    Use as a context manager; everything created is removed on exit (also after errors).
    """

    n: int
    rate_mbit: float = 1000.0
    names: list[str] = field(default_factory=list)
    addresses: list[str] = field(default_factory=list)
    ifnames: list[str] = field(default_factory=list)
    _tag: str = field(default_factory=lambda: uuid.uuid4().hex[:6])
    _bridge: str | None = None
    _host_ends: list[str] = field(default_factory=list)

    def __enter__(self) -> VirtualNodes:
        if self.n < 1:
            raise UsageError("need at least one virtual node", step="netns")
        try:
            self._create()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def describe(self) -> str:
        return f"veth+bridge between network namespaces, tbf {self.rate_mbit:g} Mbit/s egress per node"

    def _create(self) -> None:
        tag = self._tag
        subnet = f"10.{200 + int(tag[:2], 16) % 50}.{int(tag[2:4], 16)}"
        self._bridge = f"ppbr{tag}"
        _ip("link", "add", self._bridge, "type", "bridge")
        _ip("link", "set", self._bridge, "up")
        for i in range(self.n):
            ns, inner, outer = f"pp{tag}-{i}", f"ppv{tag}{i}", f"pph{tag}{i}"
            _ip("netns", "add", ns)
            self.names.append(ns)
            _ip("link", "add", outer, "type", "veth", "peer", "name", inner)
            self._host_ends.append(outer)
            _ip("link", "set", inner, "netns", ns)
            _ip("link", "set", outer, "master", self._bridge)
            _ip("link", "set", outer, "up")
            addr = f"{subnet}.{i + 1}"
            _ip("-n", ns, "addr", "add", f"{addr}/24", "dev", inner)
            _ip("-n", ns, "link", "set", inner, "up")
            _ip("-n", ns, "link", "set", "lo", "up")
            # Cap what leaves the node: burst ≥ rate/HZ so the bucket can sustain the rate.
            burst_kbit = max(32, int(self.rate_mbit * 1000 / 250) + 1)
            subprocess.run(["ip", "netns", "exec", ns, "tc", "qdisc", "replace", "dev", inner, "root", "tbf",
                            "rate", f"{self.rate_mbit:g}mbit", "burst", f"{burst_kbit}kbit", "latency", "50ms"],
                           capture_output=True, text=True, check=True)
            self.addresses.append(addr)
            self.ifnames.append(inner)

    def close(self) -> None:
        for ns in self.names:
            _ip("netns", "del", ns, check=False)
        for outer in self._host_ends:
            _ip("link", "del", outer, check=False)
        if self._bridge:
            _ip("link", "del", self._bridge, check=False)
        self.names, self.addresses, self.ifnames, self._host_ends, self._bridge = [], [], [], [], None
