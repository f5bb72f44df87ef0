"""HTML report: self-contained, everything user-derived escaped, small and collapsed for long pipelines."""
from __future__ import annotations

import re
import time
from html.parser import HTMLParser

import pytest
from tvm import s_tir, te

import tvm_hybrid_nb as thn
from tvm_hybrid_nb.html_report import report_html

EVIL = "<img src=x onerror=alert(1)>"


class Collect(HTMLParser):
    """Every start tag with its attributes, and the page's text."""

    def __init__(self):
        super().__init__()
        self.tags: list[tuple[str, dict]] = []
        self.text: list[str] = []

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))

    def handle_data(self, data):
        self.text.append(data)


def parse(html_text: str) -> Collect:
    parser = Collect()
    parser.feed(html_text)
    parser.close()
    return parser


@pytest.fixture(scope="module")
def evil_module():
    A = te.placeholder((16,), "float32", name=EVIL)
    B = te.compute((16,), lambda i: A[i] * 2.0, name=EVIL)
    hm = thn.build([A, B])
    assert EVIL in hm.stages[0].script  # the name reaches the IR text the report shows
    return hm


def test_user_text_is_shown_as_text_never_as_markup(evil_module, tmp_path):
    evil_module.compare(seed=0)
    path = thn.report(evil_module, tmp_path / "r.html")
    html_text = path.read_text(encoding="utf-8")
    page = parse(html_text)
    tags = {tag for tag, _ in page.tags}
    assert "img" not in tags and "script" not in tags
    assert not [(t, a) for t, a in page.tags for name in a if name.lower().startswith("on")]
    # the name is there, as text: escaped in the source, intact once parsed
    assert "&lt;img src=x onerror=alert(1)&gt;" in html_text
    assert EVIL in "".join(page.text)


def test_report_is_self_contained(evil_module):
    html_text = report_html(evil_module)
    page = parse(html_text)
    for tag, attrs in page.tags:
        assert tag not in ("script", "link", "iframe", "object", "embed", "img")
        assert "src" not in attrs
        href = attrs.get("href")
        assert href is None or href.startswith("#")
    csp = [a for t, a in page.tags if t == "meta" and a.get("http-equiv") == "Content-Security-Policy"]
    assert csp and "default-src 'none'" in csp[0]["content"]
    assert "http://" not in html_text and "https://" not in html_text
    assert "@import" not in html_text and "url(" not in html_text


def test_pass_list_markers_timings_and_sections(evil_module):
    hm = evil_module
    page = parse(report_html(hm))
    text = "".join(page.text)
    rows = [a for t, a in page.tags if t == "tr" and a.get("class") in ("changed", "unchanged")]
    assert len(rows) == len(hm.stages)
    assert [r["class"] == "changed" for r in rows] == [s.changed for s in hm.stages]
    for s in hm.stages:
        assert s.name in text
    details = [a for t, a in page.tags if t == "details" and "stage" in a.get("class", "")]
    assert [d["id"] for d in details] == [f"stage-{s.number}" for s in hm.stages]
    assert not any("open" in d for d in details)  # collapsed
    # stage 0's hybrid source and a changed stage's TVMScript diff are in the page
    assert "def main(" in text
    flatten = hm.stage("tirx.FlattenBuffer")
    assert flatten.changed
    assert f"TVMScript diff against stage {hm.stages[flatten.index - 1].label}" in text


def test_latest_compare_is_shown(tmp_path):
    A = te.placeholder((16,), "int32", name="A")
    B = te.compute((16,), lambda i: A[i] + 1, name="B")
    hm = thn.build([A, B])
    assert "No comparison has been run" in "".join(parse(report_html(hm)).text)
    hm.compare(stage="tirx.FlattenBuffer", seed=3)
    text = "".join(parse(report_html(hm)).text)
    assert "MATCH" in text and "stage 19 FlattenBuffer" in text and "0/16 mismatches" in text


def test_long_pipeline_with_large_ir_stays_small_and_quick(tmp_path):
    # 256 fully unrolled statements: the IR of every stage is large
    A = te.placeholder((256,), "float32", name="A")
    B = te.compute((256,), lambda i: A[i] * 2.0 + 1.0, name="B")
    sch = s_tir.Schedule(te.create_prim_func([A, B]))
    (i,) = sch.get_loops(sch.get_sblock("B"))
    sch.unroll(i)
    hm = thn.build(sch)
    assert len(hm.stages) >= 50
    start = time.perf_counter()
    html_text = report_html(hm)
    assert time.perf_counter() - start < 20
    changed = sum(1 for s in hm.stages if s.changed)
    unchanged = len(hm.stages) - changed
    assert unchanged >= 30
    page = parse(html_text)
    code_blocks = [a for t, a in page.tags if t == "div" and a.get("class") == "code"]
    # text only for stages that changed the IR (source, TVMScript and two diffs at most each)
    assert len(code_blocks) <= 4 * changed
    # an unchanged stage only points at the stage it equals: no text repeated
    sections = re.findall(r'<details class="stage unchanged" id="stage-\d+">(.*?)</details>', html_text, re.S)
    assert len(sections) == unchanged
    assert max(len(body) for body in sections) < 600
    assert len(html_text) < 8 * sum(len(s.script) + len(s.source or "") for s in hm.stages if s.changed)
