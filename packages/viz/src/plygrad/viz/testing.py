"""Checking a report in a real browser, driver-free: headless Chromium's `--dump-dom` (the DOM after the page's
scripts ran) and `--screenshot`, for the tests of this package and of the whole stack (docs/viz.md).

`page_state` reads what page.js leaves in the DOM: whether it finished (`data-ready`), the script errors it
collected, the table rows and graph nodes drawn; `png_variance` says whether a screenshot shows anything.
"""

from __future__ import annotations

import json
import os
import shutil
import struct
import subprocess
import zlib
from dataclasses import dataclass, field
from html.parser import HTMLParser
from pathlib import Path
from typing import Final

# Debian's packages (chromium-headless-shell, chromium) and the names other systems use
BROWSERS: Final = ("chromium-headless-shell", "chromium", "chromium-browser", "google-chrome", "chrome")
FLAGS: Final = ("--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", "--allow-file-access-from-files")


def find_chromium() -> str | None:
    """The path of a headless-capable Chromium on PATH (or PLYGRAD_CHROMIUM), else None."""
    chosen = os.environ.get("PLYGRAD_CHROMIUM")
    if chosen:
        return chosen if Path(chosen).is_file() else shutil.which(chosen)
    for name in BROWSERS:
        found = shutil.which(name)
        if found:
            return found
    return None


def _run(browser: str, args: list[str], timeout: float) -> subprocess.CompletedProcess[bytes]:
    result = subprocess.run([browser, *FLAGS, *args], capture_output=True, timeout=timeout,  # noqa: S603 (a browser found on PATH)
                            check=False)
    if result.returncode != 0:
        raise RuntimeError(f"{browser} exited {result.returncode}: {result.stderr.decode(errors='replace')[-2000:]}")
    return result


def dump_dom(browser: str, page: Path, timeout: float = 60.0, budget_ms: int = 5000) -> str:
    """The page's DOM once its scripts ran (`budget_ms` of virtual time for them)."""
    result = _run(browser, [f"--virtual-time-budget={budget_ms}", "--dump-dom", page.resolve().as_uri()], timeout)
    return result.stdout.decode("utf-8", errors="replace")


def screenshot(browser: str, page: Path, png: Path, size: tuple[int, int] = (1280, 1600),
               timeout: float = 60.0) -> Path:
    """A PNG of the page at `size` pixels."""
    _run(browser, [f"--window-size={size[0]},{size[1]}", f"--screenshot={png.resolve()}", "--virtual-time-budget=5000",
                   page.resolve().as_uri()], timeout)
    return png


@dataclass
class PageState:
    """What page.js drew, read from a dumped DOM (script contents are not markup, so never counted)."""

    ready: bool = False
    errors: str = ""
    rows: dict[str, int] = field(default_factory=dict)  # table id -> body rows
    graph_nodes: int = 0
    resources: list[str] = field(default_factory=list)  # every src/href that is not a same-page anchor or data:
    render_ms: dict[str, int] = field(default_factory=dict)  # milliseconds page.js spent drawing each part


class _Reader(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.state = PageState()
        self._table: str | None = None
        self._in_errors = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        if tag == "body":
            self.state.ready = a.get("data-ready") == "1"
            self.state.render_ms = json.loads(a.get("data-render-ms") or "{}")
        if tag == "table" and a.get("id"):
            self._table = a["id"]
            self.state.rows.setdefault(str(a["id"]), 0)
        if tag == "tr" and self._table is not None and "data-row" in a:
            self.state.rows[self._table] += 1
        if tag == "g" and "node" in (a.get("class") or "").split():
            self.state.graph_nodes += 1
        if a.get("id") == "errors":
            self._in_errors = True
        for name in ("src", "href"):
            value = a.get(name)
            if value is not None and not value.startswith(("#", "data:")):
                self.state.resources.append(value)

    def handle_endtag(self, tag: str) -> None:
        if tag == "table":
            self._table = None
        if tag == "div":
            self._in_errors = False

    def handle_data(self, data: str) -> None:
        if self._in_errors:
            self.state.errors += data


def page_state(dom: str) -> PageState:
    reader = _Reader()
    reader.feed(dom)
    return reader.state


def png_variance(png: bytes) -> float:
    """The variance of a PNG's samples (0 for a blank one): 8-bit RGB or RGBA, non-interlaced, as Chromium writes."""
    if png[:8] != b"\x89PNG\r\n\x1a\n":
        raise ValueError("not a PNG file")
    pos, width, height, channels, data = 8, 0, 0, 0, b""
    while pos < len(png):
        length, kind = struct.unpack(">I4s", png[pos:pos + 8])
        chunk = png[pos + 8:pos + 8 + length]
        if kind == b"IHDR":
            width, height, depth, color, _, _, interlace = struct.unpack(">IIBBBBB", chunk)
            if depth != 8 or color not in (2, 6) or interlace:
                raise ValueError(f"PNG of bit depth {depth}, color type {color}, interlace {interlace}: only 8-bit "
                                 "RGB/RGBA without interlace is read")
            channels = 3 if color == 2 else 4
        elif kind == b"IDAT":
            data += chunk
        pos += 12 + length
    raw = zlib.decompress(data)
    stride = width * channels
    prev = bytearray(stride)
    total = total_sq = 0
    for y in range(height):
        kind = raw[y * (stride + 1)]
        line = bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        for x in range(stride):  # undo the PNG row filter
            left = line[x - channels] if x >= channels else 0
            up, corner = prev[x], prev[x - channels] if x >= channels else 0
            if kind == 1:
                line[x] = (line[x] + left) & 255
            elif kind == 2:
                line[x] = (line[x] + up) & 255
            elif kind == 3:
                line[x] = (line[x] + (left + up) // 2) & 255
            elif kind == 4:
                p = left + up - corner
                pa, pb, pc = abs(p - left), abs(p - up), abs(p - corner)
                line[x] = (line[x] + (left if pa <= pb and pa <= pc else up if pb <= pc else corner)) & 255
        total += sum(line)
        total_sq += sum(v * v for v in line)
        prev = line
    count = stride * height or 1
    return total_sq / count - (total / count) ** 2
