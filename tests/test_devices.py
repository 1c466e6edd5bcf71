"""The device policy (victims/devices.py, issue 34): `device: auto` sends a part of the run to CUDA
only when its estimated work pays there, `cpu` and `cuda` put everything where asked, and the
record says where each part went. A fake CUDA device checks the choices (nothing is moved)."""

import pytest
import torch
from conftest import REPO

from harness.attacker.informed import Recipe
from harness.attacker.stacked_training import stacked_flop, training_device
from harness.scenario import load_scenario
from victims import devices
from victims.data.datasets import load_dataset
from victims.errors import BadInput
from victims.local import training_flop
from victims.models.files import model_for

FAKE = torch.device("cuda")


@pytest.fixture(autouse=True)
def _restore_numerics():
    keep = (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32,
            torch.backends.cudnn.deterministic, torch.backends.cudnn.benchmark,
            torch.get_float32_matmul_precision())
    yield
    (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32,
     torch.backends.cudnn.deterministic, torch.backends.cudnn.benchmark) = keep[:4]
    torch.set_float32_matmul_precision(keep[4])
    devices._CURRENT.clear()


def scenario(name):
    return load_scenario(REPO / "scenarios" / f"{name}.yaml", [])


def victim_flop(name):
    s = scenario(name)
    d = load_dataset(s.victim.data, s.seed)
    return training_flop(s, model_for(s.victim.model, d.input_shape, d.n_outputs), d)


def test_auto_keeps_small_work_on_the_cpu_and_sends_big_work_to_cuda():
    p = devices.DevicePolicy("auto", FAKE)
    for part, need in devices.CUDA_MIN_FLOP.items():
        assert p.place(part, need / 10).type == "cpu", part
        assert p.place(part, need) == FAKE, part
    rep = p.report()
    assert rep["requested"] == "auto" and rep["cuda_available"]
    assert rep["parts"]["victim"]["device"] == "cpu and cuda" and rep["parts"]["victim"]["times"] == 2
    assert rep["cuda_min_flop"] == devices.CUDA_MIN_FLOP
    # a part on CUDA turned TF32 off and made cuDNN deterministic
    assert not torch.backends.cuda.matmul.allow_tf32 and not torch.backends.cudnn.allow_tf32
    assert torch.backends.cudnn.deterministic and torch.get_float32_matmul_precision() == "highest"


def test_explicit_devices_and_no_gpu():
    assert devices.DevicePolicy("cuda", FAKE).place("victim", 0.0) == FAKE  # asked for: everything
    assert devices.DevicePolicy("cpu", FAKE).place("reference_models", 1e20).type == "cpu"
    none = devices.DevicePolicy("auto", None)
    assert none.place("surrogate", 1e20).type == "cpu"
    assert "no GPU" in none.report()["parts"]["surrogate"]["why"]
    with pytest.raises(ValueError, match="unknown part"):
        none.place("everything", 1.0)
    if not torch.cuda.is_available():
        with pytest.raises(BadInput, match="device: cuda"):
            devices.activate("cuda")


def test_shipped_victims_stay_on_the_cpu_and_256_reference_models_go_to_cuda():
    p = devices.DevicePolicy("auto", FAKE)
    for name in ("quickstart", "membership-digits", "extraction-gradient-exact-float32"):
        assert p.place("victim", victim_flop(name)).type == "cpu", name  # GPU.md: slower there
    s = scenario("membership-digits")
    d = load_dataset(s.victim.data, s.seed)
    recipe = Recipe(s, d.task, d.input_shape, d.n_outputs, torch.device("cpu"), torch.float32)
    n = len(d.x_train)
    assert stacked_flop(recipe, 256, n) >= devices.CUDA_MIN_FLOP["reference_models"]
    assert stacked_flop(recipe, 2, 50) < devices.CUDA_MIN_FLOP["reference_models"]
    devices._CURRENT[:] = [p]  # the run's policy, as the runner activates it
    assert training_device(recipe, torch.zeros(256, n, dtype=torch.long)) == FAKE
    assert training_device(recipe, torch.zeros(2, 50, dtype=torch.long)).type == "cpu"
    assert p.parts["reference_models"]["device"] == "cuda and cpu"


