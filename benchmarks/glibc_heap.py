"""Why CPU inference RSS grows faster with the batch than the live activations: glibc's heap, measured.

Runs one zoo model's inference points through the profiler's own worker (fork server, as a dataset row is
measured) with an ``LD_PRELOAD`` allocation counter compiled on the spot (a few lines of C wrapping malloc,
free, realloc and the aligned allocators; needs a C compiler). For each batch size it prints the peak RSS
increase, the part of it that is library code (``RssFile``), and the peak of bytes malloc had handed out
(live), then the per-sample slopes between the smallest and largest batch, next to the graph walk's peak of
live activations per sample. It does so twice: with glibc's defaults, and with ``MALLOC_MMAP_THRESHOLD_``
fixed (which turns off glibc's adaptive mmap threshold, so freed large blocks go back to the kernel).
Linux only; about 30 s.

    python benchmarks/glibc_heap.py                                 # the default Transformer, batch 16 and 64
    python benchmarks/glibc_heap.py --family vit --batches 4,16
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

SHIM = r"""
#define _GNU_SOURCE
#include <dlfcn.h>
#include <malloc.h>
#include <stddef.h>
#include <string.h>
static void *(*r_malloc)(size_t); static void (*r_free)(void*); static void *(*r_calloc)(size_t,size_t);
static void *(*r_realloc)(void*,size_t); static int (*r_pm)(void**,size_t,size_t);
static void *(*r_al)(size_t,size_t); static void *(*r_memalign)(size_t,size_t);
static long long live, peak; static int ready, initing;
static char boot[65536]; static size_t bootn;
static void init(void){ if(ready||initing) return; initing=1;
  r_malloc=dlsym(RTLD_NEXT,"malloc"); r_free=dlsym(RTLD_NEXT,"free"); r_calloc=dlsym(RTLD_NEXT,"calloc");
  r_realloc=dlsym(RTLD_NEXT,"realloc"); r_pm=dlsym(RTLD_NEXT,"posix_memalign");
  r_al=dlsym(RTLD_NEXT,"aligned_alloc"); r_memalign=dlsym(RTLD_NEXT,"memalign"); ready=1; initing=0; }
static inline void add(void*p){ if(!p) return; long long v=__atomic_add_fetch(&live,(long long)malloc_usable_size(p),
  __ATOMIC_RELAXED); long long pk=__atomic_load_n(&peak,__ATOMIC_RELAXED);
  while(v>pk && !__atomic_compare_exchange_n(&peak,&pk,v,1,__ATOMIC_RELAXED,__ATOMIC_RELAXED)); }
static inline void sub(void*p){ if(p) __atomic_sub_fetch(&live,(long long)malloc_usable_size(p),__ATOMIC_RELAXED); }
static int isboot(void*p){ return (char*)p>=boot && (char*)p<boot+sizeof boot; }
void* malloc(size_t n){ init(); void*p=r_malloc(n); add(p); return p; }
void* calloc(size_t a,size_t b){ if(!ready){ size_t n=(a*b+15)&~15UL; void*p=boot+bootn; bootn+=n; memset(p,0,n);
  return p; } void*p=r_calloc(a,b); add(p); return p; }
void free(void*p){ if(!p||isboot(p)) return; init(); sub(p); r_free(p); }
void* realloc(void*q,size_t n){ init(); if(q&&isboot(q)){ void*p=r_malloc(n); add(p); if(p) memcpy(p,q,n); return p; }
  if(q) sub(q); void*p=r_realloc(q,n); if(p) add(p); else if(q) add(q); return p; }
