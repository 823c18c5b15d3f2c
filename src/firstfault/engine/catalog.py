"""The rule catalog: symptom definitions, declarative extractors (TOML) and Python rules.

The catalog ships inside the package (`firstfault/rules/catalog/*.toml` and the Python modules of
`firstfault.rules`). Loading compiles every pattern into the per-source hyperscan databases and runs every
inline case; any failure raises `CatalogError` naming the rule and the case. Rules are never fetched from the
network or accepted from a client.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.resources
import json
import re
import string
import tomllib
from dataclasses import asdict, dataclass, field
from functools import cached_property
from typing import Any

from firstfault.engine.model import SUBDOMAIN_OUTCOME, Outcome, Role, SourceKind, SubDomain
from firstfault.engine.rules_api import (
    MetricExtractor,
    Phase,
    PythonRule,
    registered_metric_extractors,
    registered_rules,
)
from firstfault.errors import CatalogError

# Python rule modules, in the order their rules run within a phase.
RULE_MODULES = (
    "firstfault.rules.gpu_driver",
    "firstfault.rules.host",
    "firstfault.rules.metrics",
    "firstfault.rules.nccl",
    "firstfault.rules.pytorch",
    "firstfault.rules.scheduler",
    "firstfault.rules.storage",
    "firstfault.rules.election",
    "firstfault.rules.history",
)

EMIT_TYPES = {"bad_node": "bad", "interesting_node": "interesting", "xid": "xid", "context": "context"}
LINE_SOURCES = (SourceKind.APPLOG, SourceKind.SYSLOG, SourceKind.SCHEDULER)
_NAME_RE = re.compile(r"^[A-Z][A-Za-z0-9]+$")
# Constructs outside the hyperscan/RE2 common subset (hyperscan would also reject most of them).
_UNSUPPORTED_RE = re.compile(r"\(\?[=!<][^P]|\(\?<[=!]|\\[1-9]|\(\?P=|\\[AZ]|\(\?[aLu]|\(\?\(|\(\?>|[*+?}]\+")


@dataclass(frozen=True)
class NextActionDef:
    immediate: str
    investigatory: str | None
    summary: str


@dataclass(frozen=True)
class SymptomDef:
    """What a symptom means. `role`: root (a root-cause candidate), symptom (downstream by default; the
    root only when nothing earlier explains it), context (never a cause). `blame`: node (the node it appears
    on is at fault), peer (another node named in the line may be), none. `strength` orders root candidates
    that start together (kernel/hardware facts outrank what an application reports about them)."""

    name: str
    sub_domain: SubDomain
    role: Role
    blame: str
    strength: int
    next_action: NextActionDef
    doc: str
    outcome: Outcome
    origin: str
    family: str = ""
    # A failure to set up a device or fabric (not a fault met in operation): the same one on every node of a job is
    # their common setup (driver, fabric service, environment), so SystemicGuard blames none of them.
    setup: bool = False


@dataclass(frozen=True)
class ExtractorCase:
    expect: str
    line: str
    symptom: str | None = None
    attributes: dict[str, str] = field(default_factory=dict)
    source: SourceKind | None = None


@dataclass(frozen=True)
class Extractor:
    """A declarative extractor: one pattern, one emitted event per matching line."""

    name: str
    sources: tuple[SourceKind, ...]
    match_re: str
    emit_type: str  # bad | interesting | xid | context
    symptom: str | None  # template with {capture} fields
    fact: str | None
    attributes: dict[str, Any]
    key: tuple[str, ...]  # captures that keep events apart when coalescing (e.g. one event per GPU)
    sampled: bool  # only the first and last match per scan block are used (progress markers)
    doc: str
    ref: str
    cases: tuple[ExtractorCase, ...]
    origin: str

    @cached_property
    def regex(self) -> re.Pattern[str]:
        """`match_re` compiled by Python `re`, on first use (an analysis compiles only the patterns that matched)."""
        return re.compile(self.match_re)

    def render_symptom(self, captures: dict[str, str | None]) -> str | None:
        if self.symptom is None:
            return None
        return self.symptom.format_map({k: (v or "") for k, v in captures.items()})


@dataclass
class Catalog:
    symptoms: dict[str, SymptomDef]
    extractors: list[Extractor]
    python_rules: list[PythonRule]
    metric_extractors: list[MetricExtractor]
    content_hash: str
    files: list[str]
    # The extra files given to `load_catalog` (worker processes started with `spawn` reload the same catalog).
    extra_files: list[tuple[str, bytes]] = field(default_factory=list, repr=False)
    # The `CompiledCatalog` built for this catalog (see `CompiledCatalog.for_catalog`): verification and the
    # engine share one compilation.
    compiled: Any = field(default=None, repr=False, compare=False)

    def rules_in(self, phase: Phase) -> list[PythonRule]:
        return [r for r in self.python_rules if r.phase == phase]

    def extractors_for(self, source: SourceKind) -> list[Extractor]:
        return [e for e in self.extractors if source in e.sources]

    def symptom(self, name: str) -> SymptomDef:
        try:
            return self.symptoms[name]
        except KeyError:
            return self._dynamic_symptom(name)

    def _dynamic_symptom(self, name: str) -> SymptomDef:
        # Symptoms named by templates (e.g. "XID-149.4") resolve through their family definition.
        for prefix_len in range(len(name), 0, -1):
            family = self.symptoms.get(name[:prefix_len] + "*")
            if family is not None:
                return SymptomDef(**{**family.__dict__, "name": name})
        raise CatalogError(f"symptom {name!r} is emitted but not defined in the catalog")

    def pattern_list(self, source: SourceKind | None = None) -> list[str]:
        extractors = self.extractors if source is None else self.extractors_for(source)
        return [e.match_re for e in extractors]


def _catalog_files() -> list[tuple[str, bytes]]:
    root = importlib.resources.files("firstfault.rules") / "catalog"
    files = sorted((p.name, p.read_bytes()) for p in root.iterdir() if p.name.endswith(".toml"))
    if not files:
        raise CatalogError("no rule catalog files found in firstfault/rules/catalog")
    return files


def _require(table: dict[str, Any], key: str, kind: type, where: str) -> Any:
    if key not in table:
        raise CatalogError(f"{where}: missing required field {key!r}")
    return _optional(table, key, kind, where, None)


def _optional(table: dict[str, Any], key: str, kind: type | tuple[type, ...], where: str, default: Any) -> Any:
    """The field's value, which must be of `kind` (CatalogError), or `default` when it is absent."""
    value = table.get(key, default)
    if value is not default and not isinstance(value, kind):
        names = " or ".join(k.__name__ for k in (kind if isinstance(kind, tuple) else (kind,)))
        raise CatalogError(f"{where}: field {key!r} must be {names}")
    return value


