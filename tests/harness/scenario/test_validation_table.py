"""Inputs that used to pass validation and then crash the run (exit 3, traceback): each is now
exit 2 at `validate` and at `run`, within 10 s, with one line naming the key path, the value and
what is allowed. One test per row."""

from __future__ import annotations

import time

import pytest
import yaml
from click.testing import CliRunner
from conftest import message_lines

from harness.cli import main

BASE = {
    "name": "table", "seed": 0, "device": "cpu",
    "victim": {"model": {"arch": "mlp", "hidden": [8]},
               "data": {"dataset": "digits", "n_train": 100, "attacker_pool": 10},
               "training": {"epochs": 1, "dtype": "float64"}},
    "interface": {"kind": "gradient", "output": "probabilities"},
    "attacks": [{"name": "span_nonadaptive"}],
    "tracking": {"enabled": False},
}
ENDPOINT = {"url": "http://127.0.0.1:9/invocations", "input_dim": 64, "n_outputs": 10}


def edit(path: str, value):
    """A mutation setting dotted `path` (list indices as [i]) to `value`."""

    def apply(d: dict) -> dict:
        node = d
        parts = path.split(".")
        for p in parts[:-1]:
            node = node.setdefault(p, {})
        node[parts[-1]] = value
        return d

    return apply


def endpoint(**over):
    return edit("victim.endpoint", {**ENDPOINT, **over})


def text(yaml_text: str):
    return lambda _d: yaml_text


ROWS = {
    # row id: (mutation, words every message must contain)
    "seed-out-of-range": (edit("seed", 2**40), ["seed", str(2**40), "2147483647"]),
    "seed-negative": (edit("seed", -1), ["seed", "-1", "greater than or equal to 0"]),
    "timeout-inf": (endpoint(timeout_s=float("inf")), ["victim.endpoint.timeout_s", "finite"]),
    "url-no-scheme": (endpoint(url="127.0.0.1:8080/invocations"), ["victim.endpoint.url", "http"]),
    "url-bad-port": (endpoint(url="http://127.0.0.1:99999/x"), ["victim.endpoint.url", "port"]),
    "url-space": (endpoint(url="http://exa mple.com/x"), ["victim.endpoint.url", "spaces"]),
    "url-ftp": (endpoint(url="ftp://example.com/x"), ["victim.endpoint.url", "http://", "ftp"]),
    "gradient-class-99": (edit("interface.gradient_class", 99),
                          ["interface.gradient_class", "99", "0 to 9"]),
    "epsilon-tiny": (edit("defenses.dp_sgd", {"epsilon": 1e-300}),
                     ["defenses.dp_sgd.epsilon", "1e-300", "0.01"]),
    "epsilon-inf": (edit("defenses.dp_sgd", {"epsilon": float("inf")}),
                    ["defenses.dp_sgd.epsilon", "finite"]),
    "lr-inf": (edit("victim.training.lr", float("inf")), ["victim.training.lr", "finite"]),
    "width-1e9": (edit("victim.model.hidden", [10**9]),
                  ["victim.model.hidden[0]", str(10**9), "1000000"]),
    "memory": (edit("victim.model.hidden", [200_000, 200_000]), ["victim.model.hidden", "GiB"]),
    "missing-model-file": (edit("victim.model", {"arch": "file", "path": "nowhere.pt",
                                                 "spec": {"arch": "mlp"}}),
                           ["victim.model.path", "nowhere.pt", "not found"]),
    "missing-data-file": (edit("victim.data", {"dataset": "npz", "path": "nowhere.npz"}),
                          ["victim.data.path", "nowhere.npz", "not found"]),
    "budget-true": (edit("defenses.query_budget", True),
                    ["defenses.query_budget", "true", "number"]),
    "hidden-true": (edit("victim.model.hidden", [8, True]), ["victim.model.hidden", "number"]),
    "template-recursive": (text("name: t\nvictim:\n  endpoint:\n    url: http://127.0.0.1:9/x\n"
                                "    protocol: json\n    request_template: &t {a: *t}\n"),
                           ["recursive alias", "line"]),
    "template-laughs": (text("name: t\nvictim:\n  endpoint:\n    url: http://127.0.0.1:9/x\n"
                             "    protocol: json\n    request_template:\n"
                             + "".join(f"      l{i}: &l{i} [{', '.join([f'*l{i - 1}'] * 9) if i else '1'}]\n"
                                       for i in range(10))),
                        ["more than", "values", "line"]),
    "template-too-deep": (endpoint(protocol="json", request_template={"a": {"b": {"c": {"d": {"e": {
        "f": {"g": {"h": {"i": {"j": {"k": {"l": {"m": {"n": {"o": {"p": {"q": "$inputs"}}}}}}}}}}}}}}}}}),
        ["victim.endpoint.request_template", "nested deeper than 16"]),
    "duplicate-key": (text("name: t\nseed: 1\nseed: 2\n"), ["duplicate key", "seed", "line 3"]),
    "not-utf8": (lambda _d: "name: caf\xe9\n".encode("latin-1"), ["not UTF-8", "offset"]),
    "deep-nesting": (text("name: t\nx: " + "[" * 200 + "]" * 200 + "\n"), ["nested deeper than 32"]),
    "token-and-userinfo": (endpoint(url="http://u:pw-9f3k@127.0.0.1:9/x", auth_env="LM_T"),
                           ["victim.endpoint", "user:password", "auth_env", "one of them"]),
    "auth-header-newline": (endpoint(auth_header="X-Key\nInjected: 1"), ["victim.endpoint.auth_header"]),
    # values PyYAML's constructors cannot build (they used to crash: exit 3)
    "yaml-bad-timestamp": (text("name: t\nseed: 2001-13-45\n"), ["2001-13-45", "timestamp", "line 2"]),
    "yaml-float-abc": (text("name: t\nseed: !!float abc\n"), ["'abc'", "!!float", "line 2"]),
    "yaml-int-abc": (text("name: t\nseed: !!int abc\n"), ["'abc'", "!!int", "line 2"]),
    "yaml-int-4400-digits": (text("name: t\nseed: " + "9" * 4400 + "\n"), ["!!int", "4300 digits"]),
    "yaml-nul": (text("name: t\x00x\n"), ["not valid YAML", "#x0000"]),
    # a membership stand-in family leakmeter cannot build (issue 30), widths for a linear one
    "stand-in-forest": (edit("attacks", [{"name": "mia_lira", "params": {"stand_in": "forest"}}]),
                        ["attacks[0].params.stand_in", "'mlp' or 'logistic'"]),
    "stand-in-logistic-hidden": (edit("attacks", [{"name": "mia_rmia", "params": {
        "stand_in": "logistic", "stand_in_hidden": [8]}}]),
        ["attacks[0].params.stand_in_hidden", "logistic"]),
    "yaml-set-key": (text("name: t\n? !!set {a, b}\n: 1\n"), ["mapping key", "line 2"]),
}


