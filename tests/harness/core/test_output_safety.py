"""Outputs are checked before anything runs, and written without harming what is there.

- An --out / --json that cannot be written, or a tracking URI that is a folder, is exit 2 at once
  (it used to be found after the whole run, or after MLflow's ~100 s of retries).
- --json / --sarif / --junit naming a device, a pipe or a symlink out of its folder are refused
  (a device used to be replaced by a plain file); a symlink inside the folder is followed, and
  files are written to a temporary file renamed over the target.
- SIGINT while the victim is still being built exits 130 with one line, not "crashed:
  AttributeError" and exit 3.
"""

from __future__ import annotations

import os
import signal
import stat
import subprocess
import sys
import time

import pytest
import yaml
from click.testing import CliRunner
from conftest import make_scenario, message_lines

from harness.cli import main

SMALL = make_scenario(victim={"model": {"arch": "mlp", "hidden": [8]},
                              "data": {"dataset": "digits", "n_train": 100},
                              "training": {"epochs": 1, "dtype": "float64"}},
                      attacker={"pool": 10}, attacks=[{"name": "span_nonadaptive"}])


def _scenario(tmp_path, **over) -> str:
    p = tmp_path / "s.yaml"
    p.write_text(yaml.safe_dump({**SMALL, **over}))
    return str(p)


def _refused(args: list[str], words: list[str]) -> None:
    t0 = time.process_time()  # CPU time: a busy machine does not stretch it
    res = CliRunner().invoke(main, args)
    took = time.process_time() - t0
    lines = message_lines(res.stderr)  # past `run`'s stage line saying what it loads
    assert res.exit_code == 2, res.output[-1500:]
    assert len(lines) == 1 and all(w in lines[0] for w in words), (words, res.stderr)
    assert "victim ready" not in res.output and took < 10, took  # before anything was built


@pytest.mark.parametrize("flag", ["--json", "--sarif", "--junit"])
def test_an_output_file_that_cannot_be_written_is_exit_2_before_the_run(flag, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    _refused(["run", _scenario(tmp_path), "--no-tracking", flag, "/proc/leakmeter-test.out"],
             [flag, "cannot write in /proc"])
    assert not (tmp_path / "leakmeter-out").exists()


def test_an_out_folder_that_cannot_be_written_is_exit_2_before_the_run(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    _refused(["run", _scenario(tmp_path), "--no-tracking", "--out", "/proc/leakmeter-test-out"],
             ["--out", "cannot write in /proc"])
    (tmp_path / "a-file").write_text("x")
    _refused(["run", _scenario(tmp_path), "--no-tracking", "--out", str(tmp_path / "a-file" / "sub")],
             ["--out", "is not a folder"])


def test_a_tracking_uri_that_is_a_folder_is_exit_2_at_once(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "store").mkdir()
    _refused(["run", _scenario(tmp_path, tracking={"experiment": "x"}), "--tracking-uri",
              f"sqlite:///{tmp_path / 'store'}"],
             ["tracking.uri", "is a folder"])


def _special(tmp_path, kind: str):
    p = tmp_path / f"special-{kind}"
    if kind == "fifo":
        os.mkfifo(p)
    else:
        try:
            os.mknod(p, stat.S_IFCHR | 0o666, os.makedev(1, 3))  # like /dev/null
        except PermissionError:
            pytest.skip("cannot create a device node here")
    return p


@pytest.mark.parametrize("flag", ["--json", "--sarif", "--junit"])
@pytest.mark.parametrize("kind", ["fifo", "device"])
def test_a_device_or_pipe_is_refused_and_left_alone(flag, kind, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    target = _special(tmp_path, kind)
    _refused(["run", _scenario(tmp_path), "--no-tracking", flag, str(target)],
             [flag, "not a regular file"])
    mode = os.lstat(target).st_mode
    assert stat.S_ISFIFO(mode) if kind == "fifo" else stat.S_ISCHR(mode)


def test_a_symlink_out_of_the_folder_is_refused_and_one_inside_is_followed(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    victim_file = elsewhere / "precious.txt"
    victim_file.write_text("keep me")
    out = tmp_path / "out"
    out.mkdir()
    (out / "r.sarif").symlink_to(victim_file)
    _refused(["run", _scenario(tmp_path), "--no-tracking", "--sarif", str(out / "r.sarif")],
             ["--sarif", "symlink", "outside its folder"])
    assert victim_file.read_text() == "keep me" and (out / "r.sarif").is_symlink()

    (out / "real.xml").write_text("old")
    os.chmod(out / "real.xml", 0o640)
    (out / "r.xml").symlink_to("real.xml")  # a link inside the folder: written through
    res = CliRunner().invoke(main, ["run", _scenario(tmp_path), "--no-tracking", "--out", "o",
                                    "--junit", str(out / "r.xml")])
    assert res.exit_code == 1, res.output[-1500:]
    assert (out / "r.xml").is_symlink() and "<testsuites" in (out / "real.xml").read_text()
    assert stat.S_IMODE(os.stat(out / "real.xml").st_mode) == 0o640  # its mode kept
    assert not [f for f in os.listdir(out) if f.endswith((".tmp", ".probe"))]


# a CLI process training for seconds (~7 s CPU): the signal path (handler, exit 130, partial outputs)
# is test_interrupts.py::test_signal_mid_attack_kills_the_run_and_writes_the_partial_report's by default
@pytest.mark.slow
def test_sigint_while_the_victim_is_built_exits_130_not_a_crash(tmp_path, tracking_uri):
    data = make_scenario(victim={"model": {"arch": "mlp", "hidden": [64]},
                                 "data": {"dataset": "digits", "n_train": 1000},
                                 "training": {"epochs": 100_000, "dtype": "float64"}},
                         attacks=[{"name": "span_nonadaptive"}], tracking={"experiment": "sig"})
    scen = tmp_path / "s.yaml"
    scen.write_text(yaml.safe_dump(data))
    lock = tmp_path / "mlflow.db.lock"  # written when the tracker opens, just before the build
    env = {**os.environ, "LEAKMETER_THREADS": "1", "CI": "true"}
    proc = subprocess.Popen([sys.executable, "-c", "from harness.cli import main; main()", "run", str(scen),
                             "--tracking-uri", tracking_uri, "--sarif", str(tmp_path / "r.sarif"),
                             "--out", str(tmp_path / "o")], cwd=tmp_path, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        end = time.monotonic() + 120
        while not lock.exists() and time.monotonic() < end and proc.poll() is None:
            time.sleep(0.1)
        assert lock.exists(), proc.communicate(timeout=30)
        time.sleep(0.5)  # inside the build (100,000 epochs); each second here burns a CPU-second
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, err[-2000:]
    assert "interrupted by SIGINT" in err and "crashed" not in err and "Traceback" not in err
    assert "victim ready" not in err
