"""docs/papers.md stays true to the code: every registered attack has a row naming its paper and
the sections its `paper` field cites, and the five papers are cited in full."""

import re

from conftest import REPO

from harness.attacks import registry
from reports.mitigation import papers

DOC = (REPO / "docs" / "papers.md").read_text()


def test_every_attack_has_its_paper_and_sections():
    rows = {m[1]: m[0] for m in re.finditer(r"^\| `([a-z_0-9]+)` \|.*$", DOC, re.M)}
    for name, cls in registry().items():
        assert name in rows, f"docs/papers.md has no row for {name}"
        for part in cls.paper.split(";"):
            cite = re.match(r"\s*(00[0-4]|[A-Z][^;]*? et al\. \d{4})(.*)", part)
            assert cite, f"{name}: paper field {cls.paper!r} names no paper"
            assert cite[1] + " " in rows[name] or cite[1] + ")" in rows[name], f"{name}: {cite[1]} not named"
            assert cite[1] in papers(), f"{name}: {cite[1]} not in reports/advice/papers.yaml"
            for kind, ref in re.findall(r"(Alg|Sec|Thm|App|Fig)\. ([0-9A-Z][0-9A-Za-z.-]*)", cite[2]):
                lo_hi = re.fullmatch(r"(\d+)-(\d+)", ref)  # "Alg. 1-4": each of them
                refs = ([str(i) for i in range(int(lo_hi[1]), int(lo_hi[2]) + 1)] if lo_hi
                        else [ref.rstrip(".")])
                for r in refs:
                    assert f"{kind}. {r}" in rows[name], f"{name}: {kind}. {r} not in its row"


def test_the_five_papers_are_cited_with_authors_title_and_arxiv():
    for num, p in papers().items():
        if not num.startswith("00"):
            assert p["url"].rsplit("/", 1)[1] in DOC and p["title"] in DOC, num
            continue
        row = next(ln for ln in DOC.splitlines() if ln.startswith(f"| {num} |"))
        assert p["title"].split(" From")[0].split(" with")[0] in row
        assert p["url"].rsplit("/", 1)[1] in row  # the arXiv id
        first_author = p["short"].split(",")[0]
        assert first_author in row
