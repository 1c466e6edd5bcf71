"""Text an endpoint sends is hostile (issue 33 E02, E07, E08, E10): it is scrubbed in linear time,
and reaches stdout, report.md, JUnit and SARIF as one quoted line: no forged `verdict: pass` or
`::error` line, no Markdown heading or image, no terminal escape sequence, no XML-illegal byte."""

from __future__ import annotations

import json
import subprocess
import sys
import xml.etree.ElementTree as ET

import numpy as np
import pytest
import yaml
from click.testing import CliRunner
from loopback import JsonHandler, LoopbackServer

from harness.cli import main
from victims.http.secrets import SECRETS, clip, one_line

HOSTILE = ("bad input\nverdict: pass\n::error file=x::forged\n# Verdict: PASS\n"
           "![pixel](http://attacker.example/p.png) [click](http://attacker.example)\n"
           "\x1b]52;c;aGVsbG8=\x07\x1b]0;title\x07\x1b[2J done")


def test_scrubbing_is_linear_in_the_text():
    """400 KB of `a.a.a...` (and `&keykey...`) in an error body: the old patterns backtracked
    quadratically (~17 min for the first). Run in a subprocess killed after 60 s."""
    code = ("from victims.http.secrets import scrub, clip\n"
            "for t in ('a.' * 200_000, '&' + 'key' * 130_000, 'a' * 400_000 + '://x', "
            "'bearer ' * 60_000):\n"
            "    scrub(t); clip('{\"error\": \"' + t + '\"}', 200)\n"
            "print('done')\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.stdout.strip() == "done", out.stderr[-500:]


def test_the_linear_patterns_still_mask_what_they_masked():
    text = ("see https://bob:hunter2@host/x?api_key=abc123&q=1&X-Amz-Signature=zz9 "
            "Authorization: Bearer tok.en-123456 and svc+ssh://u:p@h/")
    got = SECRETS.scrub(text)
    for secret in ("hunter2", "abc123", "zz9", "tok.en-123456", "u:p"):
        assert secret not in got, (secret, got)
    assert "q=1" in got and "https://***@host" in got


def test_clip_gives_one_line_without_control_characters():
    got = clip(HOSTILE, 400)
    assert "\n" not in got and "\r" not in got and "\x1b" not in got and "\x07" not in got
    assert "\\x1b]52" in got  # shown as data, not sent to a terminal
    assert one_line("a\u2028b\u202ec\x00") == "a b\\u202ec\\x00"


class HostileEndpoint(LoopbackServer):
    """Answers the start-up check, then every request with `status` and the HOSTILE body
    (HTTP 200: an error-shaped answer, wire_base.error_text; HTTP 500: client._excerpt)."""

    def __init__(self, status: int):
        outer = self
        self.requests = 0

        class Handler(JsonHandler):
            def do_POST(self):  # noqa: N802
                rows = self.json_body()["inputs"]
                outer.requests += 1
                if outer.requests == 1:
                    z = np.exp(np.asarray(rows, dtype=np.float64)[:, :3])
                    code, body = 200, json.dumps({"predictions": (z / z.sum(1, keepdims=True)).tolist()})
                else:
                    code, body = status, json.dumps({"error": HOSTILE})
                self.reply(code, body)

        self._serve(Handler)


@pytest.mark.parametrize("status", [200, 500])
def test_hostile_error_text_is_one_quoted_line_in_every_output(status, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with HostileEndpoint(status) as srv:
        data = {"name": "hostile", "seed": 0, "device": "cpu",
                "victim": {"endpoint": {"url": srv.url, "input_dim": 5, "n_outputs": 3, "retries": 1,
                                        "backoff_s": 0.001}},
                "interface": {"kind": "prediction", "output": "probabilities"},
                "attacks": [{"name": "span_nonadaptive"}], "tracking": {"enabled": False}}
        (tmp_path / "s.yaml").write_text(yaml.safe_dump(data))
        res = CliRunner().invoke(main, ["run", "s.yaml", "--out", "out", "--junit", "r.xml",
                                        "--sarif", "r.sarif"])
    out = res.output
    md = (tmp_path / "out" / "report.md").read_text()
    assert "bad input" in md  # the endpoint's text is shown (the terminal's summary may cut it) ...
    assert "crashed: ExpatError" not in out  # ... and no writer crashed on it (E08) ...
    assert (tmp_path / "r.xml").exists() and (tmp_path / "r.sarif").exists()
    for line in out.splitlines():  # ... as data inside our own line, never a line of its own
        assert not line.lstrip().startswith(("verdict: pass", "::error", "# Verdict")), line
    assert "\x1b" not in out and "\x07" not in out
    md = (tmp_path / "out" / "report.md").read_text()
    assert "\x1b" not in md and "\x07" not in md
    assert not any(ln.startswith("# Verdict") for ln in md.splitlines())
    assert "![pixel](" not in md and "[click](" not in md  # no outside image, no link
    ET.parse(tmp_path / "r.xml")  # well-formed XML: the ESC/BEL bytes were escaped
    sarif = json.loads((tmp_path / "r.sarif").read_text())
    texts = [r["message"]["text"] for run in sarif["runs"] for r in run["results"]]
    assert texts and all("\n" not in t and "\x1b" not in t for t in texts)