# The keys each table may have: a misspelt key is an error, never a silently ignored field (a typo in a case's
# `attributes` table would otherwise delete an assertion).
_SYMPTOM_KEYS = frozenset({"name", "sub_domain", "role", "blame", "strength", "outcome", "immediate",
                           "investigatory", "action", "doc", "family", "setup"})
_EXTRACTOR_KEYS = frozenset({"name", "match_re", "emit", "source", "key", "attributes", "sampled", "doc", "ref",
                             "cases"})
_EMIT_KEYS = frozenset({"type", "symptom", "fact"})
_CASE_KEYS = frozenset({"expect", "line", "symptom", "attributes", "source"})


def _known_keys(table: dict[str, Any], allowed: frozenset[str], where: str) -> None:
    unknown = sorted(set(table) - allowed)
    if unknown:
        raise CatalogError(f"{where}: unknown key(s) {', '.join(map(repr, unknown))} "
                           f"(allowed: {', '.join(sorted(allowed))})")


def _tables(doc: dict[str, Any], key: str, where: str) -> list[dict[str, Any]]:
    """An array of tables (`[[symptom]]`, `cases = [{...}]`); anything else is a CatalogError."""
    value = doc.get(key, [])
    if not isinstance(value, list) or not all(isinstance(v, dict) for v in value):
        raise CatalogError(f"{where}: {key!r} must be an array of tables")
    return value


def _strings(value: Any, key: str, where: str) -> list[str]:
    if isinstance(value, str):
        return [value]
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise CatalogError(f"{where}: field {key!r} must be a string or a list of strings")
    return value


