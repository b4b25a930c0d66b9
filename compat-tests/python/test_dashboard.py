"""The Grafana dashboard in docs/grafana/ against its schema and the broker's metric names.

No broker needed. docs/grafana/millrace-dashboard.json must satisfy
docs/grafana/dashboard.schema.json (JSON Schema draft 2020-12), and what a schema cannot
express is checked here: panel ids unique, every panel inside Grafana's 24 columns and no two
panels overlapping, every datasource the import input ${DS_PROMETHEUS}, and every metric a
query names one that Millrace serves at GET /metrics (KNOWN_METRICS: the metrics table of
docs/operations.md, which test_metrics.py checks against a live broker).
"""

from __future__ import annotations

import copy
import itertools
import json
import re
from pathlib import Path
from typing import Dict, Iterator, List, Tuple

import pytest
from jsonschema import Draft202012Validator

REPO = Path(__file__).resolve().parents[2]
DASHBOARD = REPO / "docs" / "grafana" / "millrace-dashboard.json"
SCHEMA = REPO / "docs" / "grafana" / "dashboard.schema.json"

OPERATIONS = REPO / "docs" / "operations.md"


def documented_metrics() -> Dict[str, str]:
    """{name: type} from the metrics table of docs/operations.md (between the metrics:begin and
    metrics:end markers), the one list of what Millrace serves at GET /metrics; test_metrics.py
    checks a live broker against the same table."""
    text = OPERATIONS.read_text(encoding="utf-8")
    table = text.split("<!-- metrics:begin", 1)[1].split("<!-- metrics:end -->", 1)[0]
    rows = re.findall(r"^\| `(millrace_[a-z_]+)` \| (\w+) \|", table, flags=re.M)
    return dict(rows)


# Every metric Millrace serves, by its exposition base name (a histogram's series add _bucket,
# _sum and _count), and the histograms among them.
KNOWN_METRICS = tuple(documented_metrics())
HISTOGRAMS = frozenset(n for n, t in documented_metrics().items() if t == "histogram")
HISTOGRAM_SUFFIXES = ("_bucket", "_sum", "_count")

METRIC_TOKEN = re.compile(r"millrace_[a-z_]+")

DS_INPUT = "DS_PROMETHEUS"
DS_UID = "${" + DS_INPUT + "}"
GRID_COLUMNS = 24

# Panels whose queries may ignore the instance variable, and why.
INSTANCE_EXEMPT = {
    # Sums over every scraped broker: a healthy cluster has exactly one active controller,
    # whichever instances are selected.
    "Active controllers",
}


def load(path: Path) -> dict:
    with path.open(encoding="utf-8") as f:
        return json.load(f)


@pytest.fixture(scope="module")
def schema() -> dict:
    return load(SCHEMA)


@pytest.fixture(scope="module")
def dashboard() -> dict:
    return load(DASHBOARD)


# ---- checks, as functions so that the negative tests below can run them on broken copies ----


def schema_errors(dash: dict, schema: dict) -> List[str]:
    validator = Draft202012Validator(schema)
    return [
        f"{'/'.join(str(p) for p in e.absolute_path) or '<root>'}: {e.message}"
        for e in sorted(validator.iter_errors(dash), key=lambda e: list(map(str, e.path)))
    ]


def all_panels(dash: dict) -> Iterator[dict]:
    """Every panel, the panels of collapsed rows included."""
    for panel in dash.get("panels", []):
        yield panel
        yield from panel.get("panels", [])


def layouts(dash: dict) -> Iterator[List[dict]]:
    """The groups of panels laid out together: the top level, and each collapsed row's panels."""
    top = dash.get("panels", [])
    yield top
    for panel in top:
        if panel.get("panels"):
            yield panel["panels"]


def duplicate_ids(dash: dict) -> List[int]:
    ids = [p.get("id") for p in all_panels(dash)]
    return sorted({i for i in ids if ids.count(i) > 1})


