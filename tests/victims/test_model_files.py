"""User model files: state_dict, safetensors and ONNX are read without running code; TorchScript
(a program) only with `format: torchscript` and --trust-model-code. Crafted files that would
write a marker file if any of their code ran are tried under every extension and format value."""

import pickle

import pytest
import torch
from conftest import make_scenario

from harness.core.errors import BadInput
from harness.run.runner import run_scenario
from harness.scenario import scenario_from_dict
from victims.build import build_victim
from victims.models.builders import build_mlp
from victims.models.files import FORMATS, allow_model_code, sniff

EXTENSIONS = (".pt", ".pth", ".bin", ".ts", ".pkl", ".safetensors", ".onnx", "")


@pytest.fixture(autouse=True)
def _untrusted():
    allow_model_code(False)
    yield
    allow_model_code(False)


def _scenario(path, **model):
    return scenario_from_dict(make_scenario(victim={
        "model": {"arch": "file", "path": str(path), **model},
        "data": {"dataset": "digits", "n_train": 200, "attacker_pool": 20},
    }))


def _reference():
    torch.manual_seed(5)
    return build_mlp(64, 10, [12], "relu", True).double()


def test_state_dict_with_spec_is_loaded_not_retrained(tmp_path):
    ref = _reference()
    p = tmp_path / "victim.pt"
    torch.save(ref.state_dict(), p)
    v = build_victim(_scenario(p, spec={"arch": "mlp", "hidden": [12]}))
    assert torch.equal(v.truth.model[0].weight, ref[0].weight)  # float64 kept, bit for bit
    assert "not retrained" in " ".join(v.record["notes"])


def test_safetensors_file_loads_bit_for_bit(tmp_path):
    from safetensors.torch import save_file

    ref = _reference()
    p = tmp_path / "victim.weights"  # the name says nothing: the bytes do
    save_file({k: v.contiguous() for k, v in ref.state_dict().items()}, str(p))
    assert sniff(p) == "safetensors"
    v = build_victim(_scenario(p, spec={"arch": "mlp", "hidden": [12]}, format="safetensors"))
    for a, b in zip(v.truth.model.state_dict().values(), ref.state_dict().values(), strict=True):
        assert torch.equal(a, b)


def test_torchscript_needs_the_format_and_the_flag(tmp_path):
    ref = _reference().float()
    p = tmp_path / "victim.ts"
    torch.jit.script(ref).save(str(p))
    with pytest.raises(BadInput, match="TorchScript archive.*--trust-model-code"):
        build_victim(_scenario(p))  # auto never runs code
    with pytest.raises(BadInput, match="victim.model.format: torchscript runs the file's code"):
        build_victim(_scenario(p, format="torchscript"))  # the scenario alone cannot opt in
    allow_model_code(True)
    with pytest.raises(BadInput, match="TorchScript archive"):
        build_victim(_scenario(p))  # the flag alone cannot either
    v = build_victim(_scenario(p, format="torchscript"))
    x = torch.as_tensor(v.truth.data.x_test[:8], dtype=torch.float32)
    assert torch.allclose(v.truth.model(x).float(), ref(x), atol=1e-6)


def test_bad_model_files_are_bad_input(tmp_path):
    with pytest.raises(BadInput, match="not found"):
        build_victim(_scenario(tmp_path / "missing.pt"))
    ref = _reference()
    sd = tmp_path / "sd.pt"
    torch.save(ref.state_dict(), sd)
    with pytest.raises(BadInput, match="victim.model.spec"):
        build_victim(_scenario(sd))  # no architecture given
    with pytest.raises(BadInput, match="does not match"):
        build_victim(_scenario(sd, spec={"arch": "mlp", "hidden": [7]}))
    with pytest.raises(BadInput, match="format: safetensors does not match"):
        build_victim(_scenario(sd, spec={"arch": "mlp", "hidden": [12]}, format="safetensors"))
    junk = tmp_path / "junk.bin"
    junk.write_bytes(b"\x00\x01 not a model at all")
    with pytest.raises(BadInput, match="not a model file leakmeter reads"):
        build_victim(_scenario(junk, spec={"arch": "mlp", "hidden": [12]}))


# ---------------------------------------------------------------- crafted files: no code runs


class WritesMarker:
    """Unpickling this opens (creates) the marker file."""

    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):
        return (open, (self.marker, "w"))


