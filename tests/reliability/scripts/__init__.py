"""Scripts the reliability tests run in a fresh interpreter (`python -m tests.reliability.scripts.NAME`), so the
peak memory and time they measure are their own. Each prints its result with `measure.done()`."""
