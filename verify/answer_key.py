"""The answer-key format: what a fixture's ``answer_key.json`` may say, validated strictly.

An answer may name one verdict or a set of allowed verdicts, one action or a set, codes that must all
be raised (``must_include``), groups of which at least one code must be raised (``must_include_any``),
and codes that must not be raised (``must_exclude``). So an outside user can freeze an honest answer
("FLAG or FAIL, and either CONDITIONS_DIFFER or UNKNOWN_KNOB") without over-specifying it.

Validation is strict because a typo in a key would silently turn a required code into one that can
never be raised: an unknown field, an unknown verdict/action, or a finding code that is not in the
catalog is an input error (:class:`AnswerKeyError`), never a quiet disagreement or agreement.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from perfwarden.auditor.codes import CATALOG
from perfwarden.formats.records import Action, VerdictLabel
from perfwarden.formats.safe_read import RECORD_BYTES, STRING_CHARS, long_string, read_bytes
from perfwarden.formats.strict_json import StrictJsonError, loads

ANSWER_KEY_NAME = "answer_key.json"


class AnswerKeyError(ValueError):
    """An answer key that cannot be read or does not follow the format (the CLI exits 3)."""


def _as_list(value: Any) -> Any:
    return [value] if isinstance(value, str) else value


def _check_codes(codes: list[str], where: str) -> list[str]:
    unknown = [c for c in codes if c not in CATALOG]
    if unknown:
        raise ValueError(f"{where} names codes that are not in the catalog: {unknown!r}")
    return codes


class Answer(BaseModel):
    """The frozen answer for one claim of a fixture."""

    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True)

    claim: str
    """Claim file, relative to the fixture's ``run/`` (e.g. ``claims/001-patch.json``)."""
    verdict: list[VerdictLabel] = Field(min_length=1)
    """Allowed verdicts: one (``"FAIL"``) or a set (``["FLAG", "FAIL"]``)."""
    action: list[Action] = Field(default_factory=list)
    """Allowed actions; empty means any action agrees."""
    must_include: list[str] = Field(default_factory=list)
    """Codes that must all be raised at FLAG or FAIL (INFO does not count)."""
    must_include_any: list[list[str]] = Field(default_factory=list)
    """Groups of codes; from each group at least one must be raised at FLAG or FAIL."""
    must_exclude: list[str] = Field(default_factory=list)
    """Codes that must not be raised at FLAG or FAIL (the negatives that give a code its precision)."""
    must_note: list[str] = Field(default_factory=list)
    """Text that must appear in one of the verdict's ``not_checked`` entries: a check the auditor must say
    it could not make (e.g. ``"unsealed"`` for a run whose evidence carries no seal)."""
    banks: bool | None = None
    """Whether the verdict keeps the change by the one banking rule (``auditor/banking.py``), its seal aside
    (a fixture's evidence may be unsealed); omitted: not scored."""
    headline_rederived: tuple[float, float] | None = None
    """The range [low, high] (percent) the verdict's re-derived headline -- the figure that is banked and
    shown -- must lie in; omitted: not scored."""

    @field_validator("verdict", "action", mode="before")
    @classmethod
    def _one_or_many(cls, value: Any) -> Any:
        return [] if value is None else _as_list(value)

    @field_validator("must_include", "must_exclude")
    @classmethod
    def _known_codes(cls, value: list[str]) -> list[str]:
        return _check_codes(value, "the answer")

    @field_validator("must_include_any")
    @classmethod
    def _known_groups(cls, value: list[list[str]]) -> list[list[str]]:
        for group in value:
            if not group:
                raise ValueError("a must_include_any group is empty (it could never be satisfied)")
            _check_codes(group, "a must_include_any group")
        return value

    @model_validator(mode="after")
    def _consistent(self) -> "Answer":
        required = set(self.must_include) | {c for g in self.must_include_any if len(g) == 1 for c in g}
        clash = sorted(required & set(self.must_exclude))
        if clash:
            raise ValueError(f"codes {clash!r} are both required and excluded")
        if self.verdict == ["PASS"] and (self.must_include or self.must_include_any):
            raise ValueError("a PASS answer cannot require FLAG/FAIL findings")
        if self.verdict == ["PASS"] and self.banks is False:
            raise ValueError("a PASS answer cannot refuse banking: a PASS keeps its change")
        if self.verdict == ["FAIL"] and self.banks is True:
            raise ValueError("a FAIL answer cannot bank: a FAIL keeps nothing")
        low_high = self.headline_rederived
        if low_high is not None and not (math.isfinite(low_high[0]) and math.isfinite(low_high[1])
                                         and low_high[0] <= low_high[1]):
            raise ValueError(f"headline_rederived {list(low_high)!r} is not a finite range [low, high]")
        return self


