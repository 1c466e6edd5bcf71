"""Answers and requests that are valid JSON but hostile (issue 33): memory bounded by what is
parsed (E03), numbers no float64 holds (E12), noise keyed by the value (E06), query strings kept
last (N1), serve's Host / Content-Type gate and its access log (E14, E15)."""

from __future__ import annotations

import json
import socket

import numpy as np
import pytest
import requests
import torch
from loopback import JsonHandler, LoopbackServer

from harness.scenario import scenario_from_dict
from victims.build import build_victim
from victims.errors import BadInput
from victims.http.client import EndpointError
from victims.http.jsonlimits import MAX_CONTAINERS
from victims.http.served import RequestError, build_served, keyed_normal, parse_json
from victims.http.server import VictimServer
from victims.http.wire import make_protocol

D, C = 5, 3
HUGE_INT = "1" + "0" * 400  # 401 digits: beyond float64 (1.8e308)


class Answers(LoopbackServer):
    """Answers the i-th POST with `bodies(i, rows)` (bytes), HTTP 200."""

    def __init__(self, bodies):
        outer = self
        self.requests = 0

        class Handler(JsonHandler):
            def do_POST(self):  # noqa: N802
                rows = self.json_body()["inputs"]
                raw = bodies(outer.requests, rows)
                outer.requests += 1
                self.reply(200, raw)

        self._serve(Handler)


def _ok(rows) -> bytes:
    return json.dumps({"predictions": np.full((len(rows), C), 1 / C).tolist()}).encode()


def _remote(url: str):
    s = scenario_from_dict({"name": "t", "device": "cpu",
                            "victim": {"endpoint": {"url": url, "input_dim": D, "n_outputs": C, "retries": 2,
                                                    "backoff_s": 0.001}},
                            "interface": {"kind": "prediction", "output": "probabilities"},
                            "tracking": {"enabled": False}})
    return build_victim(s)


def test_an_answer_of_millions_of_empty_arrays_is_refused_before_parsing():
    """E03: 2.4 MB of `[],` would become 1.2 million lists (~80 MB; 32 MiB of it peaked at 1.5 GB):
    refused by count, not re-sent."""
    flood = b'{"predictions": [' + b"[]," * (MAX_CONTAINERS + 10) + b"[]]}"
    with Answers(lambda i, rows: _ok(rows) if i == 0 else flood) as srv:
        victim = _remote(srv.url)
        with pytest.raises(EndpointError, match="arrays or objects"):
            victim.backend.predict(torch.zeros(2, D, dtype=torch.float64), "probabilities")
        assert srv.requests == 2  # the start-up check, then one try: bad data is not a fault


def test_a_number_beyond_float64_is_bad_input_at_start_up():
    """E12: a 401-digit integer in the answer crashed the client (OverflowError, exit 3)."""
    body = ('{"predictions": [[' + HUGE_INT + ", 0, 0]]}").encode()
    with Answers(lambda i, rows: body) as srv:
        with pytest.raises(BadInput, match="float64"):
            _remote(srv.url)


def test_the_server_refuses_numbers_beyond_float64_and_floods_of_arrays_with_400():
    for raw in ('{"inputs": [[' + HUGE_INT + ", 1, 2, 3, 4]]}", '{"inputs": [' + "[]," * 300_000 + "[]]}"):
        with pytest.raises(RequestError) as err:
            parse_json(raw.encode())
        assert err.value.status == 400


def test_served_noise_is_keyed_by_the_value_not_its_spelling():
    """E06: `-0.0` for `0.0` (or another spelling of one float32 value) drew fresh noise, so 200
    copies of a row averaged the noise away."""
    x = np.array([[0.0, 1.0, 0.1, -2.5]])
    variants = np.array([[-0.0, 1.0, 0.1, -2.5], [0.0, float(np.nextafter(1.0, 2.0)), 0.1, -2.5],
                         [0.0, 1.0, json.loads("0.1000000000000000055511151231257827"), -2.5]])
    ref = keyed_normal(x, 3, salt=12345)
    for v in variants:
        np.testing.assert_array_equal(keyed_normal(v[None, :], 3, salt=12345), ref)
    other = keyed_normal(np.array([[0.0, 1.0, 0.1, -2.25]]), 3, salt=12345)
    assert not np.array_equal(other, ref)  # a different value still draws different noise


@pytest.mark.parametrize("protocol, suffix", [("kserve-v2", "/infer"), ("kserve-v1", ":predict")])
def test_path_suffixes_go_on_the_path_before_the_query(protocol, suffix):
    """N1: `/infer` and `:predict` were appended to the query string (`?code=KEY/infer`)."""
    root = "https://h.example/v2/models/m" if protocol == "kserve-v2" else "https://h.example/v1/models/m"
    spec = scenario_from_dict({"name": "t", "device": "cpu",
                               "victim": {"endpoint": {"url": root + "?code=abc123&x=1", "input_dim": D,
                                                       "n_outputs": C, "protocol": protocol}},
                               "interface": {"kind": "prediction", "output": "probabilities"},
                               "tracking": {"enabled": False}}).victim.endpoint
    target = make_protocol(spec, None).bind(root + "?code=abc123&x=1").target(None)
    assert target == root + suffix + "?code=abc123&x=1"


# ---------------------------------------------------------------- leakmeter serve (E12, E14, E15)


@pytest.fixture(scope="module")
def served():
    s = scenario_from_dict({"name": "gate", "device": "cpu",
                            "victim": {"model": {"arch": "mlp", "hidden": [4]},
                                       "data": {"dataset": "breast_cancer", "n_train": 60},
                                       "training": {"epochs": 1, "dtype": "float64"}},
                            "interface": {"kind": "prediction", "output": "probabilities"}})
    return build_served(s)[0]


def _raw(port: int, request: bytes) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
        s.sendall(request)
        data = b""
        while b"\r\n\r\n" not in data:
            chunk = s.recv(65536)
            if not chunk:
                break
            data += chunk
        return data


def test_serve_answers_only_its_own_host_names_and_json_posts(served):
    lines: list[str] = []
    server = VictimServer(served, log=lines.append, allow_hosts=("victim.internal",)).start()
    url = server.url
    row = {"inputs": [[0.0] * 30]}
    try:
        assert requests.post(url, json=row, timeout=10).status_code == 200  # Host: 127.0.0.1:port
        for host, want in (("evil.example", 421), ("victim.internal:80", 200), ("localhost", 200),
                           ("rebind.attacker.example:5001", 421)):
            r = requests.post(url, json=row, headers={"Host": host}, timeout=10)
            assert r.status_code == want, (host, r.status_code)
        for ctype in ("text/plain", "application/x-www-form-urlencoded", None):
            h = {"Content-Type": ctype} if ctype else {}
            r = requests.post(url, data=json.dumps(row), headers=h, timeout=10)
            assert r.status_code == 415, ctype
        r = requests.post(url, data=('{"inputs": [[' + HUGE_INT + "]]}"),
                          headers={"Content-Type": "application/json"}, timeout=10)
        assert r.status_code == 400  # E12: was 500
        head = _raw(server.port, b"GET /x%1b]0;pwned%07%1b[2J HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 404")
    finally:
        server.close()
    assert lines and all("\x1b" not in ln and "\x07" not in ln for ln in lines)  # E14
    assert any("\\x1b]0;pwned" in ln for ln in lines)  # the path is shown, as data
