"""Run a group of measuring processes at the same time (parent side) and collect one answer per member.

Members come from the same fork server as single-point measurements (torch preloaded, no CUDA context in the
parent). A member that dies without answering is classified like a single point (SIGKILL → ``oom``); when the
group's deadline passes, every member still running is killed and reported as ``timeout``, so a deadlocked
collective can never hang the profiler.
"""

from __future__ import annotations

import signal
import socket
import time
from collections.abc import Sequence
from typing import Any

from perfpredict.profile.group_request import GroupMember, GroupTiming
from perfpredict.profile.runner import _ctx, interrupts_deferred, measuring_process


def _group_entry(member: GroupMember, timing: GroupTiming, barrier, conn) -> None:
    from perfpredict.profile.group_worker import run_member

    with measuring_process():
        run_member(member, timing, barrier, conn)


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def run_group(members: Sequence[GroupMember], timing: GroupTiming, timeout_s: float) -> list[dict[str, Any]]:
    """Start every member, wait for all answers (or the deadline), return results in member order."""
    ctx = _ctx()
    barrier = ctx.Barrier(len(members))
    procs, pipes = [], []
    try:
        for m in members:
            recv, send = ctx.Pipe(duplex=False)
            p = ctx.Process(target=_group_entry, args=(m, timing, barrier, send), daemon=True,
                            name=f"perfpredict-{m.label or 'member'}")
            with interrupts_deferred():  # the member is tracked (and so killed on Ctrl-C) before SIGINT lands
                p.start()
                procs.append(p)
                pipes.append(recv)
            send.close()
        results: list[dict[str, Any] | None] = [None] * len(members)
        deadline = time.monotonic() + timeout_s
        pending = set(range(len(members)))
        grace_until: float | None = None
        while pending and time.monotonic() < deadline:
            for i in list(pending):
                if pipes[i].poll(0.05):
                    try:
                        results[i] = pipes[i].recv()
                    except EOFError:
                        procs[i].join(timeout=5)  # the fork server reports the exit status a moment later
                        results[i] = _died(members[i], procs[i].exitcode)
                    pending.discard(i)
                elif not procs[i].is_alive():
                    results[i] = _died(members[i], procs[i].exitcode)
                    pending.discard(i)
            if members[0].dist is not None and any(r is not None and r.get("status") != "ok" for r in results):
                # A failed rank leaves the others blocked in a collective until the process-group timeout:
                # stop them, after a short grace period in which the rank that actually broke can still
                # report its own error (its peers often notice the broken connection first).
                if grace_until is None:
                    grace_until = time.monotonic() + _FAILURE_GRACE_S
                if time.monotonic() < grace_until and pending:
                    continue
                for i in pending:
                    results[i] = {"status": "aborted", "label": members[i].label, "phase": "measure",
                                  "error": "stopped because another rank failed"}
                pending.clear()
        for i in pending:
            results[i] = {"status": "timeout", "label": members[i].label, "phase": "measure",
                          "error": f"no result within {timeout_s:.0f} s; the group was killed"}
        return [r for r in results if r is not None]
    finally:
        for p in procs:
            if p.is_alive():
                p.kill()
        for p in procs:
            p.join(timeout=5)
        for r in pipes:
            r.close()


#: After one data-parallel rank fails, how long the others get to report before they are stopped.
_FAILURE_GRACE_S = 3.0


def _died(member: GroupMember, code: int | None) -> dict[str, Any]:
    if code is not None and code < 0 and -code == signal.SIGKILL:
        return {"status": "oom", "label": member.label, "phase": "measure",
                "error": "a group member was killed (SIGKILL), most likely by the kernel's out-of-memory killer"}
    how = f"signal {signal.Signals(-code).name}" if code is not None and code < 0 else f"exit code {code}"
    return {"status": "error", "label": member.label, "phase": "measure",
            "error": f"a group member died with {how} before reporting"}
