"""The batch checker builders run before a blind batch's labels are frozen (tests/data/corpus/building)."""

from __future__ import annotations

import importlib.util
import shutil
from pathlib import Path
from types import ModuleType

from tests.support.workloads import CORPUS

BUILDING = CORPUS.parent / "building"
SCENARIO = CORPUS.parent / "blind-323" / "b323-003-gpu-xid32-pbdma-gromacs-mpirun"


def _checker() -> ModuleType:
    spec = importlib.util.spec_from_file_location("check_batch", BUILDING / "check_batch.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_a_landed_scenario_passes_and_each_kind_of_mistake_is_named(tmp_path: Path, capsys) -> None:
    check = _checker()
    batch = tmp_path / "b999"
    scenario = batch / SCENARIO.name
    shutil.copytree(SCENARIO, scenario)
    none_used = tmp_path / "none.txt"
    none_used.write_text("")
    assert check.main([str(batch), "--sources", str(none_used)]) == 0
    assert capsys.readouterr().out.strip() == "1 scenarios, 0 problems"

    # its source is in the shipped list of used sources: a new batch may not use it again
    assert check.main([str(batch)]) == 1
    assert "source already used by an earlier batch: https://github.com/fireice-uk/xmr-stak/issues/2054" in \
        capsys.readouterr().out

    text = (scenario / "scenario.toml").read_text()
    (scenario / "scenario.toml").write_text(text.replace('culprit_nodes = ["mdlab-n2"]', 'culprit_nodes = ["n9"]')
                                            .replace('root_evidence = "Xid"', 'root_evidence = "no such line"'))
    (scenario / "mdlab-n1" / "dmesg.txt").write_text("")
    assert check.main([str(batch), "--sources", str(none_used)]) == 1
    out = capsys.readouterr().out
    for problem in ("a culprit node is not in workload.nodes", "root_evidence occurs in no log",
                    "mdlab-n1/dmesg.txt is not one of applog.log, scheduler.log, syslog.log", "1 scenarios, 3 problems"):
        assert problem in out
