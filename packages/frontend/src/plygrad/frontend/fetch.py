"""`Tensor.from_url(url, gunzip=False)`: the bytes at a URL as a uint8 tensor (tinygrad's `from_url`).

The bytes are read with the standard library's urllib (`http://`, `https://` and `file://` URLs), optionally
gzip-decompressed, and handed to `Tensor(bytes, **kwargs)`, so `dtype=` reinterprets them and `device=` places
them. tinygrad returns a DISK tensor over a download cache; plygrad has no disk device and no cache, so each call
reads the whole resource into a host-staged tensor. `nn.state.safe_load(Tensor.from_url(...))` and the other loaders
that take a uint8 tensor read it as they read a file.
"""

from __future__ import annotations

import gzip
import urllib.error
import urllib.parse
import urllib.request
import zlib
from typing import Final

SCHEMES: Final = ("http", "https", "file")


def fetch_bytes(url: str, gunzip: bool = False, timeout: float = 60.0) -> bytes:
    """The bytes at `url` (gzip-decompressed when `gunzip`); the scheme must be one of SCHEMES."""
    if not isinstance(url, str):
        raise TypeError(f"from_url: the URL must be a str, got {type(url).__name__}")
    scheme = urllib.parse.urlsplit(url).scheme.lower()
    if scheme not in SCHEMES:
        raise ValueError(f"from_url: {url!r} has scheme {scheme or 'none'!r}; use one of "
                         f"{', '.join(s + '://' for s in SCHEMES)} (a local file is file:///absolute/path)")
    try:
        # the scheme was checked above: no ftp:// or custom openers reach urlopen
        with urllib.request.urlopen(url, timeout=timeout) as response:  # noqa: S310
            raw: bytes = response.read()
    except urllib.error.URLError as e:
        raise OSError(f"from_url: could not read {url!r}: {e.reason}") from e
    if not gunzip:
        return raw
    try:
        return gzip.decompress(raw)
    except (gzip.BadGzipFile, EOFError, zlib.error) as e:
        raise ValueError(f"from_url: gunzip=True but the {len(raw)} bytes at {url!r} are not gzip data ({e}); "
                         "pass gunzip=False to get them as they are") from e
