"""Resumable collection of a measured dataset: zoo architectures × batch sizes on one device.

Every row is one (architecture, batch size, mode) measured with perfpredict's own worker
(:func:`perfpredict.profile.worker.measure_point`: warm-up, per-iteration timing with device sync, peak
memory, NVML utilisation and energy on CUDA). Rows are appended to a CSV as they are measured, so an
interrupted sweep loses nothing and a re-run measures only what is missing.

Process isolation differs by device, on purpose:

- **CPU**: one fresh process per point (the profiler's fork server), because the RSS high-water mark that
  CPU memory is read from cannot be separated between two models in one process.
- **CUDA**: one fresh process per *architecture*, measuring its batch sizes in ascending order. CUDA
  context creation costs ~1 s per process, which would dominate a short GPU lease; torch's peak-allocated
  counter is reset between points and the caching allocator emptied, so the memory of each point is still
  its own. After an out-of-memory point the larger batch sizes of that architecture are not attempted.

Each dataset has a ``.meta.json`` beside it with its provenance: one entry per collection run (device,
driver, CUDA and torch versions, date, command, git commit).
"""

from __future__ import annotations

import contextlib
import csv
import datetime as _dt
import io
import json
import math
import os
import platform
import time
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from perfpredict.errors import UsageError
from perfpredict.git_commit import git_commit_of
from perfpredict.profile.request import PointRequest
from perfpredict.profile.timing import TimingConfig
from perfpredict.workload.spec import WorkloadRef

#: Columns of a measured dataset CSV, in file order. ``config`` joins it to the features table.
DATASET_COLUMNS = [
    "config", "family", "batch_size", "mode", "device_kind", "device_name", "status", "phase", "error",
    "iter_time_s", "iter_time_p10_s", "iter_time_p90_s", "iter_time_cv", "iterations", "samples_per_s",
    "peak_memory_bytes", "memory_kind", "cuda_reserved_bytes", "nvml_process_bytes", "nvml_context_bytes",
    "gpu_utilization", "utilization_samples", "mean_power_w", "energy_per_iter_j", "threads",
    "first_iter_extra_s", "measured_at",
]

#: Statuses that are final answers for a point (a re-run does not measure them again).
FINAL_STATUSES = ("ok", "oom")

#: Timing used for datasets on CUDA: GPU iteration times are steady, so a 1 s window is enough.
CUDA_DATASET_TIMING = TimingConfig(warmup_iters=3, warmup_s=0.3, min_iters=10, min_time_s=1.0, max_time_s=5.0)


@dataclass(frozen=True)
class ArchPlan:
    """One architecture of the sweep and the batch sizes to measure it at."""

    family: str
    cfg: Mapping[str, Any]
    config: str
    batch_sizes: tuple[int, ...]
    gmacs_per_sample: float

    @property
    def ref(self) -> WorkloadRef:
        return WorkloadRef(kind="zoo", target=self.family, params=tuple(sorted(self.cfg.items())))

    def ref_at(self, precision: str) -> WorkloadRef:
        """The reference measured at ``precision`` (fp32 leaves the ref as datasets before precision had it)."""
        return self.ref if precision == "fp32" else replace(self.ref, precision=precision)


def plan_sweep(families: Iterable[str] | None = None, batch_sizes: Iterable[int] | None = None,
               max_gmacs: float | None = None, max_sample_gmacs_per_iter: float | None = None,
               max_param_bytes: float | None = None) -> list[ArchPlan]:
    """The zoo grid as a list of :class:`ArchPlan`, filtered by forward GMACs per sample.

    ``batch_sizes`` overrides each family's default sweep. ``max_sample_gmacs_per_iter`` drops the batch
    sizes whose forward GMACs per iteration (GMACs/sample × batch) exceed it, so slow devices skip points
    that would take tens of seconds each. ``max_param_bytes`` drops architectures whose fp32 weights exceed it
    (training holds about three copies: weights, gradients, momentum), e.g. the multi-GB DLRM tables on a
    small CPU machine, where FLOP filters do not catch them.
    """
    from perfpredict.workload.zoo import enumerate_configs, get_family

    plans = []
    # a family named twice (``--families mlp,lstm,mlp``) is planned once: twice, each of its points was measured
    # twice in one run (the points still to measure are read from the file before the run)
    for fam_name in (list(dict.fromkeys(families)) if families else [None]):
        for name, cfg in enumerate_configs(fam_name):
            fam = get_family(name)
            gmacs = fam.closed_form_macs(cfg) / 1e9
            if max_gmacs is not None and gmacs > max_gmacs:
                continue
            params = fam.closed_form_params(cfg)
            if max_param_bytes is not None and params is not None and 4 * params > max_param_bytes:
                continue
            bss = tuple(sorted(batch_sizes or fam.default_batch_sizes))
            if max_sample_gmacs_per_iter is not None:
                bss = tuple(b for b in bss if gmacs * b <= max_sample_gmacs_per_iter)
            if bss:
                plans.append(ArchPlan(name, cfg, fam.config_name(cfg), bss, gmacs))
    return _interleave_families(plans)


def _interleave_families(plans: list[ArchPlan]) -> list[ArchPlan]:
    """Round-robin over families (each family's own order kept), so a sweep cut short by a time budget
    still covers every family rather than only the first few."""
    by_family: dict[str, list[ArchPlan]] = {}
    for p in plans:
        by_family.setdefault(p.family, []).append(p)
    queues = list(by_family.values())
    out: list[ArchPlan] = []
    while any(queues):
        for q in queues:
            if q:
                out.append(q.pop(0))
    return out


