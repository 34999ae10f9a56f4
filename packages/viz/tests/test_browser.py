"""The report in headless Chromium (plygrad.viz.testing): it finishes, raises nothing, draws every row and node,
and a screenshot is not blank. Skips only where no Chromium is found."""

from __future__ import annotations

import base64
from pathlib import Path

import pytest
from viz_synthetic import chain_linear, three_kernel_trace

from plygrad.ir import Stage, serialize
from plygrad.viz import parse, write_html
from plygrad.viz.graph import CAP
from plygrad.viz.html import MAX_TABLE_ROWS
from plygrad.viz.testing import dump_dom, find_chromium, page_state, png_variance, screenshot

BROWSER = find_chromium()
needs_browser = pytest.mark.skipif(BROWSER is None, reason="no headless Chromium found (chromium-headless-shell or "
                                   "chromium on PATH, or PLYGRAD_CHROMIUM); scripts/setup-system.sh installs it")


@needs_browser
def test_the_page_renders_in_chromium(tmp_path: Path) -> None:
    assert BROWSER is not None
    data = three_kernel_trace()
    page = write_html(parse(data), tmp_path / "report.html")
    state = page_state(dump_dom(BROWSER, page))
    assert state.errors == "" and state.ready
    assert state.rows == {"kernel-table": 3, "launch-table": len(data["launches"])}
    assert state.graph_nodes == 3 and state.resources == []
    png = screenshot(BROWSER, page, tmp_path / "shot.png", (640, 400))
    assert png_variance(png.read_bytes()) > 100


@needs_browser
def test_a_script_error_is_visible_in_the_dom(tmp_path: Path) -> None:
    assert BROWSER is not None
    data = three_kernel_trace()
    data["kernels"][0]["opts"] = None  # page.js calls .map on it: a TypeError the page must show, not hide
    page = write_html(parse(data), tmp_path / "report.html")
    state = page_state(dump_dom(BROWSER, page))
    assert not state.ready and "TypeError" in state.errors


@needs_browser
def test_a_ten_thousand_call_report_renders_quickly(tmp_path: Path) -> None:
    assert BROWSER is not None
    calls = 10_000
    data = three_kernel_trace()
    linear = chain_linear(calls, fan=50)
    data["schedules"] = [{"producer": None, "calls": [0] * calls,
                          "linear": base64.b64encode(serialize(linear, Stage.SCHEDULE)).decode()}]
    data["launches"] = [[0, 0, 100_000 + 10 * i, 100_005 + 10 * i, None] for i in range(calls)]
    data["runs"] = [[0, 100_000, 100_000 + 10 * calls, "script.py:3"]]
    page = write_html(parse(data), tmp_path / "report.html")
    state = page_state(dump_dom(BROWSER, page))
    assert state.ready and state.errors == ""
    assert state.rows["launch-table"] == MAX_TABLE_ROWS and 0 < state.graph_nodes <= CAP + 200
    assert sum(state.render_ms.values()) < 4000, f"drawing took {state.render_ms} ms"


def test_png_variance_of_a_blank_and_a_striped_image() -> None:
    import struct
    import zlib

    def png(rows: list[bytes], width: int) -> bytes:
        def chunk(kind: bytes, body: bytes) -> bytes:
            return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))
        raw = b"".join(b"\x00" + r for r in rows)
        return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", width, len(rows), 8, 2, 0, 0, 0)) +
                chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b""))

    assert png_variance(png([b"\x80" * 12] * 4, 4)) == 0
    assert png_variance(png([b"\x00" * 12, b"\xff" * 12] * 2, 4)) == pytest.approx(127.5 ** 2)
