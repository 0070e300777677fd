"""Seed 004 (Horus), §5-6: makespan, GPU utilisation, JCT and waiting time of Horus and Horus-f against FIFO
(exclusive GPUs), OBP and PAB, on jobs perfpredict measured on an H100.

Every job is one of perfpredict's measured training points (zoo architectures × batch 8-128 on an H100 80GB,
``datasets/cuda_h100.csv``): in the simulation it uses its *measured* solo GPU utilisation and device memory,
and co-located jobs slow each other down by perfpredict's interference model refitted on 36 measured H100
pairs (linear up to 100 % cumulative utilisation, quadratic beyond). The schedulers decide with what the
Predictor (``trained_models/cuda_h100``) predicts from the architectures' graph features; the Predictor was
trained on these very points, so ``--predictions family-cv`` replaces its predictions with leave-one-family-out
ones (each family predicted by the shipped estimators refitted on the other families: the error on jobs of a
kind never seen before). See
:mod:`perfpredict.sim.horus_workload` for the workload recipe (what the paper states, what is assumed) and
:mod:`perfpredict.sched.mechanisms.horus` for the algorithms and their parameters.

Runs:

1. **Testbed** (§5.1-5.2, Table 6, Fig. 7-8): 12 GPUs (3 nodes × 4), W-Small and W-Large of 100 single-GPU
   jobs each, ``--seeds`` traces each (10; the paper ran its workloads five times), FIFO, OBP, PAB, Horus (k = 1), Horus-f (k = 3),
   Horus deciding with the paper's RTX 2080 interference coefficients instead of the measured ones, and Horus
   with the break-even utilisation check (``overcommit=breakeven``, a reading of §4.1.2; the default checks
   CPUs, memory and GPU memory only, as Algorithm 1 does, and utilisation enters through eq. 9's cost). At
   most ``max_colocated`` = 2 jobs per GPU for every co-locating scheduler (the interference models were fitted
   on pairs); ``--caps`` adds a sensitivity run with more (3 by default in the full run), where the simulated
   truth for three jobs on a GPU is the pair model extrapolated. Jobs arrive as a Poisson process (one every
   ``--interarrival`` = 36 s on average); a second set of runs enqueues each workload at once (the paper does
   not say which).
2. **At scale** (§6.2, Table 7, Fig. 9): 128 nodes × 8 GPUs (``--scale-nodes``), ``--scale-jobs`` jobs of 1-16
   GPUs arriving at ``--scale-load`` times the cluster's exclusive capacity; FIFO, OBP, Horus, Horus-f (PAB
   was not simulated at scale in the paper either).
3. **Memory pressure** (§4.2.3, not in the paper's results): the testbed's jobs on 16 GB devices, where
   co-located jobs can run out of memory; the schedulers reserve the Predictor's q90 ("safe") memory or its
   median, so the OOM failures and resubmissions come from prediction error against the measured memory.

Targets (issue #5): Horus' makespan ≥ 20 % below FIFO's on both workloads; Horus' average GPU utilisation
(NVML definition: a GPU is busy min(1, Σ solo utilisations) of the time) above FIFO's and OBP's; JCT slowdown
vs FIFO reported; Horus-f's median waiting time below Horus' on the large (at-scale) trace; simulator
invariants under sharing (device memory never exceeded once OOM failures are resolved, every job finishes).

    python experiments/horus_makespan.py            # full: 10 seeds, caps 2 and 3, 128 x 8 GPUs, 4000 jobs
    python experiments/horus_makespan.py --fast     # CI: 2 seeds, cap 2, 16 x 8 GPUs, 800 jobs
    python experiments/horus_makespan.py --predictions family-cv   # the schedulers never saw the job's family
    python experiments/horus_makespan.py --predictions paper-mix   # §5: half the jobs new to the predictor
    python experiments/horus_makespan.py --workers 2   # the simulations in 2 processes (or --ray ADDRESS); same rows
"""

