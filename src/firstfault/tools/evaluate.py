"""`firstfault eval`: analyse every scenario of a labelled corpus and compare with its `[expected]` table.

Scoring follows the corpus README: the sub_domain is right when it is one of the accepted answers; the
culprit set must match exactly; the terminal state must be equal; the cited root line must contain the
expected substring. False infra blame = a node blamed where the expected culprit set is empty; missed
hardware = an expected culprit that was not blamed.
"""

from __future__ import annotations

import json
import tomllib
from collections import Counter
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from firstfault.engine.engine import Engine
from firstfault.engine.evidence import SCENARIO_FILE
from firstfault.engine.model import Attribution
from firstfault.errors import EvidenceError
from firstfault.tools.verify import default_engine


@dataclass
class ScenarioScore:
    id: str
    confidence: str
    expected_sub_domain: list[str]
    got_sub_domain: str
    expected_culprits: list[str]
    got_culprits: list[str]
    expected_terminal_state: str
    got_terminal_state: str
    root_evidence: str
    cited: str
    sub_domain_ok: bool
    culprits_ok: bool
    terminal_ok: bool
    evidence_ok: bool
    error: str = ""
    answer_confidence: str = ""  # the tool's own Attribution.confidence

    @property
    def committed(self) -> bool:
        """The tool committed to a cause (not unknown or ambiguous, no error)."""
        return not self.error and self.got_sub_domain not in ("unknown", "ambiguous")

    @property
    def passed(self) -> bool:
        return self.sub_domain_ok and self.culprits_ok and not self.error

    @property
    def false_blame(self) -> list[str]:
        return sorted(set(self.got_culprits) - set(self.expected_culprits)) if not self.expected_culprits else []

    @property
    def missed(self) -> list[str]:
        return sorted(set(self.expected_culprits) - set(self.got_culprits))


@dataclass
class EvalReport:
    scores: list[ScenarioScore]
    metrics: dict[str, float] = field(default_factory=dict)
    confusion: dict[str, dict[str, int]] = field(default_factory=dict)
    by_confidence: dict[str, dict[str, float]] = field(default_factory=dict)
    calibration: dict[str, dict[str, float]] = field(default_factory=dict)

    def as_dict(self) -> dict[str, object]:
        return {"metrics": self.metrics, "by_confidence": self.by_confidence, "calibration": self.calibration,
                "confusion": self.confusion, "scenarios": [asdict(s) | {"passed": s.passed} for s in self.scores]}


def _cited(result: Attribution) -> str:
    if result.root_cause is None:
        return ""
    return "\n".join(ev.text for ev in result.root_cause.evidence)


def score(directory: Path, result: Attribution | None, expected: dict[str, Any], error: str = "") -> ScenarioScore:
    exp_sd = [str(x) for x in expected.get("sub_domain", [])]
    exp_c = sorted(str(x) for x in expected.get("culprit_nodes", []))
    exp_ts = str(expected.get("terminal_state", ""))
    root_evidence = str(expected.get("root_evidence", ""))
    if result is None:
        return ScenarioScore(directory.name, str(expected.get("confidence", "")), exp_sd, "error", exp_c, [], exp_ts,
                             "", root_evidence, "", False, False, False, False, error)
    got_c = sorted(c.node for c in result.culprit_nodes)
    cited = _cited(result)
    return ScenarioScore(
        id=directory.name, confidence=str(expected.get("confidence", "")), expected_sub_domain=exp_sd,
        got_sub_domain=result.sub_domain.value, expected_culprits=exp_c, got_culprits=got_c,
        expected_terminal_state=exp_ts, got_terminal_state=result.terminal_state.value, root_evidence=root_evidence,
        cited=cited[:300], sub_domain_ok=result.sub_domain.value in exp_sd, culprits_ok=got_c == exp_c,
        terminal_ok=(not exp_ts) or result.terminal_state.value == exp_ts,
        evidence_ok=(not root_evidence) or root_evidence in cited, answer_confidence=result.confidence)


def _rate(scores: list[ScenarioScore], attr: str) -> float:
    return round(sum(1 for s in scores if getattr(s, attr)) / len(scores), 4) if scores else 0.0


def scenario_dirs(corpora: Sequence[Path]) -> list[Path]:
    """Every scenario directory of the corpora named: a corpus holds scenario directories (each with a
    scenario.toml); a directory holding corpora instead (tests/data/corpus) stands for all of them. Ids (directory
    names) must be unique across them: a baseline report joins on them."""
    found: list[Path] = []
    for corpus in corpora:
        if not corpus.is_dir():
            raise EvidenceError(f"{corpus}: not a directory")
        scenarios = sorted(p for p in corpus.iterdir() if (p / SCENARIO_FILE).is_file())
        if not scenarios:
            scenarios = sorted(s for sub in corpus.iterdir() if sub.is_dir()
                               for s in sub.iterdir() if (s / SCENARIO_FILE).is_file())
        if not scenarios:
            raise EvidenceError(f"{corpus}: no scenario directories (each needs a {SCENARIO_FILE}), "
                                "nor corpora holding them")
        found += scenarios
    seen: dict[str, Path] = {}
    for directory in found:
        if directory.name in seen:
            raise EvidenceError(f"scenario id {directory.name!r} twice: {seen[directory.name]} and {directory}")
        seen[directory.name] = directory
    return found


