"""GENIE's communication penalty (eq. 8) fitted to measured placements, checked on a held-out placement.

For each model: sPR(b) from single-device runs, then DDP placements ⟨d_node, d_g/n⟩ at two global batches —
multi-node ones across virtual network nodes (network namespaces + veth + tbf) when this machine allows it.
Comm is fitted on all placements but the most spread-out one at the larger batch, which is then predicted.

    sudo python benchmarks/comm_model_holdout.py                  # needs root for the virtual nodes
    python benchmarks/comm_model_holdout.py --models mlp --link-mbit 200 --cores-per-device 1

A CPU "device" is ``--cores-per-device`` pinned cores; placements use as many devices as the machine has.
"""

from __future__ import annotations

import argparse
import contextlib


def main(argv: list[str] | None = None) -> None:
    from perfpredict.script_args import describe, positive_float, positive_int

    ap = argparse.ArgumentParser(description=describe(__doc__))
    ap.add_argument("--models", nargs="+", default=["mlp", "transformer", "resnet"], help="zoo families")
    ap.add_argument("--batches", type=positive_int, nargs="+", default=[32, 64], help="global batch sizes")
    ap.add_argument("--window", type=positive_float, default=2.0, help="timed seconds per placement")
    ap.add_argument("--link-mbit", type=positive_float, default=1000.0, help="virtual link rate, Mbit/s")
    ap.add_argument("--cores-per-device", type=positive_int, default=1)
    args = ap.parse_args(argv)
    # imported once the flags are known to be good: they import torch (seconds), so a typo is answered at once
    from perfpredict.profile.comm_profile import default_placements, measure_comm_model
    from perfpredict.profile.group_request import GroupTiming
    from perfpredict.profile.netns import VirtualNodes, netns_support
    from perfpredict.profile.runner import warm_up
    from perfpredict.workload.spec import WorkloadRef
    from perfpredict.workload.zoo import families

    unknown = [m for m in args.models if m not in families()]
    if unknown:
        ap.error(f"argument --models: unknown zoo famil{'ies' if len(unknown) > 1 else 'y'} "
                 f"{', '.join(map(repr, unknown))}; choose from {', '.join(sorted(families()))}")

    warm_up()
    ok, why = netns_support()
    print(f"virtual nodes: {'yes' if ok else 'no (' + why + ')'}; link {args.link_mbit:g} Mbit/s")
    places = default_placements("cpu", args.cores_per_device, 2 if ok else 1)
    print("placements:", ", ".join(f"<{p.d_node},{p.d_gn}>" for p in places), "at global batches", args.batches, "\n")
    summary = []
    for fam in args.models:
        ctx = VirtualNodes(2, rate_mbit=args.link_mbit) if ok else contextlib.nullcontext(None)
        with ctx as nodes:
            card = measure_comm_model(WorkloadRef("zoo", fam), args.batches, places, timing=GroupTiming(
                window_s=args.window), nodes=nodes, cores_per_device=args.cores_per_device)
        print(f"{fam}: gamma={card.gamma}, lambda={card.lambda_}, identifiable={card.identifiable}")
        for p in card.placements:
            tag = "HELD OUT" if p.held_out else "fitted"
            print(f"   <{p.d_node},{p.d_gn}> b={p.global_batch:4d}: measured {p.samples_per_s:9.1f}  predicted "
                  f"{p.predicted_samples_per_s:9.1f} samples/s  Comm_obs={p.comm_observed:.3f}  [{tag}]")
        print(f"   relative residuals: {', '.join(f'{r:+.1%}' for r in card.residuals)}")
        err = card.holdout_rel_error
        print(f"   held-out placement error: {'n/a' if err is None else f'{err:.1%}'}\n")
        summary.append((fam, card.gamma, card.lambda_, err))
    print(f"{'model':12s} {'gamma':>8s} {'lambda':>8s} {'held-out err':>13s}")
    for fam, g, lam, err in summary:
        print(f"{fam:12s} {g if g is not None else float('nan'):8.3f} {lam if lam is not None else float('nan'):8.3f} "
              f"{err if err is not None else float('nan'):13.1%}")


if __name__ == "__main__":
    from perfpredict.script_args import run_script

    run_script(main)
