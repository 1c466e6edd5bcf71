""""valid" means runnable: every scenario below used to pass `validate` and then exit 2 at `run`.
Each is now exit 2 at both, with the same one line. And a scenario may not send an arbitrary
environment variable as a token: `auth_env` must start with LEAKMETER_ unless the person running
leakmeter chose the variable with --auth-env (exit 2 before any request otherwise)."""

from __future__ import annotations

import socket
import threading
import time

import pytest
import torch
import yaml
from click.testing import CliRunner
from conftest import message_lines

from harness.cli import main

BASE = {
    "name": "runnable", "seed": 0, "device": "cpu",
    "victim": {"model": {"arch": "mlp", "hidden": [8]},
               "data": {"dataset": "digits", "n_train": 100},
               "training": {"epochs": 1, "dtype": "float64"}},
    "interface": {"kind": "prediction", "output": "probabilities"}, "attacker": {"pool": 10},
    "attacks": [{"name": "span_nonadaptive"}],
    "tracking": {"enabled": False},
}
ENDPOINT = {"url": "http://127.0.0.1:9/invocations", "input_dim": 64, "n_outputs": 10}


def _write(tmp_path, data) -> str:
    p = tmp_path / "s.yaml"
    p.write_text(yaml.safe_dump(data))
    return str(p)


def _mismatched_state(tmp_path, data):
    from harness.scenario import scenario_from_dict
    from victims.models.builders import build_model

    spec = scenario_from_dict({"name": "t", "victim": {"model": {"arch": "mlp", "hidden": [5]}}}).victim.model
    torch.save(build_model(spec, (1, 8, 8), 10).state_dict(), tmp_path / "w.pt")
    data["victim"]["model"] = {"arch": "file", "path": "w.pt", "spec": {"arch": "mlp", "hidden": [8]}}


def _idx_folder(tmp_path, data):
    (tmp_path / "idx").mkdir()
    data["victim"]["data"] = {"dataset": "idx", "path": "idx"}


def _set(path: str, value):
    def apply(tmp_path, data):
        node = data
        *parents, last = path.split(".")
        for p in parents:
            node = node.setdefault(p, {})
        node[last] = value

    return apply


def _no_fashion(tmp_path, data, monkeypatch):
    import victims.data.datasets as ds

    monkeypatch.setattr(ds, "FASHION_DIRS", ())
    monkeypatch.delenv("LEAKMETER_FASHION_MNIST", raising=False)
    data["victim"]["data"] = {"dataset": "fashion_mnist", "n_train": 100}


def _json_gradient(tmp_path, data):
    data["victim"]["endpoint"] = {**ENDPOINT, "protocol": "json",
                                  "request_template": {"instances": "$inputs"}}
    data["interface"]["kind"] = "gradient"


def _unset_token(tmp_path, data, monkeypatch):
    monkeypatch.delenv("LEAKMETER_UNSET_TOKEN", raising=False)
    data["victim"]["endpoint"] = {**ENDPOINT, "auth_env": "LEAKMETER_UNSET_TOKEN"}


CASES = {
    # case: (edit, words in the one line)
    "state_dict does not match spec": (_mismatched_state, ["victim.model.spec", "w.pt", "hidden to [5]"]),
    "classes not in the dataset": (_set("victim.data.classes", [3, 42]), ["victim.data.classes", "[42]"]),
    "template without $explain": (_json_gradient, ["victim.endpoint.request_template", "$explain"]),
    "IDX folder without files": (_idx_folder, ["idx", "no IDX file"]),
    "unset auth_env variable": (_unset_token,
                                ["victim.endpoint.auth_env", "LEAKMETER_UNSET_TOKEN", "not set"]),
    "n_train larger than the dataset": (_set("victim.data.n_train", 5000),
                                        ["victim.data.n_train", "5000", "1797"]),
    "dataset not installed": (_no_fashion, ["fashion_mnist", "not installed"]),
}


