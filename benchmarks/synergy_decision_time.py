"""Per-round decision time of Synergy-Tune vs Synergy-Opt on Synergy's 128-GPU cluster (seed 001 §5.6).

16 servers x 8 GPUs, 24 CPUs, 500 GB; a queue of ~150 single- and multi-GPU jobs whose sensitivity grids are
Synergy's models (``perfpredict.sched.paper_cards.synergy_models()``, when that module exists) or random
grids of three kinds (CPU-hungry image jobs, memory-hungry speech jobs, insensitive language jobs). Each
round re-orders the queue (as a time-dependent policy would), passes the previous round's allocations as
the running set, and times ``allocate``; a queue of single-GPU jobs and one of mixed sizes. Prints the median seconds per round, the ratio Opt/Tune (the paper:
Tune "hardly a second", ~200x faster than Opt) and Tune's total rate against Opt's LP1 bound (the paper:
within 10%), with GPU-proportional's total for reference. LP1 pools every server's CPUs and memory; the
column "tune/cons" compares Tune with LP1 under §6's consolidation assumption instead
(``SynergyOpt.bound(consolidated=True)``: a job gets at most the CPUs and memory of the fewest servers its GPUs
need, and an 8- or 16-GPU job keeps the whole servers it fills), which is the rule Tune's placements follow.

    python benchmarks/synergy_decision_time.py                 # 5 rounds, 150 jobs, seed 0, both mixes
    python benchmarks/synergy_decision_time.py --rounds 10 --jobs 200 --seed 1 --no-ilp
"""

from __future__ import annotations

import argparse
import random
import statistics
import time


def _random_models(rng: random.Random, n: int = 12):
    from perfpredict.sched.perf import PerfModel

    cpus = (1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 8.0, 10.0, 12.0)
    mems = (31.25, 62.5, 93.75, 125.0)
    models = []
    for k in range(n):
        kind = ("image", "speech", "language")[k % 3]
        if kind == "image":      # CPU-bound input pipeline: saturates at 5-12 CPUs per GPU
            peak, mem_gain = rng.choice([5.0, 6.0, 8.0, 10.0, 12.0]), rng.uniform(0.0, 0.1)
        elif kind == "speech":   # CPU- and memory-hungry
            peak, mem_gain = rng.choice([4.0, 6.0, 8.0]), rng.uniform(0.2, 0.5)
        else:                    # barely sensitive
            peak, mem_gain = rng.choice([1.0, 2.0]), 0.0
        matrix = tuple(tuple(min(c, peak) / peak * (1 - mem_gain * (1 - min(1.0, m / 125.0))) for m in mems)
                       for c in cpus)
        models.append(PerfModel(f"{kind}{k}", cpus, mems, matrix))
    return models


def _models(rng: random.Random):
    try:
        from perfpredict.sched.paper_cards import synergy_models  # type: ignore[attr-defined]
    except ImportError:
        return _random_models(rng), "random grids"
    models = synergy_models()
    models = list(models.values()) if isinstance(models, dict) else list(models)
    return models, "paper_cards.synergy_models()"


#: GPU demand mixes: Synergy's single-GPU trace, and a multi-GPU one (sizes, weights).
MIXES = {"single": ([1], [1.0]), "multi": ([1, 2, 4, 8, 16], [0.55, 0.15, 0.15, 0.12, 0.03])}


def main(argv: list[str] | None = None) -> None:
    from perfpredict.script_args import describe, nonneg_int, positive_float, positive_int

    ap = argparse.ArgumentParser(description=describe(__doc__))
    ap.add_argument("--rounds", type=positive_int, default=5)
    ap.add_argument("--jobs", type=positive_int, default=150)
    ap.add_argument("--seed", type=nonneg_int, default=0)
    ap.add_argument("--mix", choices=[*MIXES, "both"], default="both", help="GPU demands of the queue")
    ap.add_argument("--no-ilp", action="store_true", help="Opt without the ILP (LP bound + LP-weighted points)")
    ap.add_argument("--time-limit", type=positive_float, default=10.0, help="ILP time limit per round (s)")
    args = ap.parse_args(argv)
    for mix in (MIXES if args.mix == "both" else [args.mix]):
        run(args, mix)
        print()