class AnswerKey(BaseModel):
    """``answer_key.json``: the frozen answers of one fixture, written before the auditor ran on it."""

    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True)

    schema_version: Literal[1] = 1
    """Version of this format."""
    frozen: str | None = None
    """Date the answers were frozen (ISO-8601)."""
    answers: list[Answer] = Field(min_length=1)
    """One answer per claim file under ``run/claims/``."""
    provenance: str = ""
    """Where the case comes from (a published case, a recording, a mutation, a red-team attack)."""
    rationale: str = ""
    """Why these answers are right, in terms of the design's rules."""

    @model_validator(mode="after")
    def _one_answer_per_claim(self) -> "AnswerKey":
        claims = [a.claim for a in self.answers]
        dup = sorted({c for c in claims if claims.count(c) > 1})
        if dup:
            raise ValueError(f"claims {dup!r} have more than one answer")
        return self


def parse_answer_key(data: Any, where: str = "answer key") -> AnswerKey:
    """Validate an already-decoded answer key; raises :class:`AnswerKeyError` with the first problem."""
    try:
        return AnswerKey.model_validate(data)
    except ValidationError as exc:
        err = exc.errors()[0]
        loc = ".".join(map(str, err["loc"])) or "<top>"
        raise AnswerKeyError(f"{where} is invalid at {loc!r}: {err['msg']}") from None


def load_answer_key(path: Path, root: Path | None = None) -> AnswerKey:
    """Read and validate ``answer_key.json`` the safe way: a regular file inside ``root`` (default: its own
    folder), size-, depth- and string-bounded; anything else is an :class:`AnswerKeyError`."""
    path = Path(path)
    try:
        data = loads(read_bytes(path, root or path.parent, limit=RECORD_BYTES, what="answer key"), what=repr(str(path)))
    except OSError as exc:
        raise AnswerKeyError(str(exc)) from None
    except StrictJsonError as exc:
        raise AnswerKeyError(str(exc)) from None
    too_long = long_string(data, STRING_CHARS)
    if too_long is not None:
        raise AnswerKeyError(f"{str(path)!r}: the string at {too_long[0]!r} is {too_long[1]:,} characters, over the "
                             f"{STRING_CHARS:,}-character bound")
    return parse_answer_key(data, repr(str(path)))


def answer_problems(answer: Answer, verdict: str, action: str, codes: set[str],
                    not_checked: list[str] | None = None, banks: bool | None = None,
                    headline: float | None = None) -> list[str]:
    """Why an audited claim disagrees with its answer (empty when it agrees). ``codes`` are the codes
    raised at FLAG or FAIL; ``not_checked`` the verdict's list of checks it could not make; ``banks``
    whether the verdict keeps the change (seal aside); ``headline`` its re-derived headline."""
    problems = _headline_problems(answer, banks, headline)
    if verdict not in answer.verdict:
        expected = answer.verdict[0] if len(answer.verdict) == 1 else answer.verdict
        problems.append(f"verdict {verdict} != expected {expected}")
    if answer.action and action not in answer.action:
        problems.append(f"action {action} not in {answer.action}")
    missing = [c for c in answer.must_include if c not in codes]
    if missing:
        problems.append(f"missing codes {missing}")
    for group in answer.must_include_any:
        if not any(c in codes for c in group):
            problems.append(f"none of {group} raised")
    extra = [c for c in answer.must_exclude if c in codes]
    if extra:
        problems.append(f"forbidden codes raised {extra}")
    unsaid = [n for n in answer.must_note if not any(n in item for item in not_checked or [])]
    if unsaid:
        problems.append(f"not_checked does not say {unsaid}")
    return problems


def _headline_problems(answer: Answer, banks: bool | None, headline: float | None) -> list[str]:
    """What is wrong with what the verdict banks and the figure it banks, against the answer."""
    problems = []
    if answer.banks is not None and banks is not answer.banks:
        problems.append(f"banks {banks} != expected {answer.banks}")
    if answer.headline_rederived is not None:
        low, high = answer.headline_rederived
        if headline is None or not low <= headline <= high:
            shown = "none" if headline is None else f"{headline:+.2f}%"
            problems.append(f"re-derived headline {shown} outside the expected [{low:+.2f}%, {high:+.2f}%]")
    return problems