def _parse_symptom(table: dict[str, Any], origin: str) -> SymptomDef:
    name = _require(table, "name", str, f"{origin}: symptom")
    where = f"{origin}: symptom {name!r}"
    _known_keys(table, _SYMPTOM_KEYS, where)
    try:
        sub_domain = SubDomain(_require(table, "sub_domain", str, where))
    except ValueError as exc:
        raise CatalogError(f"{where}: {exc}") from None
    role = _require(table, "role", str, where)
    if role not in ("root", "symptom", "context"):
        raise CatalogError(f"{where}: role must be root, symptom or context")
    blame = _optional(table, "blame", str, where, "none")
    if blame not in ("node", "peer", "none"):
        raise CatalogError(f"{where}: blame must be node, peer or none")
    strength = table.get("strength", 50)
    if not isinstance(strength, int) or isinstance(strength, bool) or not 0 <= strength <= 100:
        raise CatalogError(f"{where}: strength must be an integer 0..100")
    outcome_text = _optional(table, "outcome", str, where, None)
    try:
        outcome = Outcome(outcome_text) if outcome_text else SUBDOMAIN_OUTCOME[sub_domain]
    except ValueError as exc:
        raise CatalogError(f"{where}: {exc}") from None
    action = NextActionDef(
        immediate=_require(table, "immediate", str, where),
        investigatory=_optional(table, "investigatory", str, where, None),
        summary=_require(table, "action", str, where),
    )
    return SymptomDef(name=name, sub_domain=sub_domain, role=role, blame=blame, strength=strength,
                      next_action=action, doc=_require(table, "doc", str, where).strip(), outcome=outcome,
                      origin=origin, family=_optional(table, "family", str, where, origin.removesuffix(".toml")),
                      setup=_optional(table, "setup", bool, where, False))


def check_pattern_subset(pattern: str) -> str | None:
    """Return why `pattern` is outside the hyperscan/RE2 common subset, or None."""
    if _UNSUPPORTED_RE.search(pattern):
        return "uses a construct outside the hyperscan/RE2 subset (lookaround, backreference, atomic or possessive group, \\A/\\Z)"
    import re2  # here: a catalog loaded from its snapshot was checked already

    try:
        compiled = re.compile(pattern)
    except re.error as exc:
        return f"invalid regular expression: {exc}"
    try:
        re2.compile(pattern)  # long lines are captured with RE2 (engine/captures.py)
    except re2.error as exc:
        return f"does not compile with RE2: {exc}"
    if compiled.match(""):
        return "matches the empty string"
    return None


def _parse_case(table: dict[str, Any], where: str) -> ExtractorCase:
    _known_keys(table, _CASE_KEYS, where)
    expect = _require(table, "expect", str, where)
    if expect not in ("bad", "interesting", "xid", "context", "none"):
        raise CatalogError(f"{where}: expect must be bad, interesting, xid, context or none")
    source = _optional(table, "source", str, where, None)
    try:
        kind = SourceKind(source) if source else None
    except ValueError as exc:
        raise CatalogError(f"{where}: {exc}") from None
    return ExtractorCase(expect=expect, line=_require(table, "line", str, where),
                         symptom=_optional(table, "symptom", str, where, None),
                         attributes={k: str(v) for k, v in _optional(table, "attributes", dict, where, {}).items()},
                         source=kind)


