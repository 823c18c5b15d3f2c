"""The rule catalog: declarative extractors in `catalog/*.toml`, reference data in `data/`, and the Python
rules of this package (filters, collectors, refiners), registered through `firstfault.engine.rules_api`."""