def test_an_explicit_request_stays_the_runs_policy():
    run = devices.activate("cpu")
    assert devices.current() is run and devices.current("cpu") is run  # parts ask without a device
    assert devices.current("auto") is not run  # a victim built outside the run: its own policy


def test_flop_estimate_counts_the_model():
    lin = torch.nn.Sequential(torch.nn.Linear(10, 20), torch.nn.ReLU(), torch.nn.Linear(20, 3))
    assert devices.forward_flop(lin, torch.zeros(1, 10)) == 2 * (10 * 20 + 20 * 3)
    conv = torch.nn.Sequential(torch.nn.Conv2d(1, 4, 3), torch.nn.Flatten(), torch.nn.Linear(144, 2))
    assert devices.forward_flop(conv, torch.zeros(1, 1, 8, 8)) == 2 * (4 * 6 * 6 * 9 + 144 * 2)
    assert devices.forward_flop(conv, torch.zeros(1, 5)) == 2 * sum(p.numel() for p in conv.parameters())


def test_stacked_training_records_where_it_ran_and_returns_on_the_recipes_device():
    from harness.attacker.stacked_training import train_stacked

    s = load_scenario(REPO / "scenarios" / "membership-digits.yaml", ["victim.training.epochs=1"])
    d = load_dataset(s.victim.data, s.seed)
    recipe = Recipe(s, d.task, d.input_shape, d.n_outputs, torch.device("cpu"), torch.float32)
    x, y = torch.as_tensor(d.x_pool[:40], dtype=torch.float32), torch.as_tensor(d.y_pool[:40])
    idx = torch.stack([torch.arange(20), torch.arange(20, 40)])
    run = devices.activate("auto")
    flat = train_stacked(recipe, x, y, idx, seed=3)
    assert flat.device.type == "cpu" and flat.shape[0] == 2
    assert run.parts["reference_models"]["device"] == "cpu"  # no GPU here, or too little work
    devices.activate("cpu")
    assert torch.equal(train_stacked(recipe, x, y, idx, seed=3), flat)


def test_an_lm_victim_is_placed_by_its_decoders_work():
    """`arch: lm`: forward passes of the decoder (vocab × hidden × layers × prompts); the shipped
    llm-logprobs LM stays on the CPU, a GPT-2-shaped decoder (vocab 8192, hidden 256, 6 layers) goes
    to CUDA, and a small query budget (fewer prompts) keeps it on the CPU."""
    from victims.models.lm import lm_work

    p = devices.DevicePolicy("auto", FAKE)
    shipped = scenario("llm-logprobs").victim.model
    big = shipped.model_copy(update={"vocab": 8192, "hidden": [256], "layers": 6, "heads": 4})
    flop, note = lm_work(shipped, None)
    assert p.place("victim", flop, note).type == "cpu"
    assert "arch: lm" in p.parts["victim"]["why"] and "faster on the CPU" in p.parts["victim"]["why"]
    assert p.place("victim", *lm_work(big, None)) == FAKE
    assert p.place("victim", *lm_work(big, 16)).type == "cpu"  # 16 queries: at most 16 prompts
    assert lm_work(big, None)[0] > 10 * lm_work(shipped, None)[0]


def test_an_lm_run_reports_where_its_decoder_ran(tmp_path):
    from conftest import make_scenario

    from harness.run.runner import run_scenario
    from harness.scenario import scenario_from_dict

    s = scenario_from_dict(make_scenario(
        device="auto", victim={"model": {"arch": "lm", "vocab": 64, "hidden": 8, "heads": 2, "layers": 1,
                                         "context": 8}},
        interface={"output": "logprobs"}, attacks=[{"name": "logit_subspace"}]))
    r = run_scenario(s, out=tmp_path / "out")
    part = r["devices"]["parts"]["victim"]
    # ~9e5 flop: the CPU under auto whether a GPU is present or not
    assert part["device"] == "cpu" and ("no GPU" in part["why"] or "faster on the CPU" in part["why"])
    assert "arch: lm" in part["why"] and part["times"] == 1
    assert r["victim"]["device"] == part["device"]
    assert r["attacks"][0]["status"] == "ok"