@pytest.mark.parametrize("case", list(CASES))
def test_what_run_refuses_validate_refuses_too(case, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    edit, words = CASES[case]
    data = yaml.safe_load(yaml.safe_dump(BASE))
    try:
        edit(tmp_path, data)
    except TypeError:
        edit(tmp_path, data, monkeypatch)
    scen = _write(tmp_path, data)
    for command in (["validate", scen], ["run", scen, "--no-tracking", "--out", "o"]):
        res = CliRunner().invoke(main, command)
        lines = message_lines(res.stderr)
        assert res.exit_code == 2, (command[0], res.output[-1500:])
        assert len(lines) == 1 and all(w in lines[0] for w in words), (words, res.stderr)


class _Listener:
    """A socket on 127.0.0.1 that counts connections (and closes them)."""

    def __init__(self):
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(8)
        self.sock.settimeout(0.1)
        self.accepted = 0
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._watch, daemon=True)
        self._t.start()

    def _watch(self):
        while not self._stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:
                continue
            self.accepted += 1
            conn.close()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.sock.getsockname()[1]}/invocations"

    def close(self):
        time.sleep(0.3)
        self._stop.set()
        self._t.join()
        self.sock.close()


def test_a_scenario_cannot_send_an_arbitrary_environment_variable(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "aws-9Kq2-not-for-this-url")
    listener = _Listener()
    try:
        data = yaml.safe_load(yaml.safe_dump(BASE))
        data["victim"]["endpoint"] = {**ENDPOINT, "url": listener.url, "auth_env": "AWS_SECRET_ACCESS_KEY"}
        scen = _write(tmp_path, data)
        for command in (["validate", scen], ["run", scen, "--no-tracking", "--out", "o"],
                        ["sweep", scen, "--grid", "defenses.query_budget=100,200"]):
            res = CliRunner().invoke(main, command)
            assert res.exit_code == 2, res.output
            assert "victim.endpoint.auth_env: AWS_SECRET_ACCESS_KEY" in res.stderr
            assert "LEAKMETER_" in res.stderr and "--auth-env AWS_SECRET_ACCESS_KEY" in res.stderr
            assert "aws-9Kq2" not in res.output
        # the person running it may choose the variable: validate accepts it, nothing is sent
        res = CliRunner().invoke(main, ["validate", scen, "--auth-env", "AWS_SECRET_ACCESS_KEY"])
        assert res.exit_code == 0, res.output
    finally:
        listener.close()
    assert listener.accepted == 0  # not one request left with the key


def test_auth_env_on_the_command_line_sends_that_variable(tmp_path, monkeypatch):
    """--auth-env NAME replaces the scenario's variable (or adds one) for this run."""
    import json
    import sys
    from http.server import BaseHTTPRequestHandler

    sys.path.insert(0, str(__import__("pathlib").Path(__file__).parents[2] / "victims" / "http"))
    from loopback import LoopbackServer

    class Recorder(LoopbackServer):
        def __init__(self):
            outer = self
            self.auth: list[str] = []

            class Handler(BaseHTTPRequestHandler):
                protocol_version = "HTTP/1.1"

                def log_message(self, *a):
                    pass

                def do_POST(self):  # noqa: N802
                    body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                    outer.auth.append(self.headers.get("Authorization", ""))
                    raw = json.dumps({"predictions": [[0.1] * 10] * len(body["inputs"])}).encode()
                    self.send_response(200)
                    self.send_header("Content-Length", str(len(raw)))
                    self.end_headers()
                    self.wfile.write(raw)

            self._serve(Handler)

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MY_CI_TOKEN", "ci-7Hh2-token-value")
    with Recorder() as srv:
        data = yaml.safe_load(yaml.safe_dump(BASE))
        data["victim"]["endpoint"] = {**ENDPOINT, "url": srv.url, "auth_env": "LEAKMETER_OTHER"}
        scen = _write(tmp_path, data)
        res = CliRunner().invoke(main, ["run", scen, "--no-tracking", "--out", "o",
                                        "--auth-env", "MY_CI_TOKEN"])
    assert res.exit_code in (0, 1, 3, 4), res.output
    assert srv.auth and set(srv.auth) == {"Bearer ci-7Hh2-token-value"}
    assert "ci-7Hh2" not in res.output
