"""Graph features of every zoo architecture, computed once and kept in ``datasets/zoo_features.csv``.

The features of an architecture (ONNX MACs, parameter and activation bytes, op counts: Horus Table 3) do not
depend on the device or the batch size, so they are computed once, on the CPU, and joined to every device's
measurements by ``config``. That keeps the GPU lease for measuring only, and makes every dataset row of one
architecture carry identical features whatever machine measured it.

Each row is flat: scalar features in their own columns, the full ``op_counts`` and ``macs_by_op`` as JSON.
"""

from __future__ import annotations

import csv
import json
import sys
import time
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

#: Scalar columns of the features table, in file order (``config`` is the join key).
FEATURE_TABLE_COLUMNS = [
    "config", "family", "task", "config_json",
    "forward_macs_per_sample", "forward_macs_fixed", "closed_form_macs_per_sample",
    "param_count", "param_bytes", "lookup_param_bytes", "activation_bytes_per_sample", "activation_bytes_fixed",
    "num_nodes", "recurrent_steps_json",
    "input_bytes_per_sample", "op_counts_json", "macs_by_op_json", "act_bytes_by_op_json",
    "saved_bytes_per_sample", "saved_bytes_fixed", "saved_cpu_bytes_per_sample", "saved_cpu_bytes_fixed",
    "peak_live_bytes_per_sample", "peak_live_bytes_fixed",
    "graph_saved_bytes_per_sample", "graph_saved_bytes_fixed", "kernel_nodes_json",
    "exporter", "opset", "error", "export_s",
]


def arch_features_row(family: str, cfg: Mapping[str, Any]) -> dict[str, Any]:
    """Export ``family`` at ``cfg`` to ONNX on the CPU and return its features-table row (an export that fails
    is a row with the error; a family or configuration the zoo rejects raises its ``UsageError``)."""
    import torch

    from perfpredict.features import extract_features
    from perfpredict.features.saved import saved_bytes_split
    from perfpredict.workload.spec import sample_input_bytes
    from perfpredict.workload.zoo import get_family, load_zoo_workload

    fam = get_family(family)
    workload = load_zoo_workload(family, cfg)
    t0 = time.perf_counter()
    torch.manual_seed(0)
    model = workload.build_model()
    params = sum(p.numel() for p in model.parameters())
    input_bytes = sample_input_bytes(workload)
    feats = extract_features(workload, model=model, use_fvcore=False)
    saved, saved_fixed = saved_bytes_split(workload, model)
    saved_cpu, saved_cpu_fixed = saved_bytes_split(workload, model, kernels="cpu")
    return {
        "config": fam.config_name(cfg), "family": family, "task": fam.task,
        "config_json": json.dumps(dict(cfg), sort_keys=True),
        "forward_macs_per_sample": feats.forward_macs_per_sample,
        "forward_macs_fixed": feats.forward_macs_fixed,
        "closed_form_macs_per_sample": fam.closed_form_macs(cfg),
        "param_count": params, "param_bytes": feats.param_bytes, "lookup_param_bytes": feats.lookup_param_bytes,
        "activation_bytes_per_sample": feats.activation_bytes_per_sample,
        "activation_bytes_fixed": feats.activation_bytes_fixed,
        "num_nodes": feats.num_nodes, "input_bytes_per_sample": input_bytes,
        "recurrent_steps_json": json.dumps(feats.recurrent_steps_by_op, sort_keys=True),
        "op_counts_json": json.dumps(feats.op_counts, sort_keys=True),
        "macs_by_op_json": json.dumps(feats.macs_by_op, sort_keys=True),
        "act_bytes_by_op_json": json.dumps(feats.activation_bytes_by_op, sort_keys=True),
        "saved_bytes_per_sample": saved, "saved_bytes_fixed": saved_fixed,
        "saved_cpu_bytes_per_sample": saved_cpu, "saved_cpu_bytes_fixed": saved_cpu_fixed,
        "peak_live_bytes_per_sample": feats.peak_live_bytes_per_sample,
        "peak_live_bytes_fixed": feats.peak_live_bytes_fixed,
        "graph_saved_bytes_per_sample": feats.graph_saved_bytes_per_sample,
        "graph_saved_bytes_fixed": feats.graph_saved_bytes_fixed,
        "kernel_nodes_json": json.dumps(feats.kernel_nodes, separators=(",", ":")),
        "exporter": feats.exporter, "opset": feats.opset,
        "error": None if feats.available else feats.error,
        "export_s": round(time.perf_counter() - t0, 2),
    }


