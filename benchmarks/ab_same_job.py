"""How often does `perfpredict ab` call a job faster or slower than itself? A/A comparisons measured for real.

A job compared with itself has a true speed-up of exactly 1, so every verdict other than "no detectable
difference" is a false alarm; a 95 % interval should raise one in about 20 comparisons (2.5 % each way). Each
comparison runs the same rounds as ``perfpredict ab`` (fresh processes, base and new alternating which goes
first) and is then scored two ways on the same measurements:

- ``paired t``: the Student-t interval of the mean log ratio (what ``ab`` used up to 2026-11-25);
- ``crossover``: the two-period crossover analysis, log ratio = speed-up + order effect ± noise, which takes
  out a systematic difference between the process measured first and the one measured second in a round
  (an *order* or *period* effect; with an odd number of rounds it does not cancel in the plain mean).

Both are scored on all the rounds and on all but the last (an odd count when ``--rounds`` is even, as ``ab``'s
default of 5 is). The order effect itself, log(t_first / t_second) pooled over every round, is printed with its
95 % interval.

    python benchmarks/ab_same_job.py                       # 30 comparisons of zoo:mlp, 6 rounds (about 6 min)
    python benchmarks/ab_same_job.py --target zoo:resnet --param depth=18 --batch-size 8 --comparisons 20
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import time

from perfpredict.script_args import (
    command_line,
    describe,
    measure_keeping_partial,
    nonneg_float,
    out_file,
    positive_float,
    positive_int,
    run_script,
    stop_requested,
)


def summarize_crossover(log_ratios: list[float], base_first: list[bool]) -> tuple:
    """Like ``ab``'s :func:`~perfpredict.profile.ab.summarize`, with the two-period crossover analysis: log ratio =
    log speed-up + δ·(+1 when the base ran first, -1 when the new one did) + noise, fitted by least squares; δ is an order effect, the first
    process in a round running systematically slower or faster than the second. The speed-up is the mean of
    the two orders' means, so δ cancels however many rounds each order had (the plain mean keeps δ/n of it when
    the count is odd); the interval uses the residual spread with n - 2 degrees of freedom. Needs both orders
    and three rounds; otherwise the plain interval is returned."""
    if len(base_first) != len(log_ratios):
        raise ValueError("one order per log ratio")
    first = [x for x, f in zip(log_ratios, base_first) if f]
    second = [x for x, f in zip(log_ratios, base_first) if not f]
    n = len(log_ratios)
    from perfpredict.profile.ab import summarize

    if n < 3 or not first or not second:
        return summarize(log_ratios)
    from scipy.stats import t
    m1, m2 = sum(first) / len(first), sum(second) / len(second)
    mean = (m1 + m2) / 2
    residual = sum((x - m1) ** 2 for x in first) + sum((x - m2) ** 2 for x in second)
    se = math.sqrt(residual / (n - 2)) / 2 * math.sqrt(1 / len(first) + 1 / len(second))
    half = float(t.ppf(0.975, n - 2)) * se
    low, high = math.exp(mean - half), math.exp(mean + half)
    verdict = "faster" if low > 1 else "slower" if high < 1 else "no detectable difference"
    return math.exp(mean), low, high, verdict


def _param(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r}")
    return key, value


def _rate(verdicts: list[str], which: str) -> float:
    return sum(v == which for v in verdicts) / len(verdicts)


def binomial_interval(k: int, n: int) -> tuple[float, float]:
    """Clopper-Pearson 95 % interval of a rate seen k times in n (exact, so never narrower than the data allow)."""
    from scipy.stats import beta

    low = float(beta.ppf(0.025, k, n - k + 1)) if k > 0 else 0.0
    high = float(beta.ppf(0.975, k + 1, n - k)) if k < n else 1.0
    return low, high


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=describe(__doc__))
    ap.add_argument("--target", default="zoo:mlp", help="a model file or zoo:<family> (default zoo:mlp)")
    ap.add_argument("--param", type=_param, action="append", default=[], help="zoo parameter KEY=VALUE")
    ap.add_argument("--batch-size", type=positive_int, default=64)
    ap.add_argument("--comparisons", type=positive_int, default=30)
    ap.add_argument("--rounds", type=positive_int, default=6, help="rounds per comparison (at least 3)")
    ap.add_argument("--threads", type=positive_int, default=1)
    ap.add_argument("--min-time", type=positive_float, default=0.3, help="seconds timed per measurement, at least")
    ap.add_argument("--max-time", type=positive_float, default=1.0)
    ap.add_argument("--pause", type=nonneg_float, default=0.0, help="seconds between comparisons")
    ap.add_argument("--json", type=out_file, help="also write every round and the summary here")
    args = ap.parse_args(argv)
    if args.rounds < 3:
        ap.error("--rounds must be at least 3 (the crossover analysis needs one more round than it has terms)")
    if args.max_time < args.min_time:
        ap.error("--max-time must be at least --min-time")

    from scipy.stats import t

    from perfpredict.profile.ab import compare_jobs, summarize
    from perfpredict.profile.timing import TimingConfig
    from perfpredict.workload import resolve_workload

    workload = resolve_workload(args.target, dict(args.param))
    timing = TimingConfig(min_time_s=args.min_time, max_time_s=args.max_time)
    rows: list[dict] = []
    device = {}

    def measure_all() -> None:
        for i in range(args.comparisons):
            if stop_requested():
                raise KeyboardInterrupt
            res = compare_jobs(workload, workload, args.batch_size, rounds=args.rounds, device="cpu",
                               timing=timing, threads=args.threads)
            device.setdefault("name", res.device_name or res.device)
            rounds = [{"base_first": r.order == "base first", "log_ratio": r.log_ratio,
                       "base_s": r.base_iter_time_s, "new_s": r.new_iter_time_s} for r in res.rounds]
            if len(rounds) < args.rounds:
                print(f"comparison {i + 1}: only {len(rounds)} rounds ({res.stopped_because}); left out",
                      file=sys.stderr)
                continue
            rows.append({"rounds": rounds, "reported_verdict": res.verdict})
            lr = [r["log_ratio"] for r in rounds]
            first = [r["base_first"] for r in rounds]
            plain, cross = summarize(lr), summarize_crossover(lr, first)
            print(f"comparison {i + 1:3d}: speed-up {plain[0]:.3f} [{plain[1]:.3f}, {plain[2]:.3f}] {plain[3]:26s} "
                  f"crossover {cross[0]:.3f} [{cross[1]:.3f}, {cross[2]:.3f}] {cross[3]}", flush=True)
            if args.pause:
                time.sleep(args.pause)

    t0 = time.perf_counter()
    interrupted = measure_keeping_partial(measure_all, rows)
    wall = time.perf_counter() - t0

    # the order effect: log(t_first / t_second) in every round (for an A/A pair the speed-up term is zero)
    d = [r["log_ratio"] if r["base_first"] else -r["log_ratio"] for row in rows for r in row["rounds"]]
    mean_d = statistics.fmean(d)
    half = float(t.ppf(0.975, len(d) - 1)) * statistics.stdev(d) / math.sqrt(len(d)) if len(d) > 1 else math.nan
    print(f"\n{len(rows)} A/A comparisons of {workload.name} at batch {args.batch_size} on {device.get('name')}, "
          f"{args.rounds} rounds each ({wall:.0f} s)")
    print(f"order effect over {len(d)} rounds: the process measured first took {math.exp(mean_d):.4f}x the second "
          f"(95% interval {math.exp(mean_d - half):.4f}-{math.exp(mean_d + half):.4f})")
    per = [statistics.fmean(r["log_ratio"] for r in row["rounds"]) for row in rows]
    mean_s = statistics.fmean(per)
    half_s = float(t.ppf(0.975, len(per) - 1)) * statistics.stdev(per) / math.sqrt(len(per)) if len(per) > 1 \
        else math.nan
    print(f"mean speed-up over the comparisons: {math.exp(mean_s):.4f}x (95% interval "
          f"{math.exp(mean_s - half_s):.4f}-{math.exp(mean_s + half_s):.4f}; the truth is 1)")
    summary = {}
    print(f"{'analysis':12s} {'rounds':>6s} {'faster':>7s} {'slower':>7s} {'false alarms':>13s} {'95% interval':>14s}"
          "  (nominal: 2.5% each way, 5% in all)")
    for name, fn in (("paired t", lambda lr, first: summarize(lr)), ("crossover", summarize_crossover)):
        for n in (args.rounds, args.rounds - 1):
            verdicts = [fn([r["log_ratio"] for r in row["rounds"][:n]], [r["base_first"] for r in row["rounds"][:n]])[3]
                        for row in rows]
            fa, sl = _rate(verdicts, "faster"), _rate(verdicts, "slower")
            lo, hi = binomial_interval(round((fa + sl) * len(rows)), len(rows))
            summary[f"{name}, {n} rounds"] = {"faster": fa, "slower": sl, "false_alarms": fa + sl,
                                              "false_alarms_ci95": [lo, hi]}
            print(f"{name:12s} {n:6d} {fa:7.1%} {sl:7.1%} {fa + sl:13.1%} {lo:6.1%}-{hi:6.1%}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"command": command_line(__file__, argv), "device": device.get("name"),
                       "target": args.target, "params": dict(args.param), "batch_size": args.batch_size,
                       "rounds_per_comparison": args.rounds, "wall_s": wall, "interrupted": interrupted,
                       "mean_speedup": {"value": math.exp(mean_s),
                                        "ci95": [math.exp(mean_s - half_s), math.exp(mean_s + half_s)]},
                       "order_effect": {"first_over_second": math.exp(mean_d), "ci95": [math.exp(mean_d - half),
                                                                                       math.exp(mean_d + half)]},
                       "summary": summary, "comparisons": rows}, f, indent=2)
    if interrupted:
        raise KeyboardInterrupt
    return 0


if __name__ == "__main__":
    run_script(main)