def row_from_result(plan: ArchPlan, res: Mapping[str, Any], mode: str, device_kind: str) -> dict[str, Any]:
    """Flatten one worker result dict into a dataset row."""
    timing = res.get("timing") or {}
    memory = res.get("memory") or {}
    energy = res.get("energy") or {}
    info = res.get("device_info") or {}
    median = timing.get("median_s")
    bs = int(res.get("batch_size", 0))
    return {
        "config": plan.config, "family": plan.family, "batch_size": bs, "mode": mode,
        "device_kind": info.get("kind", device_kind), "device_name": info.get("name"),
        "status": res.get("status"), "phase": res.get("phase"), "error": (res.get("error") or None),
        "iter_time_s": median, "iter_time_p10_s": timing.get("p10_s"), "iter_time_p90_s": timing.get("p90_s"),
        "iter_time_cv": timing.get("cv"), "iterations": timing.get("iterations"),
        "samples_per_s": bs / median if median else None,
        "peak_memory_bytes": memory.get("peak_bytes"), "memory_kind": memory.get("kind"),
        "cuda_reserved_bytes": memory.get("cuda_reserved_bytes"),
        "nvml_process_bytes": memory.get("nvml_process_bytes"), "nvml_context_bytes": memory.get("baseline_bytes")
        if memory.get("kind", "").startswith("cuda") else None,
        "gpu_utilization": energy.get("gpu_utilization"), "utilization_samples": energy.get("utilization_samples"),
        "mean_power_w": energy.get("mean_power_w"), "energy_per_iter_j": energy.get("energy_per_iter_j"),
        "threads": res.get("threads"),
        "first_iter_extra_s": (res.get("startup") or {}).get("first_iter_extra_s"),
        "measured_at": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
    }


# ---------------------------------------------------------------------------------------------------------
# CUDA: one process per architecture
# ---------------------------------------------------------------------------------------------------------
def _arch_entry(reqs: list[PointRequest], conn) -> None:
    """Child: measure each request in turn in this process, sending each result as soon as it exists."""
    import gc

    import torch

    from perfpredict.profile.runner import measuring_process
    from perfpredict.profile.worker import measure_point

    try:
        with measuring_process():  # a parent gone (Ctrl-C) cannot be answered: end without a traceback
            for req in reqs:
                res = measure_point(req)
                conn.send(res)
                gc.collect()
                if torch.cuda.is_available():
                    torch.cuda.empty_cache()
                if res.get("status") == "oom":
                    break  # larger batches of this architecture would only run out of memory too
    finally:
        conn.close()


def run_arch_in_subprocess(reqs: list[PointRequest], timeout_s: float,
                           on_result: Callable[[dict[str, Any]], None]) -> None:
    """Run ``reqs`` in one fresh process; call ``on_result`` for each point, including a failed last one.

    If the process dies or times out, the point it was measuring gets a status that says how (``oom`` for
    SIGKILL, ``error`` for another death, ``timeout``); points it never reached get no row, so a re-run
    measures them (those below an ``oom`` point: :func:`todo_batches`).
    """
    from perfpredict.profile.runner import _ctx, interrupts_deferred

    ctx = _ctx()
    recv, send = ctx.Pipe(duplex=False)
    proc = ctx.Process(target=_arch_entry, args=(reqs, send), name="perfpredict-arch", daemon=True)
    got = 0
    deadline = time.monotonic() + timeout_s
    try:
        with interrupts_deferred():  # a Ctrl-C inside start() would leave a child that finally: cannot see
            proc.start()
        send.close()
        while got < len(reqs):
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            if recv.poll(min(remaining, 0.5)):
                try:
                    res = recv.recv()
                except EOFError:
                    break
                got += 1
                on_result(res)
                if res.get("status") == "oom":
                    return
            elif not proc.is_alive() and not recv.poll(0.1):
                break
        if got >= len(reqs):
            return
        bs = reqs[got].batch_size
        if proc.is_alive() and time.monotonic() >= deadline:
            proc.kill()
            proc.join(timeout=10)
            on_result({"status": "timeout", "batch_size": bs, "phase": "measure",
                       "error": f"no result within the architecture's {timeout_s:.0f} s budget"})
            return
        proc.join(timeout=10)
        code = proc.exitcode
        if code is not None and code < 0 and -code == 9:
            on_result({"status": "oom", "batch_size": bs, "phase": "measure",
                       "error": "the measuring process was killed (SIGKILL), most likely out of memory"})
        else:
            on_result({"status": "error", "batch_size": bs, "phase": "measure",
                       "error": f"the measuring process died (exit code {code}) before reporting"})
    finally:
        if proc.is_alive():
            proc.kill()
            proc.join(timeout=5)
        recv.close()


# ---------------------------------------------------------------------------------------------------------
# The sweep
# ---------------------------------------------------------------------------------------------------------
@dataclass
class CollectSettings:
    device: str = "cpu"  # "cpu" or "cuda:<i>" (already resolved)
    mode: str = "train"
    #: "fp32", or "bf16"/"fp16" autocast mixed precision; one per file, recorded in each run's provenance
    precision: str = "fp32"
    timing: TimingConfig = field(default_factory=TimingConfig)
    threads: int | None = None
    time_budget_s: float | None = None
    command: str = ""
    git_commit: str | None = None
    #: One process per architecture (True) or per point (False); None = per architecture on CUDA only.
    process_per_arch: bool | None = None
    #: Time the speed sentinel (:mod:`perfpredict.dataset.sentinel`) at the start, between architectures once
    #: this many seconds passed since the last reading (0: before every one), and at the end; None: no sentinel.
    sentinel_every_s: float | None = None

    @property
    def per_arch(self) -> bool:
        return self.device.startswith("cuda") if self.process_per_arch is None else self.process_per_arch


