"""The HTTP client (victims/http/client.py) against a real fault-injecting server on 127.0.0.1.

The server answers a known linear-softmax model, so every recovered answer is checked exactly;
it counts the rows it receives, so the budget is checked on the server's side too.
"""

from __future__ import annotations

import itertools
import json
import socket
import threading
import time

import numpy as np
import pytest
import torch
from loopback import JsonHandler, LoopbackServer

from defenses.output import OutputDefenses
from harness.core.errors import BadInput, BudgetExhausted
from harness.core.oracle import Oracle
from harness.run.runner import run_scenario
from harness.scenario import scenario_from_dict
from victims.build import build_victim
from victims.http.client import (
    EndpointError,
    EndpointFaults,
    EndpointQuotaExhausted,
    EndpointRefused,
)

D, C = 5, 3
W = np.random.default_rng(0).standard_normal((D, C))
TOKEN = "tok-Zq81-secret-do-not-print"


def softmax_rows(x: np.ndarray) -> np.ndarray:
    z = x @ W
    z = z - z.max(axis=1, keepdims=True)
    e = np.exp(z)
    return e / e.sum(axis=1, keepdims=True)


class FaultServer(LoopbackServer):
    """A threaded HTTP server whose i-th request meets `schedule(i)`: ok, 500, html502, 429,
    drop, sleep, badjson, nan, cols, rows, quota, echo401. `protocol="json"` speaks
    {"instances": rows} → {"result": {"scores": ...}}."""

    def __init__(self, schedule, protocol: str = "mlflow", sleep_s: float = 0.8,
                 retry_after: str = "0"):
        self.schedule = schedule
        self.requests = 0
        self.rows = 0
        self.rows_429 = 0  # rows refused with 429 (never answered)
        self.lock = threading.Lock()
        outer = self

        class Handler(JsonHandler):
            disable_nagle_algorithm = True

            def do_POST(self):  # noqa: N802
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                rows = body["instances"] if protocol == "json" else body["inputs"]
                with outer.lock:
                    i = outer.requests
                    outer.requests += 1
                    outer.rows += len(rows)
                fault = outer.schedule(i)
                x = np.asarray(rows, dtype=np.float64)
                p = softmax_rows(x)
                if fault == "500":
                    return self.reply(500, b'{"error_code": "INTERNAL_ERROR"}')
                if fault == "html502":
                    return self.reply(502, b"<html><body>502 Bad Gateway</body></html>", None, "text/html")
                if fault == "html200":
                    return self.reply(200, b"<html><body>Please log in</body></html>", None, "text/html")
                if fault == "429":
                    with outer.lock:
                        outer.rows_429 += len(rows)
                    return self.reply(429, b'{"error_code": "RATE_LIMITED"}',
                                      extra={"Retry-After": retry_after})
                if fault == "quota":
                    return self.reply(429, b'{"error_code": "RESOURCE_EXHAUSTED", "message": "spent"}')
                if fault == "echo401":
                    echo = json.dumps({"message": f"bad key {self.headers.get('Authorization')}"})
                    return self.reply(401, echo.encode())
                if fault == "drop":
                    self.close_connection = True
                    self.connection.shutdown(socket.SHUT_RDWR)
                    return None
                if fault == "sleep":
                    time.sleep(sleep_s)
                if fault == "badjson":
                    return self.reply(200, b'{"predictions": [[0.1, 0.2')
                if fault == "nan":
                    p[0, 0] = np.nan
                if fault == "cols":
                    p = np.concatenate([p, p[:, :1]], axis=1)
                if fault == "rows":
                    p = p[1:]
                out = {"result": {"scores": p.tolist()}} if protocol == "json" else {
                    "predictions": p.tolist()}
                return self.reply(200, json.dumps(out).encode())

        self._serve(Handler)


def remote(url: str, budget: int | None = None, **endpoint):
    """(oracle view, victim) for a d=5, 3-class probability endpoint."""
    ep = {"url": url, "input_dim": D, "n_outputs": C, "timeout_s": 0.5, "backoff_s": 0.001,
          "retries": 4, "max_batch": 2}
    ep.update(endpoint)
    s = scenario_from_dict({"name": "t", "device": "cpu", "victim": {"endpoint": ep},
                            "interface": {"kind": "prediction", "output": "probabilities"},
                            "tracking": {"enabled": False}})
    victim = build_victim(s)
    oracle = Oracle(victim.backend, victim.info, OutputDefenses(), budget,
                    max_rows=s.victim.endpoint.max_rows)
    return oracle, victim


