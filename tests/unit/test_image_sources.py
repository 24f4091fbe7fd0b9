"""The image is rebuilt only when what its Dockerfile copies changed."""

from pathlib import Path

from scidmz.testenv.image import SOURCES, source_digest


def _context(root: Path) -> Path:
    for name in SOURCES:
        if "." in name or name == "Dockerfile":
            (root / name).write_text(f"{name}\n")
        else:
            (root / name / "sub").mkdir(parents=True)
            (root / name / "sub" / "a.py").write_text("x = 1\n")
    return root


def test_the_digest_follows_the_copied_files_and_nothing_else(tmp_path: Path) -> None:
    context = _context(tmp_path)
    first = source_digest(context)
    (context / "operator" / "sub" / "__pycache__").mkdir()
    (context / "operator" / "sub" / "__pycache__" / "a.cpython-311.pyc").write_bytes(b"\0")
    (context / "tests").mkdir()
    (context / "tests" / "t.py").write_text("not copied\n")
    assert source_digest(context) == first  # caches and uncopied files do not count
    (context / "operator" / "sub" / "a.py").write_text("x = 2\n")
    changed = source_digest(context)
    assert changed != first
    (context / "operator" / "sub" / "a.py").rename(context / "operator" / "sub" / "b.py")
    assert source_digest(context) not in (first, changed)  # a renamed file counts too