def read_dataset(path: str | Path) -> list[dict[str, str]]:
    """The rows of a dataset CSV (none when the file does not exist).

    A file that is not a readable CSV text file (binary, another encoding, a folder) is a
    :class:`~perfpredict.errors.UsageError` naming it, not a traceback.
    """
    p = Path(path)
    if not p.exists():
        return []
    try:
        with open(p, newline="", encoding="utf-8") as f:
            return list(csv.DictReader(f))
    except (UnicodeDecodeError, csv.Error) as e:
        raise UsageError(f"{p} is not a readable CSV text file ({e})", step="reading the dataset") from None
    except OSError as e:
        raise UsageError(f"cannot read {p}: {e.strerror or e}", step="reading the dataset") from None


def check_output_path(path: str | Path) -> Path:
    """``path`` as a CSV to write: refused when it is a folder or one of its parent folders is a file."""
    from perfpredict.output_paths import output_file_problem

    problem = output_file_problem(path)
    if problem:
        raise UsageError(problem, step="output")
    return Path(path)


def _csv_records(text: str) -> list[tuple[int, list[str]]]:
    """Each CSV record of ``text`` with the character offset where it ends."""
    pos = 0
    buf = io.StringIO(text, newline="")

    def lines():
        nonlocal pos
        for line in buf:
            pos += len(line)
            yield line

    # csv.reader pulls one line at a time and stops at the end of a record, so ``pos`` is that record's end
    return [(pos, rec) for rec in csv.reader(lines())]


def prepare_resume(path: str | Path, columns: list[str]) -> tuple[list[dict[str, str]], str | None]:
    """Get ``path`` ready to have rows of ``columns`` appended, and return its complete rows.

    Refuses (:class:`~perfpredict.errors.UsageError`) a folder, a file under a file, a file that is not CSV
    text and a CSV whose header is not ``columns`` (appending would put values under the wrong names). A last
    row cut short by an interrupted or killed run (no line end, or fields missing) is removed from the file,
    so the next row starts on a line of its own and that point is measured again; every complete row is kept.
    Returns ``(rows, dropped)``: the rows that have every column, and the text of a removed partial row
    (None when there was none). Rows with too many or too few fields elsewhere stay in the file but are not
    returned.
    """
    p = check_output_path(path)
    if not p.exists():
        return [], None
    garbled = _drop_garbled_tail(p, [columns])
    if garbled is None:
        garbled = _GARBLED_DROPPED.pop(p.resolve(), None)
    _, bom, text, records = _read_csv_file(p)
    expected = ",".join(columns)
    if not text.strip():
        if text:
            _truncate(p, bom)  # only blank lines: start the file again
        return [], None
    complete_tail = text.endswith(("\n", "\r"))
    header = records[0][1]
    if header != columns:
        if len(records) == 1 and not complete_tail and expected.startswith(text):
            # only a cut-short header: nothing was measured, start the file again
            _truncate(p, bom)
            return [], text
        got = ",".join(header)
        raise UsageError(f"{p} has the header {got[:120]!r}, not the {len(columns)} columns this collection writes "
                         f"({', '.join(columns[:3])}, ...); give another --out, or move it away to start afresh",
                         step="resuming")
    while len(records) > 1 and not records[-1][1]:
        records = records[:-1]  # blank lines at the end are no rows (readers skip them too)
    dropped = None
    if len(records) > 1 and len(records[-1][1]) < len(columns):
        end = records[-2][0]
        tail = text[end:]
        if tail.rstrip("\r\n").count("\n") > 0:
            # more than one physical line does not parse: an open quote swallowed the rows after it (a run of an
            # older version appended to a cut-short row). Cutting would lose measured rows: the user decides.
            line = text[:end].count("\n") + 1
            raise UsageError(f"{p}: from line {line} on, {tail.count(chr(10))} lines do not parse as rows (an "
                             f"unclosed quote?); fix or move the file before resuming, nothing was changed",
                             step="resuming")
        dropped = tail
        _truncate(p, bom + len(text[:end].encode("utf-8")))
        records = records[:-1]
    elif garbled is not None:
        dropped = garbled
    elif not complete_tail:
        # a complete last record (the header, or a whole row) without its line end: add it, so the next row
        # starts on a line of its own
        with open(p, "a", newline="") as f:
            f.write("\r\n")
    rows = [dict(zip(columns, rec)) for _, rec in records[1:] if len(rec) == len(columns)]
    return rows, dropped


#: garbled tails :func:`upgrade_header` removed before :func:`prepare_resume` ran, by file: reported by the latter
_GARBLED_DROPPED: dict[Path, str] = {}


def _drop_garbled_tail(p: Path, headers: Sequence[Sequence[str]]) -> str | None:
    """Remove bytes after the file's last line end that are not text (NUL bytes a crash or a power cut left, a
    row cut inside a multi-byte character) and return them (decoded, replaced where not UTF-8) as the dropped
    row; None when there were none. Only in a file of ours (its header one of ``headers``): another file given
    by mistake is refused untouched. Bad bytes before the last line end are :func:`_read_csv_file`'s to refuse:
    removing them would lose measured rows."""
    try:
        data = p.read_bytes()
    except OSError:
        return None  # _read_csv_file says why
    last = data.rfind(b"\n") + 1
    tail = data[last:]
    if not tail or last == 0 or _csv_text(tail) is not None:
        return None
    text = _csv_text(data[:last])
    if text is None:
        return None
    text = text.removeprefix("\ufeff")
    header = next(csv.reader([text.splitlines()[0]]), []) if text.strip() else []
    if not any(header == list(h) for h in headers):
        return None
    _truncate(p, last)
    return tail.decode("utf-8", errors="replace").replace("\x00", "")


