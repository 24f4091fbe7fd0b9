"""MkDocs hooks: the pages of the docs site that are built from the code, not written.

- ``reference/api.md`` from the CRDs the API server enforces (``scidmz.api.reference``);
- ``reference/cli.md`` from the command tree ``scidmz --help`` prints (``scidmz.cli.reference``);
- ``reference/helm-values.md`` from ``values.yaml``'s ``# --`` comments (``chart_readme``);
- ``changelog.md``, the model cards, the P4 programs' README and every benchmark report under
  ``bench/results/`` (Markdown and plots), copied as they are committed, the reports added to
  the nav under Benchmarks;
- in ``operating/alerts.md``, each ``<!-- alert: Name -->`` marker becomes the rule as
  ``dashboards/alerts.yaml`` ships it (an unknown name, or an alert without its marker,
  fails the build);
- ``<!-- generated: operator-settings -->`` becomes the operator's environment variables
  (``OperatorSettings``), ``<!-- generated: reports -->`` the table of benchmark reports with
  the command each names and the date it was last committed, ``<!-- generated:
  sample-columns -->`` the simulator's ``samples.csv`` columns (``netsim.records``);
- a link to ``https://github.com/scidmz/scidmz/blob/main/<path>`` or ``.../tree/main/<path>``
  must name a file or folder of this repository (a broken one fails a strict build).
"""

from __future__ import annotations

import logging
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml
from mkdocs.structure.files import File, Files

REPO = Path(__file__).resolve().parents[1]
REPO_URL = "https://github.com/scidmz/scidmz/"
ALERTS_PAGE = "operating/alerts.md"
RESULTS = REPO / "bench" / "results"
log = logging.getLogger("mkdocs.plugins.scidmz")

API_INTRO = """# API reference: BorderLink and DTNTransferPolicy

Every field of the two custom resources (the administrators' cluster-scoped `BorderLink`,
the tenants' namespaced `DTNTransferPolicy`), generated from the CustomResourceDefinitions the API
server validates against (`crds/`, itself generated from the pydantic models in
`operator/scidmz/api/`): the types, defaults and rules below are the ones enforced when you
`kubectl apply`. `kubectl explain borderlink.spec.controller.limits` and
`kubectl explain dtp.spec` show the same descriptions.
Rates are strings with a unit (`bps`, `kbps`, `Mbps`, `Gbps`, `Tbps`), durations strings
such as `100ms`, `1s`, `2m`.
"""

CLI_INTRO = """# CLI reference

One command, `scidmz`, for every component: the services the operator deploys and the
tools around them. Generated from the command definitions (what `scidmz <command> --help`
prints). Every command refuses bad input with exit status 2 and a line naming the option.
"""

HELM_INTRO = """# Helm values

Every value of `charts/scidmz`, generated from the `# --` comments in `values.yaml`.
`values.schema.json` checks each of them (a typo or a wrong type fails `helm install`), and
`charts/scidmz/ci/*-values.yaml` are the combinations the tests install on a real API
server.
"""

COPIED = {
    "changelog.md": "CHANGELOG.md",
    "reference/models/cubic.md": "models/cubic/card.md",
    "reference/models/bbr.md": "models/bbr/card.md",
    "reference/p4.md": "p4/README.md",
}


def _generated() -> dict[str, str]:
    sys.path.insert(0, str(REPO / "hack"))
    import chart_readme

    from scidmz.api.crd import RESOURCES, build_crd
    from scidmz.api.reference import api_reference
    from scidmz.cli import app
    from scidmz.cli.reference import cli_reference

    values = (REPO / "charts" / "scidmz" / "values.yaml").read_text()
    return {
        "reference/api.md": api_reference([build_crd(r) for r in RESOURCES], API_INTRO),
        "reference/cli.md": cli_reference(app, CLI_INTRO),
        "reference/helm-values.md": f"{HELM_INTRO}\n{chart_readme.table(values)}\n",
    }


def _reports() -> list[Path]:
    return sorted(p for p in RESULTS.rglob("*") if p.suffix in (".md", ".png"))


def _report_uri(path: Path) -> str:
    return "benchmarks/results/" + path.relative_to(RESULTS).as_posix()


def _title(path: Path) -> str:
    first = path.read_text().splitlines()[0] if path.stat().st_size else path.stem
    return first.lstrip("# ").strip() or path.stem


def on_config(config: Any) -> Any:
    """The committed reports join the nav under Benchmarks, so none is an orphan."""
    reports = [{_title(p): _report_uri(p)} for p in _reports() if p.suffix == ".md"]
    for section in config["nav"]:
        if isinstance(section, dict) and "Benchmarks" in section:
            section["Benchmarks"].append({"Reports": reports})
            return config
    raise RuntimeError("mkdocs.yml has no Benchmarks section for the reports")