def grid_errors(dash: dict) -> List[str]:
    errors = []
    for group in layouts(dash):
        boxes: List[Tuple[str, Tuple[int, int, int, int]]] = []
        for p in group:
            g = p["gridPos"]
            name = f"panel {p['id']} {p.get('title')!r}"
            if g["x"] < 0 or g["w"] < 1 or g["x"] + g["w"] > GRID_COLUMNS:
                errors.append(f"{name}: x={g['x']} w={g['w']} leaves the {GRID_COLUMNS} columns")
            boxes.append((name, (g["x"], g["y"], g["x"] + g["w"], g["y"] + g["h"])))
        for (a, (ax0, ay0, ax1, ay1)), (b, (bx0, by0, bx1, by1)) in itertools.combinations(
            boxes, 2
        ):
            if ax0 < bx1 and bx0 < ax1 and ay0 < by1 and by0 < ay1:
                errors.append(f"{a} overlaps {b}")
    return errors


def queries(dash: dict) -> Iterator[Tuple[str, str]]:
    """(where, PromQL) for every panel target and every query variable."""
    for p in all_panels(dash):
        for t in p.get("targets", []):
            yield f"panel {p['id']} {p.get('title')!r} target {t.get('refId')}", t.get("expr", "")
    for v in dash.get("templating", {}).get("list", []):
        if v.get("type") == "query":
            q = v.get("query")
            yield f"variable {v.get('name')!r}", q.get("query", "") if isinstance(q, dict) else q


def unknown_metrics(dash: dict) -> List[str]:
    known = set(KNOWN_METRICS)
    errors = []
    for where, expr in queries(dash):
        for token in METRIC_TOKEN.findall(expr):
            if token in known:
                continue
            base = next(
                (token[: -len(s)] for s in HISTOGRAM_SUFFIXES if token.endswith(s)), None
            )
            if base in HISTOGRAMS:
                continue
            errors.append(f"{where}: {token}")
    return errors


def datasources(dash: dict) -> Iterator[Tuple[str, object]]:
    """(where, datasource) for every datasource reference outside the built-in annotations."""
    for p in all_panels(dash):
        name = f"panel {p['id']} {p.get('title')!r}"
        if "datasource" in p:
            yield name, p["datasource"]
        for t in p.get("targets", []):
            if "datasource" in t:
                yield f"{name} target {t.get('refId')}", t["datasource"]
    for v in dash.get("templating", {}).get("list", []):
        if "datasource" in v:
            yield f"variable {v.get('name')!r}", v["datasource"]


# ---- the dashboard ----


def test_schema_is_a_valid_draft_2020_12_schema(schema):
    assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    Draft202012Validator.check_schema(schema)


def test_dashboard_satisfies_the_schema(dashboard, schema):
    errors = schema_errors(dashboard, schema)
    assert not errors, "\n".join(errors)


def test_import_identity(dashboard):
    assert dashboard["uid"] == "millrace-overview"
    assert dashboard["title"] == "Millrace"
    assert dashboard["schemaVersion"] == 39
    assert dashboard.get("id") is None, "an exported dashboard carries no database id"
    inputs = {i["name"]: i for i in dashboard["__inputs"]}
    assert inputs[DS_INPUT]["type"] == "datasource"
    assert inputs[DS_INPUT]["pluginId"] == "prometheus"


def test_every_datasource_is_the_import_input(dashboard):
    refs = list(datasources(dashboard))
    assert refs
    wrong = [f"{where}: {ds!r}" for where, ds in refs if ds != {"type": "prometheus", "uid": DS_UID}]
    assert not wrong, "\n".join(wrong)


def test_provisioned_copy_resolves_the_input(dashboard):
    # A provisioned dashboard (docker-compose.yml's monitoring profile) is not run through the
    # import, so ${DS_PROMETHEUS} stays in it; a datasource variable of that name resolves it.
    variables = {v["name"]: v for v in dashboard["templating"]["list"]}
    assert variables[DS_INPUT]["type"] == "datasource"
    assert variables[DS_INPUT]["query"] == "prometheus"
    names = [v["name"] for v in dashboard["templating"]["list"]]
    assert names.index(DS_INPUT) == 0, "the datasource variable must come before those using it"


