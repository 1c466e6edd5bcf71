"""Production scans (docs/endpoints.md): credentials only from what the scenario names (no
~/.netrc), TLS as configured (verify_tls: false obeyed whatever the environment says, a private CA
by `ca_bundle`, mTLS, a certificate error exit 2 at once with a hint), refused rows never billed,
a key revoked mid-scan ends `incomplete / stopped_by endpoint` with the rows actually answered,
OAuth2 client credentials renewed on expiry and once on a 401. Real servers on 127.0.0.1 (a
stdlib HTTP(S) server; a CA and certificates made here with `cryptography`)."""

from __future__ import annotations

import datetime
import ipaddress
import json
import ssl
import threading

import numpy as np
import pytest
import torch
from loopback import JsonHandler, LoopbackServer

from defenses.output import OutputDefenses
from harness.core.errors import BadInput
from harness.core.oracle import Oracle
from harness.run.runner import run_scenario
from harness.scenario import scenario_from_dict
from victims.build import build_victim
from victims.http.client import EndpointRefused

D, C = 5, 3


def softmax_rows(x: np.ndarray) -> np.ndarray:
    z = x[:, :C]
    e = np.exp(z - z.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


class Server(LoopbackServer):
    """An MLflow-protocol endpoint that records each request's Authorization header; `decide(i,
    headers)` returns None (answer) or (status, body). Counts rows received and answered. With
    `tls=(cert, key, client_ca)` it speaks HTTPS (and asks for a client certificate when
    client_ca is given)."""

    def __init__(self, decide=lambda i, h: None, tls=None, token_server=None):
        self.decide, self.auth, self.rows_in, self.rows_answered = decide, [], 0, 0
        self.lock = threading.Lock()
        outer = self

        class Handler(JsonHandler):
            def do_POST(self):  # noqa: N802
                raw = self.body()
                if token_server is not None and self.path == "/token":
                    return self.reply_json(*token_server(raw.decode()))
                rows = json.loads(raw)["inputs"]
                with outer.lock:
                    i = len(outer.auth)
                    outer.auth.append(self.headers.get("Authorization"))
                    outer.rows_in += len(rows)
                verdict = outer.decide(i, self.headers)
                if verdict is not None:
                    return self.reply_json(*verdict)
                with outer.lock:
                    outer.rows_answered += len(rows)
                self.reply_json(200, {"predictions": softmax_rows(np.asarray(rows)).tolist()})

        self._serve(Handler)
        if tls is not None:
            ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            ctx.load_cert_chain(tls[0], tls[1])
            if tls[2]:
                ctx.load_verify_locations(tls[2])
                ctx.verify_mode = ssl.CERT_REQUIRED
            self.httpd.socket = ctx.wrap_socket(self.httpd.socket, server_side=True)
        self.scheme = "https" if tls else "http"

    @property
    def url(self) -> str:
        return f"{self.scheme}://127.0.0.1:{self.port}/invocations"


def remote(url: str, budget: int | None = None, **endpoint):
    ep = {"url": url, "input_dim": D, "n_outputs": C, "timeout_s": 2, "backoff_s": 0.001,
          "retries": 3, "max_batch": 2, **endpoint}
    s = scenario_from_dict({"name": "t", "device": "cpu", "victim": {"endpoint": ep},
                            "interface": {"kind": "prediction", "output": "probabilities"},
                            "tracking": {"enabled": False}})
    victim = build_victim(s)
    return Oracle(victim.backend, victim.info, OutputDefenses(), budget), victim


# ------------------------------------------------------------------ credentials (issue 33 E01)


def test_a_netrc_default_entry_never_replaces_the_configured_token(tmp_path, monkeypatch):
    netrc = tmp_path / ".netrc"
    netrc.write_text("default login someone password netrc-secret-9\n")
    netrc.chmod(0o600)
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("NETRC", str(netrc))
    monkeypatch.setenv("LEAKMETER_T_TOKEN", "configured-token-1")
    with Server() as srv:
        oracle, _ = remote(srv.url, auth_env="LEAKMETER_T_TOKEN")
        oracle.view("a").predict(torch.zeros(3, D, dtype=torch.float64))
        assert srv.auth and set(srv.auth) == {"Bearer configured-token-1"}, srv.auth
    with Server() as srv:  # no credential configured: none is sent (no Basic from the netrc)
        oracle, _ = remote(srv.url)
        oracle.view("a").predict(torch.zeros(1, D, dtype=torch.float64))
        assert set(srv.auth) == {None}, srv.auth


def test_an_auth_header_credential_and_a_probe_key(monkeypatch):
    monkeypatch.setenv("LEAKMETER_T_KEY", "hdr-value-7")
    with Server() as srv:
        oracle, victim = remote(srv.url, auth={"type": "header", "name": "X-Api-Key",
                                               "value_env": "LEAKMETER_T_KEY"})
        oracle.view("a").predict(torch.zeros(2, D, dtype=torch.float64))
        assert victim.record["endpoint"]["auth_type"] == "header"
    assert set(srv.auth) == {None}  # the key went in X-Api-Key, nothing in Authorization


# ------------------------------------------------------------------ TLS


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    """A private CA, a server certificate for 127.0.0.1 signed by it, a client certificate, and a
    second (untrusted) CA; PEM files."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    d = tmp_path_factory.mktemp("pki")
    now = datetime.datetime.now(datetime.UTC)

    def name(cn):
        return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])

    def write(key, cert, stem):
        (d / f"{stem}.key").write_bytes(key.private_bytes(serialization.Encoding.PEM,
                                                          serialization.PrivateFormat.PKCS8,
                                                          serialization.NoEncryption()))
        (d / f"{stem}.pem").write_bytes(cert.public_bytes(serialization.Encoding.PEM))

    def issue(cn, issuer_key, issuer_name, ca=False, san=None):
        key = ec.generate_private_key(ec.SECP256R1())
        b = (x509.CertificateBuilder().subject_name(name(cn)).issuer_name(issuer_name or name(cn))
             .public_key(key.public_key()).serial_number(x509.random_serial_number())
             .not_valid_before(now - datetime.timedelta(days=1))
             .not_valid_after(now + datetime.timedelta(days=2))
             .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True))
        if san:
            b = b.add_extension(x509.SubjectAlternativeName(san), critical=False)
        return key, b.sign(issuer_key or key, hashes.SHA256())

    ca_key, ca = issue("leakmeter test CA", None, None, ca=True)
    write(ca_key, ca, "ca")
    other_key, other = issue("another CA", None, None, ca=True)
    write(other_key, other, "other")
    k, c = issue("127.0.0.1", ca_key, ca.subject, san=[x509.IPAddress(ipaddress.ip_address("127.0.0.1"))])
    write(k, c, "server")
    k, c = issue("scanner", ca_key, ca.subject)
    write(k, c, "client")
    return d


def test_a_private_ca_by_ca_bundle_and_verify_false_obeyed_whatever_the_environment(pki, monkeypatch):
    monkeypatch.setenv("REQUESTS_CA_BUNDLE", str(pki / "other.pem"))  # as on Debian hosts / CI images
    monkeypatch.setenv("CURL_CA_BUNDLE", str(pki / "other.pem"))
    with Server(tls=(pki / "server.pem", pki / "server.key", None)) as srv:
        oracle, _ = remote(srv.url, ca_bundle=str(pki / "ca.pem"))
        got = oracle.view("a").predict(torch.ones(2, D, dtype=torch.float64))
        np.testing.assert_allclose(got.numpy(), softmax_rows(np.ones((2, D))))
        oracle, victim = remote(srv.url, verify_tls=False)
        oracle.view("a").predict(torch.ones(1, D, dtype=torch.float64))
        assert "TLS verification is OFF for this endpoint" in victim.record["notes"]


def test_a_certificate_error_is_exit_2_at_once_with_a_hint(pki, monkeypatch):
    monkeypatch.delenv("REQUESTS_CA_BUNDLE", raising=False)
    with Server(tls=(pki / "server.pem", pki / "server.key", None)) as srv:
        with pytest.raises(BadInput) as err:
            remote(srv.url, retries=4)
        msg = str(err.value)
        assert "TLS handshake failed" in msg and "ca_bundle" in msg and "not retried" in msg, msg
        with pytest.raises(BadInput) as err:  # signed by another CA than the bundle names
            remote(srv.url, ca_bundle=str(pki / "other.pem"))
        assert "not signed by victim.endpoint.ca_bundle" in str(err.value)
        assert srv.rows_in == 0  # no request ever reached the handler


def test_mtls_client_certificate(pki):
    tls = (pki / "server.pem", pki / "server.key", pki / "ca.pem")
    with Server(tls=tls) as srv:
        with pytest.raises(BadInput) as err:
            remote(srv.url, ca_bundle=str(pki / "ca.pem"))
        assert "TLS handshake failed" in str(err.value)
        oracle, _ = remote(srv.url, ca_bundle=str(pki / "ca.pem"), client_cert=str(pki / "client.pem"),
                           client_key=str(pki / "client.key"))
        oracle.view("a").predict(torch.ones(2, D, dtype=torch.float64))
        assert srv.rows_answered == 1 + 2


def test_tls_keys_are_checked_before_anything_is_sent(tmp_path):
    with pytest.raises(BadInput, match="ca_bundle: .* is not a readable file"):
        remote("https://127.0.0.1:9/invocations", ca_bundle=str(tmp_path / "missing.pem"))
    with pytest.raises(Exception, match="verify_tls: false"):
        remote("https://127.0.0.1:9/invocations", ca_bundle=str(tmp_path / "x.pem"), verify_tls=False)


# ------------------------------------------------------------------ refusals


def test_rows_a_rate_limit_refused_are_not_billed():
    with Server(lambda i, h: (429, {"error_code": "RATE_LIMITED"}) if i % 2 == 1 else None) as srv:
        oracle, victim = remote(srv.url, budget=20)
        view = oracle.view("a")
        view.predict(torch.zeros(20, D, dtype=torch.float64))  # the whole budget, half the requests 429
        assert srv.rows_answered == 1 + 20 and srv.rows_in > srv.rows_answered
        assert view.queries_sent == 20 and oracle.quotas.used == srv.rows_answered
        assert victim.backend.stats.rows_refused == srv.rows_in - srv.rows_answered


@pytest.mark.parametrize("status, body", [(400, {"code": 400, "type": "InvalidKeyException",
                                                 "message": "Token is not valid"}),
                                          (401, {"message": "expired"}), (418, {"x": 1})])
def test_a_key_revoked_mid_scan_ends_incomplete_by_endpoint_with_the_rows_answered(status, body, tmp_path,
                                                                                  monkeypatch):
    monkeypatch.setenv("LEAKMETER_T_TOKEN", "k-1")
    ep = {"auth_env": "LEAKMETER_T_TOKEN", "max_batch": 8, "retries": 1, "backoff_s": 0.001}
    if status == 418:
        ep["refusal_statuses"] = [401, 403, 418]
    with Server(lambda i, h: (status, body) if i >= 6 else None) as srv:
        oracle, victim = remote(srv.url, **ep)
        view = oracle.view("a")
        view.predict(torch.zeros(16, D, dtype=torch.float64))  # requests 1-2
        with pytest.raises(EndpointRefused) as err:
            view.predict(torch.zeros(40, D, dtype=torch.float64))  # 3 more answered, then refused
        assert err.value.stopped_by == "endpoint" and "expired or was revoked" in str(err.value)
        assert srv.rows_answered == 1 + 16 + 24
        # billed: the rows the server answered for the attacker, never the refused chunk nor the tail
        assert view.queries_sent == 16 + 24 and oracle.quotas.used == srv.rows_answered


# ------------------------------------------------------------------ OAuth2


def test_oauth2_client_credentials_fetched_renewed_on_expiry_and_once_on_a_401(monkeypatch):
    monkeypatch.setenv("LEAKMETER_T_ID", "client-a")
    monkeypatch.setenv("LEAKMETER_T_SECRET", "s3cret-xyz")
    issued: list[str] = []
    valid: set[str] = set()

    def token_server(form: str):
        assert "grant_type=client_credentials" in form and "client_secret=s3cret-xyz" in form
        tok = f"tok-{len(issued)}"
        issued.append(tok)
        valid.clear()
        valid.add(tok)
        return 200, {"access_token": tok, "expires_in": 3600, "token_type": "Bearer"}

    def decide(i, headers):
        tok = (headers.get("Authorization") or "").removeprefix("Bearer ")
        return None if tok in valid else (401, {"message": "token expired"})

    with Server(decide, token_server=token_server) as srv:
        url = srv.url
        token_url = url.replace("/invocations", "/token")
        oracle, victim = remote(url, auth={"type": "oauth2", "token_url": token_url,
                                           "client_id_env": "LEAKMETER_T_ID",
                                           "client_secret_env": "LEAKMETER_T_SECRET", "scope": "score"})
        view = oracle.view("a")
        view.predict(torch.zeros(2, D, dtype=torch.float64))
        assert issued == ["tok-0"]
        valid.clear()  # the gateway revokes the token early: one 401, a new token, the same rows
        view.predict(torch.zeros(2, D, dtype=torch.float64))
        assert issued == ["tok-0", "tok-1"] and srv.rows_answered == 1 + 4
        assert view.queries_sent == 4  # the 401's rows were refused, never billed
        cred = victim.backend.auth
        cred._renew_at = 0.0  # the token's lifetime is over: fetched again before the request
        view.predict(torch.zeros(2, D, dtype=torch.float64))
        assert issued[-1] == "tok-2" and srv.auth[-1] == "Bearer tok-2"
        valid.add("never")  # a key that stays refused after one renewal: the refusal stands
        monkeypatch.setattr(cred, "_fetch", lambda: None)
        valid.clear()
        with pytest.raises(EndpointRefused):
            view.predict(torch.zeros(2, D, dtype=torch.float64))
        assert victim.backend.scrub("tok-1 s3cret-xyz") == "*** ***"


@pytest.mark.slow  # ~10 s: a whole run (the surrogate trains on what it got)
def test_a_run_whose_key_is_revoked_mid_scan_is_inconclusive_never_error(tmp_path, monkeypatch):
    monkeypatch.setenv("LEAKMETER_T_TOKEN", "k-1")
    with Server(lambda i, h: (400, {"type": "InvalidKeyException"}) if i >= 3 else None) as srv:
        s = scenario_from_dict({
            "name": "revoked", "seed": 0, "device": "cpu",
            "victim": {"endpoint": {"url": srv.url, "auth_env": "LEAKMETER_T_TOKEN", "input_dim": D,
                                    "n_outputs": C, "max_batch": 16, "retries": 1, "backoff_s": 0.001}},
            "interface": {"kind": "prediction", "output": "probabilities"},
            "attacker": {"input_domain": [-1, 1]}, "defenses": {"query_budget": 100},
            "attacks": [{"name": "surrogate"}], "tracking": {"enabled": False}})
        report = run_scenario(s, out=tmp_path / "o")
    a = report["attacks"][0]
    assert a["status"] == "incomplete" and a["stopped_by"] == "endpoint", (a["status"], a["reason"])
    assert report["verdict"] == "inconclusive"
    assert report["queries_sent_total"] == srv.rows_answered  # the rows the server answered


# ------------------------------------------------------------------ scan --baseline last-pass


def _scan_file(tmp_path, url: str, budget: int) -> str:
    import yaml

    f = tmp_path / f"scan-{budget}.yaml"
    f.write_text(yaml.safe_dump({
        "name": "scan-prod", "seed": 0, "device": "cpu",
        "victim": {"endpoint": {"url": url, "input_dim": D, "n_outputs": C, "max_batch": 64}},
        "interface": {"kind": "prediction", "output": "probabilities"},
        "attacker": {"input_domain": [-1, 1]}, "defenses": {"query_budget": budget},
        "attacks": [{"name": "surrogate"}], "tracking": {"experiment": "prod"}}))
    return str(f)


@pytest.mark.slow  # ~60 s: two scans with MLflow tracking
def test_scan_last_pass_exits_1_on_a_failing_verdict_from_the_first_night(tmp_path):
    from click.testing import CliRunner

    from harness.cli import main

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    with Server() as srv:
        f = _scan_file(tmp_path, srv.url, 400)
        args = ["scan", f, "--tracking-uri", uri, "--baseline", "last-pass", "--out", str(tmp_path / "o")]
        res = CliRunner().invoke(main, args)
        assert "verdict: fail" in res.output.lower() or "FAIL" in res.output, res.output
        assert res.exit_code == 1, res.output  # no passing baseline, and the verdict fails
        assert "can be the next baseline" not in res.output and "no baseline" in res.output
        res = CliRunner().invoke(main, [*args, "--fail-on", "regression"])  # narrowed: no regression
        assert res.exit_code == 0, res.output


def test_an_attack_that_declines_for_its_budget_is_stopped_by_the_budget_not_the_endpoint(tmp_path):
    with Server() as srv:
        s = scenario_from_dict({
            "name": "tiny", "seed": 0, "device": "cpu",
            "victim": {"endpoint": {"url": srv.url, "input_dim": D, "n_outputs": C}},
            "interface": {"kind": "prediction", "output": "probabilities"},
            "attacker": {"input_domain": [-1, 1]}, "defenses": {"query_budget": 1},
            "attacks": [{"name": "span_nonadaptive"}], "tracking": {"enabled": False}})
        report = run_scenario(s, out=tmp_path / "o")
    a = report["attacks"][0]
    assert a["status"] == "incomplete" and a["stopped_by"] == "budget", (a["status"], a["stopped_by"],
                                                                          a["reason"])
    assert "stopped by the query budget" in a["reason"] and srv.rows_in == 1  # the start-up check only


# ------------------------------------------------------------------ a model still loading


def test_ready_timeout_waits_for_a_model_that_is_loading(capsys):
    loading = {"until": 4}  # the first 4 requests meet 503 (KServe while it loads a model)

    def decide(i, headers):
        return (503, {"error": "model is loading"}) if i < loading["until"] else None

    with Server(decide) as srv:
        with pytest.raises(BadInput, match="ready_timeout_s waits for it"):
            remote(srv.url, retries=1)  # today's default: no wait, exit 2 with the hint
        srv.auth.clear()
        oracle, victim = remote(srv.url, retries=1, ready_timeout_s=30)
        assert "not ready yet; waiting up to 30 s" in capsys.readouterr().err
        oracle.view("a").predict(torch.ones(2, D, dtype=torch.float64))
        assert srv.rows_answered == 1 + 2
    loading["until"] = 10**9
    with Server(decide) as srv:  # never ready: exit 2 after the wait, saying so
        from victims.http import endpoint

        ticks = iter(range(0, 1000, 7))
        with pytest.raises(BadInput, match=r"waited 20 s: victim.endpoint.ready_timeout_s"):
            s = scenario_from_dict({"name": "t", "device": "cpu", "tracking": {"enabled": False},
                                    "victim": {"endpoint": {"url": srv.url, "input_dim": D, "n_outputs": C,
                                                            "retries": 0, "ready_timeout_s": 20}}})
            orig = endpoint._when_ready
            endpoint._when_ready = lambda b, check: orig(b, check, clock=lambda: next(ticks),
                                                         sleep=lambda _s: None)
            try:
                build_victim(s)
            finally:
                endpoint._when_ready = orig


def test_probe_auth_env_pays_for_the_scans_own_rows_and_the_report_says_which_key_paid(monkeypatch):
    monkeypatch.setenv("LEAKMETER_T_TOKEN", "attacker-key")
    monkeypatch.setenv("LEAKMETER_T_PROBE", "probe-key")
    quota = 60  # the gateway's quota per key: exactly the attack's budget

    def decide(i, headers):
        return None

    with Server(decide) as srv:
        s = scenario_from_dict({
            "name": "probe-key", "seed": 0, "device": "cpu",
            "victim": {"endpoint": {"url": srv.url, "auth_env": "LEAKMETER_T_TOKEN", "input_dim": D,
                                    "n_outputs": C, "max_batch": 64,
                                    "probe_auth_env": "LEAKMETER_T_PROBE"}},
            "interface": {"kind": "prediction", "output": "probabilities"},
            "attacker": {"input_domain": [-1, 1]}, "defenses": {"query_budget": quota},
            "attacks": [{"name": "span_nonadaptive"}], "tracking": {"enabled": False}})
        victim = build_victim(s)
        oracle = Oracle(victim.backend, victim.info, OutputDefenses(), quota)
        view = oracle.view("a")
        view.predict(torch.zeros(quota, D, dtype=torch.float64))
        victim.truth.probe_predict(torch.zeros(7, D, dtype=torch.float64))
    by_key = victim.backend.stats.rows_by_key
    assert by_key == {"auth": quota, "probe_auth": 1 + 7}, by_key
    assert srv.auth.count("Bearer attacker-key") == 1 and srv.auth.count("Bearer probe-key") == 2
    assert victim.record["endpoint"]["probe_auth"] is True


def test_request_budget_counts_requests_per_attacker_before_they_are_sent():
    with Server() as srv:
        s = scenario_from_dict({
            "name": "req", "device": "cpu", "tracking": {"enabled": False},
            "victim": {"endpoint": {"url": srv.url, "input_dim": D, "n_outputs": C, "max_batch": 4}},
            "interface": {"kind": "prediction", "output": "probabilities"},
            "defenses": {"query_budget": 1000, "request_budget": 3}})
        victim = build_victim(s)
        oracle = Oracle(victim.backend, victim.info, OutputDefenses(), 1000)
        view = oracle.view("a")
        view.predict(torch.zeros(8, D, dtype=torch.float64))  # 2 requests
        from harness.core.errors import BudgetExhausted

        with pytest.raises(BudgetExhausted) as err:
            view.predict(torch.zeros(8, D, dtype=torch.float64))  # the 3rd request, not the 4th
        assert err.value.stopped_by == "budget" and "request_budget" in str(err.value)
        assert len(srv.auth) == 1 + 3  # the start-up check is the scan's own, not the attacker's
        assert view.queries_sent == 8 + 4 and oracle.quotas.used == srv.rows_in  # the unsent 4 not billed
        oracle.view("b").predict(torch.zeros(4, D, dtype=torch.float64))  # another client, its own count
    with pytest.raises(Exception, match="request_budget: counts HTTP requests"):
        scenario_from_dict({"name": "x", "defenses": {"request_budget": 3}})
