"""report.html: self-contained (nothing fetched), the data embedded intact, and the terminal CLI."""

from __future__ import annotations

import gzip
import json
import re
from pathlib import Path

import pytest
from viz_synthetic import three_kernel_trace

from plygrad.viz import parse, render_html
from plygrad.viz.__main__ import main
from plygrad.viz.html import page_data

DATA = re.compile(r'<script type="application/json" id="trace-data">(.*?)</script>', re.S)


def test_the_page_fetches_nothing_and_embeds_its_data() -> None:
    data = three_kernel_trace()
    data["kernels"][0]["source"] = "/* </script><script>alert(1)</script> http://example.invalid */"
    page = render_html(parse(data))
    found = DATA.search(page)
    assert found is not None
    assert json.loads(found.group(1)) == json.loads(json.dumps(page_data(parse(data))))
    outside = page[:found.start()] + page[found.end():]
    assert "http://" not in outside and "https://" not in outside, "no URL outside the data"
    assert not re.search(r"<(script|link|img|iframe)[^>]+(src|href)=", outside), "no external resource"
    assert page.count("</script>") == 2, "a kernel's source cannot end the data script"


def test_the_kernel_view_lists_what_a_kernel_computes() -> None:
    kernel = page_data(parse(three_kernel_trace()))["kernels"][0]
    assert kernel["ast_ops"] == [["LOAD", 2], ["ADD", 1], ["STORE", 1]]


def test_a_kernel_shows_its_beam_search_fastest_first() -> None:
    kernels = page_data(parse(three_kernel_trace()))["kernels"]
    assert kernels[0]["beam"] == {"width": 2, "chosen": [["UPCAST", 0, 4]], "tried": 3,
                                  "fastest": [[[["UPCAST", 0, 4]], 1e-6], [[], 3e-6]]}, "an unusable one is left out"
    assert kernels[1]["beam"] is None, "k1 was not searched"


def _write_trace(tmp_path: Path) -> Path:
    path = tmp_path / "trace.json.gz"
    path.write_bytes(gzip.compress(json.dumps(three_kernel_trace()).encode()))
    return path


def test_cli_prints_the_top_kernels_and_writes_reports(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    trace = _write_trace(tmp_path)
    assert main([str(trace), "--html", "--chrome", "--top", "2"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].split() == ["kernel", "launches", "total", "time", "share", "GFLOP/s", "GB/s"]
    assert out[2].split()[:4] == ["k0", "2", "40.00", "us"] and out[3].split()[0] == "k1"
    assert "(top 2 of 3 kernels)" in out[-1]
    assert (tmp_path / "report.html").is_file() and (tmp_path / "chrome_trace.json").is_file()


def test_cli_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main([str(_write_trace(tmp_path)), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert [k["name"] for k in doc["kernels"]] == ["k0", "k1", "k2"] and doc["summary"]["launches"] == 4


def test_cli_refuses_a_bad_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "x.json").write_text('{"format": "something else"}')
    assert main([str(tmp_path / "x.json")]) == 2
    assert "not a plygrad trace" in capsys.readouterr().err