from __future__ import annotations

import argparse
import json
import math
import time
from collections import Counter
from pathlib import Path

import numpy as np

#: the experiments' outputs, beside this script whatever the working folder (not tracked)
OUT = Path(__file__).resolve().parent / "out"

BREAKEVEN = "horus:overcommit=breakeven"
MECHS_TESTBED = ["fifo-exclusive", "obp", "pab", "horus", "horus-f", "horus:interference=paper", BREAKEVEN]
MECHS_SCALE = ["fifo-exclusive", "obp", "horus", "horus-f"]
LABEL = {"fifo-exclusive": "FIFO", "obp": "OBP", "pab": "PAB", "horus": "Horus", "horus-f": "Horus-f",
         "horus:interference=paper": "Horus (paper f)", BREAKEVEN: "Horus, break-even check"}


def _label(mech: str) -> str:
    name, _, opts = mech.partition(":")
    rest = ",".join(o for o in opts.split(",") if o and not o.startswith("max_colocated="))
    base = LABEL.get(f"{name}:{rest}" if rest else name, name)
    cap = next((o.split("=")[1] for o in opts.split(",") if o.startswith("max_colocated=")), None)
    return base if cap is None else f"{base} ≤{cap}/GPU"


def _with_cap(mech: str, cap: int) -> str:
    if mech == "fifo-exclusive" or cap == 2:
        return mech
    name, _, opts = mech.partition(":")
    return f"{name}:{','.join(filter(None, [opts, f'max_colocated={cap}']))}"


def run_one(jobs, cluster, mech_name, models, sharing, **extra):
    from perfpredict.sched import make_policy
    from perfpredict.sched.mechanisms import make_mechanism
    from perfpredict.sim.metrics import metrics_from_result
    from perfpredict.sim.simulator import SimConfig, simulate

    t0 = time.perf_counter()
    mech = make_mechanism(mech_name)
    r = simulate(jobs, cluster, make_policy("fifo"), mech, models, SimConfig(sharing=sharing, oversized="drop"))
    m = metrics_from_result(r)
    waits = [js.first_start - js.job.arrival for js in r.finished]
    return {"mechanism": mech_name, "label": _label(mech_name), "jobs": len(jobs), "finished": m.n_finished,
            "unfinished": m.n_unfinished, "dropped": len(r.dropped),
            "makespan_h": m.makespan_s / 3600, "busy_util": m.busy_gpu_util, "alloc_util": m.gpu_util,
            "avg_exec_jct_min": m.avg_exec_jct_s / 60, "avg_jct_min": m.avg_jct_s / 60,
            "avg_wait_min": m.avg_wait_s / 60, "p50_wait_min": m.p50_wait_s / 60, "ooms": m.n_ooms,
            "requeues": m.total_preemptions, "max_mem_frac": r.max_mem_frac,
            "max_mem_frac_attempted": r.max_mem_frac_attempted, "decisions": r.decisions,
            "wall_s": time.perf_counter() - t0, "_waits_min": [w / 60 for w in waits], **extra}


MEMORY_MECHS = ("fifo-exclusive", "obp", "horus", "horus-f")


def _testbed_runs(caps: list[int], mechs: list[str]) -> list[tuple[int, str]]:
    """(cap, mechanism) of one testbed trace: FIFO never shares and the paper's interference model was fitted on
    pairs, so neither runs with more than 2 jobs per GPU."""
    return [(cap, mech) for cap in caps for mech in mechs
            if cap == 2 or not (mech == "fifo-exclusive" or "paper" in mech)]