def _write(tmp_path, mutation):
    import copy

    out = mutation(copy.deepcopy(BASE))
    p = tmp_path / "s.yaml"
    if isinstance(out, bytes):
        p.write_bytes(out)
    elif isinstance(out, str):
        p.write_text(out)
    else:
        p.write_text(yaml.safe_dump(out))
    return p


@pytest.mark.parametrize("row", list(ROWS))
def test_bad_input_is_exit_2_with_one_line_at_validate_and_run(row, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    mutation, words = ROWS[row]
    path = _write(tmp_path, mutation)
    for command in (["validate", str(path)], ["run", str(path), "--no-tracking", "--out", "o"]):
        t0 = time.process_time()  # CPU time: a busy machine does not stretch it
        res = CliRunner().invoke(main, command)
        took = time.process_time() - t0
        assert res.exit_code == 2, (command[0], res.output)
        lines = message_lines(res.stderr)  # past `run`'s stage line saying what it loads
        assert len(lines) == 1 and lines[0].startswith("leakmeter: error: "), res.stderr
        assert "Traceback" not in res.output
        assert all(w in lines[0] for w in words), (words, lines[0])
        assert took < 10, (command[0], took)
        if "pw-9f3k" in yaml.safe_dump(BASE) + path.read_text(errors="replace"):
            assert "pw-9f3k" not in res.output  # URL credentials are never repeated


@pytest.mark.parametrize("value", ["2001-13-45", "!!float abc", "!!int abc", "9" * 4400, "!!set {a}"],
                         ids=["timestamp", "float", "int", "4400-digits", "set"])
def test_set_values_yaml_cannot_build_are_exit_2(value, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    path = _write(tmp_path, lambda d: d)
    for command in (["validate", str(path)], ["run", str(path), "--no-tracking", "--out", "o"]):
        res = CliRunner().invoke(main, [*command, "--set", f"seed={value}"])
        assert res.exit_code == 2, res.output
        assert res.stderr.startswith("leakmeter: error: ") and "seed" in res.stderr


def test_a_token_that_cannot_be_a_header_is_exit_2_and_never_shown(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    secret = "tok-7781-line\nInjected: yes"
    monkeypatch.setenv("LEAKMETER_NL_TOKEN", secret)
    data = endpoint(auth_env="LEAKMETER_NL_TOKEN")(yaml.safe_load(yaml.safe_dump(BASE)))
    data["interface"]["kind"] = "prediction"
    p = tmp_path / "s.yaml"
    p.write_text(yaml.safe_dump(data))
    res = CliRunner().invoke(main, ["run", str(p), "--no-tracking", "--out", "o"])
    assert res.exit_code == 2, res.output
    assert "victim.endpoint.auth_env" in res.stderr and "value not shown" in res.stderr
    assert "tok-7781" not in res.output and "Injected" not in res.output


def test_budget_zero_sends_nothing_to_the_endpoint(tmp_path, monkeypatch):
    import socket
    import threading

    monkeypatch.chdir(tmp_path)
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(8)
    srv.settimeout(0.2)
    accepted: list[bytes] = []

    def watch():
        t0 = time.time()
        while time.time() - t0 < 5:
            try:
                conn, _ = srv.accept()
            except OSError:
                continue
            accepted.append(conn.recv(65536))
            conn.close()

    th = threading.Thread(target=watch, daemon=True)
    th.start()
    url = f"http://127.0.0.1:{srv.getsockname()[1]}/invocations"
    data = endpoint(url=url)(yaml.safe_load(yaml.safe_dump(BASE)))
    data["interface"]["kind"] = "prediction"
    data["defenses"] = {"query_budget": 0}
    p = tmp_path / "s.yaml"
    p.write_text(yaml.safe_dump(data))
    res = CliRunner().invoke(main, ["run", str(p), "--no-tracking", "--out", "o"])
    th.join()
    srv.close()
    assert res.exit_code == 2 and "defenses.query_budget: 0" in res.stderr, res.output
    assert accepted == []  # not one connection, let alone a row
