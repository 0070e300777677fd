"""Run each measurement point in a fresh process, so memory and caches never leak between points.

Processes come from a multiprocessing *fork server* that has torch (and the worker module) preloaded: a
new measuring process is a fork of a clean interpreter that has imported torch but never run a model or
touched CUDA, so it starts in milliseconds instead of re-importing torch for every batch size. Where fork
servers are unavailable (Windows), ``spawn`` is used.
"""

from __future__ import annotations

import atexit
import contextlib
import multiprocessing as mp
import os
import signal
import sys
import threading
import time
from typing import Any

from perfpredict.profile.request import PointRequest

_PRELOAD = ["perfpredict.profile.worker", "perfpredict.profile.group_worker", "perfpredict.profile.pipeline_worker"]
_context: mp.context.BaseContext | None = None


def _ctx() -> mp.context.BaseContext:
    global _context
    if _context is None:
        if "forkserver" in mp.get_all_start_methods():
            ctx = mp.get_context("forkserver")
            ctx.set_forkserver_preload(_PRELOAD)
            atexit.register(_stop_fork_server)
        else:  # pragma: no cover - Windows
            ctx = mp.get_context("spawn")
        _context = ctx
    return _context


def _stop_fork_server() -> None:
    """At exit, end the fork server at once instead of letting it finish importing torch.

    A command that fails before measuring (a wrong zoo name, a broken model file) exits while the server it
    warmed up is still importing; left alone, the server only sees that its parent is gone when the import ends
    (about 2 s later, longer on a busy machine), and until then it holds the command's stdout and stderr open,
    so a pipe reader (``perfpredict ... | tee log``, ``subprocess.run(capture_output=True)``) waits for it.
    Skipped while measuring processes are still alive: their exit status is relayed by the server.
    Uses ``ForkServer._stop`` (CPython's own stop; private, so any failure leaves the old behaviour)."""
    from multiprocessing import forkserver

    server = getattr(forkserver, "_forkserver", None)
    pid = getattr(server, "_forkserver_pid", None)
    if pid is None or mp.active_children():
        return
    with contextlib.suppress(Exception):
        os.kill(pid, signal.SIGKILL)
        server._stop()


def _entry(req: PointRequest, conn) -> None:
    """Child-side entry point. The worker module (torch, torch._dynamo) is imported here, in the child,
    where the fork server has preloaded it, so the parent process never pays for importing it."""
    from perfpredict.profile.worker import run_point

    with measuring_process():
        run_point(req, conn)


@contextlib.contextmanager
def measuring_process():
    """Around a measuring process's work. A parent that has gone away (Ctrl-C, a kill) cannot be answered, so
    the pipe's BrokenPipeError ends the process quietly instead of printing a traceback into the user's
    terminal. Once it has answered, a thread the model file started and left running (a watchdog) would hold the
    process until the parent killed it 30 s later: it ends at once instead."""
    try:
        yield
    except (BrokenPipeError, ConnectionResetError, EOFError):
        pass
    loader = sys.modules.get("perfpredict.workload.loader")
    if loader is not None and any(t.is_alive() for t in loader.MODEL_THREADS):
        for stream in (sys.stdout, sys.stderr):
            stream.flush()
        os._exit(0)