def test_instance_variable_is_used(dashboard):
    variables = {v["name"]: v for v in dashboard["templating"]["list"]}
    inst = variables["instance"]
    assert inst["type"] == "query"
    q = inst["query"]
    q = q.get("query") if isinstance(q, dict) else q
    assert q == "label_values(millrace_partitions, instance)"
    unfiltered = [
        f"panel {p['id']} {p['title']!r} target {t['refId']}: {t['expr']}"
        for p in all_panels(dashboard)
        if p["title"] not in INSTANCE_EXEMPT
        for t in p.get("targets", [])
        if 'instance=~"$instance"' not in t["expr"]
    ]
    assert not unfiltered, "queries ignoring $instance:\n" + "\n".join(unfiltered)


def test_panel_ids_are_unique(dashboard):
    assert duplicate_ids(dashboard) == []


def test_ref_ids_are_unique_within_a_panel(dashboard):
    for p in all_panels(dashboard):
        refs = [t["refId"] for t in p.get("targets", [])]
        assert len(refs) == len(set(refs)), f"panel {p['id']}: refIds {refs}"


def test_panels_fit_the_grid_without_overlapping(dashboard):
    errors = grid_errors(dashboard)
    assert not errors, "\n".join(errors)


def test_queries_name_only_known_metrics(dashboard):
    assert len(list(queries(dashboard))) > 0
    errors = unknown_metrics(dashboard)
    assert not errors, "unknown metrics:\n" + "\n".join(errors)


def test_known_metrics_are_well_formed():
    assert len(KNOWN_METRICS) == len(set(KNOWN_METRICS))
    for name in KNOWN_METRICS:
        assert METRIC_TOKEN.fullmatch(name), name
    assert HISTOGRAMS <= set(KNOWN_METRICS)


# ---- the checks catch what they are for ----


def _first(dash: dict, panel_type: str) -> dict:
    return next(p for p in dash["panels"] if p["type"] == panel_type)


def test_checks_catch_an_unknown_metric(dashboard):
    broken = copy.deepcopy(dashboard)
    _first(broken, "timeseries")["targets"][0]["expr"] = "rate(millrace_bogus_total[1m])"
    assert unknown_metrics(broken) != []
    broken = copy.deepcopy(dashboard)
    # _bucket exists only for histograms
    _first(broken, "timeseries")["targets"][0]["expr"] = "millrace_requests_total_bucket"
    assert unknown_metrics(broken) != []


def test_checks_catch_layout_and_id_errors(dashboard):
    broken = copy.deepcopy(dashboard)
    a, b = [p for p in broken["panels"] if p["type"] == "timeseries"][:2]
    b["gridPos"] = dict(a["gridPos"])
    b["id"] = a["id"]
    assert any("overlaps" in e for e in grid_errors(broken))
    assert a["id"] in duplicate_ids(broken)
    broken = copy.deepcopy(dashboard)
    p = _first(broken, "stat")
    p["gridPos"]["x"] = GRID_COLUMNS - p["gridPos"]["w"] + 1
    assert any("columns" in e for e in grid_errors(broken))


@pytest.mark.parametrize(
    "breakage",
    [
        "no title",
        "schemaVersion 35",
        "schemaVersion as a string",
        "no prometheus input",
        "unknown panel type",
        "panel without datasource",
        "target without refId",
        "loki datasource",
        "fractional gridPos",
    ],
)
def test_schema_catches(dashboard, schema, breakage):
    d = copy.deepcopy(dashboard)
    ts = _first(d, "timeseries")
    if breakage == "no title":
        del d["title"]
    elif breakage == "schemaVersion 35":
        d["schemaVersion"] = 35
    elif breakage == "schemaVersion as a string":
        d["schemaVersion"] = "39"
    elif breakage == "no prometheus input":
        d["__inputs"] = [dict(i, pluginId="loki") for i in d["__inputs"]]
    elif breakage == "unknown panel type":
        ts["type"] = "graph"
    elif breakage == "panel without datasource":
        del ts["datasource"]
    elif breakage == "target without refId":
        del ts["targets"][0]["refId"]
    elif breakage == "loki datasource":
        ts["datasource"] = {"type": "loki", "uid": DS_UID}
    elif breakage == "fractional gridPos":
        ts["gridPos"]["w"] = 7.5
    assert schema_errors(d, schema) != []