def simulation_units(variants, seeds: int, nodes: int, n_scale: int, args) -> list[dict]:
    """The experiment's simulations in independent units (one trace each, every scheduler on it; one unit per
    scheduler at scale, the longest runs, listed first so that workers start them first)."""
    units = [{"part": "scale", "mechanism": m, "nodes": nodes, "n": n_scale, "load": args.scale_load, "runs": 1}
             for m in MECHS_SCALE]
    units += [{"part": "testbed", "variant": variant, "interarrival": interarrival, "caps": vcaps, "mechs": mechs,
               "workload": workload, "seed": seed, "runs": len(_testbed_runs(vcaps, mechs))}
              for variant, interarrival, vcaps, mechs in variants for workload in ("small", "large")
              for seed in range(seeds)]
    units += [{"part": "memory", "memory": memory, "seed": seed, "interarrival": args.interarrival,
               "gpu_mem_gb": args.stress_mem, "runs": len(MEMORY_MECHS)}
              for memory in ("safe", "median") for seed in range(min(seeds, 3))]
    return units


def _group(unit: dict) -> str:
    """What a progress line reports as done: each scheduler at scale, each testbed workload's traces."""
    if unit["part"] == "scale":
        return f"at scale, {_label(unit['mechanism'])}"
    if unit["part"] == "testbed":
        return f"testbed W-{unit['workload'].capitalize()} ({unit['variant']}), every trace"
    return f"memory pressure ({unit['memory']} reservations)"


def _scale_trace(nodes: int, n: int, load: float):
    from perfpredict.sim.horus_workload import horus_trace

    return horus_trace("scale", n=n, seed=0, load=load, gpus_total=8 * nodes)


def simulate_unit(unit: dict) -> list[dict]:
    """The rows of one unit of :func:`simulation_units`. Module-level, and the trace, cluster and perf models are
    rebuilt from the unit, so that a worker process or a Ray task can run it (``--workers``, ``--ray``); the
    parent's refitted predictions come with it (``refits``), so a worker does not refit them again."""
    from perfpredict.sched.cluster import ClusterSpec
    from perfpredict.sim.horus_workload import (
        horus_cluster,
        horus_perf_models,
        horus_sharing,
        horus_trace,
        prime_refit_cache,
    )

    prime_refit_cache(unit["refits"])
    sharing = horus_sharing()
    part = unit["part"]
    if part == "scale":
        node = horus_cluster("scale").servers[0]  # the paper's 8-GPU node, as many as asked (not at most 128)
        big = ClusterSpec((node,) * unit["nodes"], name=f"{unit['nodes']}x8 H100")
        jobs = _scale_trace(unit["nodes"], unit["n"], unit["load"])
        models = horus_perf_models("safe", unit["predictions"])
        return [run_one(jobs, big, unit["mechanism"], models, sharing, part="scale", nodes=unit["nodes"],
                        load=unit["load"])]
    if part == "testbed":
        models = horus_perf_models("safe", unit["predictions"])
        jobs = horus_trace(unit["workload"], seed=unit["seed"], interarrival_s=unit["interarrival"])
        return [run_one(jobs, horus_cluster("testbed"), _with_cap(mech, cap), models, sharing, part="testbed",
                        variant=unit["variant"], workload=unit["workload"], seed=unit["seed"], cap=cap)
                for cap, mech in _testbed_runs(unit["caps"], unit["mechs"])]
    models = horus_perf_models(unit["memory"], unit["predictions"])
    jobs = horus_trace("large", seed=unit["seed"], interarrival_s=unit["interarrival"])
    cluster = horus_cluster("testbed", gpu_mem_gb=unit["gpu_mem_gb"])
    return [run_one(jobs, cluster, mech, models, sharing, part="memory", memory=unit["memory"], seed=unit["seed"],
                    workload="large") for mech in MEMORY_MECHS]


def _mean(rows, key):
    v = [r[key] for r in rows]
    return float(np.mean(v)) if v else math.nan


def _sd(rows, key):
    v = [r[key] for r in rows]
    return float(np.std(v, ddof=1)) if len(v) > 1 else 0.0