@contextlib.contextmanager
def sigint_blocked():
    """Hold a Ctrl-C back for a step that must not be cut in half; one that came meanwhile is raised at the end.

    The Python-level handler is swapped for one that only records the signal. (Masking SIGINT in this thread
    is not enough: the kernel then delivers it to another thread, a library's worker, and Python still raises
    KeyboardInterrupt here.) Outside the main thread, where Python handles no signals, it does nothing."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    came: list[int] = []
    old = signal.signal(signal.SIGINT, lambda signum, frame: came.append(signum))
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, old)
        if came and old is not signal.SIG_IGN:
            if callable(old) and old is not signal.default_int_handler:
                old(signal.SIGINT, None)
            else:
                raise KeyboardInterrupt


@contextlib.contextmanager
def interrupts_deferred():
    """Hold SIGINT back while a measuring process starts: a Ctrl-C in the middle of ``Process.start()`` left a
    child the parent did not know about, which measured on and then printed a BrokenPipeError traceback."""
    if threading.current_thread() is threading.main_thread():
        warm_up()  # not under the mask: a fork server started here would pass SIGINT blocked on to every child
    with sigint_blocked():
        yield


def warm_up() -> None:
    """Start the fork server now (it imports torch in the background while the caller does other work)."""
    ctx = _ctx()
    if ctx.get_start_method() == "forkserver":
        from multiprocessing import forkserver

        forkserver.ensure_running()


def run_in_subprocess(req: PointRequest, timeout_s: float) -> dict[str, Any]:
    """Measure ``req`` in a fresh process; always returns a result dict (status ``ok`` or a failure).

    A process that dies without answering is classified by its exit: SIGKILL is taken as the kernel's OOM
    killer (status ``oom``), other signals as a crash (``error``), and a non-zero exit under a CPU memory limit
    as that limit (``oom``). Past ``timeout_s`` it is killed (``timeout``).
    """
    res = run_entry(_entry, req, timeout_s, {"batch_size": req.batch_size})
    if (res.get("status") == "error" and req.memory_limit_bytes and not req.device.startswith("cuda")
            and "died with exit code" in (res.get("error") or "") and res.get("exit_code")):
        # Under RLIMIT_DATA a process dies this way when the cap starves the runtime itself (glibc: "cannot
        # allocate memory for thread-local data: ABORT", exit 127): the limit is what failed, not the model.
        res = {**res, "status": "oom",
               "error": f"{res['error']} under the memory limit ({req.memory_limit_bytes / 2**20:.3g} MiB of private "
                        "memory): most likely too little for the measuring process itself"}
    return res


def _pipeline_entry(req, conn) -> None:
    from perfpredict.profile.pipeline_worker import run_pipeline

    with measuring_process():
        run_pipeline(req, conn)


def run_pipeline_in_subprocess(req, timeout_s: float) -> dict[str, Any]:
    """Like :func:`run_in_subprocess`, for a :class:`~perfpredict.profile.pipeline_worker.PipelineRequest`."""
    # Not a daemon: it starts DataLoader worker processes of its own.
    return run_entry(_pipeline_entry, req, timeout_s, {"cpus": list(req.cpus)}, daemon=False)


def run_entry(entry, req, timeout_s: float, tags: dict[str, Any], daemon: bool = True) -> dict[str, Any]:
    """Run ``entry(req, conn)`` in a fresh fork-server process and return what it sent (see above)."""
    ctx = _ctx()
    recv, send = ctx.Pipe(duplex=False)
    proc = ctx.Process(target=entry, args=(req, send), name="perfpredict-measure", daemon=daemon)
    try:
        with interrupts_deferred():
            proc.start()
        send.close()
        deadline = time.monotonic() + timeout_s
        result = None
        while result is None:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            if recv.poll(min(remaining, 0.5)):
                try:
                    result = recv.recv()
                except EOFError:
                    break
            elif not proc.is_alive():
                # It may have sent just before exiting: one last look.
                if recv.poll(0.1):
                    try:
                        result = recv.recv()
                    except EOFError:
                        pass
                break
        if result is not None:
            proc.join(timeout=30)
            return result
        if time.monotonic() < deadline:
            # The pipe closed early (EOF) because the child died; with the fork server its exit status
            # arrives a moment later, so wait for it rather than misreading a dead child as a hang.
            proc.join(timeout=max(1.0, min(10.0, deadline - time.monotonic())))
        if proc.is_alive():
            proc.kill()
            proc.join(timeout=10)
            return {"status": "timeout", **tags, "phase": "measure",
                    "error": f"no result within {timeout_s:.0f} s; the measuring process was killed"}
        proc.join(timeout=10)
        code = proc.exitcode
        if code is not None and code < 0 and -code == signal.SIGKILL:
            return {"status": "oom", **tags, "phase": "measure",
                    "error": "the measuring process was killed (SIGKILL), most likely by the kernel's "
                             "out-of-memory killer"}
        how = f"signal {signal.Signals(-code).name}" if code is not None and code < 0 else f"exit code {code}"
        hint = " (the model code ended the process: os._exit or a C library's exit?)" if code == 0 else ""
        return {"status": "error", **tags, "phase": "measure", "exit_code": code,
                "error": f"the measuring process died with {how} before reporting{hint}"}
    finally:
        if proc.is_alive():
            proc.kill()
            proc.join(timeout=5)
        recv.close()