def test_max_rows_caps_what_the_scan_sends_in_total_start_up_check_included():
    with FaultServer(lambda i: "ok") as srv:
        oracle, victim = remote(srv.url, budget=25, max_rows=31)
        a, b = oracle.view("a"), oracle.view("b")
        a.predict(torch.zeros(25, D, dtype=torch.float64))  # a's whole budget
        assert b.remaining == 5 and b.capped_by_rows()  # 31 - 1 start-up row - 25
        with pytest.raises(BudgetExhausted) as err:
            b.predict(torch.zeros(6, D, dtype=torch.float64))
        assert err.value.stopped_by == "cap"  # the scan's cost cap, not the defense
        b.predict(torch.zeros(5, D, dtype=torch.float64))
        assert srv.rows == 31 == oracle.quotas.used


def cycle_faults(every: int = 3):
    kinds = itertools.cycle(["500", "429", "drop", "badjson", "html502"])

    def schedule(i: int) -> str:
        if i == 0:
            return "ok"  # the start-up probe
        if i % 211 == 0:
            return "sleep"
        return next(kinds) if i % every == 1 else "ok"

    return schedule


def test_transient_faults_over_1000_requests_recover_exactly_within_budget():
    x = np.random.default_rng(1).standard_normal((1400, D))
    with FaultServer(cycle_faults()) as srv:
        oracle, victim = remote(srv.url, budget=3000)
        got = oracle.view("t").predict(torch.as_tensor(x))
        stats = victim.backend.stats
        assert srv.requests >= 1000
        np.testing.assert_array_equal(got.numpy(), softmax_rows(x))
        # every row sent (first tries, retries, the probe) was charged before it was sent, except
        # the re-sends of rows a 429 refused: those rows were never answered, so never billed twice
        assert stats.rows_sent == srv.rows and stats.rows_refused == srv.rows_429 > 0
        assert oracle.quotas.used == stats.rows_sent - stats.rows_refused <= 3000
        assert stats.retries > 300
        assert {"500", "429", "connection", "malformed", "502", "timeout"} <= set(stats.faults)


def test_budget_is_never_exceeded_whatever_the_faults_and_a_starved_attack_says_faults():
    x = np.random.default_rng(2).standard_normal((1000, D))
    budget = 1060  # the oracle charges the 1000 first tries up front; 60 rows are left for retries
    with FaultServer(cycle_faults(every=2)) as srv:
        oracle, victim = remote(srv.url, budget=budget)
        view = oracle.view("t")
        with pytest.raises(EndpointFaults) as err:
            view.predict(torch.as_tensor(x))
        assert err.value.stopped_by == "faults" and not isinstance(err.value, BudgetExhausted)
        # the attacker's own rows stay within its budget; the start-up check is the scan's own
        assert oracle.quotas.rows.by_attack["t"] <= budget and oracle.quotas.used <= budget + 1
        assert srv.rows == victim.backend.stats.rows_sent <= budget + 1
        assert 1 + 500 > srv.requests > 30  # it stopped at the budget, long before the end
        assert view.queries == 0  # nothing of the failed batch reached the attacker
        stats = victim.backend.stats_for("t")
        assert stats["queries_sent"] == srv.rows - 1  # all but the start-up check
        assert stats["retries"] > 20 and stats["faults"] >= stats["retries"]
        # the batch's unsent tail (and rows a 429 refused) is not billed: the ledger holds exactly
        # the rows the server received for the attacker, less those it refused
        refused = victim.backend.stats.rows_refused
        assert oracle.quotas.rows.by_attack["t"] == srv.rows - 1 - refused < budget


def test_a_budget_spent_without_faults_stops_by_budget():
    with FaultServer(lambda i: "ok") as srv:
        oracle, victim = remote(srv.url, budget=10)
        view = oracle.view("t")
        view.predict(torch.zeros(10, D, dtype=torch.float64))
        with pytest.raises(BudgetExhausted) as err:
            view.predict(torch.zeros(1, D, dtype=torch.float64))
        assert err.value.stopped_by == "budget"
        # the start-up check (1 row) is the scan's, not the attacker's
        assert view.queries == 10 and srv.rows == 11 == oracle.quotas.used


def test_retry_after_is_honoured():
    waits: list[float] = []
    with FaultServer(lambda i: "429" if i in (1, 2) else "ok", retry_after="0.3") as srv:
        oracle, victim = remote(srv.url, max_batch=8, backoff_s=5.0)
        victim.backend._sleep = waits.append
        y = oracle.view("t").predict(torch.zeros(4, D, dtype=torch.float64))
    assert waits == [0.3, 0.3]  # Retry-After, not the 5 s backoff
    np.testing.assert_array_equal(y.numpy(), softmax_rows(np.zeros((4, D))))