def main() -> None:
    from perfpredict.script_args import (
        describe,
        int_list,
        nonneg_float,
        out_dir,
        places_to_tell,
        positive_float,
        positive_int,
    )
    from perfpredict.sim.horus_workload import PREDICTIONS, horus_jobs_table, refit_cache_entries
    from perfpredict.sim.kept_runs import KeptRuns
    from perfpredict.sim.parallel import add_sweep_options, map_runs, where_runs

    ap = argparse.ArgumentParser(description=describe(__doc__))
    ap.add_argument("--fast", action="store_true", help="2 seeds, cap 2 only, 16 x 8 GPUs at scale (CI)")
    ap.add_argument("--seeds", type=positive_int, default=None, help="traces per testbed workload (10; fast 2)")
    ap.add_argument("--caps", type=int_list, default=None, help="max jobs per GPU to run, comma-separated, "
                    "including 2 (2,3; fast 2)")
    ap.add_argument("--scale-nodes", type=positive_int, default=None, help="8-GPU nodes at scale (128; fast 16)")
    ap.add_argument("--scale-jobs", type=positive_int, default=None, help="jobs at scale (4000; fast 800)")
    ap.add_argument("--scale-load", type=positive_float, default=2.5,
                    help="offered load at scale: exclusive GPU-seconds asked per second over the GPUs")
    ap.add_argument("--interarrival", type=nonneg_float, default=36.0, help="mean seconds between testbed arrivals "
                    "(0: all at once)")
    ap.add_argument("--stress-mem", type=positive_float, default=16.0, help="device memory (GB) of the "
                    "memory-pressure run")
    ap.add_argument("--predictions", choices=PREDICTIONS, default="trained",
                    help="what the schedulers see: the shipped Predictor (trained on these points) or "
                         "leave-one-family-out predictions (family-cv), or the paper's testbed mix: estimators "
                         "refitted without half of the architectures (paper-mix)")
    ap.add_argument("--out", type=out_dir, default=None, help="output folder (experiments/out/horus, horus_family_cv or horus_paper_mix by "
                    "--predictions)")
    add_sweep_options(ap)
    args = ap.parse_args()
    seeds = args.seeds or (2 if args.fast else 10)
    caps = args.caps or ([2] if args.fast else [2, 3])
    if 2 not in caps or min(caps) < 2:  # FIFO and the paper's pair model run at 2, and the checks compare there
        ap.error(f"--caps must include 2 and be 2 or more, got {','.join(map(str, caps))} (FIFO and the paper's "
                 "pair model run with 2 jobs per GPU; 3 and up add the sensitivity runs)")
    nodes = args.scale_nodes or (16 if args.fast else 128)
    from perfpredict.sched.cluster import MAX_SERVERS
    if nodes > MAX_SERVERS:
        ap.error(f"--scale-nodes: at most {MAX_SERVERS:,}, got {nodes:,}")
    n_scale = args.scale_jobs or (800 if args.fast else 4000)
    out = Path(args.out or (OUT / "horus" if args.predictions == "trained"
                            else OUT / f"horus_{args.predictions.replace('-', '_')}"))
    out.mkdir(parents=True, exist_ok=True)
    t_all = time.perf_counter()

    table = horus_jobs_table(predictions=args.predictions)
    util = np.array([p.util for p in table])
    pred_util = np.array([p.pred_util for p in table])
    mem = np.array([p.mem_gb for p in table])
    pred_mem = np.array([p.pred_mem_gb for p in table])
    pred_med = np.array([p.pred_mem_median_gb for p in table])
    smallest = float(np.min(np.minimum(mem, pred_mem)))
    if args.stress_mem < smallest:  # found after every run before, in a SimulationError
        ap.error(f"--stress-mem {args.stress_mem:g} GB holds none of the jobs (the smallest needs {smallest:.2f} GB)")
    pred_stats = {"predictions": args.predictions, "util_mae": float(np.mean(np.abs(util - pred_util))),
                  "util_mape": float(np.mean(np.abs(util - pred_util) / util)),
                  "mem_median_mape": float(np.mean(np.abs(pred_med - mem) / mem)),
                  "q90_below_measured": float(np.mean(pred_mem < mem)),
                  "median_below_measured": float(np.mean(pred_med < mem))}
    if args.predictions == "paper-mix":
        from perfpredict.sim.horus_workload import unseen_architectures

        new = unseen_architectures([p.config for p in table])
        is_new = np.array([p.config in new for p in table])
        pred_stats["unseen_share"] = float(np.mean(is_new))
        pred_stats["util_mae_unseen"] = float(np.mean(np.abs(util - pred_util)[is_new]))
        pred_stats["util_mae_seen"] = float(np.mean(np.abs(util - pred_util)[~is_new]))
        print(f"paper-mix: {np.mean(is_new):.0%} of the jobs are architectures the estimators never saw "
              f"(utilisation MAE {pred_stats['util_mae_unseen']:.3f} on them, {pred_stats['util_mae_seen']:.3f} "
              f"on the seen ones)")
    print(f"jobs: {len(table)} measured H100 points, {args.predictions} predictions; utilisation MAE "
          f"{pred_stats['util_mae']:.3f} (MAPE {pred_stats['util_mape']:.1%}), device memory MAPE "
          f"{pred_stats['mem_median_mape']:.1%}; reserved memory (q90) below the measured NVML memory for "
          f"{pred_stats['q90_below_measured']:.0%} of them (median ratio {np.median(pred_mem / mem):.2f}; median "
          f"prediction below for {pred_stats['median_below_measured']:.0%})")
    variants = [("poisson", args.interarrival, caps, MECHS_TESTBED),
                ("batch", 0.0, [2], ["fifo-exclusive", "obp", "pab", "horus", "horus-f", BREAKEVEN])]
    units = simulation_units(variants, seeds, nodes, n_scale, args)
    # a worker process or Ray task starts without this process's refitted predictions (~17 s each to redo)
    shared = {"predictions": args.predictions,
              "refits": refit_cache_entries() if args.workers > 1 or args.ray else {}}
    print(f"{len(units)} simulation units ({sum(u['runs'] for u in units)} runs), "
          f"{where_runs(args.workers, args.ray)}", flush=True)
    left = Counter(_group(u) for u in units)

    def progress(i: int, unit_rows: list[dict]) -> None:  # a line per finished group of traces
        group = _group(units[i])
        left[group] -= 1
        if not left[group]:
            print(f"{group} done ({time.perf_counter() - t_all:.0f} s)", flush=True)

    keep = KeptRuns(out, __file__, args, resume=args.resume)
    results = map_runs(simulate_unit, [{**u, **shared} for u in units], workers=args.workers,
                       ray_address=args.ray, on_result=progress, keep=keep)
    # the rows in the order the serial loops made them: testbed, at scale, memory pressure
    rows: list[dict] = [r for part in ("testbed", "scale", "memory")
                        for u, unit_rows in zip(units, results) if u["part"] == part for r in unit_rows]

    def pick(part, **kw):
        return [r for r in rows if r["part"] == part and all(r.get(k) == v for k, v in kw.items())]

    summary: dict[str, dict] = {}
    for variant, interarrival, vcaps, mechs in variants:
        for workload in ("small", "large"):
            fifo = pick("testbed", variant=variant, workload=workload, mechanism="fifo-exclusive")
            f_mk, f_jct = _mean(fifo, "makespan_h"), _mean(fifo, "avg_exec_jct_min")
            how = (f"Poisson arrivals, one every {interarrival:g} s on average" if interarrival > 0
                   else "the whole workload enqueued at once (sensitivity)")
            print(f"\n### W-{workload.capitalize()}: 12 GPUs, 100 jobs, {how}; mean ± sd over {seeds} traces\n")
            print("| scheduler | makespan (min) | vs FIFO | GPU util (busy) | JCT from start (min) | JCT slowdown vs "
                  "FIFO | JCT incl. wait (min) | median wait (min) | OOMs | re-queues |")
            print("|---|---|---|---|---|---|---|---|---|---|")
            for cap, mech in _testbed_runs(vcaps, mechs):
                sel = pick("testbed", variant=variant, workload=workload, mechanism=_with_cap(mech, cap))
                if not sel:
                    continue
                mk = _mean(sel, "makespan_h")
                st = {"makespan_min": mk * 60, "makespan_sd_min": _sd(sel, "makespan_h") * 60,
                      "makespan_gain_vs_fifo": 1 - mk / f_mk, "busy_util": _mean(sel, "busy_util"),
                      "exec_jct_min": _mean(sel, "avg_exec_jct_min"),
                      "jct_slowdown_vs_fifo": _mean(sel, "avg_exec_jct_min") / f_jct - 1,
                      "jct_min": _mean(sel, "avg_jct_min"), "p50_wait_min": _mean(sel, "p50_wait_min"),
                      "ooms": sum(r["ooms"] for r in sel), "requeues": sum(r["requeues"] for r in sel)}
                summary[f"{variant}/{workload}/{_with_cap(mech, cap)}"] = st
                vs = "—" if mech == "fifo-exclusive" else f"{-st['makespan_gain_vs_fifo']:+.1%}"
                slow = "—" if mech == "fifo-exclusive" else f"{st['jct_slowdown_vs_fifo']:+.1%}"
                print(f"| {_label(_with_cap(mech, cap))} | {st['makespan_min']:.0f} ± {st['makespan_sd_min']:.0f} | "
                      f"{vs} | {st['busy_util']:.1%} | {st['exec_jct_min']:.1f} | {slow} | {st['jct_min']:.1f} | "
                      f"{st['p50_wait_min']:.1f} | {st['ooms']} | {st['requeues']} |")

    # 2. at scale ---------------------------------------------------------------------------------------------
    span = max(j.arrival for j in _scale_trace(nodes, n_scale, args.scale_load)) / 3600
    print(f"\n### At scale: {nodes} x 8 GPUs, {n_scale} jobs of 1-16 GPUs over {span:.1f} h "
          f"(offered load {args.scale_load:g} of exclusive capacity)\n", flush=True)
    print("| scheduler | makespan (h) | GPU util (busy) | avg wait (min) | median wait (min) | p90 wait (min) "
          "| JCT from start (min) | wall (s) |")
    print("|---|---|---|---|---|---|---|---|")
    for r in pick("scale"):
        p90 = float(np.percentile(r["_waits_min"], 90)) if r["_waits_min"] else math.nan
        r["p90_wait_min"] = p90
        print(f"| {r['label']} | {r['makespan_h']:.2f} | {r['busy_util']:.1%} | {r['avg_wait_min']:.1f} | "
              f"{r['p50_wait_min']:.1f} | {p90:.1f} | {r['avg_exec_jct_min']:.1f} | {r['wall_s']:.0f} |", flush=True)

    # 3. memory pressure ----------------------------------------------------------------------------------
    print(f"\n### Memory pressure: W-Large on 12 GPUs of {args.stress_mem:g} GB ({min(seeds, 3)} traces; jobs that "
          "cannot fit a device alone are left out)\n")
    print("| scheduler | reserves | makespan (min) | vs FIFO | OOM failures | left out | max memory after / before OOM |")
    print("|---|---|---|---|---|---|---|")
    for memory in ("safe", "median"):
        fifo_mk = _mean(pick("memory", memory=memory, mechanism="fifo-exclusive"), "makespan_h")
        for mech in MEMORY_MECHS:
            sel = pick("memory", memory=memory, mechanism=mech)
            mk = _mean(sel, "makespan_h")
            vs = "—" if mech == "fifo-exclusive" else f"{mk / fifo_mk - 1:+.1%}"
            print(f"| {_label(mech)} | {'q90' if memory == 'safe' else 'median'} | {mk * 60:.0f} | {vs} | "
                  f"{sum(r['ooms'] for r in sel)} | {sum(r['dropped'] for r in sel)} | "
                  f"{max(r['max_mem_frac'] for r in sel):.2f} / {max(r['max_mem_frac_attempted'] for r in sel):.2f} |")

    # checks ----------------------------------------------------------------------------------------------
    checks = {}

    def gain(w, m="horus", variant="poisson"):
        return summary[f"{variant}/{w}/{m}"]["makespan_gain_vs_fifo"]

    for w in ("small", "large"):
        checks[f"makespan_{w}"] = {"ok": gain(w) >= 0.20, "value": gain(w),
                                   "text": f"Horus makespan {gain(w):.{places_to_tell(100 * gain(w), 20)}%} below "
                                           f"FIFO on W-{w.capitalize()} "
                                           f"(target >= 20%)"}
    utils = {(w, m): summary[f"poisson/{w}/{m}"]["busy_util"] for w in ("small", "large")
             for m in ("horus", "obp", "fifo-exclusive")}
    ok = all(utils[(w, "horus")] > max(utils[(w, "obp")], utils[(w, "fifo-exclusive")]) for w in ("small", "large"))
    checks["utilisation"] = {"ok": ok, "text": "Horus GPU utilisation above FIFO and OBP: " + "; ".join(
        f"W-{w.capitalize()} {utils[(w, 'horus')]:.1%} vs FIFO {utils[(w, 'fifo-exclusive')]:.1%}, "
        f"OBP {utils[(w, 'obp')]:.1%}" for w in ("small", "large"))}
    slow = {w: summary[f"poisson/{w}/horus"]["jct_slowdown_vs_fifo"] for w in ("small", "large")}
    checks["jct_reported"] = {"ok": all(math.isfinite(v) for v in slow.values()), "value": slow,
                              "text": "JCT (from start) slowdown of Horus vs FIFO reported: " + ", ".join(
                                  f"W-{w.capitalize()} {v:+.1%}" for w, v in slow.items())
                              + " (paper: +10.3-30.3% W-Small, +8.2-21.8% W-Large for the co-locating schedulers)"}
    sc = {r["mechanism"]: r for r in rows if r["part"] == "scale"}
    checks["fair_wait_scale"] = {
        "ok": sc["horus-f"]["p50_wait_min"] < sc["horus"]["p50_wait_min"],
        "value": [sc["horus-f"]["p50_wait_min"], sc["horus"]["p50_wait_min"]],
        "text": f"Horus-f median waiting time {sc['horus-f']['p50_wait_min']:.1f} min below Horus' "
                f"{sc['horus']['p50_wait_min']:.1f} min on the at-scale trace ({nodes}x8 GPUs)"}
    inv = [r for r in rows if r["unfinished"] or r["max_mem_frac"] > 1 + 1e-9
           or r["finished"] + r["dropped"] != r["jobs"]]
    checks["invariants"] = {"ok": not inv, "text": f"every run finished all its jobs and no device's measured memory "
                            f"stayed above capacity after OOM failures ({len(rows)} runs, "
                            f"{sum(r['ooms'] for r in rows)} OOM failures resolved)"}
    print()
    for c in checks.values():
        print(f"{'PASS' if c['ok'] else 'FAIL'}: {c['text']}")
    for cap in caps:
        if cap == 2:
            continue
        for w in ("small", "large"):
            h, o = summary[f"poisson/{w}/{_with_cap('horus', cap)}"], summary[f"poisson/{w}/{_with_cap('obp', cap)}"]
            be = summary[f"poisson/{w}/{_with_cap(BREAKEVEN, cap)}"]
            print(f"sensitivity, at most {cap} jobs per GPU (interference extrapolated beyond pairs): W-{w.capitalize()} "
                  f"Horus {h['makespan_gain_vs_fifo']:.1%} below FIFO, GPU util {h['busy_util']:.1%} "
                  f"(OBP {o['makespan_gain_vs_fifo']:.1%}, {o['busy_util']:.1%}; Horus with the break-even check "
                  f"{be['makespan_gain_vs_fifo']:.1%}, {be['busy_util']:.1%})")
    for w in ("small", "large"):
        b = {m: summary[f"batch/{w}/{m}"] for m in ("horus", "obp", "fifo-exclusive", BREAKEVEN)}
        print(f"sensitivity, workload enqueued at once: W-{w.capitalize()} Horus {b['horus']['makespan_gain_vs_fifo']:.1%} "
              f"(break-even check {b[BREAKEVEN]['makespan_gain_vs_fifo']:.1%}, OBP {b['obp']['makespan_gain_vs_fifo']:.1%}) "
              f"below FIFO, GPU util {b['horus']['busy_util']:.1%} (FIFO {b['fifo-exclusive']['busy_util']:.1%}, "
              f"OBP {b['obp']['busy_util']:.1%})")
    print(f"(W-Large, 12 GPUs: Horus-f median wait {summary['poisson/large/horus-f']['p50_wait_min']:.1f} min vs "
          f"Horus {summary['poisson/large/horus']['p50_wait_min']:.1f} min)")

    doc = {"plan": {"seeds": seeds, "caps": caps, "scale_nodes": nodes, "scale_jobs": n_scale,
                    "scale_load": args.scale_load, "interarrival_s": args.interarrival, "stress_mem_gb": args.stress_mem,
                    "fast": args.fast, "predictions": args.predictions},
           "predictions": pred_stats,
           "rows": [{k: v for k, v in r.items() if not k.startswith("_")} for r in rows], "summary": summary,
           "checks": checks, "wall_s": time.perf_counter() - t_all}
    (out / "results.json").write_text(json.dumps(doc, indent=2, default=float))
    keep.finish()
    _plot(rows, summary, caps, out / "horus_makespan.png")
    print(f"wrote {out / 'results.json'} and {out / 'horus_makespan.png'} ({time.perf_counter() - t_all:.0f} s)")


