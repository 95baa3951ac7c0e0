"""Reading a claim file: the auditor's first input, refused fast when it is not a claim.

Kept apart from ``audit.py`` (which pulls in the statistics stack) so that ``perfwarden audit`` can
refuse ``--claim /dev/zero``, a FIFO or a 50 MB name before anything heavy is imported.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from pydantic import ValidationError

from perfwarden.formats.records import Claim, unknown_fields, wrong_types
from perfwarden.formats.safe_read import CLAIM_BYTES, STRING_CHARS, long_string, read_bytes
from perfwarden.formats.strict_json import StrictJsonError, loads


class ClaimError(ValueError):
    """The claim file itself is unreadable or invalid (exit 3 at the CLI)."""


def load_claim(path: Path, root: Path | None = None) -> tuple[Claim, str]:
    """Parse a claim file; returns the model and the sha256 of its bytes.

    The claim must be a regular file (inside ``root`` when the claim was found in a run rather than
    named on the command line) of at most ``CLAIM_BYTES``, and no string in it may exceed
    ``STRING_CHARS``: ``/dev/zero``, a FIFO or a 50 MB name is refused at once, never read."""
    try:
        data = read_bytes(path, root, limit=CLAIM_BYTES, what="claim")
    except OSError as exc:
        raise ClaimError(f"cannot read claim {str(path)!r}: {exc}") from None
    try:
        obj = loads(data, what=f"claim {str(path)!r}")
    except StrictJsonError as exc:
        raise ClaimError(str(exc)) from None
    too_long = long_string(obj)
    if too_long is not None:
        raise ClaimError(f"claim {str(path)!r}: the string at {too_long[0]!r} is {too_long[1]:,} characters, over "
                         f"the {STRING_CHARS:,}-character bound for one field")
    try:
        claim = Claim.model_validate(obj)
    except ValidationError as exc:
        err = exc.errors()[0]
        raise ClaimError(f"claim {str(path)!r} is invalid: {err['msg']} at {'.'.join(map(str, err['loc']))!r}") from None
    wrong = wrong_types(Claim, obj)
    if wrong:  # pydantic would coerce "10" to 10.0 or 1 to True: the claim would say what its bytes do not
        raise ClaimError(f"claim {str(path)!r} has field(s) of the wrong type: {', '.join(wrong[:8])}")
    unknown = unknown_fields(claim)
    if unknown:  # a misspelt or invented field would be read by no one: the claim says less than it seems
        raise ClaimError(f"claim {str(path)!r} has field(s) a claim does not have: {', '.join(unknown[:8])}")
    return claim, hashlib.sha256(data).hexdigest()

