"""Data-parallel throughput of a job across real nodes, launched by ``torchrun`` (one process per device).

The same measurement ``perfpredict profile --scaling`` makes on one machine (group_worker.measure_member:
fixed warm-up, iteration count broadcast from rank 0, per-iteration wall times), for users with a cluster:

    # on each of N nodes (same command, node_rank 0..N-1):
    torchrun --nnodes N --nproc-per-node G --node-rank $NODE_RANK \\
        --rdzv-backend c10d --rdzv-endpoint $HEAD:29500 \\
        profilers/ddp_scaling_torchrun.py model.py --global-batch 256 --out results/

    # afterwards, on a machine that sees every node's results/ (shared FS or copied):
    python profilers/ddp_scaling_torchrun.py --summarize results/

Every rank writes ``rank<r>.json``; ``--summarize`` turns them into one scaling point (global batch / slowest
rank's median iteration time) with the placement ⟨d_node, d_g/n⟩ it ran on, ready for the comm-model fit.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import sys
from pathlib import Path


def run_rank(args: argparse.Namespace) -> int:
    import torch

    from perfpredict.profile.group_request import DistSpec, GroupMember, GroupTiming
    from perfpredict.profile.group_worker import measure_member
    from perfpredict.workload import parse_params, resolve_workload

    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    local_rank = int(os.environ.get("LOCAL_RANK", 0))
    local_world = int(os.environ.get("LOCAL_WORLD_SIZE", 1))
    if args.global_batch % world:
        print(f"error: global batch {args.global_batch} does not split over {world} ranks", file=sys.stderr)
        return 2
    cuda = torch.cuda.is_available() and not args.cpu
    workload = resolve_workload(args.model, parse_params(args.param))
    member = GroupMember(
        ref=workload.ref, batch_size=args.global_batch // world, mode=args.mode,
        device=f"cuda:{local_rank}" if cuda else "cpu", seed=rank, label=f"rank{rank}",
        dist=DistSpec(rank=rank, world_size=world, backend="nccl" if cuda else "gloo",
                      master_addr=os.environ["MASTER_ADDR"], master_port=int(os.environ["MASTER_PORT"]),
                      init_method="env://"))  # torchrun's own rendezvous store
    res = measure_member(member, GroupTiming(window_s=args.window), barrier=None)
    res.update(rank=rank, world_size=world, local_world_size=local_world, hostname=socket.gethostname(),
               global_batch=args.global_batch)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / f"rank{rank}.json").write_text(json.dumps(res, indent=1, default=str))
    return 0 if res.get("status") == "ok" else 1


def summarize(folder: Path) -> int:
    ranks = [json.loads(p.read_text()) for p in sorted(folder.glob("rank*.json"))]
    if not ranks:
        print(f"error: no rank*.json in {folder}", file=sys.stderr)
        return 2
    bad = [r for r in ranks if r.get("status") != "ok"]
    if bad:
        print(f"error: rank {bad[0].get('rank')} failed: {bad[0].get('error')}", file=sys.stderr)
        return 1
    world = ranks[0]["world_size"]
    if len(ranks) != world:
        print(f"error: {len(ranks)} of {world} rank results present", file=sys.stderr)
        return 2
    slowest = max(r["timing"]["median_s"] for r in ranks)
    hosts = sorted({r["hostname"] for r in ranks})
    point = {"d_node": len(hosts), "d_gn": world // len(hosts), "workers": world,
             "global_batch": ranks[0]["global_batch"], "samples_per_s": ranks[0]["global_batch"] / slowest,
             "iter_time_s": slowest, "device": ranks[0]["device"].split(":")[0], "hosts": hosts}
    print(json.dumps(point, indent=1))
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("model", nargs="?", help="model.py or zoo:<family>")
    ap.add_argument("-p", "--param", action="append", help="zoo parameter name=value")
    ap.add_argument("--global-batch", type=int, default=64)
    ap.add_argument("--mode", default="train", choices=["train", "infer"])
    ap.add_argument("--window", type=float, default=5.0, help="seconds of timed iterations (approx.)")
    ap.add_argument("--cpu", action="store_true", help="use gloo on CPU even where CUDA is available")
    ap.add_argument("--out", default="ddp-results")
    ap.add_argument("--summarize", metavar="DIR", help="merge rank*.json from DIR into one scaling point")
    args = ap.parse_args()
    if args.summarize:
        return summarize(Path(args.summarize))
    if not args.model:
        ap.error("a model (file or zoo:<family>) is required")
    if "RANK" not in os.environ:
        ap.error("run me under torchrun (RANK/WORLD_SIZE/MASTER_ADDR are not set)")
    return run_rank(args)


if __name__ == "__main__":
    sys.exit(main())
