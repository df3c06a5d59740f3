"""`sparkops batch verify DIR`: do the job folder's files still hold what its runs wrote?

The seals and the check are jobdir/digest.py's; this is the command: one line per file, the
edits the seals recorded between runs, and the exit status a script can act on.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from sparkops.errors import UserError
from sparkops.jobdir.folder import load_manifest
from sparkops.jobdir.verification import Verification, verify

EXIT_STATUSES = """\
exit status:
  0    verified: every file is as the last run left it, or only appended to by a later run
  1    does not verify: a file was changed, removed or added to by hand (each one named)
  2    not a job folder, or no run of it sealed its files (a kit from before seals)"""


def register_verify(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser(
        "verify",
        help="check that the job's files are as its runs wrote them (results not edited)",
        description="Recompute the digests each run recorded at its end (runs.jsonl) and say, "
        "file by file, what changed since; appending by a resume is not an edit, a changed or "
        "removed line is.",
        epilog=EXIT_STATUSES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("dir", type=Path, help="the job folder (batch run's --out)")
    parser.add_argument("--json", action="store_true", help="print the check as one JSON object")
    parser.set_defaults(func=_verify)


def _verify(args: argparse.Namespace) -> int:
    load_manifest(args.dir)  # not a job folder: one line with the fix
    found = verify(args.dir)
    if not found.sealed:
        raise UserError(
            f"{args.dir}: nothing to verify: no run of this job sealed its files (it was run by "
            "a kit from before seals); a resume seals the files as they are then, and cannot "
            "vouch for them before"
        )
    if args.json:
        print(json.dumps(found.as_dict(), indent=2))
    else:
        print("\n".join(verification_lines(found)))
    return 0 if found.verified else 1


def verification_lines(found: Verification) -> list[str]:
    """The verdict, then each file, then the edits the seals recorded between runs."""
    runs = found.sealed_runs
    sealed = f"run {runs[0]}" if len(runs) == 1 else f"runs {', '.join(map(str, runs))}"
    if found.verified:
        head = f"{found.directory}: verified against run {runs[-1]}'s seal ({sealed} sealed)"
    else:
        head = f"{found.directory}: does not verify: {len(found.problems)} edit(s) found"
    out = [head]
    out += [f"  {check.name}: {check.sentence}" for check in found.files]
    out += [f"  {line}" for line in found.history]
    return out
