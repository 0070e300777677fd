"""The Python API used the way a scheduler service uses it: one Predictor answering from several threads."""

from __future__ import annotations

import logging
import os
import sys
from concurrent.futures import ThreadPoolExecutor

from perfpredict import Predictor


def test_threads_predicting_from_model_files_get_the_serial_answers_and_leave_the_output_alone():
    """Each prediction of a model file or zoo model exports it to ONNX. Two exports at once failed ("GLOBALS.
    in_onnx_export must be False"), or fell back to the other exporter's graph and another answer without a
    word, and the exporters' output silencing, interleaved, left the process's stdout on /dev/null for good."""
    pred = Predictor.load()
    jobs = [("zoo:mlp", b) for b in (4, 8, 16, 32, 64, 128)] + [("zoo:lstm", 8), ("zoo:lstm", 16)]

    def one(job: tuple[str, int]) -> float:
        return pred.predict(job[0], batch_sizes=[job[1]], device_type="cpu").prediction.points[0].iter_time_s

    serial = [one(j) for j in jobs]
    stdout, fd1, logging_off = sys.stdout, os.fstat(1), logging.root.manager.disable
    with ThreadPoolExecutor(len(jobs)) as pool:
        threaded = list(pool.map(one, jobs))
    assert threaded == serial
    assert sys.stdout is stdout and logging.root.manager.disable == logging_off
    assert (os.fstat(1).st_dev, os.fstat(1).st_ino) == (fd1.st_dev, fd1.st_ino)


def test_fvcore_counts_beside_onnx_exports_keep_the_process_and_its_logging_whole():
    """fvcore's JIT tracing beside an export on another thread aborted the process (SIGABRT) or left logging
    disabled and stderr swapped; it now takes the exports' lock. Run in a child, so an abort fails only this test."""
    import subprocess

    code = ("import logging, sys, threading, torch\n"
            "from perfpredict.features import export_onnx, fvcore_counts\n"
            "m, x = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU()), (torch.randn(4, 8),)\n"
            "err = sys.stderr\n"
            "t = threading.Thread(target=lambda: [export_onnx(m, x) for _ in range(15)])\n"
            "t.start()\n"
            "for _ in range(300):\n    fvcore_counts(m, x)\n"
            "t.join()\n"
            "print(logging.root.manager.disable, sys.stderr is err)\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.split() == ["0", "True"]
