"""An attack's own time limit reads work seconds (CPU over threads): not stretched by load."""

import time

from harness.core.threads import work_seconds


def test_work_seconds_are_cpu_seconds_over_the_thread_count(monkeypatch):
    for threads in ("1", "4"):
        monkeypatch.setenv("LEAKMETER_THREADS", threads)
        c0, w0 = time.process_time(), work_seconds()
        while time.process_time() - c0 < 0.05:  # CPU work, whatever else runs on the machine
            pass
        cpu, work = time.process_time() - c0, work_seconds() - w0
        assert abs(work - cpu / int(threads)) < 0.01
    monkeypatch.setenv("LEAKMETER_THREADS", "1")
    w0 = work_seconds()
    time.sleep(0.1)  # waiting is not work: a loaded machine's stalls do not count
    assert work_seconds() - w0 < 0.05