def test_the_benchmarks_big_rows_go_to_cuda():
    """benchmarks/gpu.py's default sizes (issue 34's targets) are placed on a GPU under `auto`: the
    surrogate at 20,000 queries, reconn's φ, the Fashion-MNIST CNN victim and 64 of its reference
    models; the same parts at a hundredth of the work stay on the CPU."""
    from harness.attacks.extraction.surrogate import Surrogate, SurrogateParams
    from harness.attacks.reconstruction.reconn import Reconn, ReconnParams
    from harness.scenario import scenario_from_dict

    p = devices.DevicePolicy("auto", FAKE)
    devices._CURRENT[:] = [p]
    info = type("Info", (), {"dim": 64, "n_outputs": 10})()
    assert Surrogate._train_device(info, [128], SurrogateParams(), 20000, False) == FAKE
    assert Surrogate._train_device(info, [128], SurrogateParams(), 200, False).type == "cpu"
    assert Reconn._fit_device(1500, 760, 64, ReconnParams(hidden=1000, epochs=10, batch=64)) == FAKE
    assert Reconn._fit_device(150, 760, 64, ReconnParams(hidden=100, epochs=10, batch=64)).type == "cpu"
    s = scenario_from_dict({
        "name": "cnn", "seed": 0, "device": "auto",
        "victim": {"model": {"arch": "cnn", "channels": [16, 32], "hidden": [128]},
                   "data": {"dataset": "digits", "n_train": 1000},  # 8×8 stands in for the shape test
                   "training": {"optimizer": "sgd", "epochs": 2, "batch_size": 128}},
        "attacks": [{"name": "mia_loss"}], "tracking": {"enabled": False}})
    cnn = model_for(s.victim.model, (28, 28), 10)
    one = devices.forward_flop(cnn, torch.zeros(1, 784))
    assert p.place("victim", one * (3 * 2 * 10000 + 12000)) == FAKE  # 10,000 images, 2 epochs
    assert p.place("victim", one * (3 * 2 * 100 + 120)).type == "cpu"
    recipe = Recipe(s, "multiclass", (28, 28), 10, torch.device("cpu"), torch.float32)
    assert training_device(recipe, torch.zeros(64, 1000, dtype=torch.long)) == FAKE
    assert training_device(recipe, torch.zeros(2, 100, dtype=torch.long)).type == "cpu"


class DecideOnly(devices.DevicePolicy):
    """`auto` with a (fake) GPU: every choice is made and recorded as on a GPU machine, and the
    work then runs on the CPU (nothing here can run on CUDA)."""

    def place(self, part, flop, note="", step_flop=None):
        super().place(part, flop, note, step_flop)
        return torch.device("cpu")


@pytest.mark.slow  # the whole quickstart (~20 s of CPU)
def test_the_quickstart_under_auto_with_a_gpu_keeps_its_small_parts_on_the_cpu(tmp_path):
    """Issue 34: the quickstart no slower on CUDA than on the CPU. Under `auto` its small parts —
    the victim and its answers, the reference models (16 of ~650 points), the smaller shadow
    batches (10 models), reconn's φ — stay on the CPU (GPU.md: with everything on CUDA the
    quickstart took 40.6 s vs 29.9 s). Two parts are big by the policy's estimate and go to the
    GPU: 128 stacked shadow models (GPU.md measured stacked shadows 3.6× faster there) and the
    surrogate (up to 10,000 points with the joint loss, a double backward, at batches of up to
    4,096: ~3e12 flop, ~5e8 per step). Whether that makes the whole run faster is for a GPU run of
    benchmarks/gpu_recipe.sh to measure."""
    from harness.run.runner import run_scenario
    from victims.build import build_victim

    s = scenario("quickstart")
    s.tracking.enabled = False
    policy = DecideOnly("auto", FAKE)
    devices._CURRENT[:] = [policy]
    r = run_scenario(s, out=tmp_path / "q", victim=build_victim(s))
    assert r["devices"]["cuda_available"] and r["devices"]["requested"] == "auto"
    parts = r["devices"]["parts"]
    where = {k: v["device"] for k, v in parts.items()}
    assert where == {"victim": "cpu", "reference_models": "cpu", "shadows": "cpu and cuda",
                     "reconstructor": "cpu", "surrogate": "cuda"}, where
    assert "launch-bound" in parts["victim"]["why"] and "128 models" in parts["shadows"]["why"]
    assert not any(a["status"] == "error" for a in r["attacks"])