def _csv_text(data: bytes) -> str | None:
    """``data`` as text, or None when it is not (not UTF-8, or NUL bytes: the rule :func:`_read_csv_file`
    refuses a file by)."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return None
    return None if "\x00" in text else text


def _read_csv_file(p: Path) -> tuple[bytes, int, str, list[tuple[int, list[str]]]]:
    """``p``'s bytes, the length of its byte-order mark (an editor's: kept, not counted), its text and its CSV
    records (:func:`_csv_records`); a :class:`UsageError` when it cannot be read or is not CSV text."""
    try:
        data = p.read_bytes()
    except OSError as e:
        raise UsageError(f"cannot read {p}: {e.strerror or e}", step="resuming") from None
    bom = 3 if data.startswith(b"\xef\xbb\xbf") else 0
    try:
        text = data[bom:].decode("utf-8")
        if "\x00" in text:
            raise ValueError("it contains NUL bytes")
        return data, bom, text, _csv_records(text)
    except (UnicodeDecodeError, ValueError, csv.Error) as e:
        raise UsageError(f"{p} is not a CSV text file ({e}); give another --out, or move it away to start "
                         "afresh", step="resuming") from None


def upgrade_header(path: str | Path, columns: list[str], older: Iterable[Iterable[str]],
                   by: str = "") -> list[str] | None:
    """Give a CSV written under an older header of the same collection the current ``columns``, so a new
    run can append to it (:func:`prepare_resume` refuses any other header). Returns the old header, or None
    when there was nothing to do (no file, or a header that is not one of ``older``).

    Only a header listed in ``older`` is rewritten, and only when its columns are all among ``columns``:
    each value stays under its own name and the new columns are left empty in the old rows (they were not
    measured then). A cut-short last row (an interrupted run) is kept as it was, after the rewritten rows,
    for :func:`prepare_resume` to remove. Any other row whose field count is not the old header's stops the
    upgrade with nothing changed. The file is rewritten beside and renamed, with Ctrl-C held back, and the
    upgrade is recorded in the provenance file (``header_upgrades``: when, from which header, ``by``)."""
    p = check_output_path(path)
    if not p.is_file():
        return None
    older = [list(o) for o in older]  # read twice below
    garbled = _drop_garbled_tail(p, [columns, *older])
    if garbled is not None:
        _GARBLED_DROPPED[p.resolve()] = garbled
    data, bom, text, records = _read_csv_file(p)
    if not records:
        return None
    header = records[0][1]
    if header == columns or not any(header == list(o) for o in older):
        return None
    missing = [c for c in header if c not in columns]
    if missing:
        raise UsageError(f"{p}: its older header has column(s) the current one lacks ({', '.join(missing)}); "
                         "it cannot be upgraded without losing them", step="resuming")
    last = max(i for i, (_, rec) in enumerate(records) if rec)
    tail = ""
    if last > 0 and len(records[last][1]) < len(header):
        tail, records = text[records[last - 1][0]:], records[:last]
    body = [(end, rec) for end, rec in records[1:] if rec]
    bad = [i for i, (_, rec) in enumerate(body) if len(rec) != len(header)]
    if bad:
        end = body[bad[0]][0]
        raise UsageError(f"{p}: a row ending at line {text[:end].count(chr(10))} has {len(body[bad[0]][1])} fields, "
                         f"not the header's {len(header)}; fix it before upgrading the header, nothing was changed",
                         step="resuming")
    out = io.StringIO()
    w = csv.DictWriter(out, fieldnames=columns, lineterminator="\r\n")
    w.writeheader()
    for _, rec in body:
        w.writerow(dict(zip(header, rec)))
    from perfpredict.profile.runner import sigint_blocked

    tmp = p.with_name(p.name + ".upgrade.tmp")
    try:
        with sigint_blocked():
            tmp.write_bytes(data[:bom] + (out.getvalue() + tail).encode("utf-8"))
            tmp.replace(p)
    except OSError as e:
        raise UsageError(f"cannot rewrite {p}: {e.strerror or e}", step="resuming") from None
    meta = check_provenance(p) or {"dataset": p.name, "runs": []}
    meta["columns"] = list(columns)
    meta.setdefault("header_upgrades", []).append(
        {"at": _now(), "from": header, "added": [c for c in columns if c not in header], "rows": len(body),
         "by": by})
    _write_provenance(p, meta)
    return header


def _truncate(path: Path, size: int) -> None:
    try:
        with open(path, "r+b") as f:
            f.truncate(size)
    except OSError as e:
        raise UsageError(f"cannot rewrite {path}: {e.strerror or e}", step="resuming") from None


def _number(text: str | None) -> float | None:
    try:
        v = float(text)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return None
    return v if math.isfinite(v) else None


@dataclass(frozen=True)
class DonePoints:
    """What a dataset file already answers (:func:`_done_points`): ``points``, the ``(config, batch size, mode)``
    with a final answer, and ``oom_from``: per ``(config, mode)``, the smallest batch size whose answer is
    ``oom``. Empty: a file with nothing in it yet."""

    points: frozenset[tuple[str, int, str]] = frozenset()
    oom_from: Mapping[tuple[str, str], int] = field(default_factory=dict)


def _done_points(rows: list[dict[str, str]]) -> DonePoints:
    """The points with a final answer: ``oom``, or ``ok`` with a measured iteration time (a row whose numbers
    are missing or garbled is measured again). The last final row of a point is its answer (as readers take it),
    so ``oom_from`` counts a point whose last final row is ``oom``."""
    last: dict[tuple[str, int, str], str] = {}
    for r in rows:
        status = r.get("status")
        bs = _number(r.get("batch_size"))
        if status not in FINAL_STATUSES or bs is None or bs != int(bs) or not r.get("config") or not r.get("mode"):
            continue
        if status == "ok":
            t = _number(r.get("iter_time_s"))
            if t is None or t <= 0 or _number(r.get("samples_per_s")) is None:
                continue
        key = (r["config"], int(bs), r["mode"])
        last[key] = status
    oom_from: dict[tuple[str, str], int] = {}
    for (config, bs, mode), status in last.items():
        if status == "oom" and bs < oom_from.get((config, mode), bs + 1):
            oom_from[(config, mode)] = bs
    return DonePoints(frozenset(last), oom_from)


def todo_batches(plan: ArchPlan, done: DonePoints, mode: str) -> list[int]:
    """The batch sizes of ``plan`` still to measure in ``mode`` (``done``: :func:`_done_points` of the file).
    Those above a batch size that ran out of memory are not: a run stops an architecture at its first ``oom``
    (:func:`measure_architecture`), and a resumed or repeated run does the same."""
    oom_from = done.oom_from.get((plan.config, mode))
    return [b for b in plan.batch_sizes
            if (plan.config, b, mode) not in done.points and (oom_from is None or b < oom_from)]


def collect(plans: list[ArchPlan], out_csv: str | Path, settings: CollectSettings,
            progress: Callable[[ArchPlan, dict[str, Any]], None] | None = None,
            on_sentinel: Callable[[dict[str, Any]], None] | None = None,
            ray_address: str | None = None, tasks_at_once: int | None = None) -> dict[str, Any]:
    """Measure every point of ``plans`` not yet in ``out_csv``; append rows as they come; write provenance.

    Returns a summary: points measured, by status, whether the time budget stopped the sweep, and the speed
    sentinel's drift and noise (None without ``settings.sentinel_every_s``; the drift also with fewer than two
    readings); ``on_sentinel`` is called with each sentinel reading. With ``ray_address`` the architectures are
    Ray tasks on that cluster's GPUs or nodes (:mod:`perfpredict.dataset.ray_collect`; ``settings.device`` is then
    ``cpu`` or ``cuda``, no sentinel is timed, and ``tasks_at_once`` may cap the tasks in flight), and the summary
    has ``ray``: where they ran and the tasks refused or lost.
    """
    out = check_output_path(out_csv)
    # A malformed provenance file would otherwise only be found after all the measuring.
    meta = check_provenance(out)
    has_rows = out.exists() and out.stat().st_size > 0
    if meta is None and has_rows and read_dataset(out):
        raise UsageError(f"{out.name} has measured rows but no provenance ({provenance_path(out).name}), so which "
                         "precision and device they came from is unknown; restore it or collect into a new file",
                         step="provenance")
    if meta is not None and meta.get("runs"):
        recorded = dataset_precision(meta)
        if recorded != settings.precision:
            raise UsageError(f"{out.name} holds {recorded} measurements (its {provenance_path(out).name} says so); "
                             f"collect {settings.precision} into a file of its own (one precision per dataset)",
                             step="provenance")
    on_ray = ray_address is not None
    file_cpu = None
    if on_ray:
        if settings.device not in ("cpu", "cuda"):
            raise UsageError(f"--device {settings.device} with --ray: Ray gives each task its GPU; use --device cuda "
                             "or cpu", step="arguments")
        settings = replace(settings, sentinel_every_s=None)
        # a CPU set is one CPU's; a GPU set's host CPUs may differ between runs (the estimators read it for CPUs only)
        file_cpu = dataset_cpu_id(meta) if settings.device == "cpu" else None
    # Ray's connection (and its GPUs checked) before anything is written, a cut-short last row's removal included: a
    # wrong address leaves the files as they were. Only when there is something to measure (read without changing
    # the file): a finished file's re-run does not contact the cluster.
    with contextlib.ExitStack() as session:  # Ray's connection, closed however the run ends
        ray = ray_info = ray_slots = None
        done_before = _done_points(read_dataset(out)) if on_ray else DonePoints()
        if on_ray and any(todo_batches(p, done_before, settings.mode) for p in plans):
            from perfpredict.dataset.ray_collect import task_slots
            from perfpredict.ray_cluster import connected

            ray, ray_info = session.enter_context(connected(ray_address, worker_niceness=0))
            ray_slots = task_slots(ray, "cuda" if settings.device.startswith("cuda") else "cpu", tasks_at_once)
        rows, dropped = prepare_resume(out, DATASET_COLUMNS)
        if settings.device == "cpu" and not on_ray:
            _check_same_cpu(out, meta, rows)
        elif not on_ray:
            _check_same_gpu(out, rows)
        # the slice of a MIG GPU is told only by a measurement's device name: the first one is checked against the
        # file's before its row is written (Ray's tasks are checked by SameDevice)
        recorded_names = recorded_devices(meta, rows) if not on_ray and settings.device != "cpu" else None
        done = _done_points(rows)
        # Earlier non-final rows (errors, timeouts) of points measured again are superseded: keep the file
        # append-only and let readers take the last row per point.
        new_file = not out.exists() or out.stat().st_size == 0
        is_cuda = settings.device.startswith("cuda")
        device_kind = "cuda" if is_cuda else "cpu"
        started = time.monotonic()
        run_meta = _run_provenance(settings)
        ray_run: dict[str, Any] = {}
        if ray is not None:
            # the driver's CUDA settings are not the nodes'; each row's device and the nodes' are recorded instead
            for key in ("cudnn_version", "matmul_allow_tf32", "cudnn_allow_tf32", "cudnn_benchmark"):
                run_meta.pop(key, None)
            run_meta["process_isolation"] = ("one Ray task per architecture (" + ("one GPU" if is_cuda else "a node's CPUs")
                                             + "), " + run_meta["process_isolation"] + " inside it")
            run_meta["ray"] = ray_run = {**ray_info, "speed_sentinel": "not timed on Ray (many machines)"}
        if dropped is not None:
            run_meta["dropped_partial_row"] = dropped
        counts: dict[str, int] = {}
        stopped_by_budget = False
        device_info: dict[str, Any] | None = None
        sentinel = _sentinel_for(plans, settings, done, on_sentinel)
        try:
            out.parent.mkdir(parents=True, exist_ok=True)
            f = open(out, "a", newline="", encoding="utf-8")
        except OSError as e:
            raise UsageError(f"cannot write {out}: {e.strerror or e}", step="output") from None
        # Recorded before the first row, and completed at the end: a run killed outright (SIGTERM, SIGKILL, a lost
        # machine) still leaves its precision and device beside the rows it wrote.
        run_meta["finished_at"] = None
        if settings.device == "cpu" and not on_ray:
            # the CPU beyond its model name too (what the worker's device_info says at the end): without it a file
            # whose runs were all killed records no cpu_id, and another CPU of the same name could append to it
            from perfpredict.hostinfo import cpu_id, cpu_model_name

            run_meta["device_info"] = {"kind": "cpu", "name": cpu_model_name(), "cpu_id": cpu_id()}
        try:
            _append_provenance(out, run_meta)
        except BaseException:
            f.close()
            raise

        try:
            with f:
                writer = csv.DictWriter(f, fieldnames=DATASET_COLUMNS)
                if new_file:
                    writer.writeheader()

                def record(plan: ArchPlan, res: dict[str, Any]) -> None:
                    nonlocal device_info, recorded_names
                    name = (res.get("device_info") or {}).get("name")
                    if recorded_names is not None and name:
                        refusal = device_refusal(recorded_names, name)
                        if refusal:
                            raise UsageError(f"{out.name} {refusal}: collect into a file of its own (one device per "
                                             "dataset)", step="provenance")
                        recorded_names = {name}
                    row = row_from_result(plan, res, settings.mode, device_kind)
                    writer.writerow(row)
                    f.flush()
                    counts[row["status"]] = counts.get(row["status"], 0) + 1
                    if device_info is None and res.get("device_info"):
                        device_info = res["device_info"]
                    if progress:
                        progress(plan, row)

                def within_budget() -> bool:
                    """False, and the run marked stopped by its budget, once the budget is spent."""
                    nonlocal stopped_by_budget
                    if settings.time_budget_s is not None and time.monotonic() - started > settings.time_budget_s:
                        stopped_by_budget = True
                    return not stopped_by_budget

                if ray is not None:
                    from perfpredict.dataset.ray_collect import SameDevice, measure_on_ray

                    names = {r["device_name"] for r in rows if r.get("device_name")}
                    gate = SameDevice(device_kind, names, file_cpu)
                    jobs = [(p, t) for p in plans if (t := todo_batches(p, done, settings.mode))]
                    measure_on_ray(ray, jobs, settings, gate, record, within_budget, ray_slots, ray_run)
                else:
                    for plan in plans:
                        todo = todo_batches(plan, done, settings.mode)
                        if not todo:
                            continue
                        if not within_budget():
                            break
                        if sentinel is not None and sentinel.due():
                            sentinel.read(sum(counts.values()))
                        measure_architecture(plan, todo, settings, lambda r, p=plan: record(p, r))
                if sentinel is not None and sentinel.readings:
                    sentinel.read(sum(counts.values()), final=True)
        except BaseException as e:
            # Ctrl-C or a failure: the rows written so far stay, and the run is still recorded.
            run_meta["interrupted"] = True
            if not isinstance(e, KeyboardInterrupt):
                run_meta["failed"] = f"{type(e).__name__}: {e}"
            raise
        finally:
            run_meta.update(finished_at=_now(), wall_s=round(time.monotonic() - started, 1), counts=counts,
                            rows_written=sum(counts.values()), stopped_by_time_budget=stopped_by_budget,
                            device_info=device_info or run_meta.get("device_info"))
            if sentinel is not None:
                run_meta["speed_sentinel"] = sentinel.as_dict()
            _append_provenance(out, run_meta, replace_run=run_meta["run_id"])
        summary = {"counts": counts, "stopped_by_time_budget": stopped_by_budget, "wall_s": run_meta["wall_s"],
                "dropped_partial_row": dropped is not None,
                "speed_drift": sentinel.drift if sentinel is not None else None,
                "speed_noise": sentinel.noise if sentinel is not None else None}
        if ray is not None:
            summary["ray"] = ray_run
        return summary


def measure_architecture(plan: ArchPlan, batch_sizes: list[int], settings: CollectSettings,
                         on_result: Callable[[dict[str, Any]], None]) -> None:
    """Measure ``plan`` at ``batch_sizes`` on ``settings.device``, in one process per architecture or per point
    (:attr:`CollectSettings.per_arch`), calling ``on_result`` with each point's result; a batch size that runs out
    of memory ends the architecture (larger ones would too)."""
    reqs = [_point_request(plan, b, settings) for b in batch_sizes]
    per_point = _point_timeout(settings)
    if settings.per_arch:
        run_arch_in_subprocess(reqs, per_point * len(reqs) + 60.0, on_result)
        return
    from perfpredict.profile.runner import run_in_subprocess

    for req in reqs:
        res = run_in_subprocess(req, per_point)
        on_result(res)
        if res.get("status") == "oom":
            break


def _point_timeout(settings: CollectSettings) -> float:
    return settings.timing.max_time_s * 2 + 60.0


def _point_request(plan: ArchPlan, batch_size: int, settings: CollectSettings) -> PointRequest:
    return PointRequest(ref=plan.ref_at(settings.precision), batch_size=batch_size, mode=settings.mode,
                        device=settings.device, timing=settings.timing, threads=settings.threads)


def _sentinel_for(plans: list[ArchPlan], settings: CollectSettings, done: DonePoints,
                  on_reading: Callable[[dict[str, Any]], None] | None):
    """The run's :class:`~perfpredict.dataset.sentinel.SpeedSentinel`, or None: none asked for, or nothing left
    to measure (a finished file's re-run measures nothing, so it times nothing either)."""
    from perfpredict.dataset.sentinel import SpeedSentinel, choose_sentinel

    if settings.sentinel_every_s is None:
        return None
    if not any(todo_batches(p, done, settings.mode) for p in plans):
        return None
    chosen = choose_sentinel(plans)
    if chosen is None:
        return None
    plan, batch = chosen
    req = _point_request(plan, batch, settings)

    def measure() -> dict[str, Any]:
        from perfpredict.profile.runner import run_in_subprocess

        return run_in_subprocess(req, _point_timeout(settings))

    return SpeedSentinel(plan.config, batch, settings.sentinel_every_s, measure, on_reading=on_reading)


def _now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


def _run_provenance(settings: CollectSettings) -> dict[str, Any]:
    import torch

    meta: dict[str, Any] = {
        "run_id": uuid.uuid4().hex[:12], "started_at": _now(), "command": settings.command,
        "git_commit": settings.git_commit,
        "device": settings.device, "mode": settings.mode, "precision": settings.precision,
        "timing": settings.timing.as_dict(),
        "threads": settings.threads, "torch_version": torch.__version__, "cuda_version": torch.version.cuda,
        "python_version": platform.python_version(), "platform": platform.platform(),
        "hostname": platform.node(), "cpu_count": os.cpu_count(),
        "process_isolation": "one process per architecture" if settings.per_arch else "one process per point",
    }
    if settings.device.startswith("cuda"):
        meta["cudnn_version"] = torch.backends.cudnn.version()
        meta["matmul_allow_tf32"] = torch.backends.cuda.matmul.allow_tf32
        meta["cudnn_allow_tf32"] = torch.backends.cudnn.allow_tf32
        meta["cudnn_benchmark"] = torch.backends.cudnn.benchmark
    return meta


def provenance_path(dataset_csv: str | Path) -> Path:
    p = Path(dataset_csv)
    return p.with_name(p.stem + ".meta.json")


def check_provenance(dataset_csv: str | Path) -> dict[str, Any] | None:
    """The dataset's provenance file (None when there is none yet), refused up front when it is not one:
    otherwise the problem would only show once all the measuring is done."""
    path = provenance_path(dataset_csv)
    if not path.exists():
        return None
    try:
        meta = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as e:
        raise UsageError(f"{path} is not a readable provenance file ({e}); fix or move it away before "
                         "collecting into " + Path(dataset_csv).name, step="provenance") from None
    if not isinstance(meta, dict) or not isinstance(meta.get("runs"), list):
        raise UsageError(f"{path} is not a provenance file (expected a JSON object with a \"runs\" list); fix "
                         "or move it away before collecting into " + Path(dataset_csv).name, step="provenance")
    return meta


def dataset_precision(meta: dict[str, Any] | None) -> str:
    """The precision a dataset's runs measured at (runs from before precision was recorded: fp32); a file whose
    runs disagree is a :class:`UsageError`."""
    found = {str(run.get("precision") or "fp32") for run in (meta or {}).get("runs", []) if isinstance(run, dict)}
    if len(found) > 1:
        raise UsageError(f"{(meta or {}).get('dataset', 'the dataset')} mixes precisions ({', '.join(sorted(found))}) "
                         "across its runs; keep one precision per file", step="provenance")
    return found.pop() if found else "fp32"


def _check_same_cpu(out: Path, meta: dict[str, Any] | None, rows: list[dict[str, str]]) -> None:
    """Refuse to add this machine's CPU measurements to a file measured on another CPU: its time model would
    average two machines (two VMs both named "AMD EPYC" ran the same steps a median 0.75x apart)."""
    from perfpredict.hostinfo import cpu_id, cpu_model_name

    here_name, here_id = cpu_model_name(), cpu_id()
    names = {r.get("device_name") for r in rows if r.get("device_name")}
    recorded = dataset_cpu_id(meta)
    if (names and here_name not in names) or (recorded and here_id and recorded != here_id):
        theirs = "; ".join(sorted(names)) + (f" ({recorded})" if recorded else "")
        raise UsageError(f"{out.name} was measured on another CPU ({theirs}); this machine is {here_name}"
                         f"{' (' + here_id + ')' if here_id else ''}: collect into a file of its own (one machine "
                         "per dataset)", step="provenance")


def _check_same_gpu(out: Path, rows: list[dict[str, str]]) -> None:
    """Refuse to add this machine's GPU measurements to a file measured on another device (another GPU model, or a
    CPU): the loader refuses such a file (one device per dataset), and a resumed run would skip the points the other
    device measured. The GPU is named through NVML (what a CUDA row records as ``device_name``) when every GPU here is
    one model; otherwise it cannot be told before measuring and is not checked (as on Ray). On a MIG slice a row's
    name is the board's with the slice after it (``NVIDIA A100-SXM4-40GB MIG 3g.20gb``) while NVML names the board:
    the board is compared here, and the slice once the run's first measurement names it (:func:`device_refusal`)."""
    from perfpredict.hostinfo import gpu_names

    here = set(gpu_names())
    names = {r.get("device_name") for r in rows if r.get("device_name")}
    boards = {_board_and_slice(n)[0] for n in names}
    if len(here) == 1 and names and not boards <= here:
        raise UsageError(f"{out.name} was measured on another device ({'; '.join(sorted(names))}); this machine's GPU "
                         f"is {next(iter(here))}: collect into a file of its own (one device per dataset)",
                         step="provenance")


def _board_and_slice(name: str) -> tuple[str, str]:
    """A GPU's name as torch gives it split into the board and the MIG slice (``""`` for the whole GPU):
    ``NVIDIA A100-SXM4-40GB MIG 3g.20gb`` -> ``("NVIDIA A100-SXM4-40GB", "3g.20gb")``."""
    board, _, piece = name.partition(" MIG ")
    return board, piece


def recorded_devices(meta: dict[str, Any] | None, rows: list[dict[str, str]]) -> set[str]:
    """The devices a dataset was measured on, by the names its rows and its runs' ``device_info`` record (torch's
    name for a GPU: a MIG slice's carries its profile, ``NVIDIA A100-SXM4-40GB MIG 3g.20gb``)."""
    names = {r["device_name"] for r in rows if r.get("device_name")}
    for run in (meta or {}).get("runs", []):
        info = run.get("device_info") if isinstance(run, dict) else None
        if isinstance(info, dict) and info.get("name"):
            names.add(str(info["name"]))
    return names


def device_refusal(recorded: set[str], name: str) -> str | None:
    """Why measurements on the device ``name`` may not join a file measured on the devices ``recorded``
    (:func:`recorded_devices`), or None when they may: the loader takes one device per file, and a MIG slice of
    another profile, or the whole board, is another device (another share of the GPU's compute and memory)."""
    if not recorded or name in recorded:
        return None
    board, piece = _board_and_slice(name)
    slices = {s for b, s in map(_board_and_slice, recorded) if b == board}
    if slices:  # the same board, cut otherwise
        theirs = ", ".join(sorted(f"MIG slice {x}" if x else "the whole GPU" for x in slices))
        return (f"was measured on {theirs} of {board}; this run measures on "
                f"{f'MIG slice {piece}' if piece else 'the whole GPU'}, another device")
    return f"was measured on another device ({'; '.join(sorted(recorded))}); this run measures on {name}"


def dataset_cpu_id(meta: dict[str, Any] | None) -> str | None:
    """The CPU a dataset's runs measured on beyond its model name (:func:`perfpredict.hostinfo.cpu_id`): the runs'
    ``device_info.cpu_id``, or a file's own ``cpu_id`` (added by hand to runs from before the collector recorded
    it); None for files from before either. Runs on two different CPUs are a :class:`UsageError`."""
    meta = meta or {}
    found = {str(run["device_info"]["cpu_id"]) for run in meta.get("runs", [])
             if isinstance(run, dict) and isinstance(run.get("device_info"), dict) and run["device_info"].get("cpu_id")}
    if meta.get("cpu_id"):
        found.add(str(meta["cpu_id"]))
    if len(found) > 1:
        raise UsageError(f"{meta.get('dataset', 'the dataset')} mixes CPUs across its runs ({'; '.join(sorted(found))});"
                         " keep one machine per file", step="provenance")
    return found.pop() if found else None


def _append_provenance(dataset_csv: Path, run_meta: dict[str, Any], columns: list[str] | None = None,
                       replace_run: str | None = None) -> None:
    """Add one run to the dataset's provenance file, or with ``replace_run`` put it in place of the run
    recorded with that ``run_id`` (the entry a run writes before measuring); ``columns`` (default
    :data:`DATASET_COLUMNS`) are the CSV's header, checked by :func:`prepare_resume` before the run: they are
    listed when the file is created, and given explicitly they replace the list (a file created by a version
    that listed the measured datasets' columns for every collection is mended at its next run)."""
    dataset_csv = Path(dataset_csv)
    meta = check_provenance(dataset_csv) or {"dataset": dataset_csv.name,
                                             "columns": list(columns or DATASET_COLUMNS), "runs": []}
    if columns is not None:
        meta["columns"] = list(columns)
    at = next((i for i, r in enumerate(meta["runs"]) if isinstance(r, dict) and replace_run is not None
               and r.get("run_id") == replace_run), None)
    if at is None:
        meta["runs"].append(run_meta)
    else:
        meta["runs"][at] = run_meta
    _write_provenance(dataset_csv, meta)


def _write_provenance(dataset_csv: Path, meta: dict[str, Any]) -> None:
    from perfpredict.profile.runner import sigint_blocked

    path = provenance_path(dataset_csv)
    # Written beside and renamed, with Ctrl-C held back: a second Ctrl-C while the first one's run is being
    # recorded used to leave a truncated file, which lost the provenance of every earlier run too.
    tmp = path.with_name(path.name + ".tmp")
    try:
        with sigint_blocked():
            tmp.write_text(json.dumps(meta, indent=2, default=str) + "\n", encoding="utf-8")
            tmp.replace(path)
    except OSError as e:
        raise UsageError(f"cannot write {path}: {e.strerror or e}", step="provenance") from None


__all__ = ["ArchPlan", "CUDA_DATASET_TIMING", "CollectSettings", "DATASET_COLUMNS", "check_output_path",
           "dataset_precision",
           "check_provenance", "collect", "git_commit_of", "measure_architecture", "plan_sweep", "prepare_resume", "provenance_path",
           "read_dataset", "row_from_result", "todo_batches", "upgrade_header"]
