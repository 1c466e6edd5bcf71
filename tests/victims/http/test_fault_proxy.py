"""A real fault-injecting proxy on 127.0.0.1 (drops before and after the server answered, TCP
resets, 503, 429 + Retry-After) in front of `leakmeter serve` with a per-key quota; over a thousand
requests, bounded in time.

What must hold: rows sent on the attacker's behalf never exceed the scenario's budget, and
everything the scan sends (its start-up check and verification probes too) never exceeds
`victim.endpoint.max_rows` (so a server-side quota equal to it is never hit); `queries` (rows
whose answers reached the attacker) never exceed the rows the server answered; an attack starved
by faults stops with `stopped_by: faults` and one refused by the endpoint with `stopped_by:
endpoint` — never "budget"; and the verdict under faults is the fault-free verdict or
`inconclusive`, never `pass` where the fault-free run fails.
"""

from __future__ import annotations

import json
import os
import random
import socket
import struct
import subprocess
import sys
import threading

import pytest
import requests
import yaml
from loopback import JsonHandler, LoopbackServer

from harness.run.runner import run_scenario
from harness.scenario import scenario_from_dict
from victims.build import build_victim

pytestmark = pytest.mark.slow  # ~2 minutes: four scans, ~2,000 requests through the proxy

KEY = "fp-key-6Yt2"
ATTACK = "span_nonadaptive"
SERVED = {
    "name": "fault-proxy", "seed": 0, "device": "cpu",
    "victim": {"model": {"arch": "mlp", "hidden": [16]},
               "data": {"dataset": "digits", "n_train": 300, "attacker_pool": 50},
               "training": {"epochs": 5, "lr": 0.1, "batch_size": 64, "dtype": "float64"}},
    "interface": {"kind": "prediction", "output": "probabilities"},
    "attacks": [{"name": ATTACK}], "tracking": {"enabled": False},
}


class FaultProxy(LoopbackServer):
    """Forwards POSTs to `upstream`; request i meets a fault with probability `rate` (seeded):
    drop (no answer, never forwarded), drop-after (forwarded, the answer lost), reset (TCP RST),
    503, or 429 with Retry-After: 0. Counts rows received, forwarded and answered upstream."""

    KINDS = ("drop", "drop-after", "reset", "503", "429")

    def __init__(self, upstream: str, rate: float, seed: int = 0):
        self.upstream, self.rate = upstream, rate
        self.rng = random.Random(seed)
        self.lock = threading.Lock()
        self.requests = self.rows_in = self.rows_forwarded = self.rows_answered = self.rows_delivered = 0
        self.faults: dict[str, int] = {}
        self.refusals = 0
        outer = self
        local = threading.local()

        class Handler(JsonHandler):
            def _cut(self, reset: bool):
                if reset:
                    self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                self.close_connection = True
                self.connection.close()

            def do_POST(self):  # noqa: N802
                raw = self.body()
                n = len(json.loads(raw)["inputs"])
                with outer.lock:
                    outer.requests += 1
                    outer.rows_in += n
                    fault = outer.rng.choice(outer.KINDS) if outer.rng.random() < outer.rate else None
                    if fault:
                        outer.faults[fault] = outer.faults.get(fault, 0) + 1
                if fault in ("drop", "reset"):
                    return self._cut(fault == "reset")
                if fault == "503":
                    return self.reply(503, b'{"error_code": "TEMPORARILY_UNAVAILABLE"}')
                if fault == "429":
                    return self.reply(429, b'{"error_code": "RATE_LIMITED"}', {"Retry-After": "0"})
                if not hasattr(local, "session"):
                    local.session = requests.Session()
                up = local.session.post(outer.upstream, data=raw, timeout=30, headers={
                    "Content-Type": "application/json", "Authorization": self.headers["Authorization"]})
                with outer.lock:
                    outer.rows_forwarded += n
                    if up.status_code == 200:
                        outer.rows_answered += n
                    elif up.status_code == 429:
                        outer.refusals += 1
                if fault == "drop-after":
                    return self._cut(False)
                if up.status_code == 200:
                    with outer.lock:
                        outer.rows_delivered += n
                return self.reply(up.status_code, up.content)

        self._serve(Handler)