int posix_memalign(void**pp,size_t a,size_t n){ init(); int r=r_pm(pp,a,n); if(!r) add(*pp); return r; }
void* aligned_alloc(size_t a,size_t n){ init(); void*p=r_al(a,n); add(p); return p; }
void* memalign(size_t a,size_t n){ init(); void*p=r_memalign(a,n); add(p); return p; }
long long pp_live(void){ return live; } long long pp_peak(void){ return peak; } void pp_reset(void){ peak=live; }
"""


def _entry(req, conn) -> None:
    """Fork-server child: the profiler's worker, with the counter's peak reset where the worker takes its RSS
    baseline."""
    import ctypes

    from perfpredict.profile import memory as mem
    from perfpredict.profile import worker

    lib = ctypes.CDLL(None)
    lib.pp_live.restype = lib.pp_peak.restype = ctypes.c_longlong
    start = {}
    reset = mem.reset_peak_rss

    def reset_and_mark():
        ok = reset()
        lib.pp_reset()
        start["live"] = lib.pp_live()
        return ok

    mem.reset_peak_rss = reset_and_mark
    res = worker.measure_point(req)
    m = res.get("memory") or {}
    conn.send({"status": res["status"], "error": res.get("error"), "rss": m.get("peak_bytes"),
               "file": m.get("file_backed_bytes"), "malloc_peak": lib.pp_peak() - start.get("live", 0)})


def _child(family: str, batches: list[int]) -> None:
    from perfpredict.profile.request import PointRequest
    from perfpredict.profile.runner import run_entry
    from perfpredict.profile.timing import TimingConfig
    from perfpredict.workload.spec import WorkloadRef

    out = {}
    for b in batches:
        req = PointRequest(ref=WorkloadRef(kind="zoo", target=family), batch_size=b, mode="infer", device="cpu",
                           threads=2, timing=TimingConfig(min_time_s=1.0, max_time_s=3.0), measure_energy=False)
        out[b] = run_entry(_entry, req, 300.0, {"batch_size": b})
    print(json.dumps(out))


def main(argv: list[str] | None = None) -> int:
    from perfpredict.script_args import describe, int_list

    ap = argparse.ArgumentParser(description=describe(__doc__))
    ap.add_argument("--family", default="transformer", help="zoo family, at its default configuration")
    ap.add_argument("--batches", type=int_list, default="16,64",
                    help="comma-separated batch sizes, at least two different ones [16,64]")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    from perfpredict.workload.zoo import families  # imports torch: after the flags' own checks

    batches = args.batches
    if args.family not in families():
        ap.error(f"argument --family: unknown zoo family {args.family!r}; choose from {', '.join(sorted(families()))}")
    if len(set(batches)) < 2:
        ap.error("argument --batches: give at least two different batch sizes (the slopes are taken between them)")
    if args.child:
        _child(args.family, batches)
        return 0
    cc = shutil.which("cc") or shutil.which("gcc")
    if not sys.platform.startswith("linux") or cc is None:
        print("needs Linux and a C compiler (cc) for the allocation counter")
        return 1
    from perfpredict.features import extract_features
    from perfpredict.workload.zoo import load_zoo_workload

    feats = extract_features(load_zoo_workload(args.family, {}), use_fvcore=False)
    live_rule = feats.peak_live_bytes_per_sample
    with tempfile.TemporaryDirectory() as tmp:
        src, lib = Path(tmp) / "count.c", Path(tmp) / "count.so"
        src.write_text(SHIM)
        subprocess.run([cc, "-O2", "-shared", "-fPIC", "-o", str(lib), str(src), "-ldl"], check=True)
        runs = {}
        for label, extra in (("glibc defaults", {}), ("MALLOC_MMAP_THRESHOLD_=131072", {"MALLOC_MMAP_THRESHOLD_": "131072"})):
            env = {**os.environ, **extra, "LD_PRELOAD": str(lib)}
            proc = subprocess.run([sys.executable, __file__, "--child", "--family", args.family, "--batches",
                                   ",".join(map(str, batches))], env=env, capture_output=True, text=True, timeout=900)
            lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
            if proc.returncode or not lines:
                print(f"{label}: failed\n{proc.stderr[-2000:]}")
                return 1
            runs[label] = {int(k): v for k, v in json.loads(lines[-1]).items()}
    mib = 2**20
    print(f"zoo:{args.family} (default configuration), inference passes, 2 threads; graph walk's peak of live "
          f"activations {live_rule / mib:.3f} MiB per sample")
    print(f"{'allocator':32s} {'batch':>5s} {'RSS incr.':>10s} {'of it code':>10s} {'malloc live peak':>17s}")
    for label, pts in runs.items():
        for b, r in sorted(pts.items()):
            if r.get("status") != "ok":
                print(f"{label:32s} {b:5d} {r.get('status')}: {r.get('error')}")
                continue
            print(f"{label:32s} {b:5d} {r['rss'] / mib:9.1f}M {r['file'] / mib:9.1f}M {r['malloc_peak'] / mib:16.1f}M")
    lo, hi = min(batches), max(batches)
    print(f"\nper-sample slopes between batch {lo} and {hi} (MiB per sample):")
    for label, pts in runs.items():
        if all(pts[b].get("status") == "ok" for b in (lo, hi)):
            rss = (pts[hi]["rss"] - pts[lo]["rss"]) / (hi - lo) / mib
            live = (pts[hi]["malloc_peak"] - pts[lo]["malloc_peak"]) / (hi - lo) / mib
            print(f"  {label:32s} RSS {rss:.3f}   malloc live peak {live:.3f}   RSS / live {rss / live:.1f}x   "
                  f"(graph walk {live_rule / mib:.3f})")
    return 0


if __name__ == "__main__":
    from perfpredict.script_args import run_script

    run_script(main)