def arch_features_row_in_subprocess(family: str, cfg: Mapping[str, Any],
                                    timeout_s: float | None = None) -> dict[str, Any]:
    """:func:`arch_features_row` in a fresh process (never raises).

    A multi-GB model's export holds gigabytes that the exporting process does not give back, so a sweep in
    one process grows until the machine kills it, losing the architecture that was running. In a process of
    its own each architecture starts from nothing, and if that process dies (out of memory) or hangs past
    ``timeout_s`` the architecture gets a row that says so and the sweep goes on.
    """
    from concurrent.futures import ProcessPoolExecutor
    from concurrent.futures import TimeoutError as FutureTimeout
    from concurrent.futures.process import BrokenProcessPool

    from perfpredict.profile.runner import _ctx, sigint_blocked

    t0 = time.perf_counter()
    pool = ProcessPoolExecutor(max_workers=1, mp_context=_ctx())
    error = None
    try:
        with sigint_blocked():  # submit() starts the process: a Ctrl-C inside it would orphan a half-started one
            future = pool.submit(arch_features_row, family, dict(cfg))
        return future.result(timeout=timeout_s)
    except BrokenProcessPool:
        error = "the export process died before reporting (most likely out of memory)"
    except FutureTimeout:
        error = f"no features within {timeout_s:.0f} s"
        for proc in list(getattr(pool, "_processes", {}).values()):  # a hung export: end it, not wait for it
            proc.kill()
    except Exception as exc:  # noqa: BLE001 - e.g. an unknown family or config: one row with the reason
        error = f"{type(exc).__name__}: {exc}"
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
    return _error_row(family, cfg, error, time.perf_counter() - t0)


def _error_row(family: str, cfg: Mapping[str, Any], error: str, seconds: float) -> dict[str, Any]:
    from perfpredict.workload.zoo import get_family

    try:
        fam = get_family(family)
        name, task = fam.config_name(cfg), fam.task
    except Exception:  # noqa: BLE001 - the family itself is what is wrong
        name, task = f"{family}-{json.dumps(dict(cfg), sort_keys=True)}", None
    return {"config": name, "family": family, "task": task, "config_json": json.dumps(dict(cfg), sort_keys=True),
            "error": error, "export_s": round(seconds, 2)}


def read_features_table(path: str | Path) -> dict[str, dict[str, str]]:
    """``config`` → row (strings, as stored) of an existing features table; empty if there is none."""
    from perfpredict.errors import UsageError

    p = Path(path)
    if not p.exists():
        return {}
    try:
        with open(p, newline="", encoding="utf-8-sig") as f:
            return {row["config"]: row for row in csv.DictReader(f)}
    except (UnicodeDecodeError, csv.Error, KeyError) as e:
        raise UsageError(f"{p} is not a features table ({type(e).__name__}: {e}); give another path, or move it "
                         f"away to start afresh", step="reading the features table") from None


def build_features_table(configs: Iterable[tuple[str, Mapping[str, Any]]], path: str | Path,
                         progress: Callable[[str, dict[str, Any] | None], None] | None = None, *,
                         isolate: bool = True, timeout_s: float | None = None) -> int:
    """Append a row to ``path`` for each configuration not already in it (resumable); return rows added.

    Rows whose export failed are kept too, with the error, so a broken architecture is visible rather than
    silently missing; delete the row to retry it. With ``isolate`` (the default) each architecture is
    exported in a fresh process (:func:`arch_features_row_in_subprocess`), so memory does not pile up over a
    sweep and a process killed for memory costs one row, not the run.
    """
    from perfpredict.dataset.collect import prepare_resume
    from perfpredict.workload.zoo import get_family

    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    # the dataset's resume rules: a binary or foreign file refused, a row cut by an interrupted export removed
    rows, dropped = prepare_resume(p, list(FEATURE_TABLE_COLUMNS))
    if dropped is not None:
        print(f"note: the cut-short last row of {p} (an interrupted export) was removed and is exported again",
              file=sys.stderr, flush=True)
    done = {r["config"]: r for r in rows}
    new_file = not p.exists() or p.stat().st_size == 0
    added = 0
    with open(p, "a", newline="") as f:
        w = csv.DictWriter(f, fieldnames=FEATURE_TABLE_COLUMNS)
        if new_file:
            w.writeheader()
        for family, cfg in configs:
            name = get_family(family).config_name(cfg)
            if name in done:
                if progress:
                    progress(name, None)
                continue
            row = (arch_features_row_in_subprocess(family, cfg, timeout_s) if isolate
                   else arch_features_row(family, cfg))
            w.writerow(row)
            f.flush()
            done[name] = row
            added += 1
            if progress:
                progress(name, row)
    return added


#: The saved-tensor columns, (per sample, fixed), by the kernels they are counted for (features.saved.KERNELS).
SAVED_COLUMNS: dict[str, tuple[str, str]] = {"cuda": ("saved_bytes_per_sample", "saved_bytes_fixed"),
                                             "cpu": ("saved_cpu_bytes_per_sample", "saved_cpu_bytes_fixed")}