@pytest.mark.parametrize("fault, words, stopped_by", [
    ("500", ["HTTP 500", "gave up after 3 attempts"], "faults"),
    ("html200", ["HTML page", "gave up"], "faults"),
    ("badjson", ["invalid JSON", "gave up"], "faults"),
    ("drop", ["connection failed", "gave up"], "faults"),
    ("429", ["429", "gave up", "rate limited"], "endpoint"),
])
def test_permanent_faults_end_with_a_clear_error_naming_the_endpoint(fault, words, stopped_by):
    with FaultServer(lambda i: "ok" if i == 0 else fault) as srv:
        oracle, victim = remote(srv.url, retries=2)
        with pytest.raises(EndpointError) as err:
            oracle.view("t").predict(torch.zeros(2, D, dtype=torch.float64))
        assert err.value.stopped_by == stopped_by
        msg = str(err.value)
        assert srv.url in msg and all(w in msg for w in words), msg
        # rows sent and answered stay billed; rows a 429 refused were never answered: not billed
        assert srv.requests == 1 + 3 and oracle.quotas.used == 1 + (0 if fault == "429" else 3 * 2)


@pytest.mark.parametrize("fault, words", [
    ("nan", "NaN"), ("cols", "4 columns, expected 3"), ("rows", "sent 2 rows"),
])
def test_invalid_answers_mid_run_raise_without_retrying(fault, words):
    with FaultServer(lambda i: "ok" if i == 0 else fault) as srv:
        oracle, _ = remote(srv.url)
        with pytest.raises(EndpointError, match=words):
            oracle.view("t").predict(torch.zeros(2, D, dtype=torch.float64))
        assert srv.requests == 2


@pytest.mark.parametrize("fault, words", [
    ("cols", "class count"), ("html200", "HTML page"), ("500", "HTTP 500"), ("quota", "budget"),
])
def test_unusable_endpoint_at_start_is_bad_input(fault, words):
    with FaultServer(lambda i: fault) as srv:
        with pytest.raises(BadInput, match=words) as err:
            remote(srv.url, retries=1)
        assert "victim.endpoint" in str(err.value) and srv.url in str(err.value)


def test_unreachable_endpoint_is_bad_input():
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()  # nothing listens there now
    with pytest.raises(BadInput, match="connection failed"):
        remote(f"http://127.0.0.1:{port}/invocations", retries=1)


def test_endpoint_quota_429_ends_the_attack_honestly():
    with FaultServer(lambda i: "quota" if i >= 3 else "ok") as srv:
        oracle, _ = remote(srv.url)
        view = oracle.view("t")
        view.predict(torch.zeros(4, D, dtype=torch.float64))
        with pytest.raises(EndpointQuotaExhausted, match="spent") as err:
            view.predict(torch.zeros(4, D, dtype=torch.float64))
        assert srv.requests == 4  # a spent quota is not retried
        assert err.value.stopped_by == "endpoint" and not isinstance(err.value, BudgetExhausted)
        assert view.queries == 4


def test_token_never_appears_in_errors_even_when_the_server_echoes_it(monkeypatch):
    monkeypatch.setenv("LEAKMETER_TEST_TOKEN", TOKEN)
    with FaultServer(lambda i: "ok" if i == 0 else "echo401") as srv:
        oracle, victim = remote(srv.url, auth_env="LEAKMETER_TEST_TOKEN")
        with pytest.raises(EndpointRefused) as err:
            oracle.view("t").predict(torch.zeros(2, D, dtype=torch.float64))
    text = str(err.value) + repr(err.value) + repr(victim.backend) + repr(victim.record)
    assert "HTTP 401" in text and "bad key Bearer ***" in text
    assert TOKEN not in text


def test_missing_token_variable_is_bad_input(monkeypatch):
    monkeypatch.delenv("LEAKMETER_TEST_TOKEN", raising=False)
    with pytest.raises(BadInput, match="LEAKMETER_TEST_TOKEN is not set"):
        remote("http://127.0.0.1:9/invocations", auth_env="LEAKMETER_TEST_TOKEN")


def test_json_protocol_with_template_and_response_path():
    x = np.random.default_rng(3).standard_normal((10, D))
    with FaultServer(lambda i: "ok", protocol="json") as srv:
        oracle, victim = remote(srv.url, protocol="json", max_batch=4,
                                request_template={"instances": "$inputs", "meta": {"v": 1}},
                                response_path="result.scores")
        y = oracle.view("t").predict(torch.as_tensor(x))
        np.testing.assert_array_equal(y.numpy(), softmax_rows(x))
        assert victim.backend.stats.requests == 1 + 3


