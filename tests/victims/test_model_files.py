"""User model files: TorchScript or weights-only state_dicts; never unpickling objects."""

import pickle

import pytest
import torch
from conftest import make_scenario

from harness.errors import BadInput
from harness.scenario import scenario_from_dict
from victims.build import build_victim
from victims.models.builders import build_mlp


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


def test_torchscript_file(tmp_path):
    ref = _reference().float()
    p = tmp_path / "victim.ts"
    torch.jit.script(ref).save(str(p))
    v = build_victim(_scenario(p))
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


class Evil:
    def __reduce__(self):
        return (print, ("pwned",))


def test_pickled_objects_are_refused(tmp_path, capsys):
    p = tmp_path / "evil.pt"
    with open(p, "wb") as fh:
        pickle.dump({"w": Evil()}, fh)
    with pytest.raises(BadInput, match="weights-only"):
        build_victim(_scenario(p, spec={"arch": "mlp", "hidden": [12]}))
    assert "pwned" not in capsys.readouterr().out