def score_scenario(directory: Path, engine: Engine) -> ScenarioScore:
    try:
        expected = tomllib.loads((directory / SCENARIO_FILE).read_text(encoding="utf-8")).get("expected", {})
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise EvidenceError(f"{directory / SCENARIO_FILE}: {exc}") from None
    try:
        result = engine.analyze_path(directory)
    except EvidenceError as exc:
        return score(directory, None, expected, str(exc))
    return score(directory, result, expected)


def _score_in_worker(directory: Path) -> ScenarioScore:
    return score_scenario(directory, default_engine())


def _scores(directories: list[Path], engine: Engine | None, jobs: int,
            progress: Callable[[], None] | None) -> list[ScenarioScore]:
    if jobs <= 1:
        engine = engine or default_engine()
        scores = []
        for directory in directories:
            scores.append(score_scenario(directory, engine))
            if progress:
                progress()
        return scores
    # Each worker process loads and verifies the packaged catalog once; map keeps the corpus order.
    with ProcessPoolExecutor(jobs) as pool:
        scores = []
        for one in pool.map(_score_in_worker, directories, chunksize=8):
            scores.append(one)
            if progress:
                progress()
        return scores


def evaluate(corpora: Path | Sequence[Path], engine: Engine | None = None, jobs: int = 1,
             progress: Callable[[], None] | None = None) -> EvalReport:
    """Score every scenario of the corpora. With jobs > 1 the scenarios are analysed in that many processes, each
    on the packaged catalog (`engine` is then not used); the report is the same either way."""
    directories = scenario_dirs([corpora] if isinstance(corpora, Path) else corpora)
    scores = _scores(directories, engine, jobs, progress)
    report = EvalReport(scores=scores)
    blamed_when_none = sum(1 for s in scores if s.false_blame)
    expected_culprit_nodes = sum(len(s.expected_culprits) for s in scores)
    report.metrics = {
        "scenarios": len(scores),
        "passed": sum(1 for s in scores if s.passed),
        "sub_domain_accuracy": _rate(scores, "sub_domain_ok"),
        "culprit_exact_match": _rate(scores, "culprits_ok"),
        "terminal_state_accuracy": _rate(scores, "terminal_ok"),
        "root_evidence_accuracy": _rate(scores, "evidence_ok"),
        "false_infra_blame": blamed_when_none,
        "missed_hardware": sum(len(s.missed) for s in scores),
        "expected_culprit_nodes": expected_culprit_nodes,
        "committed_share": _rate(scores, "committed"),
        "committed_precision": _rate([s for s in scores if s.committed], "sub_domain_ok"),
    }
    # Calibration: how often an answer given with each confidence is right (sub_domain and culprits).
    for level in ("high", "medium", "low"):
        given = [s for s in scores if s.answer_confidence == level]
        if given:
            report.calibration[level] = {"answers": len(given), "sub_domain_accuracy": _rate(given, "sub_domain_ok"),
                                         "culprit_exact_match": _rate(given, "culprits_ok")}
    for conf in sorted({s.confidence for s in scores}):
        subset = [s for s in scores if s.confidence == conf]
        report.by_confidence[conf] = {"scenarios": len(subset), "sub_domain_accuracy": _rate(subset, "sub_domain_ok"),
                                      "culprit_exact_match": _rate(subset, "culprits_ok")}
    confusion: dict[str, Counter[str]] = {}
    for s in scores:
        expected_label = s.expected_sub_domain[0] if s.expected_sub_domain else "?"
        got = s.got_sub_domain if not s.sub_domain_ok else expected_label
        confusion.setdefault(expected_label, Counter())[got] += 1
    report.confusion = {k: dict(sorted(v.items())) for k, v in sorted(confusion.items())}
    return report


@dataclass(frozen=True)
class Change:
    """One scenario whose answer differs from a baseline report's: `fixed`, `broke` or `moved` (still right or still
    wrong, with another sub_domain, culprit set or terminal state)."""
    kind: str
    id: str
    before: str
    after: str


def _answer(sub_domain: str, culprits: list[str], terminal_state: str) -> str:
    return f"{sub_domain} [{','.join(culprits) or '-'}] {terminal_state}"


def load_baseline(path: Path) -> dict[str, dict[str, Any]]:
    """The scenarios of an earlier `firstfault eval --json` report, by id."""
    try:
        scenarios = json.loads(path.read_text(encoding="utf-8"))["scenarios"]
        return {str(s["id"]): s for s in scenarios}
    except (OSError, UnicodeDecodeError, ValueError, KeyError, TypeError) as exc:
        raise EvidenceError(f"{path}: not a `firstfault eval --json` report ({type(exc).__name__}: {exc})") from None


def compare(report: EvalReport, baseline: dict[str, dict[str, Any]]) -> list[Change]:
    """What changed against the baseline, for the scenarios both reports scored (new scenarios are not changes)."""
    changes = []
    for s in report.scores:
        old = baseline.get(s.id)
        if old is None:
            continue
        before = _answer(old["got_sub_domain"], old["got_culprits"], old["got_terminal_state"])
        after = _answer(s.got_sub_domain, s.got_culprits, s.got_terminal_state)
        if bool(old["passed"]) != s.passed:
            changes.append(Change("fixed" if s.passed else "broke", s.id, before, after))
        elif before != after:
            changes.append(Change("moved", s.id, before, after))
    return changes