def test_mid_run_failure_marks_the_attack_error(tmp_path):
    s = scenario_from_dict({
        "name": "t", "device": "cpu",
        "victim": {"endpoint": {"url": "http://127.0.0.1:1/x", "input_dim": D, "n_outputs": C,
                                "retries": 1, "backoff_s": 0.001}},
        "interface": {"kind": "prediction", "output": "probabilities"},
        "attacks": [{"name": "span_nonadaptive"}], "tracking": {"enabled": False}})
    with FaultServer(lambda i: "ok" if i < 2 else "nan") as srv:
        s.victim.endpoint.url = srv.url
        report = run_scenario(s, out=tmp_path / "o")
    a = report["attacks"][0]
    assert a["status"] == "error" and "NaN" in a["reason"] and srv.url in a["reason"]
    assert report["victim"]["truth_available"] is False


class RawServer:
    """A socket server on 127.0.0.1 answering every connection with `reply(conn)` in a thread
    (a hostile endpoint: trickled bytes, oversized bodies). Stops within a bounded time."""

    def __init__(self, reply):
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(8)
        self.sock.settimeout(0.1)
        self.reply = reply
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._serve, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.sock.getsockname()[1]}/invocations"

    def _serve(self):
        while not self.stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:
                continue
            threading.Thread(target=self._one, args=(conn,), daemon=True).start()

    def _one(self, conn):
        try:
            conn.settimeout(5)
            data = b""
            while b"\r\n\r\n" not in data:
                data += conn.recv(65536)
            head, _, body = data.partition(b"\r\n\r\n")
            length = int(next(ln.split(b":")[1] for ln in head.split(b"\r\n")
                              if ln.lower().startswith(b"content-length")))
            while len(body) < length:
                body += conn.recv(65536)
            n = len(json.loads(body)["inputs"])
            self.reply(conn, n, self.stop)
        except OSError:
            pass
        finally:
            conn.close()

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.stop.set()
        self.thread.join(timeout=5)
        self.sock.close()


def _answer(n: int) -> bytes:
    return json.dumps({"predictions": softmax_rows(np.zeros((n, D))).tolist()}).encode()


def _whole(conn, n: int) -> None:
    body = _answer(n)
    conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % len(body) + body)


def _trickle(part: str):
    """A reply that sends its headers (part="head") or its body (part="body") 1 byte per 0.25 s
    (the one-row start-up check is answered at once)."""
    def reply(conn, n, stop):
        if n == 1:
            return _whole(conn, 1)
        body = _answer(n)
        head = f"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
        slow, fast = (head.encode(), body) if part == "head" else (b"", head.encode() + body)
        if part == "body":
            conn.sendall(fast[: len(head) + 2])
            slow = fast[len(head) + 2 :]
        for i in range(len(slow)):
            if stop.wait(0.25):
                return
            conn.sendall(slow[i : i + 1])
        if part == "head":
            conn.sendall(body)

    return reply


@pytest.mark.parametrize("part", ["body", "head"])
def test_a_trickled_answer_ends_at_the_deadline(part):
    """Each byte arrives well within timeout_s (the read timeout restarts on every byte): only
    the total deadline per request ends it, as a transport fault, and the request is not re-sent
    (issue 33 E16: each of 4 tries waited its own deadline, holding a scan past 120 s)."""
    with RawServer(_trickle(part)) as srv:
        oracle, victim = remote(srv.url, retries=1, timeout_s=1.0, deadline_s=1.5)
        t0 = time.monotonic()
        with pytest.raises(EndpointFaults) as err:
            oracle.view("t").predict(torch.zeros(2, D, dtype=torch.float64))
        took = time.monotonic() - t0
    assert "no whole answer within 1.5 s" in str(err.value) and "not re-sent" in str(err.value)
    assert took < 1.5 + 20.0, took  # one attempt, cut at its deadline (slack for a loaded machine)
    assert victim.backend.stats.faults.get("deadline") == 1


@pytest.mark.parametrize("framing", ["length", "close"])
def test_an_oversized_answer_is_refused_without_reading_it_all(framing):
    big = b'{"predictions": [' + b"0.5, " * 600_000 + b"0.5]}"  # ~3 MB

    def reply(conn, n, stop):
        if n == 1:  # the start-up check gets a real answer
            return _whole(conn, 1)
        length = b"Content-Length: %d\r\n" % len(big) if framing == "length" else b"Connection: close\r\n"
        try:
            conn.sendall(b"HTTP/1.1 200 OK\r\n" + length + b"\r\n" + big)
        except OSError:
            pass  # the client hung up: it read no further than its limit

    with RawServer(reply) as srv:
        oracle, victim = remote(srv.url, retries=0, max_response_mb=1)
        with pytest.raises(EndpointError, match="more than 1 MiB") as err:
            oracle.view("t").predict(torch.zeros(2, D, dtype=torch.float64))
    assert not isinstance(err.value, EndpointFaults)  # not retried: the same answer would come back