def _parse_extractor(table: dict[str, Any], origin: str) -> Extractor:
    name = _require(table, "name", str, f"{origin}: extractor")
    where = f"{origin}: extractor {name}"
    if not _NAME_RE.match(name):
        raise CatalogError(f"{where}: names are CamelCase identifiers")
    _known_keys(table, _EXTRACTOR_KEYS, where)
    match_re = _require(table, "match_re", str, where)
    problem = check_pattern_subset(match_re)
    if problem:
        raise CatalogError(f"{where}: match_re {problem}")
    emit = _require(table, "emit", dict, where)
    _known_keys(emit, _EMIT_KEYS, f"{where}: emit")
    emit_type = EMIT_TYPES.get(_optional(emit, "type", str, f"{where}: emit", ""))
    if emit_type is None:
        raise CatalogError(f"{where}: emit.type must be one of {sorted(EMIT_TYPES)}")
    symptom = _optional(emit, "symptom", str, f"{where}: emit", None)
    fact = _optional(emit, "fact", str, f"{where}: emit", None)
    if emit_type == "context" and not fact:
        raise CatalogError(f"{where}: a context extractor names the fact it emits (emit.fact)")
    if emit_type != "context" and not symptom:
        raise CatalogError(f"{where}: emit.symptom is required")
    regex = re.compile(match_re)
    if symptom:
        try:
            fields = {f for _, f, _, _ in string.Formatter().parse(symptom) if f}
        except ValueError as exc:
            raise CatalogError(f"{where}: symptom template {symptom!r}: {exc}") from None
        missing = fields - set(regex.groupindex)
        if missing:
            raise CatalogError(f"{where}: symptom template uses unknown captures {sorted(missing)}")
    sources_raw = _strings(table.get("source", [s.value for s in LINE_SOURCES]), "source", where)
    try:
        sources = tuple(SourceKind(s) for s in sources_raw)
    except ValueError as exc:
        raise CatalogError(f"{where}: {exc}") from None
    key = tuple(_strings(table.get("key", []), "key", where))
    unknown_key = set(key) - set(regex.groupindex)
    if unknown_key:
        raise CatalogError(f"{where}: key names unknown captures {sorted(unknown_key)}")
    cases = tuple(_parse_case(c, f"{where} case {i + 1}") for i, c in enumerate(_tables(table, "cases", where)))
    if not any(c.expect != "none" for c in cases) or not any(c.expect == "none" for c in cases):
        raise CatalogError(f"{where}: needs at least one positive and one negative (expect = \"none\") case")
    return Extractor(name=name, sources=sources, match_re=match_re, emit_type=emit_type,
                     symptom=symptom, fact=fact, attributes=dict(_optional(table, "attributes", dict, where, {})),
                     key=key, sampled=_optional(table, "sampled", bool, where, False),
                     doc=_require(table, "doc", str, where).strip(), ref=_optional(table, "ref", str, where, ""),
                     cases=cases,
                     origin=origin)


def _data_files() -> list[tuple[str, bytes]]:
    root = importlib.resources.files("firstfault.rules") / "data"
    return sorted((p.name, p.read_bytes()) for p in root.iterdir() if p.name.endswith(".toml"))


def _python_sources() -> list[bytes]:
    blobs = []
    for module_name in RULE_MODULES:
        module = importlib.import_module(module_name)
        if module.__file__:
            with open(module.__file__, "rb") as fh:
                blobs.append(fh.read())
    return blobs


def order_rules(rules: list[PythonRule], *, reverse_ties: bool = False) -> list[PythonRule]:
    """Rules in phase order; within a phase, each after the rules it names in `after`, ties by name.
    `reverse_ties` breaks ties in reverse name order: another order the declarations allow, which tests use to
    show that no undeclared dependency decides a result."""
    by_name = {r.name: r for r in rules}
    ordered: list[PythonRule] = []
    for phase in sorted({r.phase for r in rules}):
        members = sorted((r for r in rules if r.phase == phase), key=lambda r: r.name, reverse=reverse_ties)
        waiting = {r.name: set(r.after) for r in members}
        for r in members:
            for name in r.after:
                if name not in by_name:
                    raise CatalogError(f"{r.module}: rule {r.name} runs after {name!r}, which is not a rule")
                if by_name[name].phase != phase:
                    raise CatalogError(f"{r.module}: rule {r.name} ({phase.name}) runs after {name}, which runs in "
                                       f"{by_name[name].phase.name}: phases already order them")
        while members:
            ready = [r for r in members if not waiting[r.name]]
            if not ready:
                raise CatalogError("rules wait for each other in a circle: " + ", ".join(r.name for r in members))
            first = ready[0]
            ordered.append(first)
            members.remove(first)
            for deps in waiting.values():
                deps.discard(first.name)
    return ordered


@dataclass(frozen=True)
class CatalogSources:
    """What a catalog is made of: its TOML files (packaged, then extra), and the hash of those, of the decode
    tables and of the Python rule modules (imported here: their rules register themselves)."""

    files: list[tuple[str, bytes]]
    extra_files: list[tuple[str, bytes]]
    content_hash: str


def catalog_sources(extra_files: list[tuple[str, bytes]] | None = None) -> CatalogSources:
    extra = list(extra_files or [])
    files = _catalog_files() + extra
    digest = hashlib.sha256()
    for name, blob in files:
        digest.update(name.encode() + b"\0" + blob + b"\0")
    for name, blob in _data_files():
        digest.update(name.encode() + b"\0" + blob + b"\0")
    for blob in _python_sources():
        digest.update(blob + b"\0")
    return CatalogSources(files=files, extra_files=extra, content_hash="sha256:" + digest.hexdigest()[:32])


