"""The docs site: built strictly, its references generated from the code, every alert's runbook
on it, and its pages rendered by a real browser (headless Chromium)."""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import typer.main
import yaml

from scidmz.api.crd import RESOURCES, build_crd
from scidmz.api.reference import anchor, objects
from scidmz.cli import app
from scidmz.cli.reference import anchor as command_anchor
from scidmz.cli.reference import commands
from scidmz.metrics import names
from scidmz.testenv.cluster import REPO_ROOT

MKDOCS = Path(sys.executable).with_name("mkdocs")
CONFIG = yaml.safe_load((REPO_ROOT / "mkdocs.yml").read_text())


def build(config: Path, site: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(MKDOCS), "build", "--strict", "-f", str(config), "-d", str(site)],
        cwd=REPO_ROOT, capture_output=True, text=True, check=False,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
    )  # fmt: skip


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("site")
    result = build(REPO_ROOT / "mkdocs.yml", out)
    assert result.returncode == 0, result.stdout + result.stderr
    return out


def page(site: Path, path: str) -> str:
    return (site / path / "index.html").read_text()


def ids(html: str) -> set[str]:
    return set(re.findall(r'\bid="([^"]+)"', html))


# ---- strictness: what must fail the build ------------------------------------------------


@pytest.fixture
def docs_copy(tmp_path: Path) -> tuple[Path, Path]:
    """A copy of docs/ and a config building it with the real hooks; (config, docs)."""
    docs = tmp_path / "docs"
    shutil.copytree(REPO_ROOT / "docs", docs)
    config = {
        "INHERIT": str(REPO_ROOT / "mkdocs.yml"),
        "docs_dir": str(docs),
        "hooks": [str(REPO_ROOT / "hack" / "mkdocs_hooks.py")],
    }
    path = tmp_path / "mkdocs.yml"
    path.write_text(yaml.safe_dump(config))
    return path, docs


@pytest.mark.parametrize(
    ("page_name", "addition", "complaint"),
    [
        ("index.md", "\n[a broken link](no-such-page.md)\n", "no-such-page.md"),
        ("index.md", "\n[an anchor](getting-started.md#no-such-heading)\n", "no-such-heading"),
        ("orphan.md", "# A page no nav entry names\n", "orphan.md"),
        (
            "index.md",
            "\n[a repo file](https://github.com/scidmz/scidmz/blob/main/no/such/file.yaml)\n",
            "no/such/file.yaml",
        ),
    ],
    ids=["broken link", "missing anchor", "page not in the nav", "missing repository file"],
)
def test_the_strict_build_fails_on(docs_copy, tmp_path, page_name, addition, complaint):
    config, docs = docs_copy
    target = docs / page_name
    target.write_text((target.read_text() if target.exists() else "") + addition)
    result = build(config, tmp_path / "site")
    assert result.returncode != 0
    assert complaint in result.stdout + result.stderr


def test_the_copy_itself_builds(docs_copy, tmp_path):
    config, _ = docs_copy
    result = build(config, tmp_path / "site")
    assert result.returncode == 0, result.stdout + result.stderr


# ---- the generated references --------------------------------------------------------------


def test_the_api_reference_has_every_object_and_field_of_both_crds(site):
    html = page(site, "reference/api")
    found = ids(html)
    for resource in RESOURCES:
        crd = build_crd(resource)
        schema = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]
        kind = crd["spec"]["names"]["kind"]
        for top in ("spec", "status"):
            for section in objects(schema[top], top):
                assert anchor(f"{kind}.{section.path}") in found, f"{kind} {section.path}"
                for field in section.schema["properties"]:
                    assert f"<code>{field}</code>" in html, f"{kind} {section.path}.{field}"
    # a default and rules' messages, as the API server holds them
    assert "must be between 100ms and 60s" in html
    assert "capacity must be at most 10Tbps" in html
    assert "switch.tls is required" in html


def test_the_cli_reference_has_every_command_and_option(site):
    html = page(site, "reference/cli")
    found = ids(html)
    root = typer.main.get_command(app)
    entries = list(commands(root))
    assert len(entries) > 20
    for entry in entries:
        assert command_anchor(entry.words) in found, " ".join(entry.words)
        for param in entry.command.params:
            for option in param.opts:
                if option.startswith("--") and option not in (
                    "--install-completion",
                    "--show-completion",
                ):
                    assert f"<code>{option}</code>" in html, f"{entry.words} {option}"


def test_the_operator_settings_table_is_generated_from_the_settings_model(site):
    from scidmz.k8s.settings import OperatorSettings

    html = page(site, "operating/install")
    for field in OperatorSettings.model_fields:
        assert f"SCIDMZ_{field.upper()}" in html
    assert "<!-- generated:" not in html


