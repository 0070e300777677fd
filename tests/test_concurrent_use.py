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
