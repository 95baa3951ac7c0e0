"""Records are read with their schema_version checked: newer major refused clearly, older migrated."""

from __future__ import annotations

import json

import pytest
from pydantic import ValidationError
from typer.testing import CliRunner

from perfwarden.cli.main import app
from perfwarden.formats import records
from perfwarden.formats.records import Claim, LegSpec, Verdict


def test_current_and_minor_versions_read():
    assert Claim.model_validate({"scope": "patch", "schema_version": 1}).schema_version == 1
    assert Claim.model_validate({"scope": "patch", "schema_version": "1.3"}).schema_version == 1
    assert Claim.model_validate({"scope": "patch"}).schema_version == records.SCHEMA_VERSION


@pytest.mark.parametrize("version,needle", [(2, "newer than the 1"), ("7.0", "newer"), ("x", "not a version"),
                                            (True, "not a version"), (-1, "no such version"),
                                            (0, "no migration from it")])
def test_unknown_or_bad_versions_are_clear_errors(version, needle):
    with pytest.raises(ValidationError, match=needle):
        LegSpec.model_validate({"leg": "a", "role": "baseline", "schema_version": version})


def test_an_older_version_is_migrated(monkeypatch):
    def v0_to_v1(record_type, data):
        assert record_type == "Verdict"
        data["verdict"] = {"ok": "PASS", "bad": "FAIL"}[data.pop("outcome")]
        return data

    monkeypatch.setitem(records.MIGRATIONS, 0, v0_to_v1)
    v = Verdict.model_validate({"schema_version": 0, "scope": "patch", "claim": "c.json", "outcome": "bad",
                                "action": "eject"})
    assert (v.verdict, v.schema_version) == ("FAIL", 1)


def test_audit_cli_refuses_a_claim_from_a_newer_schema(tmp_path):
    claim = tmp_path / "claim.json"
    claim.write_text(json.dumps({"scope": "patch", "schema_version": 2, "legs": {"baseline": "a", "candidate": "b"}}))
    result = CliRunner().invoke(app, ["audit", str(tmp_path), "--claim", str(claim)])
    assert result.exit_code == 3
    assert "schema_version 2, newer than the 1" in result.output
