"""report.html: rendered from the Jinja2 templates, self-contained, escaped, with advice filled from the
measured numbers, and rendered by a real headless Chromium without console errors; the screenshot
shows the verdict banner in its colour."""

import base64
import re
import shutil
import subprocess

import pytest
from conftest import make_scenario

from reports.html import to_html, write_html

BROWSER = next((b for b in ("chromium", "chromium-browser", "google-chrome") if shutil.which(b)), None)
needs_browser = pytest.mark.skipif(BROWSER is None, reason="no chromium (apt-get install -y chromium)")
PROBE = ('<script>window.addEventListener("load",()=>{const im=[...document.images];'
         'const bad=im.filter(i=>!(i.complete&&i.naturalWidth>0)).length;'
         'console.log("PROBE images="+im.length+" broken="+bad)'
         '})</script>')


def render_in_browser(html_path, tmp_path, name="page"):
    """Load a copy of the page (plus a probe that counts broken images) in headless Chromium.

    Returns (console lines other than the probe's, (images, broken), screenshot path)."""
    probe = tmp_path / f"{name}-probe.html"
    probe.write_text(html_path.read_text().replace("</body>", PROBE + "</body>"))
    shot = tmp_path / f"{name}.png"
    cmd = [BROWSER, "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
           "--disable-component-update", "--disable-sync", "--no-first-run",
           f"--user-data-dir={tmp_path / f'profile-{name}'}", "--enable-logging=stderr", "--v=0",
           "--window-size=1100,2400", f"--screenshot={shot}", probe.as_uri()]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    console = [ln for ln in out.stderr.splitlines() if ":CONSOLE" in ln]
    probes = [re.search(r"PROBE images=(\d+) broken=(\d+)", ln) for ln in console]
    found = [m for m in probes if m]
    assert found, f"the page did not finish loading: {out.stderr[-2000:]}"
    others = [ln for ln, m in zip(console, probes, strict=True) if not m]
    return others, (int(found[0][1]), int(found[0][2])), shot


def not_blank(png):
    import matplotlib.image as mpimg

    img = mpimg.imread(png)
    return img.shape[0] > 100 and float(img[..., :3].std()) > 0.01


@pytest.fixture(scope="module")
def real_run(tmp_path_factory):
    """A real (tiny) run: report.json, report.md and report.html in its folder."""
    from harness.run.runner import run_scenario
    from harness.scenario import scenario_from_dict

    out = tmp_path_factory.mktemp("run")
    s = scenario_from_dict(make_scenario(attacks=[{"name": "span_nonadaptive"}],
                                         defenses={"query_budget": 200}))
    report = run_scenario(s, out=out)
    return report, out


def test_run_writes_self_contained_html_next_to_json(real_run):
    report, out = real_run
    page = (out / "report.html").read_text()
    assert (out / "report.json").exists() and (out / "report.md").exists()
    # verdict in plain words at the top, before any section
    first = page.index('class="verdict')
    assert first < page.index("Attacks at a glance") < page.index("Each attack") < page.index("The scenario")
    word = re.search(r'class="verdict (\w+)" id="verdict"><b>([A-Z ]+)</b>', page)
    assert word[1] == report["verdict"] and word[2] == report["verdict"].upper()
    a = report["attacks"][0]
    assert a["name"] == "span_nonadaptive" and a["status"] == "ok"
    assert f"{a['queries']} queries" in page and re.sub(r"\s+", " ", a["reason"]).split(" (")[0] in page
    assert "name: t" in page  # the scenario as YAML
    # nothing outside the file: no scripts, no remote links or images
    assert "<script" not in page and not re.search(r'(src|href)="(?!data:|#)', page)


@needs_browser
def test_real_report_renders_in_chromium(real_run, tmp_path):
    _, out = real_run
    errors, (images, broken), shot = render_in_browser(out / "report.html", tmp_path, "real")
    assert errors == []
    assert broken == 0
    assert shot.exists() and not_blank(shot)


def _png(tmp_path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(2, 2), dpi=50)
    ax.imshow([[0, 1], [1, 0]])
    p = tmp_path / "grid.png"
    fig.savefig(p)
    plt.close(fig)
    return p