def _plot(rows, summary, caps, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(1, 3, figsize=(16, 4.5))
    mechs = [m for m in MECHS_TESTBED]
    x = np.arange(len(mechs))
    for i, w in enumerate(("small", "large")):
        mk = [summary[f"poisson/{w}/{m}"]["makespan_min"] for m in mechs]
        sd = [summary[f"poisson/{w}/{m}"]["makespan_sd_min"] for m in mechs]
        ax[0].bar(x + (i - 0.5) * 0.38, mk, 0.38, yerr=sd, label=f"W-{w.capitalize()}")
        ut = [summary[f"poisson/{w}/{m}"]["busy_util"] * 100 for m in mechs]
        ax[1].bar(x + (i - 0.5) * 0.38, ut, 0.38, label=f"W-{w.capitalize()}")
    for a, title, ylabel in ((ax[0], "Makespan (12 GPUs, max 2 jobs/GPU)", "minutes"),
                             (ax[1], "Average cluster GPU utilisation (NVML busy)", "%")):
        a.set_xticks(x, [_label(m) for m in mechs], rotation=20)
        a.set_title(title)
        a.set_ylabel(ylabel)
        a.legend()
    for r in rows:
        if r["part"] == "scale" and r["_waits_min"]:
            w = np.sort(r["_waits_min"])
            ax[2].step(w, np.arange(1, len(w) + 1) / len(w), where="post", label=r["label"])
    ax[2].set_xlabel("waiting time (min)")
    ax[2].set_ylabel("CDF")
    ax[2].set_title("Job waiting time at scale")
    ax[2].legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


if __name__ == "__main__":
    from perfpredict.script_args import run_script

    run_script(main)
