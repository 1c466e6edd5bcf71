"""`leakmeter serve`: the reference victim server (victims/http/server.py) for a scenario, or its
export as an MLflow pyfunc model. numpy/torch are imported after the thread count is pinned."""

from __future__ import annotations

import sys

import click

from harness.cli.common import SET, THREADS, TRUST, apply_trust, guarded
from harness.core.threads import pin_threads


@click.command()
@click.argument("scenario", type=click.Path(dir_okay=False))
@SET
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to bind.")
@click.option("--port", type=click.IntRange(0, 65535), default=5001, show_default=True,
              help="Port (0 = any free port; the one chosen is printed).")
@click.option("--budget", type=click.IntRange(min=0), default=None,
              help="Query budget per API key with --keys-env, else one budget shared by every caller "
                   "(default: the scenario's defenses.query_budget).")
@click.option("--keys-env", metavar="VAR",
              help="Accept only the comma-separated API keys held in this environment variable.")
@click.option("--export-mlflow", type=click.Path(file_okay=False),
              help="Save the victim as an MLflow pyfunc model in this folder and exit "
                   "(then: mlflow models serve -m DIR --env-manager local).")
@click.option("--protocol", type=click.Choice(["mlflow", "kserve-v2", "kserve-v1", "openai"]),
              default="mlflow", show_default=True, help="Wire protocol: MLflow scoring, the Open Inference "
              "Protocol (KServe V2, as Triton and MLServer speak it), KServe V1 / TF Serving REST, or "
              "openai (an arch: lm victim's legacy completions API, as vLLM serves it).")
@click.option("--model-name", default=None, metavar="NAME",
              help="The model's name in kserve-v2 / kserve-v1 URLs (default: the scenario's name).")
@click.option("--log", "access_log", is_flag=True, help="Print one line per request (never keys).")
@click.option("--allow-host", "allow_hosts", multiple=True, metavar="NAME",
              help="A host name clients may send in the Host header (besides IP addresses, localhost "
                   "and --host); any other is refused (421), against DNS rebinding.")
@click.option("--max-body-mb", type=click.FloatRange(min=0.001, max=1024), default=8.0, show_default=True,
              help="Largest request body accepted (413 beyond).")
@click.option("--request-timeout", type=click.FloatRange(min=0.5, max=600), default=15.0, show_default=True,
              help="Seconds a client has to send a whole request (slow or half-sent ones are dropped).")
@TRUST
@THREADS
@guarded
def serve(scenario, overrides, host, port, budget, keys_env, export_mlflow, protocol, model_name, access_log,
          allow_hosts, max_body_mb, request_timeout, trust_model_code, threads):
    """Serve the SCENARIO's victim over HTTP (MLflow scoring protocol, or --protocol), defenses
    server side.

    Clients authenticate with 'Authorization: Bearer KEY' or 'X-API-Key: KEY' (other schemes: 401)."""
    pin_threads(threads)
    apply_trust(trust_model_code)
    import os
    import re

    from harness.core.errors import BadInput
    from harness.scenario import load_scenario

    if model_name is not None and protocol == "mlflow":
        raise BadInput("--model-name: only the kserve-v2 and kserve-v1 URLs (and openai's model field) "
                       "name the model; --protocol is mlflow (/invocations)")
    if model_name is not None and not re.fullmatch(r"[A-Za-z0-9_.\-]{1,128}", model_name):
        raise BadInput("--model-name: letters, digits, '_', '.', '-' (at most 128)")
    s = load_scenario(scenario, list(overrides))
    if (protocol == "openai") != (s.victim.model.arch == "lm"):
        raise BadInput(f"--protocol {protocol}: the openai protocol serves language models (victim.model."
                       f"arch: lm) and only it does; this scenario's arch is {s.victim.model.arch}")
    if export_mlflow:
        from victims.http.pyfunc import export_pyfunc

        path = export_pyfunc(s, export_mlflow)
        click.echo(f"saved MLflow pyfunc model: {path}\n"
                   f"serve it with: mlflow models serve -m {path} --env-manager local -p 5001")
        return
    keys = None
    if keys_env:
        raw = os.environ.get(keys_env, "")
        keys = {k.strip() for k in raw.split(",") if k.strip()}
        from victims.http.secrets import SECRETS

        for k in keys:
            SECRETS.add(k)
        if not keys:
            raise BadInput(f"--keys-env: the environment variable {keys_env} holds no API keys")
    from victims.http.served import build_served
    from victims.http.server import ServerLimits, VictimServer

    if protocol == "openai":
        from victims.http.server_openai import build_lm_served

        served, _ = build_lm_served(s)
    else:
        served, _ = build_served(s)
    per_key = budget if budget is not None else s.defenses.query_budget
    log = (lambda line: click.echo(line, err=True)) if access_log else None
    try:
        limits = ServerLimits(max_body=int(max_body_mb * 1024 * 1024), request_timeout_s=request_timeout)
        server = VictimServer(served, host, port, budget=per_key, keys=keys, log=log, limits=limits,
                              protocol=protocol, model_name=model_name or s.name,
                              allow_hosts=(*allow_hosts, host))
    except OSError as exc:
        raise BadInput(f"--port: cannot listen on {host}:{port} ({exc.strerror})") from None
    defenses = ", ".join(served.defenses.active()) or "none"
    scaling = s.victim.data.standardize  # what the served model expects (also on every answer)
    click.echo(f"serving {s.name} at {server.url} ({protocol}) "
               f"(interface {s.interface.kind}/{s.interface.output}; defenses: {defenses}; "
               f"budget: {per_key if per_key is not None else 'unlimited'} "
               f"{server.budgets.scope if per_key is not None else ''}; "
               f"{'API keys required' if keys else 'no API keys'}; "
               f"inputs: standardize: {scaling}{' (z-scored rows)' if scaling == 'standard' else ''})",
               nl=True)
    sys.stdout.flush()
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.close()