def saved_counts(family: str, cfg: Mapping[str, Any], kernels: Iterable[str]) -> dict[str, tuple[int, int]]:
    """(per-sample, fixed) saved-tensor bytes of ``family`` at ``cfg`` for each of ``kernels``, from one model."""
    import torch

    from perfpredict.features.saved import saved_bytes_split
    from perfpredict.workload.zoo import load_zoo_workload

    wl = load_zoo_workload(family, dict(cfg))
    torch.manual_seed(0)
    model = wl.build_model()
    return {k: saved_bytes_split(wl, model, kernels=k) for k in kernels}


def add_saved_bytes(path: str | Path, recompute: bool = False,
                    progress: Callable[[str, str, int | None], None] | None = None) -> int:
    """Fill the saved-tensor columns (:data:`SAVED_COLUMNS`) of an existing table in place (rows that lack
    them, or every row with ``recompute``, after the count itself changed); return rows filled.
    ``progress(config, kernels, per_sample_bytes or None)`` is called for each count.

    The saved-bytes count takes seconds where the ONNX export takes minutes, so an older table gains the
    columns without being rebuilt. Each architecture is counted in a fresh process: the process does not give
    back what a multi-GB model held, and one sweep in one process was killed for memory at 24 GB. A count whose
    process dies leaves its cells empty (training then names the architecture) and the backfill goes on; the
    table is rewritten after every architecture. Rows whose export failed are left alone.
    """
    p = Path(path)
    with open(p, newline="") as f:
        rows = list(csv.DictReader(f))
    filled = 0
    for row in rows:
        todo = [k for k, (per, _) in SAVED_COLUMNS.items() if recompute or row.get(per) in (None, "")]
        if not todo or row.get("error"):
            continue
        # None when the forward failed or its process died: these cells then stay empty
        counts = _in_fresh_process(saved_counts, row["family"], json.loads(row["config_json"]), todo) or {}
        for kernels in todo:
            per, fixed = SAVED_COLUMNS[kernels]
            row[per], row[fixed] = counts.get(kernels, ("", ""))
            if progress:
                progress(row["config"], kernels, counts.get(kernels, (None,))[0])
        filled += bool(counts)
        _rewrite(p, rows)
    return filled


#: Columns added after the table was first built, each filled from one ONNX export at batch 1: column -> (the
#: op types without which its value is known without an export, that value, how to read it off the graph).
EXPORT_BACKFILLS: dict[str, tuple[tuple[str, ...], Any, Callable[[Any], Any]]] = {
    "lookup_param_bytes": (("Gather",), 0, lambda s: s.lookup_param_bytes),
    "recurrent_steps_json": (("LSTM", "GRU", "RNN"), "{}",
                             lambda s: json.dumps(s.recurrent_steps_by_op, sort_keys=True)),
}


def graph_stats_of_export(family: str, cfg: Mapping[str, Any]):
    """:class:`~perfpredict.features.graph.GraphStats` of ``family`` at ``cfg`` from one ONNX export at batch 1
    (where a features row takes two exports and a saved-tensor count)."""
    import torch

    from perfpredict.features.graph import analyze_onnx
    from perfpredict.features.onnx_export import export_onnx
    from perfpredict.workload.zoo import load_zoo_workload

    wl = load_zoo_workload(family, cfg)
    torch.manual_seed(0)
    model = wl.build_model()
    return analyze_onnx(export_onnx(model, wl.inputs(1)).model_proto, run_for_shapes=False)


def backfill_export_columns(path: str | Path,
                            progress: Callable[[str, str, Any], None] | None = None) -> dict[str, int]:
    """Fill the :data:`EXPORT_BACKFILLS` cells that the rows of an existing table lack, in place; return the
    number of cells filled per column.

    A row whose graph has none of a column's op types gets that column's known value without an export (no
    Gather: no lookup-only weight; no recurrent op: no time step). The others are exported once per row, each
    in a fresh process (multi-GB embedding tables), and the table is rewritten after every architecture so an
    interrupted backfill keeps what it did. An export that fails (or a process killed for memory) leaves the
    cells empty, reported through ``progress(config, column, None)``, and the backfill goes on; training then
    names that architecture instead of reading a 0.
    """
    p = Path(path)
    with open(p, newline="") as f:
        rows = list(csv.DictReader(f))
    filled = {col: 0 for col in EXPORT_BACKFILLS}
    for row in rows:
        missing = [c for c in EXPORT_BACKFILLS if row.get(c) in (None, "")]
        if not missing or row.get("error"):
            continue
        ops = json.loads(row.get("op_counts_json") or "{}")
        need_export = [c for c in missing if any(op in ops for op in EXPORT_BACKFILLS[c][0])]
        for c in missing:
            if c not in need_export:
                row[c] = EXPORT_BACKFILLS[c][1]
        if need_export:
            # None on an export error or a dead process: these cells then stay empty
            stats = _in_fresh_process(graph_stats_of_export, row["family"], json.loads(row["config_json"]))
            for c in need_export:
                row[c] = "" if stats is None else EXPORT_BACKFILLS[c][2](stats)
        for c in missing:
            if row[c] != "":
                filled[c] += 1
            if progress:
                progress(row["config"], c, row[c] if row[c] != "" else None)
        _rewrite(p, rows)
    return filled


