"""`leakmeter serve` without API keys, and its noise secret (a real server on 127.0.0.1).

- An open server cannot tell callers apart by a key they make up: every caller shares one budget,
  and the budget table does not grow with the keys sent.
- Served output noise is keyed by a secret from the OS's randomness, never by the scenario's seed
  (public: 0 in shipped scenarios, written to every report): knowing the seed must not let anyone
  compute the noise and subtract it.
"""

from __future__ import annotations

import numpy as np
import requests
import torch

from harness.scenario import scenario_from_dict
from victims.http.served import build_served, keyed_normal
from victims.http.server import VictimServer

SCENARIO = {
    "name": "open", "seed": 0, "device": "cpu",
    "victim": {"model": {"arch": "mlp", "hidden": [8]},
               "data": {"dataset": "digits", "n_train": 100, "attacker_pool": 20},
               "training": {"epochs": 1, "dtype": "float64"}},
    "interface": {"kind": "prediction", "output": "probabilities"},
    "tracking": {"enabled": False},
}


def test_an_open_server_serves_one_budget_to_every_made_up_key():
    served, victim = build_served(scenario_from_dict(SCENARIO))
    server = VictimServer(served, budget=1000).start()  # no keys: an open server
    rows = np.zeros((100, 64)).tolist()
    session = requests.Session()
    try:
        codes = [session.post(server.url, json={"inputs": rows}, timeout=10,
                              headers={"X-API-Key": f"made-up-{i}-" + "k" * 15_000}).status_code
                 for i in range(14)]
        assert codes[:10] == [200] * 10 and set(codes[10:]) == {429}, codes
        refused = session.post(server.url, json={"inputs": rows[:1]}, timeout=10,
                               headers={"Authorization": "Bearer yet-another"})
        assert refused.status_code == 429 and "every caller" in refused.json()["message"]
        for i in range(200):  # more made-up keys: the table holds one entry
            session.post(server.url, json={"inputs": rows[:1]}, timeout=10,
                         headers={"X-API-Key": f"rotating-{i}"})
        assert len(server.budgets.used) == 1 and sum(server.budgets.used.values()) == 1000
        base = server.url.removesuffix("/invocations")
        assert "every caller" in session.get(f"{base}/version", timeout=5).json()["query_budget_scope"]
    finally:
        session.close()
        server.close()


def test_with_keys_the_table_holds_only_known_keys():
    served, _ = build_served(scenario_from_dict(SCENARIO))
    server = VictimServer(served, budget=10, keys={"key-a"}).start()
    try:
        for i in range(50):
            r = requests.post(server.url, json={"inputs": [[0.0] * 64]}, timeout=5,
                              headers={"X-API-Key": f"nope-{i}"})
            assert r.status_code == 401
        assert requests.post(server.url, json={"inputs": [[0.0] * 64]}, timeout=5,
                             headers={"X-API-Key": "key-a"}).status_code == 200
        assert set(server.budgets.used) == {"key-a"}
    finally:
        server.close()


def test_served_noise_cannot_be_computed_from_the_public_seed():
    sigma = 0.05
    s = scenario_from_dict({**SCENARIO, "defenses": {"output_noise": {"sigma": sigma}}})
    served, victim = build_served(s)
    other, _ = build_served(s)
    server = VictimServer(served).start()
    x = np.random.default_rng(3).uniform(-1, 1, (50, 64))
    try:
        noisy = np.asarray(requests.post(server.url, json={"inputs": x.tolist()}, timeout=10)
                           .json()["predictions"])
        again = np.asarray(requests.post(server.url, json={"inputs": x.tolist()}, timeout=10)
                           .json()["predictions"])
    finally:
        server.close()
    np.testing.assert_array_equal(noisy, again)  # still keyed by the query: repeats average nothing
    clean = victim.backend.predict(torch.as_tensor(x), "probabilities").numpy()
    noise = noisy - clean
    assert 0.03 < noise.std() < 0.07  # the noise is there
    guess = sigma * keyed_normal(x, clean.shape[1], s.seed)  # what the public seed would give
    left = noisy - guess - clean
    assert np.abs(left).max() > 1e-2, "the noise subtracts exactly: it is keyed by the public seed"
    assert abs(np.corrcoef(noise.ravel(), guess.ravel())[0, 1]) < 0.2
    assert not np.allclose(other.predict(x), noisy)  # another server: another secret