def on_files(files: Files, config: Any) -> Files:
    for uri, text in _generated().items():
        files.append(File.generated(config, uri, content=text))
    for uri, source in COPIED.items():
        files.append(File.generated(config, uri, abs_src_path=str(REPO / source)))
    for path in _reports():
        files.append(File.generated(config, _report_uri(path), abs_src_path=str(path)))
    return files


_ALERT_MARKER = re.compile(r"^<!-- alert: (\w+) -->$", re.M)
_REPO_LINK = re.compile(re.escape(REPO_URL) + r"(?:blob|tree)/main/([^)\s#\"'>]+)")


def _alert_rules() -> dict[str, dict[str, Any]]:
    groups = yaml.safe_load((REPO / "dashboards" / "alerts.yaml").read_text())["groups"]
    return {rule["alert"]: rule for group in groups for rule in group["rules"]}


def _alert_block(rule: dict[str, Any]) -> str:
    annotations = rule.get("annotations", {})
    lines = [
        "| severity | for | summary |",
        "|---|---|---|",
        f"| {rule['labels']['severity']} | {rule.get('for', '0s')} | "
        f"{annotations.get('summary', '').replace('|', '&#124;')} |",
        "",
        annotations.get("description", ""),
        "",
        "```promql",
        rule["expr"].strip(),
        "```",
    ]
    return "\n".join(lines)


def _expand_alerts(markdown: str) -> str:
    rules = _alert_rules()
    named = _ALERT_MARKER.findall(markdown)
    unknown = sorted(set(named) - set(rules))
    missing = sorted(set(rules) - set(named))
    if unknown or missing:
        raise RuntimeError(
            f"{ALERTS_PAGE}: markers for unknown alerts {unknown}, no marker for {missing}"
        )
    return _ALERT_MARKER.sub(lambda m: _alert_block(rules[m.group(1)]), markdown)


_COMMAND = re.compile(r"`((?:\.venv/bin/|sudo )*(?:python|scidmz)[^`]*)`")


def _committed(path: Path) -> str:
    """The date ``path`` was last committed (YYYY-MM-DD), or "uncommitted"."""
    try:
        out = subprocess.run(
            ["git", "log", "-1", "--format=%cs", "--", str(path)],
            cwd=REPO,
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return out or "uncommitted"


def _reports_table() -> str:
    rows = ["| report | command | last committed |", "|---|---|---|"]
    for path in _reports():
        if path.suffix != ".md":
            continue
        head = "\n".join(path.read_text().splitlines()[:8])
        found = _COMMAND.search(head)
        command = f"`{found.group(1)}`" if found else "(see the report)"
        link = _report_uri(path).removeprefix("benchmarks/")
        rows.append(f"| [{_title(path)}]({link}) | {command} | {_committed(path)} |")
    return "\n".join(rows)


def _operator_settings() -> str:
    from scidmz.api.reference import settings_reference
    from scidmz.k8s.settings import OperatorSettings

    return settings_reference(OperatorSettings, "SCIDMZ_")


def _sample_columns() -> str:
    from scidmz.netsim.records import SAMPLE_COLUMN_DOCS, SAMPLE_COLUMNS

    rows = ["| column of `samples.csv` | meaning |", "|---|---|"]
    rows += [f"| `{column}` | {SAMPLE_COLUMN_DOCS[column]} |" for column in SAMPLE_COLUMNS]
    return "\n".join(rows)


GENERATED = {
    "operator-settings": _operator_settings,
    "reports": _reports_table,
    "sample-columns": _sample_columns,
}
_GENERATED_MARKER = re.compile(r"^<!-- generated: ([\w-]+) -->$", re.M)


def _expand_generated(markdown: str, page: str) -> str:
    def one(match: re.Match[str]) -> str:
        name = match.group(1)
        if name not in GENERATED:
            raise RuntimeError(f"{page}: no generator for <!-- generated: {name} -->")
        return GENERATED[name]()

    return _GENERATED_MARKER.sub(one, markdown)


def on_page_markdown(markdown: str, page: Any, config: Any, files: Files) -> str:
    source = page.file.src_uri
    for target in _REPO_LINK.findall(markdown):
        if not (REPO / target).exists():
            log.warning("%s links to %s, which is not in the repository", source, target)
    if source == ALERTS_PAGE:
        markdown = _expand_alerts(markdown)
    return _expand_generated(markdown, source)