def load_catalog(*, extra_files: list[tuple[str, bytes]] | None = None) -> Catalog:
    """Parse the packaged catalog (`firstfault.tools.verify.verify_catalog` compiles it and runs every case).

    `extra_files` (name, TOML bytes) are appended after the packaged files; tests and `rules test --file`
    use it to check a candidate rule file against the rest of the catalog.
    """
    return parse_catalog(catalog_sources(extra_files))


def parse_catalog(sources: CatalogSources) -> Catalog:
    symptoms: dict[str, SymptomDef] = {}
    extractors: list[Extractor] = []
    for name, blob in sources.files:
        try:
            doc = tomllib.loads(blob.decode("utf-8"))
        except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
            raise CatalogError(f"{name}: not valid TOML: {exc}") from None
        unknown = set(doc) - {"symptom", "extractor", "meta"}
        if unknown:
            raise CatalogError(f"{name}: unknown top-level tables {sorted(unknown)}")
        for table in _tables(doc, "symptom", name):
            sdef = _parse_symptom(table, name)
            if sdef.name in symptoms:
                raise CatalogError(f"{name}: symptom {sdef.name!r} is already defined in {symptoms[sdef.name].origin}")
            symptoms[sdef.name] = sdef
        for table in _tables(doc, "extractor", name):
            extractors.append(_parse_extractor(table, name))
    seen: dict[str, str] = {}
    for ex in extractors:
        if ex.name in seen:
            raise CatalogError(f"{ex.origin}: extractor {ex.name} is already defined in {seen[ex.name]}")
        seen[ex.name] = ex.origin
    return _catalog(sources, symptoms, extractors)


def _catalog(sources: CatalogSources, symptoms: dict[str, SymptomDef], extractors: list[Extractor]) -> Catalog:
    """The catalog of parsed symptoms and extractors, with the registered Python rules (checked and ordered)."""
    python_rules = registered_rules()
    names = {e.name for e in extractors}
    for rule in python_rules:
        if rule.name in names:
            raise CatalogError(f"{rule.module}: rule {rule.name} is already defined")
        names.add(rule.name)
    return Catalog(symptoms=symptoms, extractors=extractors, python_rules=order_rules(python_rules),
                   metric_extractors=registered_metric_extractors(), content_hash=sources.content_hash,
                   files=[n for n, _ in sources.files], extra_files=sources.extra_files)


# -- the catalog as data (the snapshot a verified catalog is kept as: firstfault.tools.verify) ------------------
def catalog_data(catalog: Catalog) -> dict[str, Any] | None:
    """The parsed symptoms and extractors as JSON-ready data, or None when a value would not survive JSON (a TOML
    date in an attribute): `catalog_from_data` rebuilds them equal."""
    data = {"content_hash": catalog.content_hash, "symptoms": [asdict(s) for s in catalog.symptoms.values()],
            "extractors": [asdict(e) for e in catalog.extractors]}
    try:
        text = json.dumps(data)
    except (TypeError, ValueError):
        return None
    again = json.loads(text)
    return data if _symptoms(again) == catalog.symptoms and _extractors(again) == catalog.extractors else None


def catalog_from_data(data: dict[str, Any], sources: CatalogSources) -> Catalog | None:
    """The catalog of `sources` from `catalog_data`'s output (None when the data is of another catalog or
    damaged: the caller parses the files instead)."""
    if not isinstance(data, dict) or data.get("content_hash") != sources.content_hash:
        return None
    try:
        return _catalog(sources, _symptoms(data), _extractors(data))
    except (KeyError, TypeError, ValueError):
        return None


def _symptoms(data: dict[str, Any]) -> dict[str, SymptomDef]:
    symptoms = {}
    for s in data["symptoms"]:
        symptoms[s["name"]] = SymptomDef(**{**s, "sub_domain": SubDomain(s["sub_domain"]),
                                            "outcome": Outcome(s["outcome"]),
                                            "next_action": NextActionDef(**s["next_action"])})
    return symptoms


def _extractors(data: dict[str, Any]) -> list[Extractor]:
    return [Extractor(**{**e, "sources": tuple(SourceKind(v) for v in e["sources"]), "key": tuple(e["key"]),
                         "cases": tuple(ExtractorCase(**{**c, "source": c["source"] and SourceKind(c["source"])})
                                        for c in e["cases"])})
            for e in data["extractors"]]
