"""Plotly's typed-array JSON (`{"dtype", "bdata"[, "shape"]}`, plotly.js >= 2.28): compact numeric data.

Without numpy: the `array` module packs the values, base64 carries them. A 64x512 timeline holds ~200k
boxes; as decimal JSON lists they would not fit the 20 MB the page may weigh.
"""

from __future__ import annotations

import base64
import sys
from array import array
from collections.abc import Iterable
from typing import Any

_CODES = {"f4": "f", "f8": "d", "i1": "b", "u1": "B", "i2": "h", "i4": "i"}


def typed(values: Iterable[float], dtype: str) -> dict[str, Any]:
    """A 1-D typed array; float dtypes may hold NaN (a gap in a line trace)."""
    return {"dtype": dtype, "bdata": _b64(array(_CODES[dtype], values))}


def typed_rows(rows: Iterable[Iterable[float]], dtype: str, width: int) -> dict[str, Any]:
    """A 2-D typed array of `width` columns (e.g. `customdata`)."""
    packed = array(_CODES[dtype])
    n = 0
    for row in rows:
        packed.extend(row)
        n += 1
    if len(packed) != n * width:
        raise ValueError(f"every row must have {width} values")
    return {"dtype": dtype, "bdata": _b64(packed), "shape": f"{n},{width}"}


def decode(spec: Any) -> list:
    """The values of a typed array (a list of rows when 2-D), or `spec` itself when it is a plain list."""
    if not isinstance(spec, dict):
        return list(spec)
    values = array(_CODES[spec["dtype"]])
    values.frombytes(base64.b64decode(spec["bdata"]))
    if sys.byteorder == "big":
        values.byteswap()
    if "shape" not in spec:
        return values.tolist()
    width = int(spec["shape"].split(",")[1])
    flat = values.tolist()
    return [flat[i : i + width] for i in range(0, len(flat), width)]


def _b64(values: array) -> str:
    if sys.byteorder == "big":  # plotly.js reads little-endian
        values = array(values.typecode, values)
        values.byteswap()
    return base64.b64encode(values.tobytes()).decode("ascii")