def synthetic_report(tmp_path):
    evil = "<script>console.error('injected')</script>"
    return {
        "scenario": "synthetic", "verdict": "fail", "risk": "high", "seed": 0, "started": "now",
        "victim": {"test_accuracy": 0.93, "parameters": 100, "notes": [evil]},
        "privacy": {"epsilon": 2.0, "delta": 1e-5, "accountant": "rdp"},
        "rero": [{"prior": "empirical", "eta": 0.5, "kappa": 0.01, "gamma": 0.07, "bound": "rdp"}],
        "policy": {"fail_on": "high"}, "interface": {"kind": "prediction", "output": "label"},
        "defenses": ["query_budget(100)"], "query_budget": 100, "queries_total": 90,
        "attacks": [
            {"name": "recon", "family": "reconstruction", "status": "ok", "risk": "high", "queries": 90,
             "wall_s": 1.5, "reason": f"rebuilt 3 records {evil}",
             "metrics": {"success_rate": 0.3}, "artifacts": {"grid": str(_png(tmp_path)),
                                                             "raw": str(tmp_path / "x.npz")},
             "curves": {"fidelity": [(1, 0.1), (10, 0.5), (100, 0.9)]}, "notes": ["note"]},
            {"name": "skipme", "family": "span", "status": "skipped", "reason": "labels only",
             "queries": 0, "metrics": {}},
            {"name": "boom", "family": "extraction", "status": "error", "reason": "ValueError: x",
             "queries": 3, "wall_s": 0.1, "metrics": {}},
        ],
    }


def test_html_embeds_artifacts_curves_and_escapes(tmp_path):
    rep = synthetic_report(tmp_path)
    (tmp_path / "out").mkdir()
    fig = _png(tmp_path / "out")  # a figure next to the report (e.g. the ReRo plot)
    p = write_html(rep, tmp_path / "out" / "report.html", {"name": "synthetic", "seed": 0})
    page = p.read_text()
    assert "<script>console.error" not in page and "&lt;script&gt;" in page
    imgs = re.findall(r'src="data:image/png;base64,([^"]+)"', page)
    assert len(imgs) == 3  # artifact grid, fidelity curve, the figure next to the report
    assert base64.b64decode(imgs[0]) == (tmp_path / "grid.png").read_bytes()
    assert base64.b64decode(imgs[2]) == fig.read_bytes()
    assert base64.b64decode(imgs[1])[:8] == b"\x89PNG\r\n\x1a\n"
    for text in ("FAIL", "labels only", "crashed", "0.07", "rebuilt 3 records", "x.npz",
                 "Privacy accounting"):
        assert text in page


@needs_browser
def test_synthetic_report_renders_images_in_chromium(tmp_path):
    p = tmp_path / "report.html"
    p.write_text(to_html(synthetic_report(tmp_path)))
    errors, (images, broken), shot = render_in_browser(p, tmp_path, "synthetic")
    assert errors == [] and images == 2 and broken == 0 and not_blank(shot)


@needs_browser
def test_browser_check_detects_console_errors(tmp_path):
    """Control: the same check flags a page with a script error and a broken image."""
    p = tmp_path / "bad.html"
    p.write_text('<html><body><img src="data:image/png;base64,AAAA"><script>nope()</script></body></html>')
    errors, (images, broken), _ = render_in_browser(p, tmp_path, "bad")
    assert any("nope is not defined" in e for e in errors)
    assert (images, broken) == (1, 1)


# --------------------------------------------------------------------------- verdicts, advice, screenshots

BANNER = {"pass": (0x1E, 0x8E, 0x3E), "fail": (0xD9, 0x30, 0x25), "error": (0xF9, 0xAB, 0x00),
          "inconclusive": (0x1A, 0x73, 0xE8)}


def verdict_report(tmp_path, verdict):
    """The synthetic report with statuses that give `verdict` under the contract's precedence."""
    rep = synthetic_report(tmp_path)
    rep["verdict"] = verdict
    atk = rep["attacks"]
    if verdict != "fail":
        atk[0]["risk"] = "low"
    if verdict in ("pass", "inconclusive"):
        atk[2].update(status="ok", risk="low", reason="nothing extracted")
    if verdict == "inconclusive":
        atk[0].update(status="incomplete", stopped_by="faults", reason="the endpoint dropped 30% of requests")
    rep["risk"] = "high" if verdict == "fail" else "low"
    return rep


def colour_pixels(png, rgb, tol=8):
    """How many pixels of the screenshot are within `tol` (0-255 per channel) of `rgb`."""
    import matplotlib.image as mpimg
    import numpy as np

    img = mpimg.imread(png)[..., :3] * 255.0
    return int((np.abs(img - np.array(rgb, dtype=float)).max(axis=-1) <= tol).sum())


@pytest.mark.parametrize("verdict", ["pass", "fail", "error", "inconclusive"])
def test_banner_word_and_class_follow_the_verdict(tmp_path, verdict):
    page = to_html(verdict_report(tmp_path, verdict))
    m = re.search(r'class="verdict (\w+)" id="verdict"><b>([A-Z ]+)</b> — ([^<]*)<', page)
    assert (m[1], m[2]) == (verdict, verdict.upper())
    if verdict == "inconclusive":
        assert "not a pass" in m[3] and "recon (faults" in m[3]
    if verdict == "error":
        assert "boom" in m[3] and "partial" in m[3]


