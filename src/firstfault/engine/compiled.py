"""The catalog compiled for scanning: one hyperscan scanner per evidence source, built once per catalog."""

from __future__ import annotations

from pathlib import Path

from firstfault.engine.catalog import Catalog, Extractor
from firstfault.engine.model import SourceKind
from firstfault.engine.scanner import SourceScanner


class CompiledCatalog:
    """A catalog with its per-source scanners compiled once (shared by all sessions; thread-safe).

    Sources with the same pattern list share one hyperscan database (most extractors apply to every line
    source, so applog, syslog and scheduler usually compile to one database, not three). `for_catalog()`
    returns the compilation cached on the catalog, so loading with verification and then opening an engine
    compiles once.
    """

    def __init__(self, catalog: Catalog, *, cache_dir: Path | None = None) -> None:
        self.catalog = catalog
        self.by_source: dict[SourceKind, list[Extractor]] = {}
        self.scanners: dict[SourceKind, SourceScanner] = {}
        compiled: dict[tuple[tuple[str, ...], frozenset[int]], SourceScanner] = {}
        for source in SourceKind:
            extractors = catalog.extractors_for(source)
            self.by_source[source] = extractors
            patterns = tuple(e.match_re for e in extractors)
            sampled = frozenset(i for i, e in enumerate(extractors) if e.sampled)
            if (patterns, sampled) not in compiled:
                compiled[patterns, sampled] = SourceScanner(list(patterns), sampled, cache_dir=cache_dir)
            self.scanners[source] = compiled[patterns, sampled]
        # Pattern id of each extractor in its source's scanner, by identity (comparing the frozen dataclasses
        # field by field would make a lookup linear in the catalog size).
        self._ids = {source: {id(e): i for i, e in enumerate(extractors)}
                     for source, extractors in self.by_source.items()}

    def pattern_id(self, source: SourceKind, extractor: Extractor) -> int:
        """The id under which `source`'s scanner reports `extractor`'s matches."""
        return self._ids[source][id(extractor)]

    @classmethod
    def for_catalog(cls, catalog: Catalog, *, cache_dir: Path | None = None) -> CompiledCatalog:
        """The compilation of `catalog`, built once and kept on it (`cache_dir`: see `SourceScanner`)."""
        cached = catalog.compiled
        if isinstance(cached, cls) and cached.catalog is catalog:
            return cached
        compiled = cls(catalog, cache_dir=cache_dir)
        catalog.compiled = compiled
        return compiled
