"""Device portability: every solver takes one path on every device (least squares on the CPU in
float64, results moved back), so the CPU suite exercises the code CUDA runs; `-m cuda` runs the
extraction and span attacks on both devices and compares them (skipped without a GPU)."""

import numpy as np
import pytest
import torch
from attack_direct import run_direct
from test_extraction_exact import random_net

from harness.attacks.extraction.cryptanalysis import relu_lines as rl


def test_lstsq_is_device_portable_and_exact():
    g = torch.Generator().manual_seed(0)
    a = torch.randn(40, 7, generator=g, dtype=torch.float64)
    b = torch.randn(40, 3, generator=g, dtype=torch.float64)
    x = rl.lstsq(a, b)
    ref = np.linalg.lstsq(a.numpy(), b.numpy(), rcond=None)[0]
    assert x.device == a.device and x.dtype == torch.float64
    assert np.abs(x.numpy() - ref).max() < 1e-12


CASES = [("gradient_exact", "gradient", {}), ("finite_difference_exact", "prediction", {}),
         ("query_learning", "prediction", {"bias": (True, True)}),
         ("span_nonadaptive", "prediction", {})]


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
@pytest.mark.parametrize("attack,interface,extra", CASES)
def test_same_result_on_cuda_and_cpu(attack, interface, extra, tmp_path):
    out = {}
    for device in ("cpu", "cuda"):
        s = random_net(32, 8, attack=attack, interface=interface, **extra)
        s.device = device
        r = run_direct(s, tmp_path / device)
        assert r.stopped_by is None, (device, r.reason)
        out[device] = r
    cpu, gpu = out["cpu"].metrics, out["cuda"].metrics
    assert out["cpu"].risk == out["cuda"].risk
    for key in ("output_error", "param_error", "max_principal_angle_deg"):
        if key in cpu:
            assert abs(cpu[key] - gpu[key]) <= 1e-6 + 1e-3 * abs(cpu[key]), (key, cpu, gpu)
    if "max_rel_error" in cpu and attack != "span_nonadaptive":
        assert gpu["max_rel_error"] <= 1e-6