def crafted_torchscript(path, marker) -> None:
    """A TorchScript module whose __setstate__ (run by torch.jit.load) creates `marker`."""

    class Payload(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.w = torch.nn.Parameter(torch.zeros(10, 64))
            self.where = "/nonexistent"

        def forward(self, x):
            return x @ self.w.t()

        @torch.jit.export
        def __getstate__(self):
            return (self.where, self.w, self.training)

        @torch.jit.export
        def __setstate__(self, state: tuple[str, torch.Tensor, bool]):
            self.where = state[0]
            touched = torch.from_file(state[0], shared=True, size=1, dtype=torch.uint8)
            self.w = state[1]
            self.training = state[2] or bool(touched.numel() < 0)  # used: the call is kept

    m = torch.jit.script(Payload())
    m.where = str(marker)
    m.save(str(path))


def crafted_pickles(folder, marker) -> dict[str, bytes]:
    """The same payload as a plain pickle, a torch.save zip and torch.save's legacy layout."""
    out = {}
    out["pickle"] = pickle.dumps({"w": WritesMarker(marker)})
    zp, lp = folder / "z.tmp", folder / "l.tmp"
    torch.save({"w": WritesMarker(marker)}, zp)
    torch.save({"w": WritesMarker(marker)}, lp, _use_new_zipfile_serialization=False)
    out["torch-zip"], out["torch-legacy"] = zp.read_bytes(), lp.read_bytes()
    zp.unlink()
    lp.unlink()
    return out


@pytest.fixture
def crafted(tmp_path):
    marker = tmp_path / "MARKER"
    ts = tmp_path / "payload.ts"
    crafted_torchscript(ts, marker)
    files = {"torchscript": ts.read_bytes(), **crafted_pickles(tmp_path, marker)}
    assert not marker.exists()
    return marker, files


def test_the_crafted_torchscript_does_run_code_when_trusted(tmp_path, crafted):
    marker, files = crafted  # the control: this payload is live, so the refusals below mean something
    p = tmp_path / "live.ts"
    p.write_bytes(files["torchscript"])
    allow_model_code(True)
    build_victim(_scenario(p, format="torchscript"))
    assert marker.exists()


@pytest.mark.parametrize("fmt", FORMATS)
def test_crafted_files_run_no_code_under_any_extension_or_format(tmp_path, crafted, fmt):
    marker, files = crafted
    spec = {"arch": "mlp", "hidden": [12]}
    for kind, raw in files.items():
        for ext in EXTENSIONS:
            p = tmp_path / f"model-{kind}{ext}"
            p.write_bytes(raw)
            with pytest.raises(BadInput) as err:
                build_victim(_scenario(p, spec=spec, format=fmt))
            msg = str(err.value)
            assert "\n" not in msg and "victim.model" in msg, msg
            if kind == "torchscript" or fmt == "torchscript":
                assert "--trust-model-code" in msg
            assert not marker.exists(), (kind, ext, fmt)


def test_crafted_pickles_stay_inert_even_with_the_flag(tmp_path, crafted):
    marker, files = crafted
    allow_model_code(True)
    for kind in ("pickle", "torch-zip", "torch-legacy"):
        for fmt in FORMATS:
            p = tmp_path / f"{kind}.pt"
            p.write_bytes(files[kind])
            with pytest.raises(BadInput):
                build_victim(_scenario(p, spec={"arch": "mlp", "hidden": [12]}, format=fmt))
    assert not marker.exists()


# ---------------------------------------------------------------- the same victim, three formats


def _exact(path, fmt, tmp_path):
    s = scenario_from_dict({
        "name": "formats", "seed": 0, "device": "cpu",
        "victim": {"model": {"arch": "file", "path": str(path), "format": fmt,
                             "spec": {"arch": "mlp", "hidden": [8], "bias": [True, False]}},
                   "data": {"dataset": "gaussian", "dim": 16, "labels": "victim", "task": "regression",
                            "n_train": 50, "n_test": 500, "attacker_pool": 20}},
        "interface": {"kind": "prediction", "output": "logits"},
        "attacks": [{"name": "finite_difference_exact"}], "tracking": {"enabled": False}})
    return run_scenario(s, out=tmp_path / fmt)["attacks"][0]


def test_safetensors_and_onnx_victims_give_the_state_dict_victims_extraction(tmp_path):
    pytest.importorskip("onnxruntime")
    pytest.importorskip("onnx")  # torch.onnx.export writes the file with it
    from safetensors.torch import save_file

    torch.manual_seed(3)
    net = build_mlp(16, 1, [8], "relu", [True, False]).double()
    torch.save(net.state_dict(), tmp_path / "net.pt")
    save_file({k: v.contiguous() for k, v in net.state_dict().items()}, str(tmp_path / "net.safetensors"))
    torch.onnx.export(net, (torch.zeros(2, 16, dtype=torch.float64),), str(tmp_path / "net.onnx"),
                      dynamo=False, input_names=["x"], output_names=["y"],
                      dynamic_axes={"x": {0: "n"}, "y": {0: "n"}})
    ref = _exact(tmp_path / "net.pt", "state_dict", tmp_path)
    assert ref["status"] == "ok" and ref["stopped_by"] is None  # the attack works here
    assert ref["metrics"]["max_rel_error"] <= 1e-6
    for name, fmt in (("net.safetensors", "safetensors"), ("net.onnx", "onnx")):
        got = _exact(tmp_path / name, fmt, tmp_path)
        assert got["status"] == ref["status"] and got["risk"] == ref["risk"] == "high", (fmt, got)
        assert got["queries"] == ref["queries"], fmt
        for m in ("max_rel_error", "max_rel_error_gaussian", "normalized_loss_gaussian"):
            assert got["metrics"][m] == pytest.approx(ref["metrics"][m], rel=1e-3, abs=1e-9), (fmt, m)
    auto = _exact(tmp_path / "net.onnx", "auto", tmp_path)  # found from its bytes
    assert auto["queries"] == ref["queries"]


def test_onnx_victims_answer_predictions_only(tmp_path):
    pytest.importorskip("onnxruntime")
    pytest.importorskip("onnx")
    net = _reference()
    p = tmp_path / "net.onnx"
    torch.onnx.export(net, (torch.zeros(2, 64, dtype=torch.float64),), str(p), dynamo=False,
                      input_names=["x"], output_names=["y"], dynamic_axes={"x": {0: "n"}, "y": {0: "n"}})
    with pytest.raises(BadInput, match="interface.kind: gradient.*ONNX"):
        build_victim(_scenario(p))  # make_scenario's interface is gradient
    data = make_scenario(interface={"kind": "prediction", "output": "probabilities"}, victim={
        "model": {"arch": "file", "path": str(p)},
        "data": {"dataset": "digits", "n_train": 200, "attacker_pool": 20}})
    v = build_victim(scenario_from_dict(data))
    x = torch.as_tensor(v.truth.data.x_test[:32], dtype=torch.float64)
    assert torch.allclose(v.backend.predict(x, "probabilities"), torch.softmax(net(x), 1), atol=1e-12)
    assert v.record["parameters"] == sum(q.numel() for q in net.parameters())  # its initializers


# ---------------------------------------------------------------- the same, through the CLI


@pytest.mark.parametrize("command", ["validate", "run"])
def test_cli_refuses_every_crafted_file_with_one_line_and_exit_2(command, tmp_path, crafted, monkeypatch):
    import yaml
    from click.testing import CliRunner

    from harness.cli import main

    marker, files = crafted
    monkeypatch.chdir(tmp_path)
    for kind, raw in files.items():
        for fmt in FORMATS:
            p = tmp_path / f"{kind}-{fmt}.pt"
            p.write_bytes(raw)
            data = make_scenario(interface={"kind": "prediction", "output": "probabilities"}, victim={
                "model": {"arch": "file", "path": str(p), "format": fmt, "spec": {"arch": "mlp"}},
                "data": {"dataset": "digits", "n_train": 100, "attacker_pool": 10}})
            (tmp_path / "s.yaml").write_text(yaml.safe_dump(data))
            args = [command, "s.yaml"] + (["--no-tracking", "--out", "o"] if command == "run" else [])
            res = CliRunner().invoke(main, args)
            lines = res.stderr.strip().splitlines()
            assert res.exit_code == 2 and len(lines) == 1, (kind, fmt, res.output)
            assert "victim.model" in lines[0] and "Traceback" not in res.output
            assert not marker.exists(), (kind, fmt)


def test_a_real_run_process_refuses_the_crafted_torchscript(tmp_path, crafted):
    """The CLI's own process, format auto (every format and extension is refused in-process by
    test_crafted_files_run_no_code_under_any_extension_or_format)."""
    import os
    import subprocess
    import sys

    import yaml

    marker, files = crafted
    p = tmp_path / "model.pt"
    p.write_bytes(files["torchscript"])
    data = make_scenario(interface={"kind": "prediction", "output": "probabilities"}, victim={
        "model": {"arch": "file", "path": str(p), "format": "auto"},
        "data": {"dataset": "digits", "n_train": 100, "attacker_pool": 10}})
    (tmp_path / "s.yaml").write_text(yaml.safe_dump(data))
    res = subprocess.run([sys.executable, "-c", "from harness.cli import main; main()", "run", "s.yaml",
                          "--no-tracking"], cwd=tmp_path, capture_output=True, text=True, timeout=120,
                         env={**os.environ, "LEAKMETER_THREADS": "1"})
    assert res.returncode == 2 and "--trust-model-code" in res.stderr, res.stderr
    assert len(res.stderr.strip().splitlines()) == 1
    assert not marker.exists()
