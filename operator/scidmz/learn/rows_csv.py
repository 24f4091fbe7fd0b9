"""A bench's episodes as CSV: one row per dataclass instance, read back by field type."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, fields
from typing import Any, TypeVar

T = TypeVar("T")


def columns(row_type: type[Any]) -> tuple[str, ...]:
    return tuple(f.name for f in fields(row_type))


def rows_csv(rows: Sequence[Any], row_type: type[Any]) -> str:
    """``rows`` (instances of the dataclass ``row_type``) with a header; floats to 6
    significant digits."""
    lines = [",".join(columns(row_type))]
    lines += [
        ",".join(f"{v:.6g}" if isinstance(v, float) else str(v) for v in asdict(row).values())
        for row in rows
    ]
    return "\n".join(lines) + "\n"


def parse_rows(text: str, row_type: type[T]) -> list[T]:
    """A CSV of ``rows_csv`` back into rows; a wrong header is a ValueError naming the
    one expected."""
    names = columns(row_type)
    lines = [line.split(",") for line in text.strip().splitlines()]
    if not lines or tuple(lines[0]) != names:
        raise ValueError(f"the header must be {','.join(names)}")
    kinds = {f.name: f.type for f in fields(row_type)}  # type: ignore[arg-type]
    parsed = []
    for line in lines[1:]:
        values = {name: _cell(cell, kinds[name]) for name, cell in zip(names, line, strict=True)}
        parsed.append(row_type(**values))
    return parsed


_FLAGS = {"True": True, "False": False, "None": None}


def _cell(cell: str, kind: Any) -> Any:
    """One cell by its field's (string) annotation: int, str, bool, bool | None, float."""
    if kind == "int":
        return int(cell)
    if kind == "str":
        return cell
    if kind in ("bool", "bool | None"):
        if cell not in _FLAGS or (kind == "bool" and cell == "None"):
            raise ValueError(f"not a {kind}: {cell!r}")
        return _FLAGS[cell]
    return float(cell)
