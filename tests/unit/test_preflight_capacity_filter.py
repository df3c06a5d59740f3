"""preflight.yml's concurrency against the server's --max-num-seqs (issue 34 item 7): the
filter applies the rule `sparkops batch` applies before a job (sparkops.vocabulary),
so both say the same sentence; with no planned value it uses the doctor's one default."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest
from ansible.errors import AnsibleFilterError

from sparkops.doctor.preflight import Settings
from sparkops.vocabulary import capacity, capacity_warning

FILTERS = Path(__file__).resolve().parents[2] / "ansible" / "plugins" / "filter"
spec = importlib.util.spec_from_file_location("sparkops_doctor", FILTERS / "sparkops_doctor.py")
doctor = importlib.util.module_from_spec(spec)
spec.loader.exec_module(doctor)

RECORD = json.dumps({"command": ["vllm", "serve", "/m", "--max-num-seqs", "128"]})


def test_a_concurrency_above_max_num_seqs_gets_the_batch_client_s_sentence():
    said = doctor.sparkops_capacity_warning(RECORD, "200")
    assert said == capacity_warning(capacity(json.loads(RECORD), 200, 1))
    assert said.startswith("--concurrency 200 is above the server's --max-num-seqs 128")


def test_a_fitting_or_unknown_capacity_says_nothing():
    assert doctor.sparkops_capacity_warning(RECORD, 128) == ""
    assert doctor.sparkops_capacity_warning("", 5000) == ""  # no stack record on the host
    assert doctor.sparkops_capacity_warning("not json", 5000) == ""
    assert doctor.sparkops_capacity_warning(json.dumps({"command": ["vllm"]}), 5000) == ""


def test_no_planned_value_uses_the_doctor_s_default():
    default = Settings.model_fields["concurrency"].default
    assert doctor.sparkops_capacity_warning(RECORD, "").startswith(f"--concurrency {default} ")
    with pytest.raises(AnsibleFilterError, match="sparkops_preflight_concurrency"):
        doctor.sparkops_capacity_warning(RECORD, "lots")