def test_fail_box_says_how_many_more_it_does_not_quote(tmp_path):
    from reports.html import verdict_parts

    rep = verdict_report(tmp_path, "fail")
    base = rep["attacks"][0]
    rep["attacks"] = [{**base, "name": f"a{i}", "risk": "high", "reason": f"why {i}"} for i in range(5)]
    _, word, text = verdict_parts(rep)
    assert word == "FAIL" and "5 attack(s)" in text
    assert "a2: why 2" in text and "a3" not in text and text.endswith("and 2 more (see the table below)")
    rep["attacks"] = rep["attacks"][:3]  # all quoted: no "more"
    assert "more" not in verdict_parts(rep)[2]


def test_findings_get_advice_filled_from_their_numbers(tmp_path):
    rep = verdict_report(tmp_path, "fail")
    rep["attacks"].append({
        "name": "gradient_exact", "family": "extraction", "paper": "000 Alg. 1, 1a, 1b, App. B",
        "status": "ok", "risk": "high", "queries": 1234, "wall_s": 0.3, "reason": "a working copy",
        "metrics": {"units_matched": 16.0, "units_true": 16.0, "max_rel_error": 2e-9, "agreement": 1.0}})
    page = to_html(rep, {"name": "synthetic", "defenses": {"explanation_noise": {"sigma": 0.05}}})
    advice = page[page.index('id="advice"'):page.index("The deployment")]
    # 3·h·log h for h = 16 is 133.1: the number comes from the metrics, not from the file
    assert "16 of 16 hidden units in 1234 queries" in advice and "3·h·log h is 133" in advice
    assert "Explanation noise σ = 0.05 did not stop it" in advice
    # key names in backticks become <code>, and what the report holds is still escaped
    assert "<code>interface.kind: prediction</code>" in advice and "`" not in advice
    # a finding whose numbers are missing gets no half-filled line
    assert "None" not in advice and "{{" not in advice
    levels = page[page.index('id="risk-levels"'):page.index("Each attack")]
    for fam in ("extraction", "span", "reconstruction"):
        assert f"<h3>{fam}</h3>" in levels
    assert "<h3>membership</h3>" not in levels  # only the families this report has
    assert "Milli, Schmidt, Dragan, Hardt" in page  # the paper behind gradient_exact, cited


def test_warnings_caught_during_the_run_are_shown_escaped(tmp_path):
    rep = synthetic_report(tmp_path)
    rep["warnings"] = [{"category": "UserWarning", "message": "Secure RNG <off>", "source": "pe.py:98",
                        "count": 3}]
    page = to_html(rep)
    assert "Warnings raised during the run" in page and "Secure RNG &lt;off&gt;" in page


def test_page_escapes_template_syntax_and_tolerates_old_reports(tmp_path):
    rep = synthetic_report(tmp_path)
    rep["attacks"][0]["reason"] = "{{ 7 * 7 }} {% if true %}x{% endif %}"
    page = to_html(rep)
    assert "{{ 7 * 7 }} {% if true %}x{% endif %}" in page.replace("&#39;", "'")
    old = {"scenario": "old", "verdict": None, "attacks": [{"name": "a"}, {"name": "b", "status": "ok"}]}
    page = to_html(old)  # no policy, no risk, no family, no queries: still a page
    assert "NO VERDICT" in page and "<td>a</td>" not in page and 'href="#atk-a"' in page


# a browser each (~2 s CPU): pass and fail by default; error and inconclusive in the slow suite (their
# class is test_banner_word_and_class_follow_the_verdict's; the class-to-colour path is the same)
@needs_browser
@pytest.mark.parametrize("verdict", ["pass", "fail", pytest.param("error", marks=pytest.mark.slow),
                                     pytest.param("inconclusive", marks=pytest.mark.slow)])
def test_screenshot_shows_the_verdict_banner_in_its_colour(tmp_path, verdict):
    p = tmp_path / "report.html"
    p.write_text(to_html(verdict_report(tmp_path, verdict)))
    errors, (_, broken), shot = render_in_browser(p, tmp_path, verdict)
    assert errors == [] and broken == 0
    own = colour_pixels(shot, BANNER[verdict])
    assert own >= 400, f"the {verdict} banner's colour is not on the screenshot ({own} pixels)"
    for other, rgb in BANNER.items():
        if other != verdict:
            assert colour_pixels(shot, rgb) < own / 10, f"{other}'s colour on a {verdict} page"
