"""The Grafana dashboards type-check against Grafana's own schema package.

No Grafana server can run here; `@grafana/schema` is the TypeScript model Grafana's frontend
builds its dashboards with, so `tsc --strict` over `const d: Dashboard = <json>` catches what
Grafana would reject or silently drop: unknown keys (an excess-property error on an object
literal), wrong types, wrong enum strings. A planted error of each kind must fail.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from scidmz.metrics.dashboards import DASHBOARDS, render

SCHEMA_VERSION = "13.2.3"
TYPESCRIPT_VERSION = "5.9.3"
TSCONFIG = {
    "compilerOptions": {
        "strict": True, "noEmit": True, "module": "esnext", "moduleResolution": "bundler",
        "target": "es2022", "skipLibCheck": True,
    },
}  # fmt: skip


@pytest.fixture(scope="module")
def toolchain() -> Path:
    """node_modules with the pinned @grafana/schema and typescript (npm, cached)."""
    npm = shutil.which("npm")
    if npm is None:
        pytest.fail("npm is not installed (make test installs it: hack/system-deps.sh)")
    root = Path.home() / ".cache" / "scidmz" / f"grafana-schema-{SCHEMA_VERSION}"
    if not (root / "node_modules" / ".bin" / "tsc").exists():
        root.mkdir(parents=True, exist_ok=True)
        (root / "package.json").write_text(json.dumps({
            "private": True,
            "dependencies": {"@grafana/schema": SCHEMA_VERSION, "typescript": TYPESCRIPT_VERSION},
        }))  # fmt: skip
        result = subprocess.run(
            [npm, "install", "--no-audit", "--no-fund", "--silent"], cwd=root,
            capture_output=True, text=True, check=False, timeout=600,
        )  # fmt: skip
        if result.returncode != 0:
            pytest.fail(f"npm install failed:\n{result.stderr[-2000:]}")
    return root


def type_errors(root: Path, work: Path, dashboards: dict[str, dict]) -> str:
    """tsc's errors for ``dashboards`` (name -> JSON model); empty when they type-check."""
    files = []
    for name, model in dashboards.items():
        source = work / f"{name}.ts"
        source.write_text(
            "import type { Dashboard } from '@grafana/schema';\n"
            f"export const dashboard: Dashboard = {json.dumps(model, indent=1)};\n"
        )
        files.append(source.name)
    (work / "tsconfig.json").write_text(json.dumps({**TSCONFIG, "files": files}))
    (work / "node_modules").symlink_to(root / "node_modules")
    result = subprocess.run(
        [str(root / "node_modules" / ".bin" / "tsc"), "-p", str(work)],
        capture_output=True, text=True, check=False, timeout=300,
    )  # fmt: skip
    return "" if result.returncode == 0 else result.stdout + result.stderr


def test_every_dashboard_type_checks(toolchain, tmp_path):
    shipped = {name: json.loads(render(name)) for name in DASHBOARDS}
    assert type_errors(toolchain, tmp_path, shipped) == ""


@pytest.mark.parametrize(
    ("plant", "expected"),
    [
        (
            lambda d: d["panels"][0]["gridPos"].update(bogus=1),
            "'\"bogus\"' does not exist in type 'GridPos'",
        ),
        (lambda d: d["panels"][0]["gridPos"].update(h="8"), "not assignable to type 'number'"),
        (lambda d: d.update(graphTooltip="shared"), "'DashboardCursorSync | undefined'"),
        (lambda d: d["panels"][0].update(targets="up"), "'Record<string, unknown>[]'"),
    ],
    ids=["unknown-key", "wrong-type", "wrong-enum", "not-a-list"],
)
def test_a_planted_error_fails(toolchain, tmp_path, plant, expected):
    name = next(iter(DASHBOARDS))
    model = json.loads(render(name))
    plant(model)
    errors = type_errors(toolchain, tmp_path, {name: model})
    assert expected in errors, errors