def test_every_benchmark_report_is_a_page_of_the_site(site):
    results = REPO_ROOT / "bench" / "results"
    reports = sorted(results.rglob("*.md"))
    assert reports
    index = page(site, "benchmarks")
    for report in reports:
        relative = report.relative_to(results).with_suffix("")
        assert (site / "benchmarks" / "results" / relative / "index.html").is_file(), relative
        assert f"results/{relative.as_posix()}/" in index, relative


def test_the_metrics_page_lists_exactly_the_exported_names():
    exported = {
        value for key, value in vars(names).items()
        if key.isupper() and isinstance(value, str) and value.startswith(names.PREFIX)
        and value != names.PREFIX
    }  # fmt: skip
    documented = set(
        re.findall(r"`(scidmz_[a-z0-9_]+)`", (REPO_ROOT / "docs/reference/metrics.md").read_text())
    )
    assert exported - documented == set(), "exported but not documented"
    assert documented - exported == set(), "documented but not exported"


# ---- alerts and their runbooks ---------------------------------------------------------------


def _alerts() -> list[dict[str, Any]]:
    groups = yaml.safe_load((REPO_ROOT / "dashboards" / "alerts.yaml").read_text())["groups"]
    return [rule for group in groups for rule in group["rules"]]


def test_every_alert_links_its_runbook_section_on_the_site(site):
    html = page(site, "operating/alerts")
    found = ids(html)
    for rule in _alerts():
        url = rule["annotations"]["runbook_url"]
        section = rule["alert"].lower()
        assert url == f"{CONFIG['site_url']}operating/alerts/#{section}"
        assert section in found, rule["alert"]
        assert rule["annotations"]["description"].split(":")[0] in html, rule["alert"]


def _hooks() -> ModuleType:
    path = REPO_ROOT / "hack" / "mkdocs_hooks.py"
    spec = importlib.util.spec_from_file_location("mkdocs_hooks", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_an_alert_without_its_runbook_or_a_runbook_without_its_alert_fails_the_build():
    hooks = _hooks()
    markdown = (REPO_ROOT / "docs" / "operating" / "alerts.md").read_text()
    assert "ScidmzTelemetryStale" in hooks._expand_alerts(markdown)
    with pytest.raises(RuntimeError, match="no marker for \\['ScidmzTelemetryStale'\\]"):
        hooks._expand_alerts(markdown.replace("<!-- alert: ScidmzTelemetryStale -->", ""))
    with pytest.raises(RuntimeError, match="unknown alerts \\['ScidmzNoSuchAlert'\\]"):
        hooks._expand_alerts(markdown + "\n<!-- alert: ScidmzNoSuchAlert -->\n")


# ---- rendered by a browser -------------------------------------------------------------------

RENDERED = ["", "getting-started/", "reference/api/", "reference/cli/", "operating/dashboards/",
            "benchmarks/"]  # fmt: skip


def test_pages_render_in_headless_chromium(site):
    from scidmz.testenv.browser import BrowserUnavailable, browser, serve

    failures: list[str] = []
    try:
        with serve(site) as base, browser() as chromium:
            tab = chromium.new_page()

            def ours(url: str) -> bool:
                # the theme asks GitHub for the repository's stars, which no offline
                # reader gets; what the site serves itself must all load
                return url.startswith(base)

            tab.on(
                "console",
                lambda m: (
                    failures.append(m.text)
                    if m.type == "error" and ours(m.location.get("url", base))
                    else None
                ),
            )
            tab.on(
                "requestfailed",
                lambda r: failures.append(f"failed: {r.url}") if ours(r.url) else None,
            )
            tab.on("response", lambda r: failures.append(f"{r.status}: {r.url}")
                   if r.status >= 400 and ours(r.url) else None)  # fmt: skip
            for path in RENDERED:
                tab.goto(base + path, wait_until="networkidle")
                assert "scidmz" in tab.title(), path
                heading = tab.locator("article h1").first.inner_text()
                assert heading.strip(), f"{path}: no heading rendered"
                links = tab.locator("nav.md-nav--primary a").count()
                assert links > 20, f"{path}: the navigation has {links} links"
                broken = tab.evaluate(
                    "[...document.images].filter(i => !i.complete || i.naturalWidth === 0)"
                    ".map(i => i.src)"
                )
                assert broken == [], f"{path}: images that did not load: {broken}"
            tab.goto(base + "reference/api/", wait_until="networkidle")
            tab.locator("#borderlink-spec-controller-limits").scroll_into_view_if_needed()
            assert tab.locator("#borderlink-spec-controller-limits").is_visible()
    except BrowserUnavailable as error:
        pytest.fail(str(error))
    assert failures == []


def test_the_simulator_page_lists_every_sample_column(site):
    from scidmz.netsim.records import SAMPLE_COLUMNS

    html = page(site, "simulator")
    for column in SAMPLE_COLUMNS:
        assert f"<code>{column}</code>" in html, column
