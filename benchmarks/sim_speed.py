"""Benchmark: simulator throughput on a large trace (issue target: 100 000 jobs on 512 GPUs in < 60 s).

Generates a Synergy-recipe single-GPU trace (§5.1 durations, Poisson arrivals) of ``--jobs`` jobs, runs it
on 64 servers x 8 GPUs with FIFO + GPU-proportional in round mode (300 s rounds), and prints the wall time,
jobs simulated per second, decisions and the share of time spent inside the mechanism. The default load
keeps the cluster near, but below, saturation (mean job duration ~16.8 h: 512 GPUs serve ~30 jobs/h), so
the queue stays bounded and the figure is the simulator's speed, not a queue that grows without end.

    python benchmarks/sim_speed.py [--jobs 100000] [--load 28] [--mechanism proportional] [--mode round]
"""

from __future__ import annotations

import argparse
import time


def main(argv: list[str] | None = None) -> None:
    from perfpredict.sched import ClusterSpec, make_policy
    from perfpredict.sched.cluster import MAX_SERVERS
    from perfpredict.sched.mechanisms import make_mechanism
    from perfpredict.script_args import describe, nonneg_int, positive_float, positive_int
    from perfpredict.sim.run import load_perf_models
    from perfpredict.sim.simulator import SimConfig, simulate
    from perfpredict.sim.traces import synergy_trace

    ap = argparse.ArgumentParser(description=describe(__doc__))
    ap.add_argument("--jobs", type=positive_int, default=100_000)
    ap.add_argument("--load", type=positive_float, default=28.0, help="arrivals per hour")
    ap.add_argument("--servers", type=positive_int, default=64)
    ap.add_argument("--policy", default="fifo")
    ap.add_argument("--mechanism", default="proportional")
    ap.add_argument("--mode", default="round", choices=["round", "event"])
    ap.add_argument("--seed", type=nonneg_int, default=0)
    args = ap.parse_args(argv)
    if args.servers > MAX_SERVERS:
        ap.error(f"argument --servers: {args.servers} is more than the {MAX_SERVERS:,} servers a cluster may have")
    try:
        policy = make_policy(args.policy)
    except ValueError as e:
        ap.error(f"argument --policy: {e}")
    try:
        mechanism = make_mechanism(args.mechanism)
    except (ValueError, TypeError) as e:
        ap.error(f"argument --mechanism: {e}")

    t0 = time.perf_counter()
    jobs = synergy_trace(args.jobs, load_jobs_per_hour=args.load, seed=args.seed)
    t_gen = time.perf_counter() - t0
    cluster = ClusterSpec.homogeneous(args.servers)
    models = load_perf_models("paper")
    res = simulate(jobs, cluster, policy, mechanism, models,
                   SimConfig(mode=args.mode))
    jct = sorted(s.finish - s.job.arrival for s in res.finished)
    util = sum(s.job.gpus * s.run_time for s in res.finished) / (cluster.total_gpus * res.end_time)
    print(f"trace: {len(jobs)} jobs at {args.load:g}/h generated in {t_gen:.1f} s; cluster {cluster.total_gpus} GPUs; "
          f"{args.policy} + {args.mechanism}, {res.mode} mode")
    print(f"simulated {res.end_time / 3600:,.0f} h: {len(res.finished)} finished, {len(res.unfinished)} unfinished; "
          f"GPU utilisation {util:.0%}; median JCT {jct[len(jct) // 2] / 3600:.1f} h")
    print(f"wall {res.wall_s:.1f} s = {len(res.finished) / res.wall_s:,.0f} jobs/s; {res.decisions} decisions, "
          f"{res.decision_time_s / res.wall_s:.0%} of the time in the mechanism")
    target = 60.0 * args.jobs / 100_000
    print(f"target: 100 000 jobs in < 60 s -> {'PASS' if res.wall_s < target else 'FAIL'} "
          f"({res.wall_s:.1f} s for {args.jobs} jobs, limit scaled {target:.3g} s)")


if __name__ == "__main__":
    from perfpredict.script_args import run_script

    run_script(main)