#: Columns filled by a walk over the graphs of the two exports :func:`~perfpredict.features.extract_features`
#: makes (batch 1 and 2; shapes resolved by running the graph where inference leaves them unknown): the peak
#: of live activations and the rule-based saved-for-backward bytes, each per sample and fixed, the kernels
#: one pass runs (JSON rows of :func:`perfpredict.estimators.kernel_nodes.split_nodes`), and the activation bytes
#: (per sample, fixed, by op type; recomputed with the others since they stopped counting weight-derived tensors).
GRAPH_WALK_COLUMNS: tuple[str, ...] = ("peak_live_bytes_per_sample", "peak_live_bytes_fixed",
                                       "graph_saved_bytes_per_sample", "graph_saved_bytes_fixed", "kernel_nodes_json",
                                       "activation_bytes_per_sample", "activation_bytes_fixed", "act_bytes_by_op_json")


def graph_walk_counts(family: str, cfg: Mapping[str, Any]) -> dict[str, int | str]:
    """The :data:`GRAPH_WALK_COLUMNS` of ``family`` at ``cfg``, from the same two exports a features row makes
    (:func:`~perfpredict.features.extract_features`); raises when the export fails."""
    import torch

    from perfpredict.features import extract_features
    from perfpredict.workload.zoo import load_zoo_workload

    wl = load_zoo_workload(family, dict(cfg))
    torch.manual_seed(0)
    feats = extract_features(wl, use_fvcore=False)
    if not feats.available or feats.peak_live_bytes_per_sample is None:
        raise RuntimeError(feats.error or "no features")
    out: dict[str, int | str] = {c: int(getattr(feats, c) or 0) for c in GRAPH_WALK_COLUMNS
                                 if not c.endswith("_json")}
    out["kernel_nodes_json"] = json.dumps(feats.kernel_nodes, separators=(",", ":"))
    out["act_bytes_by_op_json"] = json.dumps(feats.activation_bytes_by_op, sort_keys=True)
    return out


def add_graph_walk_columns(path: str | Path,
                           progress: Callable[[str, dict[str, int] | None], None] | None = None,
                           recompute: bool = False) -> int:
    """Fill the :data:`GRAPH_WALK_COLUMNS` cells that the rows of an existing table lack (every row's, with
    ``recompute``, after a walk's rules changed), in place; return rows filled. Each architecture is exported
    in a fresh process (multi-GB models), and the table is rewritten after every architecture, so an
    interrupted backfill keeps what it did (a recompute keeps the old values where it did not get to); an
    export that fails (or a process killed for memory) leaves the cells as they were, reported as
    ``progress(config, None)``."""
    p = Path(path)
    with open(p, newline="") as f:
        rows = list(csv.DictReader(f))
    filled = 0
    for row in rows:
        missing = [c for c in GRAPH_WALK_COLUMNS if recompute or row.get(c) in (None, "")]
        if row.get("error") or not missing:
            continue
        got = _in_fresh_process(graph_walk_counts, row["family"], json.loads(row["config_json"]))
        if got is not None:
            row.update({c: got[c] for c in missing})
            filled += 1
            _rewrite(p, rows)
        if progress:
            progress(row["config"], got)
    return filled


def _in_fresh_process(fn: Callable[..., Any], *args: Any) -> Any:
    """``fn(*args)`` in a fresh process of its own (a backfill's multi-GB models are not given back to the OS
    within one process), or None when it raised or its process died."""
    from concurrent.futures import ProcessPoolExecutor

    from perfpredict.profile.runner import _ctx, sigint_blocked

    try:
        with ProcessPoolExecutor(max_workers=1, mp_context=_ctx()) as pool:
            with sigint_blocked():  # as in arch_features_row_in_subprocess
                future = pool.submit(fn, *args)
            return future.result()
    except Exception:  # noqa: BLE001 - a model error or a dead process: the caller leaves its cells empty
        return None


def _rewrite(p: Path, rows: list[dict[str, Any]]) -> None:
    tmp = p.with_suffix(".tmp")
    with open(tmp, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=FEATURE_TABLE_COLUMNS)
        w.writeheader()
        for row in rows:
            w.writerow({k: row.get(k) for k in FEATURE_TABLE_COLUMNS})
    tmp.replace(p)