def run(args: argparse.Namespace, mix: str) -> None:
    from perfpredict.sched.cluster import ClusterSpec
    from perfpredict.sched.job import Job, JobState
    from perfpredict.sched.mechanisms.proportional import GpuProportional
    from perfpredict.sched.mechanisms.synergy import SynergyOpt, SynergyTune

    rng = random.Random(args.seed)
    cluster = ClusterSpec.homogeneous(16, gpus=8, cpus=24, mem_gb=500.0)
    models, source = _models(rng)
    sizes, weights = MIXES[mix]
    jobs = [JobState(Job(id=f"j{i}", arrival=float(i), gpus=rng.choices(sizes, weights)[0], work=3600.0),
                     rng.choice(models)) for i in range(args.jobs)]
    tune, opt, prop = SynergyTune(), SynergyOpt(ilp=not args.no_ilp, time_limit=args.time_limit), GpuProportional()

    # warm-up: imports (SciPy's HiGHS) and caches, not timed
    opt.allocate(jobs[:8], cluster, {}, 0.0)
    tune.allocate(jobs[:8], cluster, {}, 0.0)

    t_tune, t_opt, rows, parts = [], [], [], []
    run_t: dict = {}
    run_o: dict = {}
    for r in range(args.rounds):
        ordered = list(jobs)
        rng.shuffle(ordered)
        t0 = time.perf_counter()
        out_t = tune.allocate(ordered, cluster, run_t, float(r))
        t_tune.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        out_o = opt.allocate(ordered, cluster, run_o, float(r))
        t_opt.append(time.perf_counter() - t0)
        out_p = prop.allocate(ordered, cluster, {}, float(r))
        by = {js.id: js for js in jobs}
        rate = {name: sum(by[j].rate_on(a) for j, a in out.items())
                for name, out in (("tune", out_t), ("opt", out_o), ("prop", out_p))}
        moved_t = sum(1 for j in out_t if j in run_t and out_t[j].placement != run_t[j].placement)
        moved_o = sum(1 for j in out_o if j in run_o and out_o[j].placement != run_o[j].placement)
        rows.append((len(out_t), rate["prop"], rate["tune"], rate["opt"], opt.last_stats["opt_bound"],
                     opt.last_stats.get("ilp_value", float("nan")), opt.last_stats["fragmented_jobs"],
                     moved_t, moved_o, opt.bound(ordered, cluster, consolidated=True)))
        parts.append(tuple(opt.last_stats[k] for k in ("lp1_s", "ilp_s", "lp2_s")))
        run_t, run_o = out_t, out_o

    print(f"[{mix}-GPU queue] cluster {cluster.name} ({cluster.total_gpus} GPUs, {cluster.total_cpus:g} CPUs, "
          f"{cluster.total_mem_gb:g} GB); {args.jobs} queued jobs; grids: {source}; "
          f"Opt ILP: {'off' if args.no_ilp else f'on (limit {args.time_limit:g} s)'}")
    print(f"{'round':>5} {'runnable':>8} {'prop':>7} {'tune':>7} {'opt real':>8} {'opt bound':>9} "
          f"{'ilp':>7} {'tune/bnd':>8} {'cons bnd':>8} {'tune/cons':>9} {'frag':>4} {'moved t/o':>9} "
          f"{'tune s':>8} {'opt s':>8}")
    for r, (n, rp, rt, ro, b, ilp, frag, mt, mo, bc) in enumerate(rows):
        print(f"{r:>5} {n:>8} {rp:>7.2f} {rt:>7.2f} {ro:>8.2f} {b:>9.2f} {ilp:>7.2f} {rt / b:>8.3f} "
              f"{bc:>8.2f} {rt / bc:>9.3f} {frag:>4.0f} {mt:>4}/{mo:<4} {t_tune[r]:>8.4f} {t_opt[r]:>8.4f}")
    mt, mo = statistics.median(t_tune), statistics.median(t_opt)
    lp1, ilp, lp2 = (statistics.median(p[i] for p in parts) for i in range(3))
    print(f"median seconds per round: Tune {mt:.4f} s, Opt {mo:.4f} s (LP1 bound {lp1:.3f}, ILP {ilp:.3f}, "
          f"LP2 {lp2:.3f}, the rest is building and rounding); Opt/Tune = {mo / mt:.0f}x "
          f"(target: Tune <= 1 s, >= 100x faster)")
    ratios = [rt / b for _, _, rt, _, b, *_ in rows]
    print(f"Tune's total rate / Opt's LP1 bound: median {statistics.median(ratios):.3f}, "
          f"min {min(ratios):.3f} (paper: within 10%)")
    cons = [row[2] / row[-1] for row in rows]
    opt_real = [row[3] / row[4] for row in rows]
    print(f"Tune's total rate / LP1 bound under §6's consolidation: median {statistics.median(cons):.3f}, "
          f"min {min(cons):.3f}; Opt's own rounded allocations / LP1 bound: median "
          f"{statistics.median(opt_real):.3f}")


if __name__ == "__main__":
    from perfpredict.script_args import run_script

    run_script(main)
