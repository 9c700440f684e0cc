"""A short fault run (compat/faults/jepsen.py): ~25 s of kill -9, SIGTERM and SIGSTOP of the
nodes and leaders of a three-node cluster under idempotent acks=all producers and a consumer
group, then the checker finds no lost, duplicated or reordered record, no disagreeing read, no
consumer moving backwards and no lost commit. Longer runs: scripts/faults.sh.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

from harness import external_bootstrap, weir_binary

FAULTS = Path(__file__).resolve().parents[1] / "faults" / "jepsen.py"


def load_faults():
    # Loaded by path under its own name: compat/tests/harness.py already owns `harness`.
    name = "weir_faults_jepsen"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, FAULTS)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


@pytest.mark.timeout(400)
def test_a_short_fault_run_has_no_anomalies(tmp_path):
    if external_bootstrap():
        pytest.skip("starts its own cluster; the broker is external (COMPAT_BOOTSTRAP)")
    faults = load_faults()
    result = faults.run_once(0, 20240601, 25.0, tmp_path / "run-0", weir_binary())
    line = faults.summary(result)
    print(line)
    assert result["nemesis"], line
    assert result["acked"] > 0 and result["read"] > 0, line
    assert not result["anomalies"], f"{line}\nhistory and server logs in {tmp_path / 'run-0'}"
