"""The metric names (and label matchers) a PromQL expression reads, and the series names a
/metrics page offers, so that dashboards and alert rules can be checked against the code.

Not a PromQL parser: a tokenizer that knows where names cannot be (strings, ranges, numbers
and durations, function and aggregation names, keywords, `by (...)`-style label lists).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field

from prometheus_client.parser import text_string_to_metric_families

_TOKEN = re.compile(
    r"""
    (?P<string>"(?:\\.|[^"\\])*"|'(?:\\.|[^'\\])*'|`[^`]*`)
  | (?P<range>\[[^\]]*\])
  | (?P<number>(?:\d+(?:\.\d+)?(?:[eE][+-]?\d+)?)(?:ms|[smhdwy])?(?:\d+(?:ms|[smhdwy]))*)
  | (?P<name>[A-Za-z_:][A-Za-z0-9_:]*)
  | (?P<op>==|!=|=~|!~|>=|<=|[-+*/%^(){},=<>@])
  | (?P<space>\s+)
    """,
    re.VERBOSE,
)
_KEYWORDS = {"and", "or", "unless", "bool", "offset", "inf", "nan", "start", "end"}
_LABEL_LISTS = {"by", "without", "on", "ignoring", "group_left", "group_right"}
_GRAFANA_VARIABLES = re.compile(r"\$(?:\{[^}]*\}|__[A-Za-z_]+|[A-Za-z_][A-Za-z0-9_]*)")
_LABEL_VALUES = re.compile(r"^\s*label_values\((.*),\s*([A-Za-z_][A-Za-z0-9_]*)\s*\)\s*$")


@dataclass
class Selector:
    name: str
    labels: set[str] = field(default_factory=set)


def _tokens(expr: str) -> list[tuple[str, str]]:
    tokens: list[tuple[str, str]] = []
    position = 0
    while position < len(expr):
        match = _TOKEN.match(expr, position)
        if match is None:
            raise ValueError(f"cannot read {expr[position : position + 20]!r} in {expr!r}")
        kind = match.lastgroup or ""
        if kind != "space":
            tokens.append((kind, match.group()))
        position = match.end()
    return tokens


def selectors(expr: str) -> list[Selector]:
    """The metric selectors of a PromQL expression, Grafana variables allowed."""
    label_values = _LABEL_VALUES.match(expr)
    if label_values:  # a Grafana variable query: label_values(selector, label)
        (values_of,) = selectors(label_values.group(1))
        values_of.labels.add(label_values.group(2))
        return [values_of]
    # A variable stands for a value (in a string or a range) or a duration; `5m` reads as both.
    tokens = _tokens(_GRAFANA_VARIABLES.sub("5m", expr))
    found: list[Selector] = []
    i = 0
    while i < len(tokens):
        kind, text = tokens[i]
        following = tokens[i + 1][1] if i + 1 < len(tokens) else ""
        if kind == "name" and text in _LABEL_LISTS:
            i += 1
            if following == "(":
                while tokens[i][1] != ")":
                    i += 1
            i += 1
            continue
        # A name before `(` is a function, before `by`/`without` an aggregation.
        if kind != "name" or text in _KEYWORDS or following == "(" or following in _LABEL_LISTS:
            if text == "{":
                raise ValueError(f"a selector without a metric name in {expr!r}")
            i += 1
            continue
        selector = Selector(text)
        i += 1
        if following == "{":
            i += 1
            while tokens[i][1] != "}":
                if tokens[i][0] == "name":
                    selector.labels.add(tokens[i][1])
                    i += 3  # name, operator, string
                else:
                    i += 1  # a comma
            i += 1
        found.append(selector)
    return found


@dataclass
class Exposition:
    """What a /metrics page offers: every series name it declares (HELP/TYPE), the names
    that have samples, and the label names seen on each."""

    declared: set[str] = field(default_factory=set)
    labels: dict[str, set[str]] = field(default_factory=dict)

    @property
    def sampled(self) -> set[str]:
        return set(self.labels)


_SERIES_OF_TYPE = {
    "counter": ("_total",),
    "histogram": ("_bucket", "_sum", "_count"),
    "gaugehistogram": ("_bucket", "_gsum", "_gcount"),
    "summary": ("", "_sum", "_count"),
}


def read_exposition(text: str) -> Exposition:
    page = Exposition()
    for family in text_string_to_metric_families(text):
        # A histogram is queried as name_bucket/_sum/_count and a counter as name_total,
        # never by the family name alone.
        for suffix in _SERIES_OF_TYPE.get(family.type, ("",)):
            page.declared.add(family.name + suffix)
        for sample in family.samples:
            page.labels.setdefault(sample.name, set()).update(sample.labels)
    return page


def names(found: Iterable[Selector]) -> set[str]:
    return {s.name for s in found}