@pytest.fixture(scope="module")
def serve(tmp_path_factory):
    """`leakmeter serve` with a per-key quota of 6,000 rows and two keys."""
    tmp = tmp_path_factory.mktemp("fp")
    path = tmp / "serve.yaml"
    path.write_text(yaml.safe_dump(SERVED))
    env = {**os.environ, "LEAKMETER_THREADS": "1", "LM_FP_KEYS": f"{KEY},{KEY}-b,{KEY}-c,{KEY}-d"}
    proc = subprocess.Popen([sys.executable, "-c", "from harness.cli import main; main()", "serve",
                             str(path), "--port", "0", "--keys-env", "LM_FP_KEYS", "--budget", "6000"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    line = proc.stdout.readline()
    if "serving" not in line:
        proc.kill()
        raise AssertionError(f"serve did not start: {line!r} {proc.stderr.read()[-2000:]}")
    yield "http://127.0.0.1:" + line.split("127.0.0.1:")[1].split("/")[0] + "/invocations"
    proc.terminate()
    try:
        proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        proc.kill()


def scan(url: str, key: str, budget: int, tmp_path, name: str, retries: int = 3):
    """Run the attack through `url` in process, the scan's rows capped at budget + 200;
    returns (report entry, report, backend)."""
    os.environ["LEAKMETER_FP_TOKEN"] = key
    data = json.loads(json.dumps(SERVED))
    data["victim"]["endpoint"] = {"url": url, "auth_env": "LEAKMETER_FP_TOKEN", "max_batch": 4,
                                  "retries": retries, "backoff_s": 0.001, "timeout_s": 5,
                                  "max_rows": budget + 200}
    data["defenses"] = {"query_budget": budget}
    s = scenario_from_dict(data)
    victim = build_victim(s)
    report = run_scenario(s, victim=victim, out=tmp_path / name)
    return report["attacks"][0], report, victim.backend


def test_faults_and_quotas_never_turn_a_fail_into_a_pass(serve, tmp_path):
    with FaultProxy(serve, rate=0.0) as clean:
        base, base_report, _ = scan(clean.url, KEY, 4000, tmp_path, "clean")
    assert base["status"] == "ok" and base["risk"] == "high" and base_report["verdict"] == "fail"
    assert base["queries"] <= clean.rows_answered and clean.rows_in <= 4200

    # ~30% of requests meet a fault; the budget has room for the retries
    with FaultProxy(serve, rate=0.3, seed=1) as noisy:
        flaky, flaky_report, be = scan(noisy.url, f"{KEY}-b", 4000, tmp_path, "flaky", retries=6)
    stats = be.stats_for(ATTACK)
    # the attacker's rows never exceed its budget; all the scan's rows never exceed max_rows; rows a
    # 429 refused (re-sent without being billed again: never answered) are not the attacker's
    assert stats["queries_sent"] - stats.get("rows_refused", 0) <= 4000
    assert noisy.rows_in == be.stats.rows_sent and be.stats.rows_sent - be.stats.rows_refused <= 4200
    assert flaky["queries"] <= noisy.rows_answered and flaky["queries"] <= noisy.rows_delivered
    assert stats["retries"] > 20 and stats["faults"] >= stats["retries"]
    assert set(noisy.faults) == set(FaultProxy.KINDS)

    # the same faults with a budget the retries eat: the attack is starved by faults, not budget
    with FaultProxy(serve, rate=0.3, seed=2) as starving:
        starved, starved_report, be2 = scan(starving.url, f"{KEY}-c", 900, tmp_path, "starved", retries=6)
    st2 = be2.stats_for(ATTACK)
    assert st2["queries_sent"] - st2.get("rows_refused", 0) <= 900 and starving.rows_in == be2.stats.rows_sent
    assert be2.stats.rows_sent - be2.stats.rows_refused <= 1100
    assert starved["queries"] <= starving.rows_answered
    assert starved["stopped_by"] == "faults", starved.get("reason")

    # a per-key quota below the scenario's budget: the endpoint refuses, stopped_by endpoint
    used_before = 0
    for _ in range(11):  # the key has used 5,500 of its 6,000 rows elsewhere
        r = requests.post(serve, json={"inputs": [[0.0] * 64] * 500}, timeout=30,
                          headers={"Authorization": f"Bearer {KEY}-d"})
        assert r.status_code == 200
        used_before += 500
    with FaultProxy(serve, rate=0.0) as quota:
        refused, refused_report, be3 = scan(quota.url, f"{KEY}-d", 10_000, tmp_path, "quota")
    assert quota.refusals >= 1 and quota.rows_answered + used_before <= 6000
    assert refused["queries"] <= quota.rows_answered
    assert refused["stopped_by"] == "endpoint", refused.get("reason")

    total = clean.requests + noisy.requests + starving.requests + quota.requests
    print(f"\nrequests through the proxy: {total}; faults {noisy.faults} / {starving.faults}")
    assert total >= 1000
    for rep in (flaky_report, starved_report, refused_report):
        assert rep["verdict"] in ("fail", "inconclusive"), rep["verdict"]
    assert starved["status"] == refused["status"] == "incomplete"
